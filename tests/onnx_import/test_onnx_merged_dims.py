"""ONNX models that flatten ranged batch AND sequence dims (issue 34): the exporters' linear layer
`Reshape(x, [-1, H])` -> Gemm / MatMul -> `Reshape(y, Concat(Shape(x)[:2], [N]))` over
(batch, seq, H) with both dims ranged. No padded layout holds batch * seq, so the merged value
keeps its (batch, seq, H) tensor (onnx/merged.py); it runs every size from one compile, against
onnxruntime. Consumers that would need the product raise a typed UnsupportedError."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tools import device_runtime

DIMS = {"batch": (1, 4), "seq": (1, 16)}
SIZES = [(2, 3), (1, 1), (4, 16), (3, 5), (1, 16)]      # range ends and sizes that divide nothing
RNG = np.random.default_rng(34)


def _init(name, value):
  return numpy_helper.from_array(np.asarray(value), name)


def _model(nodes, inits, outputs=("y",), opset=17, hidden=8):
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden])
  outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
  graph = helper.make_graph(nodes, "g", [x], outs, inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                 helper.make_opsetid("com.microsoft", 1)]
                           ).SerializeToString()


def _flatten(x, out, tag):
  """GPT-2's x.view(-1, x.size(-1)): Reshape(x, Concat([-1], Shape(x)[2]))."""
  return [helper.make_node("Shape", [x], [f"{tag}_s"]),
          helper.make_node("Gather", [f"{tag}_s", "two"], [f"{tag}_h"], axis=0),
          helper.make_node("Unsqueeze", [f"{tag}_h", "zero"], [f"{tag}_h1"]),
          helper.make_node("Concat", ["minus1", f"{tag}_h1"], [f"{tag}_flat"], axis=0),
          helper.make_node("Reshape", [x, f"{tag}_flat"], [out])]


def _unflatten(y, like, n, out, tag):
  """Reshape(y, Concat(Gather(Shape(like), [0, 1]), [n])): back to (batch, seq, n)."""
  return [helper.make_node("Shape", [like], [f"{tag}_ls"]),
          helper.make_node("Gather", [f"{tag}_ls", "lead"], [f"{tag}_bs"], axis=0),
          helper.make_node("Concat", [f"{tag}_bs", n], [f"{tag}_back"], axis=0),
          helper.make_node("Reshape", [y, f"{tag}_back"], [out])]


SHAPE_INITS = [_init("two", np.array(2, np.int64)), _init("zero", np.array([0], np.int64)),
               _init("minus1", np.array([-1], np.int64)),
               _init("lead", np.array([0, 1], np.int64))]


def _gpt2_linear():
  """GPT-2 / Optimum Conv1D as torch.addmm exports it: Gemm(transB=1) with a bias, then
  x.view(x.size()[:-1] + (nf,))."""
  w = RNG.standard_normal((6, 8)).astype(np.float32)       # (out, in): transB
  b = RNG.standard_normal(6).astype(np.float32)
  nodes = _flatten("x", "x2", "a") + [
    helper.make_node("Gemm", ["x2", "w", "b"], ["h"], transB=1, alpha=0.5, beta=2.0),
    helper.make_node("Slice", ["a_s", "zero", "minus1"], ["a_lead"]),    # x.size()[:-1]
    helper.make_node("Concat", ["a_lead", "six"], ["a_back"], axis=0),
    helper.make_node("Reshape", ["h", "a_back"], ["y"])]
  inits = SHAPE_INITS + [_init("w", w), _init("b", b), _init("six", np.array([6], np.int64))]
  return _model(nodes, inits)


def _mlp_block(x, out, k, hidden=8, inner=16, gelu=False):
  """LayerNorm, MatMul, Add bias, Relu or Gelu (erf form), MatMul, Add bias on Reshape(x, [-1, 8]);
  Reshape back, residual Add."""
  t = f"b{k}"
  nodes = _flatten(x, f"{t}_x2", t) + [
    helper.make_node("LayerNormalization", [f"{t}_x2", f"{t}_g", f"{t}_beta"], [f"{t}_n"],
                     axis=-1),
    helper.make_node("MatMul", [f"{t}_n", f"{t}_w1"], [f"{t}_m1"]),
    helper.make_node("Add", [f"{t}_m1", f"{t}_b1"], [f"{t}_a1"])]
  if gelu:
    nodes += [helper.make_node("Div", [f"{t}_a1", "sqrt2"], [f"{t}_d"]),
              helper.make_node("Erf", [f"{t}_d"], [f"{t}_e"]),
              helper.make_node("Add", [f"{t}_e", "one"], [f"{t}_e1"]),
              helper.make_node("Mul", [f"{t}_a1", f"{t}_e1"], [f"{t}_p"]),
              helper.make_node("Mul", [f"{t}_p", "half"], [f"{t}_act"])]
  else:
    nodes += [helper.make_node("Relu", [f"{t}_a1"], [f"{t}_act"])]
  nodes += [helper.make_node("MatMul", [f"{t}_act", f"{t}_w2"], [f"{t}_m2"]),
            helper.make_node("Add", [f"{t}_m2", f"{t}_b2"], [f"{t}_a2"])]
  nodes += _unflatten(f"{t}_a2", x, "hidden", f"{t}_y", t)
  nodes += [helper.make_node("Add", [x, f"{t}_y"], [out])]
  inits = [_init(f"{t}_g", RNG.uniform(0.5, 1.5, hidden).astype(np.float32)),
           _init(f"{t}_beta", RNG.standard_normal(hidden).astype(np.float32)),
           _init(f"{t}_w1", RNG.standard_normal((hidden, inner)).astype(np.float32) / 3),
           _init(f"{t}_b1", RNG.standard_normal((1, inner)).astype(np.float32)),
           _init(f"{t}_w2", RNG.standard_normal((inner, hidden)).astype(np.float32) / 4),
           _init(f"{t}_b2", RNG.standard_normal(hidden).astype(np.float32))]
  return nodes, inits


def _mini_transformer_mlp():
  """Two residual MLP blocks (the second with an erf Gelu) over (batch, seq, 8)."""
  n1, i1 = _mlp_block("x", "x1", 1)
  n2, i2 = _mlp_block("x1", "y", 2, gelu=True)
  consts = [_init("hidden", np.array([8], np.int64)), _init("sqrt2", np.float32(np.sqrt(2))),
            _init("one", np.float32(1)), _init("half", np.float32(0.5))]
  return _model(n1 + n2, SHAPE_INITS + i1 + i2 + consts)


def _check_sizes(src, device, sizes=SIZES, outputs=("y",), settled=0):
  """Run `src` loaded with DIMS at each (batch, seq) against onnxruntime; nothing compiles after
  call `settled` (0: the first; 1 where the second call, which records the replay and realizes
  all outputs at once, schedules a value they share as a kernel of its own)."""
  ort = pytest.importorskip("onnxruntime")
  device_runtime(device)
  session = ort.InferenceSession(src)
  model = kg.onnx.load(src, dims=DIMS)
  kg.clear_cache()
  rng = np.random.default_rng(7)
  for k, (batch, seq) in enumerate(sizes):
    x = rng.standard_normal((batch, seq, 8)).astype(np.float32)
    got = model.run({"x": x}, device=device)
    for name, want in zip(outputs, session.run(list(outputs), {"x": x})):
      np.testing.assert_allclose(got[name].numpy(), want, rtol=1e-4, atol=1e-5)
    if k == settled:
      misses = kg.cache_info()["misses"]
  assert kg.cache_info()["misses"] == misses


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_gpt2_linear_over_ranged_batch_and_seq_compiles_once(device):
  _check_sizes(_gpt2_linear(), device)


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_two_block_transformer_mlp_over_ranged_batch_and_seq_compiles_once(device):
  _check_sizes(_mini_transformer_mlp(), device)


def test_gpt2_linear_on_ptxsim():
  _check_sizes(_gpt2_linear(), "PTXSIM", sizes=[(2, 3), (1, 1), (3, 5)])


def test_static_loads_and_one_ranged_dim_run_the_idiom():
  """Static loads reshape as they always did, and so does (1, seq) -> (-1, 8); a batch fixed
  above 1 ((3, seq): the symbolic size behind a static one, no padded layout) is merged too."""
  ort = pytest.importorskip("onnxruntime")
  src = _mini_transformer_mlp()
  session = ort.InferenceSession(src)
  for batch, dims in ((3, None), (3, {"batch": 3, "seq": (1, 16)}),
                      (1, {"batch": 1, "seq": (1, 16)}), (3, {"batch": (1, 4), "seq": 5})):
    x = np.random.default_rng(8).standard_normal((batch, 5, 8)).astype(np.float32)
    got = kg.onnx.load(src, dims=dims).run({"x": x}, device="PYTHON")["y"].numpy()
    np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def _on_merged(extra, outputs=("y",), inits=()):
  """x -> Reshape(x, [-1, 8]) -> MatMul (8, 4) = "h", then the nodes `extra`."""
  nodes = _flatten("x", "x2", "a") + [helper.make_node("MatMul", ["x2", "w"], ["h"])] + extra
  w = _init("w", RNG.standard_normal((8, 4)).astype(np.float32))
  return _model(nodes, SHAPE_INITS + [w] + list(inits), outputs)


def test_reductions_over_the_merged_axis_reduce_over_batch_and_seq():
  """ReduceMean / ReduceMax over the merged rows (axis 0), keepdims 0 and 1, and Softmax and
  ReduceSum along the later axis, which stay merged until the Reshape back."""
  extra = [helper.make_node("ReduceMean", ["h"], ["y"], axes=[0], keepdims=0),
           helper.make_node("ReduceMax", ["h"], ["z"], axes=[0], keepdims=1),
           helper.make_node("Softmax", ["h"], ["p"], axis=1),
           helper.make_node("ReduceSum", ["p", "last"], ["r"], keepdims=1)] + \
    _unflatten("r", "x", "one", "u", "c")
  src = _on_merged(extra, ("y", "z", "u"), [_init("last", np.array([-1], np.int64)),
                                            _init("one", np.array([1], np.int64))])
  _check_sizes(src, "PYTHON", sizes=[(2, 3), (4, 16), (1, 1), (3, 5)], outputs=("y", "z", "u"),
               settled=1)


H = helper.make_node
ROW_WISE = {   # nodes after h = MatMul(Reshape(x, [-1, 8]), (8, 4)), ending in a (batch, seq, ..) y
  "split_slice_mul": ([H("Split", ["h", "sp"], ["h1", "h2"], axis=1),
                       H("Slice", ["h1", "st", "en", "ax"], ["h3"]),
                       H("Mul", ["h3", "h2"], ["m"])] + _unflatten("m", "x", "two_", "y", "c"),
                      [_init("sp", np.array([2, 2], np.int64)),
                       _init("st", np.array([1], np.int64)),
                       _init("en", np.array([3], np.int64)), _init("ax", np.array([-1], np.int64)),
                       _init("two_", np.array([1, 2], np.int64))]),
  "kept_merged_transpose_softmax": (
    [H("Reshape", ["h", "r"], ["h4"]), H("Transpose", ["h4"], ["h5"], perm=[0, 2, 1]),
     H("Softmax", ["h5"], ["h6"], axis=-1)] + _unflatten("h6", "x", "r2", "y", "c"),
    [_init("r", np.array([-1, 2, 2], np.int64)), _init("r2", np.array([2, 2], np.int64))]),
  "gemm_with_merged_c": ([H("Gemm", ["h", "w4", "h"], ["g"], beta=0.5)] +
                         _unflatten("g", "x", "four", "y", "c"),
                         [_init("w4", RNG.standard_normal((4, 4)).astype(np.float32)),
                          _init("four", np.array([4], np.int64))]),
  "argmax_gather_cast_unsqueeze": (
    [H("ArgMax", ["h"], ["am"], axis=1, keepdims=0), H("Gather", ["h", "cols"], ["g"], axis=1),
     H("Cast", ["am"], ["amf"], to=TensorProto.FLOAT), H("Unsqueeze", ["amf", "ax1"], ["amu"]),
     H("Add", ["g", "amu"], ["gg"])] + _unflatten("gg", "x", "three", "y", "c"),
    [_init("cols", np.array([2, 0, 3], np.int64)), _init("three", np.array([3], np.int64)),
     _init("ax1", np.array([1], np.int64))]),
  "shape_of_the_later_axes": ([H("Shape", ["x"], ["xs"]), H("Gather", ["xs", "lead"], ["bs"]),
                               H("Shape", ["h"], ["tail"], start=1),
                               H("Concat", ["bs", "tail"], ["back"], axis=0),
                               H("Reshape", ["h", "back"], ["y"])], []),
  "kept_merged_by_its_own_shape": ([H("Relu", ["h"], ["r"]), H("Shape", ["h"], ["hs"]),
                                    H("Reshape", ["r", "hs"], ["m"])] +
                                   _unflatten("m", "x", "four", "y", "c"),
                                   [_init("four", np.array([4], np.int64))]),
  "skip_layer_norm": ([H("SkipLayerNormalization", ["h", "h", "g4", "b4"], ["n"],
                         domain="com.microsoft", epsilon=1e-5)] +
                      _unflatten("n", "x", "four", "y", "c"),
                      [_init("g4", RNG.uniform(0.5, 1.5, 4).astype(np.float32)),
                       _init("b4", RNG.standard_normal(4).astype(np.float32)),
                       _init("four", np.array([4], np.int64))]),
  "back_with_minus_one": ([H("Shape", ["x"], ["xs"]), H("Gather", ["xs", "one1"], ["sq"]),
                           H("Concat", ["minus1", "sq", "four"], ["back"], axis=0),
                           H("Reshape", ["h", "back"], ["y"])],
                          [_init("one1", np.array([1], np.int64)),
                           _init("four", np.array([4], np.int64))]),
}


def test_flatten_by_the_product_of_the_dims():
  """Reshape(x, Concat(Mul(Shape(x)[0], Shape(x)[1]), [8])): the product batch * seq as the
  merged size (other exporters' spelling of -1)."""
  nodes = [H("Shape", ["x"], ["s"]), H("Gather", ["s", "zero"], ["b"]),
           H("Gather", ["s", "one1"], ["q"]), H("Mul", ["b", "q"], ["bq"]),
           H("Concat", ["bq", "eight"], ["flat"], axis=0), H("Reshape", ["x", "flat"], ["x2"]),
           H("MatMul", ["x2", "w"], ["h"])] + _unflatten("h", "x", "four", "y", "c")
  inits = SHAPE_INITS + [_init("one1", np.array([1], np.int64)),
                         _init("eight", np.array([8], np.int64)),
                         _init("w", RNG.standard_normal((8, 4)).astype(np.float32)),
                         _init("four", np.array([4], np.int64))]
  _check_sizes(_model(nodes, inits), "PYTHON", sizes=[(2, 3), (4, 16), (1, 1), (3, 5)])


@pytest.mark.parametrize("case", sorted(ROW_WISE))
def test_row_wise_consumers_of_the_merged_value(case):
  extra, inits = ROW_WISE[case]
  _check_sizes(_on_merged(extra, ("y",), inits), "PYTHON", sizes=[(2, 3), (4, 16), (1, 1), (3, 5)])


def test_softmax_of_opset_11_over_the_last_axis():
  """Opset < 13 Softmax flattens axes 1.. of its input: here only the last, as opset 13's."""
  nodes = [H("Reshape", ["x", "flat"], ["x2"]), H("MatMul", ["x2", "w"], ["h"]),
           H("Softmax", ["h"], ["p"])] + _unflatten("p", "x", "four", "y", "c")
  inits = SHAPE_INITS + [_init("flat", np.array([-1, 8], np.int64)),
                         _init("w", RNG.standard_normal((8, 4)).astype(np.float32)),
                         _init("four", np.array([4], np.int64))]
  _check_sizes(_model(nodes, inits, opset=11), "PYTHON", sizes=[(2, 3), (4, 16), (3, 5)])


@pytest.mark.parametrize("extra, outputs, match", [
  ([helper.make_node("Transpose", ["h"], ["y"], perm=[1, 0])], ("y",),
   r"\(Transpose, opset 17\): 'h' is a Reshape's merge of the axes \(batch, seq\).*"
   r"perm \[1, 0\] moves the merged axis.*dims=\{'seq': size\}.*reshape back before"),
  ([helper.make_node("Gather", ["h", "idx"], ["y"], axis=0)], ("y",),
   r"Gather.*axis 0 is the merged one"),
  ([helper.make_node("Shape", ["h"], ["hs"]), helper.make_node("ConstantOfShape", ["hs"], ["y"])],
   ("y",), r"ConstantOfShape.*\(batch\) \* \(seq\) is a product of symbolic sizes"),
  ([helper.make_node("Relu", ["h"], ["y"])], ("y",), r"graph output 'y'.*\(batch\) \* \(seq\).*"
   r"no flattening of it is exact.*dims=\{'seq': size\}.*end the graph with a Reshape back to "
   r"\(batch, seq, \.\.\.\)"),
  ([helper.make_node("Add", ["h", "bias3"], ["y"])], ("y",),
   r"operand 'bias3' of shape \(2, 4\) does not broadcast over the merged axis"),
  ([helper.make_node("TopK", ["h", "k"], ["y", "i"], axis=-1)], ("y", "i"),
   r"TopK is not an operator that keeps the rows apart"),
])
def test_consumers_that_need_the_product_are_refused(extra, outputs, match):
  inits = [_init("idx", np.array([0], np.int64)), _init("k", np.array([2], np.int64)),
           _init("bias3", np.ones((2, 4), np.float32))]
  model = kg.onnx.load(_on_merged(extra, outputs, inits), dims=DIMS)
  with pytest.raises(kg.UnsupportedError, match=match):
    model.run({"x": np.zeros((2, 3, 8), np.float32)}, device="PYTHON")


def test_fixing_the_dim_the_error_names_returns_the_merged_output():
  """The graph-output error's advice holds: with seq fixed, batch * 3 leads static sizes (an
  affine size), so the merged (batch * seq, 4) output comes back, one program for every batch."""
  src = _on_merged([helper.make_node("Relu", ["h"], ["y"])])
  w = next(numpy_helper.to_array(t) for t in onnx.load_from_string(src).graph.initializer
           if t.name == "w")
  model = kg.onnx.load(src, dims={"batch": (1, 4), "seq": 3})
  kg.clear_cache()
  for b in (1, 3, 4, 2):
    x = RNG.standard_normal((b, 3, 8)).astype(np.float32)
    got = model.run({"x": x}, device="PYTHON")["y"].numpy()
    np.testing.assert_allclose(got, np.maximum(x.reshape(-1, 8) @ w, 0), rtol=1e-5, atol=1e-5)
    misses = kg.cache_info()["misses"] if b == 1 else misses
  assert kg.cache_info()["misses"] == misses
