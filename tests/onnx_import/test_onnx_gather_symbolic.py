"""ONNX Gather with a constant negative index along a symbolic axis (a causal LM's last position,
as exports with logits_to_keep write it): -1 is the run-time last element of that axis, not the
padded axis's, against onnxruntime at the range's ends and between, on PYTHON and WEBGPU."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _model(index: int):
  from onnx import TensorProto, helper
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, 4])
  idx = helper.make_tensor("at", TensorProto.INT64, [1], [index])
  graph = helper.make_graph([helper.make_node("Gather", ["x", "at"], ["g"], axis=1),
                             helper.make_node("Relu", ["g"], ["y"])], "g", [x], [y], [idx])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("index", [-1, -2, 0])
def test_gather_at_a_constant_index_along_a_symbolic_axis(device, index):
  raw = _model(index)
  session = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
  model = kg.onnx.load(raw, dims={"seq": (2, 16)})
  for seq in (2, 5, 16):
    x = np.random.default_rng(seq).standard_normal((2, seq, 4)).astype(np.float32)
    want = session.run(None, {"x": x})[0]
    got = model.run({"x": x}, device=device)["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"seq = {seq}")
