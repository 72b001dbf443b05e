"""ONNX inputs' symbolic dims (issue 34): unnamed dims ("?") are distinct unknowns, `dims=` at
load fixes or bounds a named one, and a Gather whose indices are a model input (token ids)
stays a run-time gather: other ids compile nothing new."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tools import device_runtime

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


def _sequence_model():
  """x (batch, sequence_length, 8) -> LayerNorm(x @ W) softmax over the sequence, mean over it."""
  rng = np.random.default_rng(1)
  w = rng.standard_normal((8, 8)).astype(np.float32)
  scale, bias = np.ones(8, np.float32), np.zeros(8, np.float32)
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence_length", 8])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
  z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
  nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("LayerNormalization", ["h", "scale", "bias"], ["n"], axis=-1),
           helper.make_node("Softmax", ["n"], ["y"], axis=1),
           helper.make_node("ReduceMean", ["n", "axes"], ["z"], keepdims=0)]
  inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(scale, "scale"),
           numpy_helper.from_array(bias, "bias"),
           numpy_helper.from_array(np.array([1], np.int64), "axes")]
  graph = helper.make_graph(nodes, "g", [x], [y, z], inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_ranged_batch_and_sequence_dims_compile_once_for_five_sizes(device):
  ort = pytest.importorskip("onnxruntime")
  device_runtime(device)
  src = _sequence_model()
  session = ort.InferenceSession(src)
  model = kg.onnx.load(src, dims={"batch": (1, 4), "sequence_length": (1, 33)})
  kg.clear_cache()
  rng = np.random.default_rng(2)
  for k, (batch, seq) in enumerate([(2, 1), (1, 7), (4, 33), (3, 12), (1, 2)]):
    x = rng.standard_normal((batch, seq, 8)).astype(np.float32)
    got = model.run({"x": x}, device=device)
    want = session.run(None, {"x": x})
    for name, w in zip(("y", "z"), want):
      np.testing.assert_allclose(got[name].numpy(), w, rtol=1e-4, atol=1e-5)
    if k == 0:
      misses = kg.cache_info()["misses"]
  assert kg.cache_info()["misses"] == misses


def test_shape_of_a_symbolic_dim_is_refused_not_guessed():
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["sequence_length", 4])
  y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
  model = kg.onnx.load(_model([x], [helper.make_node("Shape", ["x"], ["y"])], [y]),
                       dims={"sequence_length": (1, 9)})
  with pytest.raises(kg.UnsupportedError, match="symbolic"):
    model.run({"x": np.zeros((3, 4), np.float32)}, device="PYTHON")


def _attention_with_past():
  """One attention step with a KV cache: q, k, v (1, new, 8) for the new tokens; past_key and
  past_value (1, past, 8); present = Concat(past, new) along the sequence; softmax(q k^T) v."""
  f = TensorProto.FLOAT
  ins = [helper.make_tensor_value_info(n, f, [1, "new", 8]) for n in ("q", "k", "v")]
  ins += [helper.make_tensor_value_info(n, f, [1, "past_sequence_length", 8])
          for n in ("past_key", "past_value")]
  outs = [helper.make_tensor_value_info(n, f, None) for n in ("y", "present_key",
                                                              "present_value")]
  nodes = [helper.make_node("Concat", ["past_key", "k"], ["present_key"], axis=1),
           helper.make_node("Concat", ["past_value", "v"], ["present_value"], axis=1),
           helper.make_node("Transpose", ["present_key"], ["kt"], perm=[0, 2, 1]),
           helper.make_node("MatMul", ["q", "kt"], ["s"]),
           helper.make_node("Softmax", ["s"], ["p"], axis=-1),
           helper.make_node("MatMul", ["p", "present_value"], ["y"])]
  graph = helper.make_graph(nodes, "g", ins, outs)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_past_key_values_with_a_symbolic_past_length_compile_once():
  ort = pytest.importorskip("onnxruntime")
  src = _attention_with_past()
  session = ort.InferenceSession(src)
  model = kg.onnx.load(src, dims={"new": 1, "past_sequence_length": (0, 24)})
  rng = np.random.default_rng(3)
  past_k = past_v = np.zeros((1, 0, 8), np.float32)
  kg.clear_cache()
  misses = []
  for step in range(12):
    q, k, v = (rng.standard_normal((1, 1, 8)).astype(np.float32) for _ in range(3))
    feeds = {"q": q, "k": k, "v": v, "past_key": past_k, "past_value": past_v}
    got = model.run(feeds, device="PYTHON")
    want = session.run(None, feeds)
    for name, w in zip(("y", "present_key", "present_value"), want):
      np.testing.assert_allclose(got[name].numpy(), w, rtol=1e-5, atol=1e-6)
    past_k, past_v = want[1], want[2]
    misses.append(kg.cache_info()["misses"])
  assert misses[2:] == [misses[1]] * 10, misses
