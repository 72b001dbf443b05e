"""ONNX inputs' symbolic dims (issue 34): unnamed dims ("?") are distinct unknowns, `dims=` at
load fixes or bounds a named one, and a Gather whose indices are a model input (token ids)
stays a run-time gather: other ids compile nothing new."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

TABLE = np.arange(40, dtype=np.float32).reshape(10, 4)


def _model(inputs, nodes, outputs, inits=()):
  graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _embedding():
  ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence_length"])
  out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
  node = helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)
  return _model([ids], [node], [out], [numpy_helper.from_array(TABLE, "table")])


def test_token_ids_given_as_input_are_not_folded_into_kernels():
  model = kg.onnx.load(_embedding())
  kg.clear_cache()
  for step, token in enumerate([3, 7, 1, 9]):
    ids = np.array([[token]], np.int64)
    got = model.run({"ids": ids}, device="PYTHON")["y"].numpy()
    np.testing.assert_array_equal(got, TABLE[ids])
    if step == 0:
      misses = kg.cache_info()["misses"]
  assert kg.cache_info()["misses"] == misses


def test_unnamed_dims_are_distinct_unknowns():
  a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["?", 4])
  b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["?", 4])
  out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
  nodes = [helper.make_node("Concat", ["a", "b"], ["y"], axis=0)]
  model = kg.onnx.load(_model([a, b], nodes, [out]))
  x, y = np.ones((3, 4), np.float32), np.zeros((5, 4), np.float32)
  got = model.run({"a": x, "b": y}, device="PYTHON")["y"].numpy()
  np.testing.assert_array_equal(got, np.concatenate([x, y]))


def test_dims_at_load_fix_or_bound_a_named_dim():
  model = kg.onnx.load(_embedding(), dims={"batch": 1, "sequence_length": (1, 3)})
  model.run({"ids": np.zeros((1, 3), np.int64)}, device="PYTHON")
  with pytest.raises(kg.ShapeError, match="batch=1"):
    model.run({"ids": np.zeros((2, 3), np.int64)}, device="PYTHON")
  with pytest.raises(kg.ShapeError, match=r"sequence_length=\(1, 3\)"):
    model.run({"ids": np.zeros((1, 4), np.int64)}, device="PYTHON")
  with pytest.raises(kg.ModelError, match="no input of the model declares"):
    kg.onnx.load(_embedding(), dims={"seq": 4})
  with pytest.raises(kg.ModelError, match="a size"):
    kg.onnx.load(_embedding(), dims={"batch": "one"})
