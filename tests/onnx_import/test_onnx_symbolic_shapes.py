"""Shape subgraphs over ONNX symbolic dims (onnx/symshape.py): Shape -> Gather -> Mul ->
Unsqueeze -> Concat into Reshape / Expand / Range / ConstantOfShape computes with the dims'
expressions, not the sizes of the first run: against onnxruntime at several sizes (the range's
ends and values between), with one compile for all. An operator that cannot compute with a
symbolic size refuses it (UnsupportedError), never guesses."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tools import device_runtime

SIZES = [(1, 1), (2, 7), (3, 16), (2, 5)]


def _ints(name, v):
  return numpy_helper.from_array(np.array(v, np.int64), name)


def _model(nodes, outputs, inits=()):
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
  outs = [helper.make_tensor_value_info(n, t, None) for n, t in outputs]
  graph = helper.make_graph(nodes, "g", [x], outs, list(inits))
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _shape_subgraph():
  """y = Relu(Reshape(x, [batch, 2 * seq, 4])), e = Expand(row, [batch, seq, 8]),
  r = Range(0, seq, 1), c = ConstantOfShape([batch, 2 * seq, 4], 1.5)."""
  f, i = TensorProto.FLOAT, TensorProto.INT64
  n = helper.make_node
  nodes = [n("Shape", ["x"], ["s"]), n("Gather", ["s", "i0"], ["b"], axis=0),
           n("Gather", ["s", "i1"], ["q"], axis=0), n("Mul", ["q", "two"], ["q2"]),
           n("Unsqueeze", ["b", "ax0"], ["bu"]), n("Unsqueeze", ["q2", "ax0"], ["q2u"]),
           n("Unsqueeze", ["q", "ax0"], ["qu"]),
           n("Concat", ["bu", "q2u", "four"], ["shape"], axis=0),
           n("Reshape", ["x", "shape"], ["y0"]), n("Relu", ["y0"], ["y"]),
           n("Range", ["zero", "q", "one"], ["r"]),
           n("Concat", ["bu", "qu", "eight"], ["eshape"], axis=0),
           n("Expand", ["row", "eshape"], ["e"]),
           n("ConstantOfShape", ["shape"], ["c"],
             value=helper.make_tensor("v", f, [1], [1.5]))]
  inits = [_ints("i0", 0), _ints("i1", 1), _ints("two", 2), _ints("ax0", [0]),
           _ints("four", [4]), _ints("zero", 0), _ints("one", 1), _ints("eight", [8]),
           numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(1, 1, 8), "row")]
  return _model(nodes, [("y", f), ("e", f), ("r", i), ("c", f)], inits)


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_a_shape_subgraph_over_symbolic_dims_matches_onnxruntime_with_one_compile(device):
  ort = pytest.importorskip("onnxruntime")
  device_runtime(device)
  src = _shape_subgraph()
  session = ort.InferenceSession(src)
  model = kg.onnx.load(src, dims={"batch": (1, 3), "seq": (1, 16)})
  kg.clear_cache()
  for k, (batch, seq) in enumerate(SIZES):
    x = np.random.default_rng(k).standard_normal((batch, seq, 8)).astype(np.float32)
    got = model.run({"x": x}, device=device, replay=False)     # the lazy graph of each size
    for name, want in zip(("y", "e", "r", "c"), session.run(None, {"x": x})):
      value = got[name].numpy()
      assert value.shape == want.shape, (name, value.shape, want.shape)
      np.testing.assert_allclose(value, want, rtol=1e-6)
    if k == 0:
      misses = kg.cache_info()["misses"]
  assert kg.cache_info()["misses"] == misses       # every size ran the first size's kernels


def _exported_patterns():
  """What torch / Optimum exports write on shape values: Expand's target through
  Where(Equal(shape, -1), 1, shape) (torch's expand_as), Range up to Max(seq, 1), a Reshape
  to Min(2 * seq, 64) rows (seq <= 16: decided by the range), Greater/Less deciding a Where,
  Neg, Abs."""
  f, i = TensorProto.FLOAT, TensorProto.INT64
  n = helper.make_node
  nodes = [n("Shape", ["x"], ["s"]), n("Gather", ["s", "i1"], ["q"], axis=0),
           n("Gather", ["s", "i0"], ["b"], axis=0),
           n("Unsqueeze", ["b", "ax0"], ["bu"]), n("Unsqueeze", ["q", "ax0"], ["qu"]),
           n("Concat", ["bu", "qu", "eight"], ["target"], axis=0),
           n("Equal", ["target", "minus1"], ["is_neg"]),
           n("Where", ["is_neg", "ones3", "target"], ["etarget"]),
           n("Expand", ["row", "etarget"], ["e"]),
           n("Max", ["q", "one"], ["qmax"]), n("Range", ["zero", "qmax", "one"], ["r"]),
           n("Mul", ["q", "two"], ["q2"]), n("Min", ["q2", "sixty_four"], ["rows"]),
           n("Greater", ["q", "zero"], ["pos"]), n("Neg", ["rows"], ["neg"]),
           n("Abs", ["neg"], ["abs"]), n("Where", ["pos", "abs", "rows"], ["rows2"]),
           n("Less", ["b", "zero"], ["never"]), n("Where", ["never", "one", "b"], ["b2"]),
           n("Unsqueeze", ["b2", "ax0"], ["b2u"]), n("Unsqueeze", ["rows2", "ax0"], ["ru"]),
           n("Concat", ["b2u", "ru", "four"], ["rshape"], axis=0),
           n("Reshape", ["x", "rshape"], ["y"])]
  inits = [_ints("i0", 0), _ints("i1", 1), _ints("ax0", [0]), _ints("eight", [8]),
           _ints("minus1", -1), _ints("ones3", [1, 1, 1]), _ints("one", 1), _ints("zero", 0),
           _ints("two", 2), _ints("sixty_four", 64), _ints("four", [4]),
           numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(1, 1, 8), "row")]
  return _model(nodes, [("e", f), ("r", i), ("y", f)], inits)


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_exported_comparisons_on_shape_values_are_decided_by_the_dims_ranges(device):
  ort = pytest.importorskip("onnxruntime")
  device_runtime(device)
  src = _exported_patterns()
  session = ort.InferenceSession(src)
  model = kg.onnx.load(src, dims={"batch": (1, 3), "seq": (1, 16)})
  kg.clear_cache()
  for k, (batch, seq) in enumerate(SIZES + [(3, 16), (1, 3)]):
    x = np.random.default_rng(k).standard_normal((batch, seq, 8)).astype(np.float32)
    got = model.run({"x": x}, device=device)
    for name, want in zip(("e", "r", "y"), session.run(None, {"x": x})):
      value = got[name].numpy()
      assert value.shape == want.shape, (name, value.shape, want.shape)
      np.testing.assert_array_equal(value, want)
    if k == 0:
      misses = kg.cache_info()["misses"]
  assert kg.cache_info()["misses"] == misses


def test_a_comparison_that_depends_on_the_bound_value_is_refused_not_guessed():
  n = helper.make_node
  nodes = [n("Shape", ["x"], ["s"]), n("Equal", ["s", "three"], ["eq"]),
           n("Where", ["eq", "s", "s"], ["w"]), n("Reshape", ["x", "w"], ["y"])]
  model = kg.onnx.load(_model(nodes, [("y", TensorProto.FLOAT)], [_ints("three", 3)]),
                       dims={"batch": (1, 3), "seq": (1, 16)})
  with pytest.raises(kg.UnsupportedError, match="Equal.*depends on the bound"):
    model.run({"x": np.zeros((2, 3, 8), np.float32)}, device="PYTHON")
  nodes = [n("Shape", ["x"], ["s"]), n("Mod", ["s", "three"], ["m"]),
           n("Reshape", ["x", "m"], ["y"])]
  model = kg.onnx.load(_model(nodes, [("y", TensorProto.FLOAT)], [_ints("three", 3)]),
                       dims={"batch": (1, 3), "seq": (1, 16)})
  with pytest.raises(kg.UnsupportedError, match="Mod.*symbolic size"):
    model.run({"x": np.zeros((2, 3, 8), np.float32)}, device="PYTHON")


def test_size_of_a_symbolic_tensor_is_an_expression():
  ort = pytest.importorskip("onnxruntime")
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", 8])
  r = helper.make_tensor_value_info("r", TensorProto.INT64, None)
  n = helper.make_node
  nodes = [n("Size", ["x"], ["s"]), n("Div", ["s", "eight"], ["q"]),
           n("Range", ["zero", "q", "one"], ["r"])]
  graph = helper.make_graph(nodes, "g", [x], [r], [_ints("eight", 8), _ints("zero", 0),
                                                    _ints("one", 1)])
  src = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
  session = ort.InferenceSession(src)
  model = kg.onnx.load(src, dims={"seq": (1, 16)})
  for seq in (1, 9, 16):
    feed = {"x": np.zeros((seq, 8), np.float32)}
    np.testing.assert_array_equal(model.run(feed, device="PYTHON")["r"].numpy(),
                                  session.run(None, feed)[0])
