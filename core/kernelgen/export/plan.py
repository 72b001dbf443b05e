"""What a bundle holds: a compiled program's buffers, kernels and memory plan, as plain data.

`make_plan(outputs, target, options)` compiles the program once (compiler.compile_plan: the same
schedule and kernels as `kg.compile`) and wires every kernel's binding slots to the program's
buffers: slot 0 is the kernel's own output, slot i its input `item.inputs[i - 1]`, then a joined kernel's
further outputs `item.extra` (graph/join.py). A buffer is
  - an input: an unfilled named buffer (`Tensor.empty(..., name=)`), written by the caller;
  - a weight: any other realized buffer; its bytes go into weights.safetensors;
  - an output: a tensor the caller named in `outputs`;
  - an intermediate: what one kernel writes for later kernels; these share storage
    (memory.py).
The manifest (`BundlePlan.manifest`) is JSON: see export/README.md for its fields.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..compiler import compile_plan, compile_plan_twice, with_one_row_joins
from ..errors import KernelgenError, ShapeError, UnsupportedError
from ..graph.dims import Sym
from ..graph.lazy import L
from ..tensor.tensor import Tensor
from ..uop.program import grid_json, unnamed_source, work_json
from . import alternates
from .memory import Interval, assign

FORMAT = "kernelgen-bundle/1"
ALIGN = 16   # storage sizes are rounded up to this (WebGPU copies need 4; vec4 access 16)


@dataclass
class BundlePlan:
  """What a bundle's files hold: its manifest, its kernel sources and its weights."""
  manifest: dict                               # manifest.json's contents
  sources: dict[str, str]                      # file name -> kernel source
  weights: dict[str, tuple[str, tuple, bytes]] = field(default_factory=dict)  # safetensors


class ModelOutputs(dict):
  """An ONNX model's outputs by the model's own names, which need not be identifiers: the
  manifest keeps them as they are (kernels name their buffers by slot, never by them)."""


def named_outputs(outputs) -> dict:
  """{name: Tensor} from a Tensor (named `out`), a list/tuple (`out0`, `out1`, ...) or a dict."""
  if isinstance(outputs, Tensor):
    outputs = {"out": outputs}
  elif isinstance(outputs, (list, tuple)):
    outputs = {f"out{i}": t for i, t in enumerate(outputs)}
  if not isinstance(outputs, dict) or not outputs:
    raise KernelgenError("export needs the program's outputs: a Tensor, a list of Tensors or a "
                         f"dict name -> Tensor, got {type(outputs).__name__}")
  for name, value in outputs.items():
    if isinstance(outputs, ModelOutputs) and isinstance(name, str) and name.isprintable() \
        and 0 < len(name) <= 256:
      pass          # an ONNX model's output keeps its own name ('gpu_0/softmax_1')
    elif not isinstance(name, str) or not name.isidentifier():
      raise KernelgenError(f"output name {name!r} is not an identifier: name outputs like `y`")
    if not isinstance(value, Tensor):
      raise KernelgenError(f"output {name!r} is a {type(value).__name__}, not a Tensor")
  return outputs


class _Buffers:
  """The program's buffers by identity (a realized Buffer object, or a kernel's output node)."""

  def __init__(self):
    self.entries: list[dict] = []
    self.ids: dict[int, int] = {}
    self.keep: list = []           # the keyed objects, alive while ids refer to them

  def of(self, node) -> int:
    while node.op is L.WRITE and not node.realized:
      node = node.src[0]           # an in-place write's output is its target's buffer
    obj = node.buffer if node.realized else node
    if id(obj) not in self.ids:
      self.ids[id(obj)] = len(self.entries)
      self.keep.append(obj)
      self.entries.append(_describe(node, len(self.entries)))
    return self.ids[id(obj)]


def _describe(node, key: int) -> dict:
  dtype, size = node.dtype, node.size
  if node.realized:
    buf = node.buffer
    kind = "input" if buf.is_input else "weight"
    name = (buf.public_name or buf.name) if buf.is_input else (buf.name or buf.label)
    dtype, size = buf.dtype, buf.size
  else:
    kind, name = "intermediate", None
  # an input read as a prefix of its buffer (Buffer.public_view) has that view's sizes
  view = node.buffer.public_view if node.realized and node.buffer.is_input else None
  return {"id": key, "kind": kind, "name": name, "dtype": dtype.name, "size": size,
          "shape": list(node.shape), "nbytes": size * dtype.itemsize,
          "alloc": _rounded(size * dtype.itemsize), "written_by": [], "read_by": [],
          **_symbolic(view if view is not None else node)}


def _symbolic(node) -> dict:
  """{"symbolic_shape": [...]} of a node with symbolic sizes (each an int, or {"terms": [[dim,
  coefficient], ...], "const": c}: the value under the run's dims, and "div": d for a floored
  size, floor((const + terms) / d), as a slice with a step makes), else {}."""
  if node.sym is None:
    return {}
  return {"symbolic_shape": [_size_json(s) if isinstance(s, Sym) else s for s in node.sym]}


def _size_json(s: Sym) -> dict:
  out = {"terms": [list(t) for t in s.terms], "const": s.const}
  return {**out, "div": s.div} if s.div != 1 else out


def _dims(pairs, entries: list[dict]) -> list[dict]:
  """[{name, lo, hi}] of every dim the kernels read (as an argument, or in their run-time grid);
  each must be the size of some input's axis (its only symbolic one, a plain dim), so run() can
  tell its value from that input. A dim an output's size has and an input gives is listed too,
  though no kernel reads it (kernels over the padded rows: run() still binds it to cut the
  outputs)."""
  dims, ranges = {}, {}
  for item, compiled in pairs:
    for v in compiled.kernel.vars if compiled.kernel is not None else ():
      name, lo, hi = v.arg
      dims[name] = {"name": name, "lo": lo, "hi": hi}
    for s in item.out.sym or ():
      ranges.update(getattr(s, "ranges", {}))
    gridded = item.out.sym if compiled.launch.grid and item.out.sym else ()
    for s in gridded:
      for name, (lo, hi) in getattr(s, "ranges", {}).items():
        dims[name] = {"name": name, "lo": lo, "hi": hi}
  given, shown = set(), set()
  for e in entries:
    syms = [s for s in e.get("symbolic_shape", ()) if isinstance(s, dict)]
    if e["kind"] == "input" and len(syms) == 1 and len(syms[0]["terms"]) == 1 and \
       syms[0]["terms"][0][1] == 1 and not syms[0]["const"] and "div" not in syms[0]:
      given.add(syms[0]["terms"][0][0])
    shown.update(name for s in syms for name, _ in s["terms"])
  for name in sorted(shown & given & set(ranges) - set(dims)):
    lo, hi = ranges[name]
    dims[name] = {"name": name, "lo": lo, "hi": hi}
  missing = sorted(set(dims) - given)
  if missing:
    raise UnsupportedError(f"the kernels read the symbolic size(s) {', '.join(missing)}, which "
                           f"no input has as its size: a bundle takes each dim's value from an "
                           f"input's length, so give some input (Tensor.empty(..., name=)) that "
                           f"size as its only symbolic axis")
  return sorted(dims.values(), key=lambda d: d["name"])


def _rounded(nbytes: int) -> int:
  return max(ALIGN, -(-nbytes // ALIGN) * ALIGN)


def make_plan(outputs, target: str, options: dict, file_suffix: str,
              alternate: dict | None = None) -> BundlePlan:
  """Compile `outputs` (named_outputs) for `target` and describe the bundle. alternate: options
  (`{"subgroups": True}`) each kernel is compiled again under; a kernel whose launch differs so,
  with the same bindings, carries that form as its entry's `subgroups` (export/alternates.py)."""
  outputs = named_outputs(outputs)
  roots = [t.node for t in outputs.values()]
  if alternate:
    triples = compile_plan_twice(roots, target, dict(options), alternate)
  else:
    triples = [(item, compiled, None) for item, compiled in
               compile_plan(roots, target, dict(options))]
  others = {id(item): other for item, _, other in triples}
  pairs = with_one_row_joins([(item, compiled) for item, compiled, _ in triples], roots, target,
                             dict(options))       # a one-row step's joins (no subgroups form)
  triples = [(item, compiled, others.get(id(item))) for item, compiled in pairs]
  table = _Buffers()
  kernels, sources = [], {}
  for index, (item, compiled, other) in enumerate(triples):
    slots = (item.out,) + tuple(item.inputs) + tuple(item.extra)
    kernels.append(_kernel_entry(index, compiled, slots, table, file_suffix))
    _add_sources(sources, kernels[-1], compiled)
    if other is not None:
      alternates.attach(kernels[-1], compiled, other, _launch_entry, file_suffix)
      _add_sources(sources, kernels[-1].get("subgroups", {}), other)
  sources = share_sources(kernels, sources)
  for node in _named_inputs([t.node for t in outputs.values()]):
    table.of(node)                 # an input no kernel reads still takes its value
  manifest_outputs = _outputs(outputs, table)
  _name_buffers(table.entries)
  weights = _weights(table)
  storage = _storage(table.entries, len(kernels))
  features = sorted({f for k in kernels for f in k["features"]})
  manifest = {"format": FORMAT, "target": target, "options": _plain(options),
              "features": features, "dims": _dims(pairs, table.entries),
              "inputs": _io(table.entries, "input"), "outputs": manifest_outputs,
              "weights": _io(table.entries, "weight"), "buffers": table.entries,
              "storage": storage, "memory": _memory(table.entries, storage),
              "kernels": kernels}
  alternates.declare(manifest)
  return BundlePlan(manifest, sources, weights)


def _kernel_entry(index: int, compiled, slots, table: _Buffers, suffix: str) -> dict:
  launch = compiled.launch
  bindings = []
  for b in launch.bindings:
    key = table.of(slots[b.slot])
    entry = table.entries[key]
    entry["alloc"] = max(entry["alloc"], _rounded(b.nbytes))
    entry["written_by" if b.access != "read" else "read_by"].append(index)
    if b.access == "readwrite":
      entry["read_by"].append(index)
    bindings.append({"slot": b.slot, "buffer": key, "access": b.access, "nbytes": b.nbytes,
                     **({"kind": b.kind} if b.kind != "storage" else {})})
  entry = {"name": compiled.name, **_launch_entry(compiled, compiled.name + suffix),
           "bindings": bindings, "uniforms": [list(u) for u in launch.uniforms]}
  if compiled.runs:       # launched only while its dim is bound within lo..hi (graph/one_row.py)
    dim, lo, hi = compiled.runs
    entry["runs"] = {"dim": dim, "lo": lo, "hi": hi}
  if launch.work:         # its estimated work (Launch.work): model.js weighs a run's time by it
    entry["work"] = work_json(launch.work)
  if compiled.variants:   # for small bound values (lowering/variants.py): the same bindings
    entry["variants"] = [{"dim": dim, "most": most, **({"exact": True} if variant.exact else {}),
                          **_launch_entry(variant, f"{compiled.name}_v{i}{suffix}")}
                         for i, (dim, most, variant) in enumerate(compiled.variants, 1)]
  return entry


def _add_sources(sources: dict, entry: dict, compiled) -> None:
  """{file: source} of a kernel entry and its variants' (nothing for an empty entry)."""
  if "file" in entry:
    sources[entry["file"]] = compiled.source
  for variant, (_, _, other) in zip(entry.get("variants", ()), compiled.variants):
    sources[variant["file"]] = other.source


def share_sources(kernels: list, sources: dict) -> dict:
  """The sources to write, each once: a launch (kernel or variant entry) whose source is an
  earlier one's but for its entry point's name (a model's layers: the same kernel over other
  buffers, named _n2, _n3...) takes the earlier one's file and entry point, so the page builds
  one pipeline for both (SmolLM2's prefill, 2 layers: 57 launches, 35 distinct). The entries
  are changed in place; returns {file: source} of the files left."""
  first: dict = {}        # the source with its entry point's name blanked -> (file, entry point)
  kept = {}
  for entry in (e for k in kernels for e in alternates.launches(k)):
    source, name = sources[entry["file"]], entry["entry_point"]
    key = unnamed_source(source, name)
    if key in first:
      entry["file"], entry["entry_point"] = first[key]
    else:
      first[key] = entry["file"], name
      kept[entry["file"]] = source
  return kept


def _launch_entry(compiled, file: str) -> dict:
  """A kernel entry's launch fields: its source `file`, entry point, sizes, features and
  run-time grid."""
  launch = compiled.launch
  entry = {"file": file, "entry_point": launch.entry_point,
           "workgroup_size": list(launch.workgroup_size), "dispatch": list(launch.dispatch),
           "global_size": list(compiled.global_size), "local_size": list(compiled.local_size),
           "features": list(launch.features)}
  if launch.grid:     # the workgroups a run needs under the dims' values (Launch.grid)
    entry["grid"] = grid_json(launch.grid)
  return entry


def _named_inputs(roots: list) -> list:
  """The realized nodes with an input buffer (Tensor.empty) that the graph of `roots` reaches."""
  found, seen, stack = [], set(), list(roots)
  while stack:
    node = stack.pop()
    if id(node) in seen:
      continue
    seen.add(id(node))
    if node.realized:
      found.extend([node] if node.buffer.is_input else [])
    else:
      stack.extend(node.src)
  return found


def _outputs(outputs: dict, table: _Buffers) -> list[dict]:
  out = []
  for name, tensor in outputs.items():
    key = table.of(tensor.node)
    entry = table.entries[key]
    if entry["kind"] == "intermediate" and not entry["written_by"]:
      raise ShapeError(f"output {name!r} has no elements (shape {tensor.shape}): a bundle cannot "
                       f"return an empty tensor")
    if entry["kind"] == "intermediate":
      entry["kind"], entry["name"] = "output", name
    if entry["kind"] == "output":      # (an input written in place keeps its own description)
      entry["shape"] = list(tensor.shape)
      entry.update(_symbolic(tensor.node))
    out.append({"name": name, "shape": list(tensor.shape), "dtype": tensor.dtype.name,
                "buffer": key, **_symbolic(tensor.node)})
  return out


def _name_buffers(entries: list[dict]) -> None:
  """Weights get their buffers' names or `w0`, `w1`, ... (their safetensors keys); inputs must
  have distinct names."""
  seen: dict[str, int] = {}
  for entry in entries:
    if entry["kind"] == "input":
      if entry["name"] is None:
        raise KernelgenError(f"an input of shape {tuple(entry['shape'])} has no name: a bundle's "
                             f"caller passes inputs by name, so make it Tensor.empty(..., "
                             f"name='x')")
      if entry["name"] in seen:
        raise KernelgenError(f"two different inputs are named {entry['name']!r}: give each "
                             f"Tensor.empty(..., name=) its own name")
      seen[entry["name"]] = entry["id"]
  _name_weights([e for e in entries if e["kind"] == "weight"])


def _name_weights(weights: list[dict]) -> None:
  """A weight keeps its buffer's name (the program's variable, where the CLI or the page named
  it: `w = Tensor.randn(...).realize()` is `w`); the others, and a name taken twice, get `w0`,
  `w1`, ... by position (never a name another weight has)."""
  taken = {e["name"] for e in weights if e["name"] is not None}
  counts: dict[str, int] = {}
  for entry in weights:
    counts[entry["name"]] = counts.get(entry["name"], 0) + 1
  used: set[str] = set()
  for i, entry in enumerate(weights):
    name = entry["name"]
    if name is None or counts[name] > 1 or name in used:
      name, n = f"w{i}", i
      while name in taken or name in used:
        n += len(weights)
        name = f"w{n}"
    entry["name"] = name
    used.add(name)


def _weights(table: _Buffers) -> dict:
  weights = {}
  for entry, obj in zip(table.entries, table.keep):
    if entry["kind"] == "weight":
      weights[entry["name"]] = (entry["dtype"], tuple(entry["shape"]), obj.copyout())
  return weights


def _storage(entries: list[dict], n_kernels: int) -> list[dict]:
  """Each buffer's `storage` index; intermediates share storages (memory.assign)."""
  intervals = [Interval(e["id"], e["alloc"], min(e["written_by"]),
                        max(e["read_by"] + e["written_by"]))
               for e in entries if e["kind"] == "intermediate"]
  shared, sizes = assign(intervals)
  storage = [{"nbytes": n, "shared": True} for n in sizes]
  for entry in entries:
    if entry["id"] in shared:
      entry["storage"] = shared[entry["id"]]
    else:
      entry["storage"] = len(storage)
      storage.append({"nbytes": entry["alloc"], "shared": False})
  return storage


def _memory(entries: list[dict], storage: list[dict]) -> dict:
  inter = [e["alloc"] for e in entries if e["kind"] == "intermediate"]
  return {"buffer_bytes": sum(e["alloc"] for e in entries),
          "peak_bytes": sum(s["nbytes"] for s in storage),
          "intermediate_bytes": sum(inter),
          "intermediate_peak_bytes": sum(s["nbytes"] for s in storage if s["shared"])}


def _io(entries: list[dict], kind: str) -> list[dict]:
  keep = ("symbolic_shape",)
  return [{"name": e["name"], "shape": e["shape"], "dtype": e["dtype"], "buffer": e["id"],
           **{k: e[k] for k in keep if k in e}} for e in entries if e["kind"] == kind]


def _plain(options: dict) -> dict:
  return {k: v for k, v in options.items() if isinstance(v, (bool, int, float, str))}
