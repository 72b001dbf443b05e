"""ONNX MaxPool's Indices output for 1-, 2- and 3-d pooling (pads, strides, dilations, ceil_mode,
storage_order), against onnxruntime on the same model (the onnx node tests have 2-d cases only).
"""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg


def _model(shape, attrs):
  onnx = pytest.importorskip("onnx")
  from onnx import TensorProto, helper
  node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
  graph = helper.make_graph(
    [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
     helper.make_tensor_value_info("i", TensorProto.INT64, None)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
  model.ir_version = 8
  return onnx, model.SerializeToString()


CASES = [
  ((2, 3, 11), dict(kernel_shape=[3], strides=[2])),
  ((1, 2, 10), dict(kernel_shape=[4], strides=[3], pads=[1, 2], dilations=[1])),
  ((1, 2, 9), dict(kernel_shape=[2], strides=[2], ceil_mode=1)),
  ((1, 2, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1],
                      storage_order=1)),
  ((2, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2])),
  ((1, 3, 6, 5, 4), dict(kernel_shape=[3, 2, 2], strides=[2, 1, 2], pads=[1, 0, 1, 1, 1, 0],
                         dilations=[1, 2, 1])),
  ((1, 1, 4, 5, 3), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2], ceil_mode=1,
                         storage_order=1)),
]


@pytest.mark.parametrize("shape,attrs", CASES, ids=lambda v: str(v))
def test_maxpool_indices_match_onnxruntime(shape, attrs):
  ort = pytest.importorskip("onnxruntime")
  _, raw = _model(shape, attrs)
  rng = np.random.default_rng(len(shape) * 10 + len(attrs))
  x = rng.permutation(int(np.prod(shape))).reshape(shape).astype(np.float32)   # no ties
  want_y, want_i = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(
    None, {"x": x})
  m = kg.onnx.load(raw)
  out = m.run({"x": x}, device="PYTHON")
  np.testing.assert_array_equal(out["y"].numpy(), want_y)
  np.testing.assert_array_equal(out["i"].numpy(), want_i.astype(out["i"].numpy().dtype))
