"""Writing a bundle to a directory, and running one from Python (`kg.load_bundle`).

    DIR/manifest.json          plan.py's manifest
    DIR/<kernel>.wgsl|.ptx     each distinct kernel source once (plan.share_sources)
    DIR/weights.safetensors    the realized data the program reads (nn/safetensors.py)
    DIR/model.js               webgpu bundles: the browser loader (scripts.py joins it from
                               loader.js and its parts, loader_*.js; no dependencies)
    DIR/generate.js            webgpu bundles: model.js's generate() for causal LMs (generate.js)

`Bundle.run(inputs, device)` executes the manifest on a kernelgen runtime: a ptx bundle on CUDA or
PTXSIM, a webgpu bundle on WEBGPU (wgpu). Storage buffers are allocated and the weights uploaded
once per device; each run writes the inputs, launches every kernel in order and reads the outputs
back as Tensors on that device.
"""
from __future__ import annotations

import json
import os
import warnings

from .. import limits
from ..device import Device
from ..dtype import dtypes
from ..errors import (DeviceError, DTypeError, KernelgenError, ManifestError, ShapeError,
                      SymbolicDimWarning)
from ..nn import safetensors
from ..tensor.tensor import Tensor
from ..graph import lazy
from ..graph.view import prod
from ..uop.program import Binding, CompiledKernel, Launch, grid_from_json, runs_at, work_from_json
from . import manifest
from .inputs import is_model, model_feeds
from ..tensor.symbolic import compact, padded
from .plan import ModelOutputs, make_plan
from .progress import RunProgress
from . import scripts
from . import state as bundle_state
from . import alternates, device_limits

FORMATS = {"webgpu": ("wgsl", ".wgsl"), "ptx": ("ptx", ".ptx")}
WEIGHTS = "weights.safetensors"


def export(outputs, path: str, format: str = "webgpu", arch: str | None = None,
           input_shapes: dict | None = None, state=None, **options):
  """Compile `outputs` (a Tensor, a list, or a dict name -> Tensor) and write a bundle of
  `format` ("webgpu" or "ptx") into directory `path` (created if needed): the kernels' sources,
  the weights (safetensors), manifest.json and, for webgpu, model.js. Inputs are the program's
  `Tensor.empty(..., name=)` buffers. arch: the PTX architecture (default "sm_80"); options: the
  target's compile options. Returns the bundle loaded (a Bundle). With `adapter` a CPU adapter
  (SwiftShader, lavapipe), the kernels are those of a one-off run unless `runs` says otherwise
  (lowering/compile_cost.py: a page loads the bundle once and waits for every pipeline before
  its first result); runs=100 keeps the larger kernels a long loop pays back.

  subgroups (webgpu): None (the default) compiles each kernel also with subgroups and keeps that
  form where it differs, which model.js runs on a device with the `subgroups` feature whose
  quads pass its probe at load, the plain form elsewhere (export/alternates.py); True: every
  kernel may need subgroups (the bundle runs only where the device has them); False: plain only.

  `outputs` may also be an ONNX model (kg.onnx.load): its graph inputs become the bundle's
  inputs, shaped by `input_shapes` ({name: (d0, d1, ...)}; a name the model lacks is an
  InputError); a symbolic dimension not given is 1, with a SymbolicDimWarning saying so.

  state: {input name: output name}, buffers the bundle keeps between runs (a KV cache, or a
  recurrent model's fixed-shape state): after each run the output's rows are copied into the
  input's buffer on the device (export/state.py).

  Raises KernelgenError for an unknown format or an arch with format "webgpu"; the errors of
  `kg.compile` when the program does not compile."""
  if is_model(outputs):
    outputs = _model_outputs(outputs, input_shapes)
  elif input_shapes:
    raise KernelgenError("input_shapes= is for exporting an ONNX model; a program's inputs have "
                         "their shapes already (Tensor.empty(..., name=))")
  if format not in FORMATS:
    raise KernelgenError(f"unknown export format {format!r}: use 'webgpu' or 'ptx'")
  target, suffix = FORMATS[format]
  if target == "ptx":
    options["arch"] = arch or "sm_80"
  elif arch is not None:
    raise KernelgenError("arch= is for format='ptx'; a webgpu bundle has no arch")
  plan = make_plan(outputs, target, options, suffix, _alternate(format, options))
  plan.manifest["bundle"] = format
  if format == "webgpu":
    device_limits.declare(plan.manifest)
    alternates.fit(plan.manifest, plan.sources, device_limits.needs, device_limits.DEFAULTS)
  bundle_state.declare(plan.manifest, state)
  os.makedirs(path, exist_ok=True)
  for name, source in plan.sources.items():
    _write_text(os.path.join(path, name), source)
  safetensors.write(os.path.join(path, WEIGHTS), plan.weights)
  plan.manifest["weights_file"] = WEIGHTS
  text = json.dumps(plan.manifest, separators=(",", ":"))
  _write_text(os.path.join(path, "manifest.json"), text)
  if format == "webgpu":
    for name, script in scripts.scripts().items():
      _write_text(os.path.join(path, name), script)
  return Bundle(path)


def _alternate(format: str, options: dict) -> dict | None:
  """The options a webgpu bundle's kernels are compiled again under, the forms model.js runs
  where the device has them (export/alternates.py): {"subgroups": True} unless the caller set
  option subgroups (True: every kernel needs them; False: none has them). The option is removed
  from `options` where it is None ("where available", the default)."""
  if format != "webgpu" or options.get("subgroups") is not None:
    return None
  options.pop("subgroups", None)
  return {"subgroups": True}


def _model_outputs(model, input_shapes: dict | None) -> dict:
  feeds, notes = model_feeds(model, input_shapes)
  for note in notes:
    warnings.warn(note, SymbolicDimWarning, stacklevel=3)
  return ModelOutputs(model.run(feeds, device="PYTHON", replay=False))   # the lazy graph


def _write_text(path: str, text: str) -> None:
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def load_bundle(path: str) -> Bundle:
  """The bundle `kg.export` wrote into directory `path`, as a Bundle (nothing is compiled).

  Raises KernelgenError when `path` holds no bundle manifest, or one of another format."""
  return Bundle(path)


class Bundle:
  """An exported program (`kg.load_bundle(path)` or `kg.export`'s result): `inputs` and
  `outputs` (lists of {name, shape, dtype}), `manifest` (the parsed manifest.json), `path`,
  and `run`.

  Raises KernelgenError when `path` holds no bundle manifest, or one of another format."""

  def __init__(self, path: str):
    self.path = os.fspath(path)
    where = os.path.join(self.path, "manifest.json")
    if not os.path.isfile(where):
      raise KernelgenError(f"{self.path} holds no bundle (no file manifest.json): write one "
                           f"with kg.export(...) or python -m kernelgen export")
    text = limits.read_file(limits.confined(self.path, "manifest.json", "the bundle"),
                            "the bundle's manifest", "r")
    try:
      self.manifest = limits.json_load(text, where)
    except ValueError as error:
      raise ManifestError(f"{where} is not valid JSON ({type(error).__name__} at line "
                          f"{getattr(error, 'lineno', '?')}): re-export the bundle") from None
    manifest.check(self.manifest, where)
    kept = {s["name"] for s in self.manifest.get("state", [])}
    self.inputs = [_public(e) for e in self.manifest["inputs"] if e["name"] not in kept]
    self.state = [dict(s) for s in self.manifest.get("state", [])]
    self.outputs = [_public(e) for e in self.manifest["outputs"]]
    self._devices: dict[str, tuple] = {}
    self._rows: dict[str, bundle_state.Rows] = {}

  def run(self, inputs: dict, device: str | None = None, progress=None,
          outputs=None) -> dict:
    """{output name: Tensor on `device`} for `inputs` ({input name: Tensor, numpy array, list,
    bytes or array.array}). device: "CUDA" or "PTXSIM" for a ptx bundle (default CUDA where
    there is a driver, else PTXSIM), "WEBGPU" for a webgpu bundle. Outputs have the shapes and
    dtypes of `outputs`. `progress(info)` is called before each kernel (and on PTXSIM as its
    blocks run) with kernel i of n and an estimate of the seconds left; returning False stops
    the run (StoppedError); see export/progress.py. outputs: the names to read back (default
    all). A bundle with `state` keeps those buffers between runs on each device (the caller
    passes none of them); `reset()` empties them.

    Raises KernelgenError for inputs that are not a dict, unknown or missing names, or values
    of an unsupported type; DTypeError / ShapeError for an input of another dtype or shape;
    DeviceError for a device the bundle's format does not run on."""
    device = Device.canonical(device or self._default_device())
    runtime, handles, kernels = self._prepare(device)
    rows = self._rows.setdefault(device, bundle_state.Rows(self.manifest))
    specs = [s for s in self.manifest["inputs"] if s["name"] not in rows.names()]
    values = rows.values(_dim_values(self.manifest.get("dims", []), specs, inputs))
    for spec, data in zip(specs, _input_bytes(specs, inputs, values)):
      runtime.copyin(handles[self._storage(spec)], data)
    rows.zero(runtime, handles, self._storage_of)
    report = RunProgress(progress, [k for k, _ in kernels]) if progress is not None else None
    for i, (kernel, binding_handles) in enumerate(kernels):
      if not runs_at(self.manifest["kernels"][i].get("runs"), values):
        continue                # (a one-row step's joined kernel, or the pair it stands for)
      if report is not None:
        report.kernel(i)
      runtime.run(kernel, binding_handles, values, **({"progress": report.blocks}
                                                       if report and device == "PTXSIM" else {}))
    named = {spec["name"]: spec for spec in self.manifest["outputs"]}
    unknown = [n for n in outputs or () if n not in named]
    if unknown:
      raise KernelgenError(f"unknown output(s) {unknown}: this bundle's outputs are {list(named)}")
    out = {name: self._output(runtime, device, handles, named[name], values)
           for name in (named if outputs is None else outputs)}
    rows.advance(runtime, handles, self._storage_of, named, values)
    return out

  def generate(self, prompt, **options) -> list:
    """The tokens this causal LM bundle generates after `prompt`, with its KV cache kept as
    state between steps: `kg.generate`'s options (max_new_tokens, temperature, top_k, top_p,
    seed, stop, on_token, device); see export/causal.py."""
    from .causal import generate
    return generate(self, prompt, **options)

  def reset(self) -> None:
    """Empty the bundle's state (export's state=) on every device: the next run starts anew."""
    for rows in self._rows.values():
      rows.reset()

  def _storage_of(self, name: str) -> int:
    specs = self.manifest["inputs"] + self.manifest["outputs"]
    return self._storage(next(s for s in specs if s["name"] == name))

  def _default_device(self) -> str:
    if self.manifest["target"] == "wgsl":
      return "WEBGPU"
    return "CUDA" if Device.available("CUDA") else "PTXSIM"

  def _storage(self, spec: dict) -> int:
    return self.manifest["buffers"][spec["buffer"]]["storage"]

  def _prepare(self, device: str):
    """(runtime, storage handles, [(kernel, its handles)]) for `device`, made once."""
    if device in self._devices:
      return self._devices[device]
    runtime = Device[device]
    if runtime.target != self.manifest["target"]:
      wants = "CUDA or PTXSIM" if self.manifest["target"] == "ptx" else "WEBGPU"
      raise DeviceError(f"this is a {self.manifest['bundle']} bundle: run it on {wants}, not "
                        f"{device} (or export it with the other format)")
    handles = [runtime.alloc(s["nbytes"]) for s in self.manifest["storage"]]
    weights = self._weights() if self.manifest["weights"] else {}
    for spec in self.manifest["weights"]:
      runtime.copyin(handles[self._storage(spec)], weights[spec["name"]][2])
    kernels = [(self._kernel(k), [handles[self.manifest["buffers"][b["buffer"]]["storage"]]
                                  for b in k["bindings"]]) for k in self.manifest["kernels"]]
    self._devices[device] = runtime, handles, kernels
    return self._devices[device]

  def _weights(self) -> dict:
    """The weights file's entries, each one the manifest's weights list names, checked."""
    what = "the bundle's weights_file"
    path = limits.confined(self.path, self.manifest["weights_file"], what)
    weights = safetensors.decode(limits.read_file(path, what))
    for spec in self.manifest["weights"]:
      entry = weights.get(spec["name"])
      if entry is None or entry[0] != spec["dtype"] or list(entry[1]) != spec["shape"]:
        raise ManifestError(f"{path} has no weight {spec['name']!r} of {spec['dtype']} "
                            f"{spec['shape']}, which the manifest names: re-export the bundle")
    return weights

  def _kernel(self, entry: dict):
    """The CompiledKernel of manifest kernel `entry`, with its variants for small bound values
    (each entry's fields over the kernel's: lowering/variants.py; the runtime picks one)."""
    shared = {k: x for k, x in entry.items() if k not in ("grid", "variants")}
    variants = tuple((v["dim"], v["most"], self._kernel({**shared, **v}))
                     for v in entry.get("variants", ()))
    source = limits.read_file(limits.confined(self.path, entry["file"],
                                              f"kernel {entry['name']!r} (its file)"), "a kernel file", "r")
    buffers = self.manifest["buffers"]
    bindings = tuple(Binding(b["slot"], buffers[b["buffer"]]["name"] or f"b{b['buffer']}",
                             buffers[b["buffer"]]["dtype"], buffers[b["buffer"]]["size"],
                             b["access"], b["nbytes"], b.get("kind", "storage"))
                     for b in entry["bindings"])
    target = self.manifest["target"]
    launch = Launch(target, source, entry["entry_point"], bindings,
                    tuple(entry["workgroup_size"]), tuple(entry["dispatch"]),
                    tuple(tuple(u) for u in entry.get("uniforms", ())),
                    tuple(entry["features"]), grid_from_json(entry.get("grid")),
                    work_from_json(entry.get("work")))
    return CompiledKernel(entry["name"], target, source, tuple(entry["global_size"]),
                          tuple(entry["local_size"]), (), launch, variants=variants,
                          exact=entry.get("exact") is True)

  def _output(self, runtime, device: str, handles: list, spec: dict, values: dict):
    entry = self.manifest["buffers"][spec["buffer"]]
    data = bytes(runtime.copyout(handles[entry["storage"]]))[:entry["nbytes"]]
    dtype, shape = dtypes.from_name(spec["dtype"]), tuple(spec["shape"])
    if "symbolic_shape" in spec:     # the values of the bound sizes, out of the padded layout
      logical = _concrete(spec["symbolic_shape"], values)
      data, shape = compact(data, shape, logical, dtype.itemsize), logical
    buffer = lazy.Buffer(device, dtype, prod(shape), data)
    return Tensor(lazy.LazyOp.from_buffer(buffer, shape))


def _public(entry: dict) -> dict:
  return {"name": entry["name"], "shape": list(entry["shape"]), "dtype": entry["dtype"]}


def _concrete(symbolic_shape: list, values: dict) -> tuple:
  """A manifest's symbolic shape at the run's dim values (floored sizes: floor division)."""
  return tuple((s["const"] + sum(c * values[n] for n, c in s["terms"])) // s.get("div", 1)
               if isinstance(s, dict) else s for s in symbolic_shape)


def _size_text(s: dict) -> str:
  text = " + ".join(n if c == 1 else f"{c}*{n}" for n, c in s["terms"]) + \
    (f" + {s['const']}" if s["const"] else "")
  return f"({text}) // {s['div']}" if "div" in s else text


def _dim_values(dims: list[dict], specs: list[dict], inputs: dict) -> dict:
  """{dim: value} from the inputs whose only symbolic size is that dim (the manifest's dims);
  ShapeError outside a dim's range or where two inputs disagree."""
  values: dict = {}
  if not dims or not isinstance(inputs, dict):
    return values
  ranges = {d["name"]: (d["lo"], d["hi"]) for d in dims}
  for spec in specs:
    sym = spec.get("symbolic_shape")
    value = inputs.get(spec["name"])
    if sym is None or value is None:
      continue
    at = [a for a, s in enumerate(sym) if isinstance(s, dict)]
    if len(at) != 1 or len(sym[at[0]]["terms"]) != 1 or sym[at[0]]["const"] or \
       "div" in sym[at[0]]:
      continue
    name = sym[at[0]]["terms"][0][0]
    shape = tuple(value.shape) if hasattr(value, "shape") else None
    got = shape[at[0]] if shape is not None and len(shape) == len(sym) else None
    if got is None:
      raise ShapeError(f"input {spec['name']!r} has a symbolic size ({name}): pass a Tensor or "
                       f"numpy array of shape {_shape_text(sym)}")
    lo, hi = ranges[name]
    if not lo <= got <= hi:
      raise ShapeError(f"input {spec['name']!r} gives {name} = {got}, outside the bundle's range "
                       f"{lo}..{hi}")
    if values.setdefault(name, got) != got:
      raise ShapeError(f"input {spec['name']!r} gives {name} = {got}, another input gave "
                       f"{values[name]}")
  return values


def _shape_text(sym: list) -> str:
  parts = [_size_text(s) if isinstance(s, dict) else str(s) for s in sym]
  return "(" + ", ".join(parts) + ")"


def _input_bytes(specs: list[dict], inputs: dict, values: dict | None = None) -> list[bytes]:
  """The bytes of each input in `specs` order; typed errors for wrong names, shapes, dtypes."""
  if not isinstance(inputs, dict):
    raise KernelgenError(f"run() takes a dict of inputs by name ({_names(specs)}), got "
                         f"{type(inputs).__name__}")
  known = {s["name"] for s in specs}
  unknown = sorted(set(inputs) - known)
  if unknown:
    raise KernelgenError(f"unknown input(s) {', '.join(map(repr, unknown))}: this bundle's "
                         f"inputs are {_names(specs)}")
  missing = [s["name"] for s in specs if s["name"] not in inputs]
  if missing:
    raise KernelgenError(f"missing input(s) {', '.join(map(repr, missing))}: this bundle's "
                         f"inputs are {_names(specs)}")
  return [_one_input(spec, inputs[spec["name"]], values or {}) for spec in specs]


def _names(specs: list[dict]) -> str:
  return ", ".join(f"{s['name']} ({s['dtype']}{s['shape']})" for s in specs) or "none"


def _one_input(spec: dict, value, values: dict) -> bytes:
  name, dtype, shape = spec["name"], dtypes.from_name(spec["dtype"]), tuple(spec["shape"])
  if "symbolic_shape" in spec:      # the values at the front of each symbolic axis (padded)
    logical = _concrete(spec["symbolic_shape"], values)
    plain = {k: v for k, v in spec.items() if k != "symbolic_shape"}
    raw = _one_input({**plain, "shape": list(logical)}, value, values)
    return padded(raw, logical, shape, dtype.itemsize)
  if isinstance(value, list):
    value = Tensor(value, dtype=dtype, device="PYTHON")
  if isinstance(value, Tensor) or hasattr(value, "__array_interface__"):
    got = value.dtype.name if isinstance(value, Tensor) else str(value.dtype)
    if got != dtype.name:
      raise DTypeError(f"input {name!r} is {got}, the bundle takes {dtype.name}: cast it first")
    if tuple(value.shape) != shape:
      raise ShapeError(f"input {name!r} has shape {tuple(value.shape)}, the bundle takes "
                       f"{shape}: reshape it first")
    return bytes(value.data()) if isinstance(value, Tensor) else value.tobytes()
  try:
    view = memoryview(value).cast("B")
  except TypeError:
    raise KernelgenError(f"input {name!r} is a {type(value).__name__}: pass a Tensor, numpy "
                         f"array, list, bytes or array.array") from None
  fmt = memoryview(value).format.lstrip("@<=")
  if fmt not in ("B", "b", "c") and fmt != dtype.fmt:
    raise DTypeError(f"input {name!r} holds {fmt!r} items, the bundle takes {dtype.name} "
                     f"({dtype.fmt!r}): convert it first")
  if len(view) != prod(shape) * dtype.itemsize:
    raise ShapeError(f"input {name!r} has {len(view)} bytes, the bundle takes {prod(shape)} x "
                     f"{dtype.name} = {prod(shape) * dtype.itemsize} bytes")
  return bytes(view)
