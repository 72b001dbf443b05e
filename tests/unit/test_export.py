"""kg.export / kg.load_bundle (core/kernelgen/export/): the manifest describes the compiled program
(inputs, weights, intermediates, outputs, kernels in launch order with their bindings), the
intermediates share storage where their lifetimes allow, a ptx bundle runs end to end on PTXSIM
and a webgpu bundle on WEBGPU (wgpu) like numpy, its PTX assembles with ptxas, and misuse raises
typed errors that say what to do."""
from __future__ import annotations

import json

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.export import memory
from kernelgen.nn import safetensors
from tools import ptxas_check, wgpu_device


def _mlp(batch=4, n_in=8, hidden=16, n_out=3):
  """x (batch, n_in) -> relu(x @ w1 + b1) -> exp(h / 4) -> softmax(h @ w2); weights realized."""
  x = kg.Tensor.empty(batch, n_in, name="x")
  w1 = kg.Tensor.randn(n_in, hidden, seed=1).realize()
  b1 = kg.Tensor.randn(hidden, seed=2).realize()
  w2 = kg.Tensor.randn(hidden, n_out, seed=3).realize()
  h = ((x @ w1 + b1).relu().contiguous() / 4).exp().contiguous()
  y = (h @ w2).softmax(axis=-1)
  arrays = {"w1": w1.numpy(), "b1": b1.numpy(), "w2": w2.numpy()}
  return y, arrays


def _mlp_numpy(xv, a):
  h = np.exp(np.maximum(xv @ a["w1"] + a["b1"], 0) / 4)
  z = h @ a["w2"]
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _read(path):
  return json.loads((path / "manifest.json").read_text())


# ---- the manifest ----------------------------------------------------------------------------

def test_manifest_lists_inputs_weights_outputs_and_kernels_in_launch_order(tmp_path):
  y, arrays = _mlp()
  kernels = kg.compile(y, target="wgsl")
  kg.export({"probs": y}, str(tmp_path), format="webgpu")
  m = _read(tmp_path)
  assert m["bundle"] == "webgpu" and m["target"] == "wgsl" and m["features"] == []
  assert m["inputs"] == [{"name": "x", "shape": [4, 8], "dtype": "float32",
                          "buffer": m["inputs"][0]["buffer"]}]
  assert [o["name"] for o in m["outputs"]] == ["probs"]
  assert m["outputs"][0]["shape"] == [4, 3]
  # the same kernels, in the same order, with the same source as kg.compile
  assert [k["name"] for k in m["kernels"]] == [k.name for k in kernels]
  for entry, kernel in zip(m["kernels"], kernels):
    assert (tmp_path / entry["file"]).read_text() == kernel.source
    assert entry["dispatch"] == list(kernel.launch.dispatch)
    assert entry["workgroup_size"] == list(kernel.launch.workgroup_size)
    assert [b["slot"] for b in entry["bindings"]] == [b.slot for b in kernel.launch.bindings]
  # weights: exactly the realized arrays, by value, in weights.safetensors
  stored = safetensors.read(str(tmp_path / "weights.safetensors"))
  got = sorted(np.frombuffer(stored[w["name"]][2], np.float32).size for w in m["weights"])
  assert got == sorted(a.size for a in arrays.values())
  values = {w["name"]: np.frombuffer(stored[w["name"]][2], np.float32).reshape(w["shape"])
            for w in m["weights"]}
  for a in arrays.values():
    assert any(v.shape == a.shape and np.array_equal(v, a) for v in values.values())


def test_buffers_record_which_kernels_write_and_read_them(tmp_path):
  y, _ = _mlp()
  kg.export(y, str(tmp_path))
  m = _read(tmp_path)
  buffers = m["buffers"]
  for index, kernel in enumerate(m["kernels"]):
    for b in kernel["bindings"]:
      entry = buffers[b["buffer"]]
      assert index in (entry["written_by"] if b["access"] == "write" else entry["read_by"])
  kinds = {e["kind"] for e in buffers}
  assert kinds == {"input", "weight", "intermediate", "output"}
  for e in buffers:
    if e["kind"] == "intermediate":   # written once, read only after
      assert len(e["written_by"]) == 1 and min(e["read_by"]) > e["written_by"][0]
    if e["kind"] in ("input", "weight"):
      assert e["written_by"] == []
  assert m["outputs"][0]["name"] == "out"    # a bare tensor is named `out`


def test_intermediates_share_storage_when_their_lifetimes_do_not_overlap(tmp_path):
  # a chain of 6 kernels over (256,) buffers: each intermediate dies when the next is read
  x = kg.Tensor.empty(256, name="x")
  t = x
  for i in range(6):
    t = (t * (i + 1.5)).sin().contiguous()
  bundle = kg.export({"y": t.sum()}, str(tmp_path), format="ptx")
  m = _read(tmp_path)
  inter = [e for e in m["buffers"] if e["kind"] == "intermediate"]
  assert len(inter) == 6
  shared = {e["storage"] for e in inter}
  assert len(shared) == 2         # a ping-pong pair: live ranges [k, k + 1] overlap only pairwise
  mem = m["memory"]
  assert mem["intermediate_bytes"] == 6 * 1024 and mem["intermediate_peak_bytes"] == 2 * 1024
  assert mem["peak_bytes"] == mem["buffer_bytes"] - 4 * 1024
  # no kernel binds two buffers that share a storage
  for k in m["kernels"]:
    used = [m["buffers"][b["buffer"]]["storage"] for b in k["bindings"]]
    assert len(used) == len(set(used))
  # and the values survive the sharing
  xv = np.linspace(-2, 2, 256, dtype=np.float32)
  want = xv.astype(np.float64)
  for i in range(6):
    want = np.sin(want * (i + 1.5))
  got = bundle.run({"x": xv}, device="PTXSIM")["y"].numpy()
  np.testing.assert_allclose(got, want.sum(), rtol=1e-4, atol=1e-4)


def test_interval_allocator_reuses_the_smallest_fitting_free_storage():
  iv = memory.Interval
  where, sizes = memory.assign([iv(0, 1000, 0, 1), iv(1, 100, 1, 2), iv(2, 900, 2, 3),
                                iv(3, 50, 3, 4), iv(4, 2000, 4, 5)])
  # 0 dies after 1: 2 (900) takes its storage; 1 dies after 2: 3 (50) takes its 100;
  # 2 dies after 3: 4 (2000) grows 2's storage to 2000
  assert where == {0: 0, 1: 1, 2: 0, 3: 1, 4: 0}
  assert sizes == [2000, 100]


def test_a_list_of_outputs_is_named_out0_out1_and_an_output_read_later_keeps_its_own(tmp_path):
  x = kg.Tensor.empty(3, 5, name="x")
  h = (x * 2).contiguous()
  y = h.sum(axis=1)
  bundle = kg.export([h, y], str(tmp_path), format="ptx")
  assert [o["name"] for o in bundle.outputs] == ["out0", "out1"]
  m = bundle.manifest
  storages = [m["buffers"][o["buffer"]]["storage"] for o in m["outputs"]]
  assert all(not m["storage"][s]["shared"] for s in storages)
  xv = np.arange(15, dtype=np.float32).reshape(3, 5)
  out = bundle.run({"x": xv}, device="PTXSIM")
  np.testing.assert_array_equal(out["out0"].numpy(), xv * 2)
  np.testing.assert_allclose(out["out1"].numpy(), (xv * 2).sum(1), rtol=1e-6)


# ---- running bundles -------------------------------------------------------------------------

@pytest.mark.parametrize("batch,hidden", [(4, 16), (33, 96)])
def test_ptx_bundle_runs_on_ptxsim_like_numpy(tmp_path, batch, hidden):
  y, arrays = _mlp(batch=batch, hidden=hidden)
  kg.export({"probs": y}, str(tmp_path), format="ptx", arch="sm_80")
  bundle = kg.load_bundle(str(tmp_path))
  assert bundle.inputs == [{"name": "x", "shape": [batch, 8], "dtype": "float32"}]
  rng = np.random.default_rng(batch)
  for _ in range(2):           # storage and weights are set up once, inputs written per run
    xv = rng.standard_normal((batch, 8)).astype(np.float32)
    out = bundle.run({"x": xv}, device="PTXSIM")
    assert isinstance(out["probs"], kg.Tensor) and out["probs"].shape == (batch, 3)
    np.testing.assert_allclose(out["probs"].numpy(), _mlp_numpy(xv, arrays), rtol=1e-4,
                               atol=1e-6)


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_ptx_bundle_kernels_assemble_with_ptxas(tmp_path, arch):
  y, _ = _mlp(batch=33, hidden=96)
  kg.export({"probs": y}, str(tmp_path), format="ptx", arch=arch)
  m = _read(tmp_path)
  assert m["options"]["arch"] == arch and not (tmp_path / "model.js").exists()
  for k in m["kernels"]:
    source = (tmp_path / k["file"]).read_text()
    assert f".target {arch}" in source
    ptxas_check(source, arch)


def test_webgpu_bundle_runs_on_wgpu_like_numpy(tmp_path):
  wgpu_device()                   # lavapipe: fails under KERNELGEN_REQUIRE_ALL=1 if missing
  y, arrays = _mlp(batch=33, hidden=96)
  bundle = kg.export({"probs": y}, str(tmp_path), format="webgpu")
  assert (tmp_path / "model.js").read_text().startswith("// A kernelgen WebGPU bundle's loader")
  assert "export async function generate(" in (tmp_path / "generate.js").read_text()
  xv = np.random.default_rng(1).standard_normal((33, 8)).astype(np.float32)
  out = bundle.run({"x": xv}, device="WEBGPU")
  np.testing.assert_allclose(out["probs"].numpy(), _mlp_numpy(xv, arrays), rtol=1e-4, atol=1e-6)


def _layers(count=3, width=8):
  """x (4, width) through `count` layers relu(h @ w_i) * 2: one kernel structure per layer."""
  x = kg.Tensor.empty(4, width, name="x")
  ws = [kg.Tensor.randn(width, width, seed=s).realize() for s in range(count)]
  h = x
  for w in ws:
    h = ((h @ w).relu().contiguous() * 2).contiguous()
  return h, [w.numpy() for w in ws]


@pytest.mark.parametrize("fmt", ["webgpu", "ptx"])
def test_layers_of_one_kernel_share_a_file_and_run_like_numpy(tmp_path, fmt):
  """Kernels whose source differs only in the entry point's name (a model's layers) point at one
  file and entry point, each written once (the page builds one pipeline for them); the bundle
  still runs every layer like numpy."""
  y, ws = _layers()
  bundle = kg.export({"y": y}, str(tmp_path), format=fmt)
  kernels = _read(tmp_path)["kernels"]
  names = [k["name"] for k in kernels]
  shared = {(k["file"], k["entry_point"]) for k in kernels}
  assert len(set(names)) == len(names) == 6 and len(shared) < len(kernels), kernels
  files = sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".wgsl", ".ptx"))
  assert files == sorted({f for f, _ in shared})
  for file, entry in shared:
    assert entry in (tmp_path / file).read_text()
  xv = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
  want = xv
  for w in ws:
    want = np.maximum(want @ w, 0) * 2
  if fmt == "webgpu":
    wgpu_device()
  out = bundle.run({"x": xv}, device="WEBGPU" if fmt == "webgpu" else "PTXSIM")
  np.testing.assert_allclose(out["y"].numpy(), want, rtol=1e-4, atol=1e-4)


def test_inputs_of_other_dtypes_and_kinds_of_values(tmp_path):
  import array
  a = kg.Tensor.empty(2, 3, name="a", dtype="int32")
  b = kg.Tensor.empty(3, name="b", dtype="uint8")
  y = a * 3 + b.cast("int32")
  bundle = kg.export({"y": y}, str(tmp_path), format="ptx")
  want = np.array([[5, 9, 13], [14, 18, 22]], np.int32)
  av = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
  for a_in, b_in in [(av, np.array([2, 3, 4], np.uint8)),
                     (kg.Tensor(av), bytes([2, 3, 4])),
                     (array.array("i", av.ravel().tolist()), [2, 3, 4])]:
    out = bundle.run({"a": a_in, "b": b_in}, device="PTXSIM")
    np.testing.assert_array_equal(out["y"].numpy(), want)


# ---- errors ----------------------------------------------------------------------------------

def test_wrong_inputs_are_typed_errors_that_name_the_inputs(tmp_path):
  x = kg.Tensor.empty(4, name="x")
  bundle = kg.export({"y": x + 1}, str(tmp_path), format="ptx")
  with pytest.raises(kg.KernelgenError, match=r"unknown input\(s\) 'z': this bundle's inputs "
                     r"are x \(float32\[4\]\)"):
    bundle.run({"x": np.zeros(4, np.float32), "z": 1}, device="PTXSIM")
  with pytest.raises(kg.KernelgenError, match=r"missing input\(s\) 'x'"):
    bundle.run({}, device="PTXSIM")
  with pytest.raises(kg.ShapeError, match=r"has shape \(5,\), the bundle takes \(4,\)"):
    bundle.run({"x": np.zeros(5, np.float32)}, device="PTXSIM")
  with pytest.raises(kg.DTypeError, match="is float64, the bundle takes float32: cast it"):
    bundle.run({"x": np.zeros(4)}, device="PTXSIM")
  with pytest.raises(kg.ShapeError, match="has 12 bytes, the bundle takes 4 x float32 = 16"):
    bundle.run({"x": bytes(12)}, device="PTXSIM")


def test_running_a_bundle_on_the_wrong_device_says_which_devices_fit(tmp_path):
  x = kg.Tensor.empty(4, name="x")
  bundle = kg.export({"y": x + 1}, str(tmp_path), format="ptx")
  with pytest.raises(kg.DeviceError, match="this is a ptx bundle: run it on CUDA or PTXSIM"):
    bundle.run({"x": np.zeros(4, np.float32)}, device="PYTHON")


def test_export_errors_are_typed():
  x = kg.Tensor.empty(4, name="x")
  with pytest.raises(kg.KernelgenError, match="unknown export format 'onnx'"):
    kg.export(x + 1, "/nonexistent", format="onnx")
  with pytest.raises(kg.KernelgenError, match="output name 'my out' is not an identifier"):
    kg.export({"my out": x + 1}, "/nonexistent")
  with pytest.raises(kg.KernelgenError, match="not a Tensor"):
    kg.export({"y": 3}, "/nonexistent")
  y = kg.Tensor.empty(4, name="x")
  with pytest.raises(kg.KernelgenError, match="two different inputs are named 'x'"):
    kg.export(x + y, "/nonexistent")
  with pytest.raises(kg.KernelgenError, match="holds no bundle"):
    kg.load_bundle("/nonexistent")


def test_safetensors_round_trip_keeps_names_dtypes_shapes_and_bytes():
  tensors = {"a": ("float32", (2, 3), np.arange(6, dtype=np.float32).tobytes()),
             "b": ("uint8", (5,), bytes(range(5))), "c": ("float16", (), b"\x00\x3c")}
  data = safetensors.encode(tensors)
  assert (8 + int.from_bytes(data[:8], "little")) % 8 == 0
  assert safetensors.decode(data) == tensors


# ---- the command line ------------------------------------------------------------------------

PROGRAM = """import kernelgen as kg
x = kg.Tensor.empty(2, 6, name="x")
w = kg.Tensor.arange(18, dtype="float32").reshape(6, 3).realize()
out = {"y": (x @ w).relu(), "total": x.sum()}
"""


def _cli(*args):
  from kernelgen.__main__ import main
  return main([str(a) for a in args])


@pytest.mark.parametrize("fmt", ["webgpu", "ptx"])
def test_cli_exports_a_programs_dict_of_outputs(tmp_path, capsys, fmt):
  program = tmp_path / "prog.py"
  program.write_text(PROGRAM)
  out = tmp_path / "bundle"
  extra = ["--arch", "sm_86"] if fmt == "ptx" else []
  assert _cli("export", program, "--out", out, "--format", fmt, *extra) == 0
  printed = capsys.readouterr().out
  assert str(out / "manifest.json") in printed and "inputs x; outputs y, total" in printed
  assert (out / "model.js").exists() == (fmt == "webgpu")
  bundle = kg.load_bundle(str(out))
  assert [o["name"] for o in bundle.outputs] == ["y", "total"]
  if fmt == "ptx":
    assert bundle.manifest["options"]["arch"] == "sm_86"
    xv = np.arange(-6, 6, dtype=np.float32).reshape(2, 6)
    got = bundle.run({"x": xv}, device="PTXSIM")
    w = np.arange(18, dtype=np.float32).reshape(6, 3)
    np.testing.assert_allclose(got["y"].numpy(), np.maximum(xv @ w, 0), rtol=1e-6)
    np.testing.assert_allclose(got["total"].numpy(), xv.sum(), rtol=1e-6)


def test_cli_errors_say_what_to_do(tmp_path, capsys):
  program = tmp_path / "prog.py"
  program.write_text("import kernelgen as kg\nresult = kg.Tensor.empty(3, name='x') + 1\n")
  assert _cli("export", program, "--out", tmp_path / "b") == 1
  assert "does not define `out`" in capsys.readouterr().err
  assert _cli("export", program, "--out", tmp_path / "b", "--output", "result") == 0
  assert _cli("export", program, "--out", tmp_path / "c", "--arch", "sm_80") == 1
  assert "--arch is for --target ptx" in capsys.readouterr().err


def test_cli_exports_an_onnx_model_or_says_onnx_is_not_there_yet(tmp_path, capsys):
  import importlib.util
  onnx = pytest.importorskip("onnx")
  from onnx import TensorProto, helper, numpy_helper
  w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
  graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
    "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
    [numpy_helper.from_array(w, "w")])
  path = tmp_path / "mm.onnx"
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
  out = tmp_path / "bundle"
  code = _cli("export", path, "--out", out, "--format", "ptx", "--input-shape", "x=5x4")
  if importlib.util.find_spec("kernelgen.onnx") is None:
    assert code == 1
    assert "cannot read ONNX models yet" in capsys.readouterr().err
    return
  assert code == 0
  bundle = kg.load_bundle(str(out))
  assert bundle.inputs == [{"name": "x", "shape": [5, 4], "dtype": "float32"}]
  xv = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)
  got = bundle.run({"x": xv}, device="PTXSIM")["y"].numpy()
  np.testing.assert_allclose(got, np.maximum(xv @ w, 0), rtol=1e-5, atol=1e-6)


def test_onnx_names_that_are_not_identifiers_are_kept_in_the_bundle(tmp_path):
  """ResNet-50's input 'gpu_0/data_0' and output 'gpu_0/softmax_1': the CLI exports the model,
  the manifest keeps the model's names (the kernels' buffers get sanitized ones), run() takes
  them, and the result matches onnxruntime; two inputs that sanitize alike stay apart."""
  onnx = pytest.importorskip("onnx")
  ort = pytest.importorskip("onnxruntime")
  from onnx import TensorProto, helper, numpy_helper
  w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
  graph = helper.make_graph(
    [helper.make_node("MatMul", ["gpu_0/data_0", "w"], ["h"]),
     helper.make_node("Add", ["h", "gpu_0:data_0"], ["s"]),
     helper.make_node("Softmax", ["s"], ["gpu_0/softmax_1"], axis=-1)],
    "mm", [helper.make_tensor_value_info("gpu_0/data_0", TensorProto.FLOAT, [2, 4]),
           helper.make_tensor_value_info("gpu_0:data_0", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor_value_info("gpu_0/softmax_1", TensorProto.FLOAT, [2, 3])],
    [numpy_helper.from_array(w, "w")])
  path = tmp_path / "named.onnx"
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
  out = tmp_path / "bundle"
  assert _cli("export", path, "--out", out, "--format", "ptx") == 0
  bundle = kg.load_bundle(str(out))
  assert [i["name"] for i in bundle.inputs] == ["gpu_0/data_0", "gpu_0:data_0"]
  assert [o["name"] for o in bundle.outputs] == ["gpu_0/softmax_1"]
  names = {b["name"] for b in bundle.manifest["buffers"] if b.get("name")}
  assert {"gpu_0/data_0", "gpu_0:data_0"} <= names
  ptx = "".join(p.read_text() for p in out.glob("*.ptx"))
  assert ".param .u64 data1_gpu_0_data_0," in ptx and "_gpu_0_data_0_2\n" in ptx
  feeds = {"gpu_0/data_0": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4),
           "gpu_0:data_0": np.linspace(0, 2, 6, dtype=np.float32).reshape(2, 3)}
  got = bundle.run(feeds, device="PTXSIM")["gpu_0/softmax_1"].numpy()
  want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  with pytest.raises(kg.KernelgenError, match="output name 'my out' is not an identifier"):
    kg.export({"my out": kg.Tensor.empty(4, name="x") + 1}, str(tmp_path / "c"))


def test_web_api_export_bundles_gives_both_bundles_as_files():
  import base64
  from kernelgen import web_api
  result = web_api.export_bundles("a = Tensor([[1.0, -2.0], [3.0, 4.0]])\nout = (a @ a).relu()\n",
                                  "sm_86")
  assert result["ok"], result
  files = {f["name"]: base64.b64decode(f["base64"]) for f in result["files"]}
  assert {"webgpu/model.js", "webgpu/manifest.json", "ptx/manifest.json",
          "ptx/weights.safetensors"} <= set(files)
  ptx = [name for name in files if name.endswith(".ptx")]
  assert ptx and all(b".target sm_86" in files[name] for name in ptx)
  manifest = json.loads(files["webgpu/manifest.json"])
  assert manifest["outputs"][0]["name"] == "out" and manifest["inputs"] == []
  bad = web_api.export_bundles("out = 3\n", "sm_80")
  assert not bad["ok"] and "must be a Tensor" in bad["error"]["message"]


def test_an_output_that_is_an_input_or_a_weight_needs_no_kernel(tmp_path):
  x = kg.Tensor.empty(2, 2, name="x")
  w = kg.Tensor([[1.0, 2.0], [3.0, 4.0]])
  bundle = kg.export({"same": x, "w": w}, str(tmp_path), format="ptx")
  assert bundle.manifest["kernels"] == []
  xv = np.array([[5, 6], [7, 8]], np.float32)
  out = bundle.run({"x": xv}, device="PTXSIM")
  np.testing.assert_array_equal(out["same"].numpy(), xv)
  np.testing.assert_array_equal(out["w"].numpy(), [[1, 2], [3, 4]])
