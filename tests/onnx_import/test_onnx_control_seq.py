"""ONNX control flow, sequences, data-dependent shapes and random operators through the public
kg.onnx API: models built with the onnx package's helpers, results checked against numpy. The
node conformance cases cover each operator's semantics; these tests cover what they do not: a
condition computed from data, a Loop the importer must refuse, sequences as run() inputs and
outputs, outer-scope values inside bodies, scatter reductions at two sizes, random statistics.
"""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from onnx_corpus import onnx_or_missing

onnx = onnx_or_missing()
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, inits=(), opset=18):
  graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
  return kg.onnx.load(helper.make_model(
    graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())


def _vi(name, elem, shape):
  return helper.make_tensor_value_info(name, elem, shape)


def _seq_vi(name, elem):
  return helper.make_value_info(name, helper.make_sequence_type_proto(
    helper.make_tensor_type_proto(elem, None)))


def _const(name, array):
  return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def test_if_on_a_condition_computed_from_data_builds_the_chosen_branch():
  then_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [],
                             [_vi("t", F, [4])])
  else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                             [_vi("e", F, [4])])
  nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
           _const("zero", np.array(0, np.float32)),
           helper.make_node("Greater", ["s", "zero"], ["c"]),
           helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
  m = _model(nodes, [_vi("x", F, [4])], [_vi("y", F, [4])])
  for x in (np.array([1, 2, -1, 3], np.float32), np.array([-1, -2, 1, 0], np.float32)):
    want = x * x if x.sum() > 0 else -x
    np.testing.assert_allclose(m.run({"x": x})["y"].numpy(), want)


def _loop_body(cond_from_data: bool):
  """acc_out = acc_in + x (an outer-scope value); scan output acc_out; cond_out is cond_in or,
  when cond_from_data, sum(acc_out) < 100 (a while loop on computed data)."""
  nodes = [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
           helper.make_node("Identity", ["acc_out"], ["scan_out"])]
  if cond_from_data:
    nodes += [helper.make_node("ReduceSum", ["acc_out"], ["tot"], keepdims=0),
              _const("limit", np.array(100, np.float32)),
              helper.make_node("Less", ["tot", "limit"], ["cond_out"])]
  else:
    nodes += [helper.make_node("Identity", ["cond_in"], ["cond_out"])]
  return helper.make_graph(nodes, "body",
                           [_vi("i", I64, []), _vi("cond_in", B, []), _vi("acc_in", F, [3])],
                           [_vi("cond_out", B, []), _vi("acc_out", F, [3]),
                            _vi("scan_out", F, [3])])


@pytest.mark.parametrize("trips", [1, 5])
def test_loop_unrolls_a_static_trip_count_and_stacks_scan_outputs(trips):
  nodes = [helper.make_node("Loop", ["M", "", "a0"], ["acc", "steps"], body=_loop_body(False))]
  m = _model(nodes, [_vi("M", I64, []), _vi("a0", F, [3]), _vi("x", F, [3])],
             [_vi("acc", F, [3]), _vi("steps", F, [trips, 3])])
  x, a0 = np.array([1, 2, 3], np.float32), np.array([0.5, 0, -1], np.float32)
  out = m.run({"M": np.array(trips, np.int64), "a0": a0, "x": x})
  want = np.stack([a0 + (k + 1) * x for k in range(trips)])
  np.testing.assert_allclose(out["steps"].numpy(), want)
  np.testing.assert_allclose(out["acc"].numpy(), want[-1])


def test_loop_whose_condition_depends_on_computed_data_is_a_typed_error():
  nodes = [helper.make_node("Loop", ["", "c0", "a0"], ["acc", "steps"], body=_loop_body(True))]
  m = _model(nodes, [_vi("c0", B, []), _vi("a0", F, [3]), _vi("x", F, [3])],
             [_vi("acc", F, [3]), _vi("steps", F, [None, 3])])
  with pytest.raises(kg.UnsupportedError, match="condition is computed from the data"):
    m.run({"c0": np.array(True), "a0": np.zeros(3, np.float32), "x": np.ones(3, np.float32)})


def test_scan_runs_forward_and_reverse_like_numpy_cumsum():
  body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
                            helper.make_node("Identity", ["s_out"], ["y_t"])], "body",
                           [_vi("s_in", F, [2]), _vi("x_t", F, [2])],
                           [_vi("s_out", F, [2]), _vi("y_t", F, [2])])
  nodes = [helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_input_directions=[1])]
  m = _model(nodes, [_vi("s0", F, [2]), _vi("xs", F, [5, 2])],
             [_vi("s", F, [2]), _vi("ys", F, [5, 2])])
  xs = np.arange(10, dtype=np.float32).reshape(5, 2)
  out = m.run({"s0": np.zeros(2, np.float32), "xs": xs})
  np.testing.assert_allclose(out["ys"].numpy(), np.cumsum(xs[::-1], 0))
  np.testing.assert_allclose(out["s"].numpy(), xs.sum(0))


def test_sequences_go_in_and_come_out_of_run_as_lists():
  seq_t = _seq_vi("seq", F)
  nodes = [helper.make_node("SequenceInsert", ["seq", "x"], ["seq2"]),
           helper.make_node("SequenceLength", ["seq2"], ["n"]),
           helper.make_node("ConcatFromSequence", ["seq2"], ["cat"], axis=0)]
  m = _model(nodes, [seq_t, _vi("x", F, [2])],
             [_seq_vi("seq2", F), _vi("n", I64, []),
              _vi("cat", F, [None])])
  parts = [np.array([1, 2], np.float32), np.array([3, 4], np.float32)]
  x = np.array([5, 6], np.float32)
  out = m.run({"seq": parts, "x": x})
  assert isinstance(out["seq2"], list) and len(out["seq2"]) == 3
  np.testing.assert_allclose(out["seq2"][2].numpy(), x)
  assert int(out["n"].numpy()) == 3
  np.testing.assert_allclose(out["cat"].numpy(), np.concatenate(parts + [x]))


def _scatter_numpy(data, idx, upd, axis, reduction):
  out = data.copy()
  fn = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
  for pos in np.ndindex(idx.shape):
    target = list(pos)
    target[axis] = idx[pos]
    t = tuple(target)
    out[t] = upd[pos] if reduction == "none" else fn[reduction](out[t], upd[pos])
  return out


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("shape", [(3, 4), (17, 40)])
def test_scatter_elements_reductions_match_numpy(reduction, shape):
  rng = np.random.default_rng(3)
  data = rng.standard_normal(shape).astype(np.float32)
  idx = rng.integers(0, shape[0], size=(shape[0] + 2, shape[1])).astype(np.int64)
  upd = rng.standard_normal(idx.shape).astype(np.float32)
  nodes = [helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=0,
                            reduction=reduction)]
  m = _model(nodes, [_vi("d", F, shape), _vi("i", I64, idx.shape), _vi("u", F, idx.shape)],
             [_vi("y", F, shape)])
  got = m.run({"d": data, "i": idx, "u": upd})["y"].numpy()
  np.testing.assert_allclose(got, _scatter_numpy(data, idx, upd, 0, reduction), rtol=1e-5)


def test_nonzero_of_computed_data_is_realized_to_its_length():
  nodes = [_const("t", np.array(0.5, np.float32)),
           helper.make_node("Greater", ["x", "t"], ["m"]),
           helper.make_node("NonZero", ["m"], ["idx"])]
  m = _model(nodes, [_vi("x", F, [3, 3])], [_vi("idx", I64, [2, None])])
  x = np.array([[0, 1, 0], [1, 1, 0], [0, 0, 0.7]], np.float32)
  np.testing.assert_array_equal(m.run({"x": x})["idx"].numpy(), np.stack(np.nonzero(x > 0.5)))


def test_random_normal_has_its_moments_and_a_seed_makes_it_repeatable():
  nodes = [helper.make_node("RandomNormal", [], ["a"], shape=[64, 64], mean=2.0, scale=0.5,
                            seed=7.0),
           helper.make_node("RandomNormal", [], ["b"], shape=[64, 64], mean=2.0, scale=0.5,
                            seed=7.0),
           helper.make_node("RandomUniformLike", ["a"], ["u"], low=-1.0, high=3.0)]
  m = _model(nodes, [], [_vi("a", F, [64, 64]), _vi("b", F, [64, 64]), _vi("u", F, [64, 64])])
  out = m.run({})
  a, u = out["a"].numpy(), out["u"].numpy()
  assert abs(a.mean() - 2.0) < 0.05 and abs(a.std() - 0.5) < 0.05
  np.testing.assert_array_equal(a, out["b"].numpy())
  assert u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean() - 1.0) < 0.1


@pytest.mark.parametrize("strides,dilations,group", [([1, 1, 1], [1, 1, 1], 1),
                                                     ([2, 1, 2], [1, 2, 1], 2)])
def test_conv_3d_matches_the_onnx_reference(strides, dilations, group):
  from onnx.reference import ReferenceEvaluator
  rng = np.random.default_rng(5)
  x = rng.standard_normal((2, 4, 7, 6, 5)).astype(np.float32)
  w = rng.standard_normal((6, 4 // group, 3, 2, 3)).astype(np.float32)
  b = rng.standard_normal(6).astype(np.float32)
  node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=strides,
                          dilations=dilations, group=group, pads=[1, 0, 1, 0, 1, 1])
  graph = helper.make_graph([node], "g", [_vi("x", F, x.shape), _vi("w", F, w.shape),
                                          _vi("b", F, [6])], [_vi("y", F, None)])
  proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
  want = ReferenceEvaluator(proto).run(None, {"x": x, "w": w, "b": b})[0]
  got = kg.onnx.load(proto.SerializeToString()).run({"x": x, "w": w, "b": b})["y"].numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
