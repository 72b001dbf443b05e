"""A streaming recurrent model as a bundle (issue 42): an ONNX model that takes its hidden state
and returns the next one (Silero VAD's `state` -> `stateN`) exported with `state=` keeps that
state on the device between runs (export/state.py's fixed state), starting from zeros and again
after reset(); each chunk's output matches onnxruntime fed its own state back. Bundles compiled
for more than WebGPU's default limits record them in the manifest (export/device_limits.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import kernelgen as kg
from tools import wgpu_device

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

CHUNK, HIDDEN = 16, 8


def recurrent_onnx() -> bytes:
  """x (1, CHUNK), state (2, 1, HIDDEN) -> output (1, 1), stateN (2, 1, HIDDEN): two stacked
  tanh cells, the output a sigmoid of the top one (Silero VAD's interface, in small)."""
  rng = np.random.default_rng(0)
  w = {"W0": rng.standard_normal((CHUNK, HIDDEN)) * 0.3, "U0": rng.standard_normal((HIDDEN,
       HIDDEN)) * 0.3, "W1": rng.standard_normal((HIDDEN, HIDDEN)) * 0.3,
       "U1": rng.standard_normal((HIDDEN, HIDDEN)) * 0.3, "V": rng.standard_normal((HIDDEN, 1)),
       "axis0": np.array([0], np.int64)}
  inits = [numpy_helper.from_array(v.astype(np.int64 if k == "axis0" else np.float32), k)
           for k, v in w.items()]
  n = helper.make_node
  nodes = [n("Split", ["state"], ["s0", "s1"], axis=0, num_outputs=2),
           n("Squeeze", ["s0", "axis0"], ["h0"]), n("Squeeze", ["s1", "axis0"], ["h1"]),
           n("MatMul", ["x", "W0"], ["a0"]), n("MatMul", ["h0", "U0"], ["b0"]),
           n("Add", ["a0", "b0"], ["c0"]), n("Tanh", ["c0"], ["n0"]),
           n("MatMul", ["n0", "W1"], ["a1"]), n("MatMul", ["h1", "U1"], ["b1"]),
           n("Add", ["a1", "b1"], ["c1"]), n("Tanh", ["c1"], ["n1"]),
           n("MatMul", ["n1", "V"], ["z"]), n("Sigmoid", ["z"], ["output"]),
           n("Unsqueeze", ["n0", "axis0"], ["u0"]), n("Unsqueeze", ["n1", "axis0"], ["u1"]),
           n("Concat", ["u0", "u1"], ["stateN"], axis=0)]
  f32 = TensorProto.FLOAT
  graph = helper.make_graph(
    nodes, "recurrent", [helper.make_tensor_value_info("x", f32, [1, CHUNK]),
                         helper.make_tensor_value_info("state", f32, [2, 1, HIDDEN])],
    [helper.make_tensor_value_info("output", f32, [1, 1]),
     helper.make_tensor_value_info("stateN", f32, [2, 1, HIDDEN])], inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
  model.ir_version = 8
  return model.SerializeToString()


def reference(raw: bytes, chunks: list) -> list:
  """onnxruntime's output per chunk, each call fed the state the previous one returned."""
  session = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
  state, outs = np.zeros((2, 1, HIDDEN), np.float32), []
  for chunk in chunks:
    out, state = session.run(None, {"x": chunk, "state": state})
    outs.append(out)
  return outs


def export(raw: bytes, path, fmt: str):
  return kg.export(kg.onnx.load(raw), str(path), format=fmt, state={"state": "stateN"})


@pytest.mark.parametrize("fmt,device", [("ptx", "PTXSIM"), ("webgpu", "WEBGPU")])
def test_a_recurrent_state_stays_on_the_device_and_matches_onnxruntime(tmp_path, fmt, device):
  if device == "WEBGPU":
    wgpu_device()                 # lavapipe: fails under KERNELGEN_REQUIRE_ALL=1 if missing
  raw = recurrent_onnx()
  chunks = [np.random.default_rng(i).standard_normal((1, CHUNK)).astype(np.float32)
            for i in range(4)]
  want = reference(raw, chunks)
  bundle = export(raw, tmp_path / "vad", fmt)
  assert bundle.manifest["state"] == [{"name": "state", "output": "stateN", "dim": None,
                                       "axis": 0, "row": 2 * HIDDEN, "outer": 1, "in_rows": 1,
                                       "out_rows": 1, "dtype": "float32"}]
  assert [i["name"] for i in bundle.inputs] == ["x"]          # the state is not the caller's
  got = [bundle.run({"x": c}, device=device, outputs=["output"])["output"].numpy()
         for c in chunks]
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
  assert not np.allclose(want[0], want[1])       # the state did change the next output
  bundle.reset()                                  # zeros again: the first chunk's output
  again = bundle.run({"x": chunks[0]}, device=device)["output"].numpy()
  np.testing.assert_allclose(again, want[0], rtol=1e-5, atol=1e-6)
  loaded = kg.load_bundle(str(tmp_path / "vad"))  # the manifest round trip keeps it
  assert loaded.manifest["state"] == bundle.manifest["state"]


def test_a_fixed_state_needs_an_output_of_its_shape_and_a_damaged_one_is_refused(tmp_path):
  raw = recurrent_onnx()
  with pytest.raises(kg.KernelgenError, match=r"'state' -> 'output': its input needs exactly "
                     r"one symbolic size.*or none and an output of its dtype and shape"):
    kg.export(kg.onnx.load(raw), str(tmp_path / "bad"), format="ptx",
              state={"state": "output"})
  export(raw, tmp_path / "ok", "ptx")
  where = tmp_path / "ok" / "manifest.json"
  manifest = json.loads(where.read_text())
  manifest["state"][0]["row"] = 3
  where.write_text(json.dumps(manifest))
  with pytest.raises(kg.ManifestError, match=r"state\[0\]"):
    kg.load_bundle(str(tmp_path / "ok"))


def wide_program(n: int = 12):
  """One elementwise kernel over `n` inputs: n + 1 buffers (past WebGPU's default 8)."""
  xs = [kg.Tensor.empty(64, name=f"x{i}") for i in range(n)]
  total = xs[0]
  for i, x in enumerate(xs[1:], 1):
    total = total + x * (i + 1)
  return {"y": total}, xs


def test_a_bundle_for_more_storage_buffers_records_the_limit_in_its_manifest(tmp_path):
  outputs, _ = wide_program()
  narrow = kg.export(outputs, str(tmp_path / "narrow"), format="webgpu")
  outputs, _ = wide_program()
  wide = kg.export(outputs, str(tmp_path / "wide"), format="webgpu", max_storage_buffers=16)
  # at WebGPU's default 8 storage buffers, five of the small inputs bind as uniform buffers
  # (render/wgsl/target.py uniform_slots), within the default 12: one kernel, no limits
  assert "limits" not in narrow.manifest
  kinds = [b.get("kind", "storage") for k in narrow.manifest["kernels"] for b in k["bindings"]]
  assert len(wide.manifest["kernels"]) == len(narrow.manifest["kernels"]) == 1
  assert (kinds.count("storage"), kinds.count("uniform")) == (8, 5)
  assert wide.manifest["limits"] == {"maxStorageBuffersPerShaderStage": 13}
  assert kg.load_bundle(str(tmp_path / "wide")).manifest["limits"] == wide.manifest["limits"]
  wgpu_device()                   # natively (wgpu's lavapipe gives more than 13) it runs
  rng = np.random.default_rng(0)
  feed = {f"x{i}": rng.standard_normal(64).astype(np.float32) for i in range(12)}
  np.testing.assert_allclose(wide.run(feed, device="WEBGPU")["y"].numpy(),
                             sum(feed[f"x{i}"] * (i + 1) for i in range(12)), rtol=1e-6)
  np.testing.assert_allclose(narrow.run(feed, device="WEBGPU")["y"].numpy(),
                             sum(feed[f"x{i}"] * (i + 1) for i in range(12)), rtol=1e-6)
  where = tmp_path / "wide" / "manifest.json"
  for bad in ({"maxStorageBuffersPerShaderStage": 0}, {"maxStorageBuffers": 13}, [13]):
    manifest = json.loads(where.read_text())
    manifest["limits"] = bad
    where.write_text(json.dumps(manifest))
    with pytest.raises(kg.ManifestError, match="limits"):
      kg.load_bundle(str(tmp_path / "wide"))


def test_a_uniform_binding_in_a_manifest_is_checked(tmp_path):
  """A binding's kind is "storage" or "uniform"; a uniform one is read-only, a multiple of 16
  bytes (render/wgsl/__init__.py): anything else is a ManifestError naming the field."""
  outputs, _ = wide_program()
  kg.export(outputs, str(tmp_path / "narrow"), format="webgpu")
  where = tmp_path / "narrow" / "manifest.json"
  good = json.loads(where.read_text())
  at = next((k, i) for k, kernel in enumerate(good["kernels"])
            for i, b in enumerate(kernel["bindings"]) if b.get("kind") == "uniform")
  for change in ({"kind": "texture"}, {"access": "readwrite"}, {"nbytes": 20}):
    manifest = json.loads(json.dumps(good))
    manifest["kernels"][at[0]]["bindings"][at[1]].update(change)
    where.write_text(json.dumps(manifest))
    with pytest.raises(kg.ManifestError, match=r"bindings\[\d+\]\.(kind|access|nbytes)"):
      kg.load_bundle(str(tmp_path / "narrow"))
