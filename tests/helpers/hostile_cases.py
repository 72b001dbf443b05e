"""Hostile and malformed inputs, as an attacker or a careless user would write them (issue 41).

`cases(workdir)` builds every case in `workdir`: a `Case(category, name, run, expect, outside)`
whose `run()` does one thing with kernelgen's public API. `expect` is
  - an exception class: the typed error it must raise (a regression case from the issue),
  - "ok": it must succeed (a deep graph, a valid file),
  - "either": a mutated file: it may load or be refused, but only with a KernelgenError.
Files a case names outside its folder hold SECRET; a case "escapes" when SECRET shows up in an
error message or a result. Mutations (bit flips, truncations) of a valid bundle manifest,
safetensors file and ONNX model are seeded and bounded, so the whole set runs in a minute or so.
hostile_report.py runs them with a time limit each and prints the totals per category.
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

import kernelgen as kg

SECRET = "hostile-secret-7f3a91"      # the contents of every file outside a case's folder
FLIPS, CUTS = 24, 8                   # mutations of each valid file (seeded)


@dataclass
class Case:
  category: str        # bundle, safetensors, onnx, tensor, options, deep
  name: str
  run: Callable        # () -> anything; raises for a refused input
  expect: object       # an exception class, "ok" or "either"
  outside: bool = False  # the input names a file outside its folder: success is an escape


def cases(workdir) -> list[Case]:
  """Every hostile case, its files built under `workdir`."""
  work = Path(workdir)
  secret = work / "secret.txt"
  secret.write_text(SECRET * 4)
  return (bundle_cases(work, secret) + safetensors_cases(work) + onnx_cases(work, secret) +
          tensor_cases() + option_cases() + deep_cases())


# ---- bundles ---------------------------------------------------------------------------------

def _bundle(work: Path) -> tuple[Path, dict]:
  folder = work / "bundle"
  x = kg.Tensor.empty(2, 4, name="x")
  w = kg.Tensor([[1.0, 2.0, 3.0, 4.0]] * 2)
  kg.export({"out": x * w}, str(folder), format="ptx")
  return folder, json.loads((folder / "manifest.json").read_text())


def _run_bundle(folder: Path, text: str | None = None, setup: Callable | None = None):
  """Write `text` as the manifest (and do `setup`), then load and run the bundle on PTXSIM."""
  def run():
    if text is not None:
      (folder / "manifest.json").write_text(text)
    if setup:
      setup()
    out = kg.load_bundle(str(folder)).run({"x": np.ones((2, 4), np.float32)}, device="PTXSIM")
    return out["out"].numpy()
  return run


def _with_file(path: Path, text: str, run: Callable) -> Callable:
  """`run` with `path` holding `text`, restored afterwards."""
  def wrapped():
    saved = path.read_bytes()
    path.write_text(text)
    try:
      return run()
    finally:
      path.write_bytes(saved)
  return wrapped


def _edit(m: dict, fn: Callable) -> str:
  m = json.loads(json.dumps(m))
  fn(m)
  return json.dumps(m)


def _set(path: tuple, value):
  def fn(m):
    target = m
    for key in path[:-1]:
      target = target[key]
    target[path[-1]] = value
  return fn


def _pop(key):
  return lambda m: m.pop(key)


def bundle_cases(work: Path, secret: Path) -> list[Case]:
  folder, m = _bundle(work)
  (folder / "dir.d").mkdir()
  os.mkfifo(folder / "fifo")
  os.symlink(secret, folder / "link.safetensors")
  os.symlink(secret, folder / "link.ptx")
  edits = {   # name -> (manifest edit, expected error)
    "weights_file absolute (/etc/passwd)": (_set(("weights_file",), "/etc/passwd"), kg.PathError),
    "weights_file absolute (secret)": (_set(("weights_file",), str(secret)), kg.PathError),
    "weights_file ../": (_set(("weights_file",), "../secret.txt"), kg.PathError),
    "weights_file symlink out": (_set(("weights_file",), "link.safetensors"), kg.PathError),
    "weights_file FIFO": (_set(("weights_file",), "fifo"), kg.PathError),
    "weights_file folder": (_set(("weights_file",), "dir.d"), kg.PathError),
    "kernel file absolute": (_set(("kernels", 0, "file"), str(secret)), kg.PathError),
    "kernel file ../": (_set(("kernels", 0, "file"), "../secret.txt"), kg.PathError),
    "kernel file symlink out": (_set(("kernels", 0, "file"), "link.ptx"), kg.PathError),
    "kernel file FIFO": (_set(("kernels", 0, "file"), "fifo"), kg.PathError),
    "workgroup_size [0, 0, 0]": (_set(("kernels", 0, "workgroup_size"), [0, 0, 0]),
                                 kg.ManifestError),
    "workgroup_size 2048": (_set(("kernels", 0, "workgroup_size"), [2048, 1, 1]),
                            kg.ManifestError),
    "binding buffer -1": (_set(("kernels", 0, "bindings", 0, "buffer"), -1), kg.ManifestError),
    "binding buffer 99": (_set(("kernels", 0, "bindings", 0, "buffer"), 99), kg.ManifestError),
    "binding slot twice": (_set(("kernels", 0, "bindings", 1, "slot"), 0), kg.ManifestError),
    "binding nbytes past storage": (_set(("kernels", 0, "bindings", 0, "nbytes"), 1 << 20),
                                    kg.ManifestError),
    "kernel work a string": (_set(("kernels", 0, "work"), "lots"), kg.ManifestError),
    "kernel work a bool factor": (_set(("kernels", 0, "work"), [[[], True]]), kg.ManifestError),
    "no inputs": (_pop("inputs"), kg.ManifestError),
    "no kernels": (_pop("kernels"), kg.ManifestError),
    "kernels [{}]": (_set(("kernels",), [{}]), kg.ManifestError),
    "inputs [{name}]": (_set(("inputs",), [{"name": "x"}]), kg.ManifestError),
    "input buffer 7": (_set(("inputs", 0, "buffer"), 7), kg.ManifestError),
    "input shape strings": (_set(("inputs", 0, "shape"), ["2", "4"]), kg.ManifestError),
    "input dtype complex": (_set(("inputs", 0, "dtype"), "complex64"), kg.ManifestError),
    "dtype a list": (_set(("buffers", 0, "dtype"), ["float32"]), kg.ManifestError),
    "storage nbytes -1": (_set(("storage", 0, "nbytes"), -1), kg.ManifestError),
    "storage empty": (_set(("storage",), []), kg.ManifestError),
    "dispatch negative": (_set(("kernels", 0, "dispatch"), [-1, 1, 1]), kg.ManifestError),
    "entry_point not a name": (_set(("kernels", 0, "entry_point"), "a b"), kg.ManifestError),
    "format other": (_set(("format",), "other/9"), kg.ManifestError),
    "bundle webgpu target ptx": (_set(("bundle",), "webgpu"), kg.ManifestError),
    "weights name unknown": (_set(("weights", 0, "name"), "nope"), kg.ManifestError),
    "manifest an empty object": (lambda m: m.clear(), kg.ManifestError),
  }
  out = [Case("bundle", name, _run_bundle(folder, _edit(m, fn)), err,
              outside="out" in name or "passwd" in name or "secret" in name or "../" in name)
         for name, (fn, err) in edits.items()]
  texts = {"not JSON": "{inputs:", "empty": "", "a JSON list": "[]", "a number": "1e999",
           "100,000-deep nesting": "[" * 100_000 + "]" * 100_000,
           "5,000-digit int": json.dumps(m).replace('"size": 8', '"size": ' + "9" * 5000, 1)}
  out += [Case("bundle", f"manifest {name}", _run_bundle(folder, text),
               kg.LimitError if "deep" in name else kg.ManifestError)
          for name, text in texts.items()]
  out.append(Case("bundle", "manifest a list (not a dict)", _run_bundle(folder, "[1, 2]"),
                  kg.ManifestError))
  out.append(Case("bundle", "valid bundle", _run_bundle(folder, json.dumps(m)), "ok"))
  kernel = folder / m["kernels"][0]["file"]
  source = kernel.read_text()
  sources = {"garbage": "hello world", "empty": "", "cut in half": source[:len(source) // 2],
             "5,000 nested brackets": source.replace("[", "[" * 5000, 1),
             "binary": "\x00\xff" * 10}
  out += [Case("bundle", f"kernel file {name}", _with_file(kernel, text, _run_bundle(
    folder, json.dumps(m))), kg.CompileError) for name, text in sources.items()]
  # a kernel that never ends (a branch back to itself): PTXSIM's work limit stops it
  at = source.index("{", source.index(".entry")) + 1
  spin = source[:at] + "\n$Lkg_spin:\n\tbra.uni $Lkg_spin;\n" + source[at:]
  run_spin = _with_file(kernel, spin, _run_bundle(folder, json.dumps(m)))
  out.append(Case("bundle", "kernel file an endless loop (PTXSIM work limit)",
                  lambda: _with_limits(run_spin, ptxsim_work=20_000), kg.LimitError))
  out += [Case("bundle", f"manifest mutation {i}", _run_bundle(folder, text), "either")
          for i, text in enumerate(_mutations(json.dumps(m).encode(), 1))]
  return out


def _with_limits(run: Callable, **limits):
  with kg.limits.raised(**limits):    # (a lower limit: the default takes a minute to reach)
    return run()


# ---- safetensors -----------------------------------------------------------------------------

def _st(header: dict, data: bytes = b"") -> bytes:
  text = json.dumps(header).encode()
  return len(text).to_bytes(8, "little") + text + data


def safetensors_cases(work: Path) -> list[Case]:
  def load(blob):
    return lambda: {k: v.numpy() for k, v in kg.load(blob, device="PYTHON").items()}
  entry = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
  bad = {
    "dtype a list": _st({"a": {**entry, "dtype": ["F32"]}}, b"\0" * 4),
    "dtype an object": _st({"a": {**entry, "dtype": {"F32": 1}}}, b"\0" * 4),
    "dtype unknown": _st({"a": {**entry, "dtype": "F128"}}, b"\0" * 4),
    "5,000-digit offset": (lambda t: len(t).to_bytes(8, "little") + t + b"\0" * 4)(
      ('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,' + "9" * 5000 + "]}}").encode()),
    "offsets floats": _st({"a": {**entry, "data_offsets": [0.0, 4.0]}}, b"\0" * 4),
    "offsets past the file": _st({"a": {**entry, "data_offsets": [0, 1 << 40]}}, b"\0" * 4),
    "shape 2**62 x 2**62": _st({"a": {**entry, "shape": [1 << 62, 1 << 62]}}, b"\0" * 4),
    "shape 100 dims": _st({"a": {**entry, "shape": [1] * 100}}, b"\0" * 4),
    "100,000-deep nesting": (lambda t: len(t).to_bytes(8, "little") + t)(
      b"[" * 100_000 + b"]" * 100_000),
    "header length /etc/passwd": b"root:x:0:0:root:/root:/bin/bash\n",
    "header not UTF-8": (4).to_bytes(8, "little") + b"\xff\xfe{}",
    "header a list": _st([]),
    "metadata not strings": _st({"__metadata__": {"a": [1]}}),
  }
  out = [Case("safetensors", name, load(blob), kg.LimitError if "100" in name else
               kg.SafetensorsError) for name, blob in bad.items()]
  valid = kg.Tensor.arange(12, device="PYTHON").reshape(3, 4).float()
  path = work / "w.safetensors"
  kg.save({"a": valid, "b": kg.Tensor([1, 2, 3], dtype="int32", device="PYTHON")}, str(path))
  blob = path.read_bytes()
  out.append(Case("safetensors", "valid file", load(blob), "ok"))
  os.mkfifo(work / "fifo.safetensors")
  out.append(Case("safetensors", "a FIFO", load(str(work / "fifo.safetensors")), kg.PathError))
  out.append(Case("safetensors", "a folder", load(str(work)), kg.PathError))
  out += [Case("safetensors", f"mutation {i}", load(b), "either")
          for i, b in enumerate(_mutations(blob, 2))]
  return out


# ---- ONNX ------------------------------------------------------------------------------------

def _onnx_model(nodes, inputs, outputs, inits=(), opset=13):
  import onnx
  from onnx import helper
  graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape):
  from onnx import TensorProto, helper
  return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _run_onnx(src, feeds=None):
  def run():
    model = kg.onnx.load(src() if callable(src) else src)
    out = model.run(feeds or {}, device="PYTHON")
    return {k: v.numpy() for k, v in out.items()}
  return run


def _external_model(folder: Path, location: str, n: int = 4, tensors: int = 1) -> str:
  """A model whose initializers w0.. keep their data in `location` (relative to folder)."""
  import onnx
  from onnx import TensorProto, helper
  folder.mkdir(parents=True, exist_ok=True)
  inits, nodes, last = [], [], "x"
  for i in range(tensors):
    t = helper.make_tensor(f"w{i}", TensorProto.FLOAT, [n], [0.0] * n)
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(i * 4 * n)),
                       ("length", str(4 * n))):
      entry = t.external_data.add()
      entry.key, entry.value = key, value
    inits.append(t)
    nodes.append(helper.make_node("Add", [last, f"w{i}"], [f"y{i}"]))
    last = f"y{i}"
  model = _onnx_model(nodes, [_vi("x", [n])], [_vi(last, [n])], inits)
  path = folder / "m.onnx"
  onnx.save(model, str(path))
  return str(path)


def _chain_model(n: int) -> bytes:
  from onnx import helper
  nodes = [helper.make_node("Add" if i % 2 else "Mul", [f"t{i}", "x"], [f"t{i + 1}"])
           for i in range(n)]
  nodes.insert(0, helper.make_node("Identity", ["x"], ["t0"]))
  return _onnx_model(nodes, [_vi("x", [2])], [_vi(f"t{n}", [2])]).SerializeToString()


def _loop_model(n: int) -> bytes:
  """y = x + 1 carried through an ONNX Loop of n iterations."""
  from onnx import TensorProto, helper, numpy_helper
  info = helper.make_tensor_value_info
  body = helper.make_graph(
    [helper.make_node("Add", ["v_in", "one"], ["v_out"]),
     helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
    [info("i", TensorProto.INT64, []), info("cond_in", TensorProto.BOOL, []),
     info("v_in", TensorProto.FLOAT, [2])],
    [info("cond_out", TensorProto.BOOL, []), info("v_out", TensorProto.FLOAT, [2])],
    [numpy_helper.from_array(np.ones(2, np.float32), "one")])
  node = helper.make_node("Loop", ["n", "c", "x"], ["y"], body=body)
  inits = [numpy_helper.from_array(np.array(n, np.int64), "n"),
           numpy_helper.from_array(np.array(True), "c")]
  return _onnx_model([node], [_vi("x", [2])], [_vi("y", [2])], inits).SerializeToString()


def _one_node(op: str, attrs: dict, inits=(), out_shape=None) -> bytes:
  from onnx import helper
  names = ["x"] + [t.name for t in inits]
  node = helper.make_node(op, names, ["y"], **attrs)
  return _onnx_model([node], [_vi("x", [1, 1, 4, 4])], [_vi("y", out_shape)],
                     inits).SerializeToString()


def _resize(scale: float) -> bytes:
  from onnx import helper, numpy_helper
  node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")
  s = numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "s")
  return _onnx_model([node], [_vi("x", [1, 1, 4, 4])], [_vi("y", None)], [s]).SerializeToString()


def onnx_cases(work: Path, secret: Path) -> list[Case]:
  x4 = {"x": np.ones(4, np.float32)}
  onnx_dir = work / "onnx"
  good = _external_model(onnx_dir / "good", "data.bin")
  (onnx_dir / "good" / "data.bin").write_bytes(b"\0" * 16)
  (onnx_dir / "link").mkdir(parents=True)
  os.symlink(secret, onnx_dir / "link" / "data.bin")
  link = _external_model(onnx_dir / "link", "data.bin")
  fifo = _external_model(onnx_dir / "fifo", "data.bin")
  os.mkfifo(onnx_dir / "fifo" / "data.bin")
  up = _external_model(onnx_dir / "up", "../../secret.txt")
  absolute = _external_model(onnx_dir / "abs", str(secret))
  folder = _external_model(onnx_dir / "folder", "sub")
  (onnx_dir / "folder" / "sub").mkdir()
  many = _external_model(onnx_dir / "many", "data.bin", n=256, tensors=4)
  (onnx_dir / "many" / "data.bin").write_bytes(b"\0" * 4096)

  def over_model_limit():   # each tensor (1 KiB) is under the limit, the four together are not
    with kg.limits.raised(external_bytes=3000):
      return _run_onnx(many, {"x": np.ones(256, np.float32)})()
  out = [
    Case("onnx", "external data valid", _run_onnx(good, x4), "ok"),
    Case("onnx", "external data symlink out", _run_onnx(link, x4), kg.ModelError, True),
    Case("onnx", "external data FIFO", _run_onnx(fifo, x4), kg.ModelError),
    Case("onnx", "external data ../", _run_onnx(up, x4), kg.ModelError, True),
    Case("onnx", "external data absolute", _run_onnx(absolute, x4), kg.ModelError, True),
    Case("onnx", "external data a folder", _run_onnx(folder, x4), kg.ModelError),
    Case("onnx", "external data over the per-model limit", over_model_limit, kg.LimitError),
    Case("onnx", "load a directory", _run_onnx(str(onnx_dir)), kg.ModelError),
    Case("onnx", "Resize scales 1e6", _run_onnx(_resize(1e6), {"x": np.ones((1, 1, 4, 4),
                                                                          np.float32)}),
         kg.LimitError),
    Case("onnx", "Resize scales inf", _run_onnx(_resize(float("inf")), {
      "x": np.ones((1, 1, 4, 4), np.float32)}), kg.ModelError),
    Case("onnx", "Transpose perm [5, 0]", _run_onnx(_one_node("Transpose", {"perm": [5, 0]}), {
      "x": np.ones((1, 1, 4, 4), np.float32)}), kg.KernelgenError),
    Case("onnx", "500-node chain", _run_onnx(_chain_model(500), {"x": np.ones(2, np.float32)}),
         "ok"),
    Case("onnx", "Loop of 4,000 iterations", _run_onnx(_loop_model(4000), {
      "x": np.zeros(2, np.float32)}), "ok"),
  ]
  blob = _chain_model(6)
  out += [Case("onnx", f"model mutation {i}", _run_onnx(b, {"x": np.ones(2, np.float32)}),
               "either") for i, b in enumerate(_mutations(blob, 3))]
  return out


# ---- the Tensor API and options ---------------------------------------------------------------

def tensor_cases() -> list[Case]:
  P = "PYTHON"
  t = lambda: kg.Tensor.ones(2, 3, device=P)  # noqa: E731
  calls = {
    "permute(5, 0)": (lambda: t().permute(5, 0).numpy(), kg.ShapeError),
    "permute(-3, 0)": (lambda: t().permute(-3, 0).numpy(), kg.ShapeError),
    "eye(-1)": (lambda: kg.Tensor.eye(-1, device=P).numpy(), kg.ShapeError),
    "eye(2.5)": (lambda: kg.Tensor.eye(2.5, device=P).numpy(), kg.ShapeError),
    't["a"]': (lambda: t()["a"], kg.ShapeError),
    "t[{}]": (lambda: t()[{}], kg.ShapeError),
    "arange(0, nan)": (lambda: kg.Tensor.arange(0, float("nan"), device=P), kg.ShapeError),
    "arange(0, inf)": (lambda: kg.Tensor.arange(0, float("inf"), device=P), kg.ShapeError),
    "arange(0, 1, nan)": (lambda: kg.Tensor.arange(0, 1, float("nan"), device=P), kg.ShapeError),
    "arange(2**60)": (lambda: kg.Tensor.arange(2 ** 60, device=P), kg.LimitError),
    "Tensor(a 5,000-deep nested list)": (lambda: kg.Tensor(_nested(5000), device=P),
                                         kg.LimitError),
    "2**40-element output on PYTHON": (lambda: kg.Tensor.ones(2 ** 40, device=P).numpy(),
                                       kg.LimitError),
    "2**40-element reduction on PYTHON": (
      lambda: kg.Tensor.ones(2 ** 40, device=P).sum().numpy(), kg.LimitError),
    "rand(2**64).sum() to WGSL": (lambda: kg.compile(kg.Tensor.rand(2 ** 64).sum(),
                                                     target="wgsl"), kg.LimitError),
    "rand(2**47).sum() to WGSL": (lambda: kg.compile(kg.Tensor.rand(2 ** 47).sum(),
                                                     target="wgsl"), kg.LimitError),
  }
  n = kg.Dim("n", 1, 2 ** 30)
  gpu = {   # GPU indices are int32: 2**31 elements or more are refused (limit index_elements)
    "rand(2**40).sum() to PTX": lambda: kg.compile(kg.Tensor.rand(2 ** 40).sum(), target="ptx"),
    "rand(2**40).sum() on PTXSIM": lambda: kg.Tensor.rand(2 ** 40, device="PTXSIM").sum().numpy(),
    "ones(1).expand(2**33).sum() to WGSL": lambda: kg.compile(
      kg.Tensor.ones(1).expand(2 ** 33).sum(), target="wgsl"),
    "a 2**32-element output to PTX": lambda: kg.compile(
      kg.Tensor.ones(1, 1).expand(2 ** 16, 2 ** 16) * 2, target="ptx"),
    "symbolic (n <= 2**30, 4) to WGSL": lambda: kg.compile(
      kg.Tensor.empty(n, 4, name="x") * 2, target="wgsl"),
  }
  calls.update({name: (fn, kg.LimitError) for name, fn in gpu.items()})
  return [Case("tensor", name, fn, err) for name, (fn, err) in calls.items()]


def _nested(depth: int):
  value = 1.0
  for _ in range(depth):
    value = [value]
  return value


def option_cases() -> list[Case]:
  def compile_with(**options):
    return lambda: kg.compile(kg.Tensor.ones(64, 64).sum(1), target="wgsl", **options)
  bad = {"upcast=0": {"upcast": 0}, "upcast=-1": {"upcast": -1}, "local=-1": {"local": -1},
         "group=-4": {"group": -4}, "upcast='4'": {"upcast": "4"}, "upcast=4.0": {"upcast": 4.0},
         "upcst=4 (a typo)": {"upcst": 4}}
  out = [Case("options", name, compile_with(**o), kg.UnsupportedError) for name, o in bad.items()]
  out.append(Case("options", "upcast=1", compile_with(upcast=1), "ok"))
  return out


# ---- deep graphs -----------------------------------------------------------------------------

def _chain(n: int, step: Callable):
  def run():
    x = kg.Tensor([1.0, 2.0], device="PYTHON")
    y = x
    for i in range(n):
      y = step(y, x, i)
    return y.numpy()
  return run


def _grad_chain(n: int):
  def run():
    x = kg.Tensor([1.0, 2.0], device="PYTHON", requires_grad=True)
    y = x
    for _ in range(n):
      y = y * 0.5 + x
    y.sum().backward()
    return x.grad.numpy()
  return run


def deep_cases() -> list[Case]:
  steps = {
    "400 x (y + 1.0)": (400, lambda y, x, i: y + 1.0),
    "5,000 x (y * 0.5 + x)": (5000, lambda y, x, i: y * 0.5 + x),
    "1,000 mixed unary ops": (1000, lambda y, x, i: (y.sin() if i % 3 == 0 else
                                                     y.exp2() * 0.25 if i % 3 == 1 else
                                                     y.maximum(x))),
    "300 views and reductions": (300, lambda y, x, i: (
      y.reshape(2, 1).expand(2, 2).sum(1) * 0.5 if i % 2 else y.flip(0) + x)),
  }
  out = [Case("deep", name, _chain(n, fn), "ok") for name, (n, fn) in steps.items()]
  out.append(Case("deep", "autograd through 3,000 ops", _grad_chain(1500), "ok"))
  out.append(Case("deep", "10,000-op chain to WGSL", lambda: kg.compile(
    _lazy_chain(5_000), target="wgsl"), "ok"))
  return out


def _lazy_chain(n: int):
  x = kg.Tensor([1.0, 2.0], device="PYTHON")
  y = x
  for _ in range(n):
    y = y * 0.5 + x
  return y


# ---- mutations ---------------------------------------------------------------------------------

def _mutations(blob: bytes, seed: int) -> list[bytes]:
  """FLIPS copies of `blob` with 1-4 bits flipped and CUTS truncations, seeded."""
  rng = random.Random(seed)
  out = []
  for _ in range(FLIPS):
    data = bytearray(blob)
    for _ in range(rng.randint(1, 4)):
      data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    out.append(bytes(data))
  out += [blob[:rng.randrange(len(blob))] for _ in range(CUTS)]
  return [b.decode("utf-8", "replace") if seed == 1 else b for b in out]
