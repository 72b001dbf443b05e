"""kg.onnx.load and Model.run: the public API, shape folding, symbolic dims, 64-bit policy and
typed errors on malformed graphs. Models are built with the onnx package's helpers and checked
against onnxruntime (or numpy)."""
from __future__ import annotations

import io
import math

import numpy as np
import pytest

import kernelgen as kg
from onnx_corpus import onnx_or_missing

onnx = onnx_or_missing()
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=17):
  graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, elem, shape):
  return helper.make_tensor_value_info(name, elem, shape)


def _ort(model, feeds):
  ort = pytest.importorskip("onnxruntime")
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  return sess.run(None, feeds)


def _dynamic_reshape_model():
  """y = reshape(x, [shape(x)[0], -1]) @ w: a Shape -> Gather -> Concat -> Reshape chain with a
  symbolic batch dim N."""
  w = np.arange(12, dtype=np.float32).reshape(12, 1) / 10
  nodes = [
    helper.make_node("Shape", ["x"], ["s"]),
    helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
    helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
    helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
    helper.make_node("Reshape", ["x", "shape"], ["flat"]),
    helper.make_node("MatMul", ["flat", "w"], ["y"]),
  ]
  inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
           numpy_helper.from_array(np.array([0], np.int64), "ax0"),
           numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
           numpy_helper.from_array(w, "w")]
  return _model(nodes, [_vi("x", TensorProto.FLOAT, ["N", 3, 4])],
                [_vi("y", TensorProto.FLOAT, ["N", 1])], inits)


def test_load_from_path_bytes_and_file_object(tmp_path):
  model = _dynamic_reshape_model()
  path = tmp_path / "m.onnx"
  path.write_bytes(model.SerializeToString())
  for src in (str(path), path, path.read_bytes(), io.BytesIO(path.read_bytes())):
    m = kg.onnx.load(src)
    assert m.input_names == ["x"] and m.output_names == ["y"]   # initializers are not inputs
    assert m.input_shapes == {"x": ("N", 3, 4)} and m.output_shapes == {"y": ("N", 1)}
    assert m.input_dtypes == {"x": kg.dtypes.float32}
    assert m.op_histogram() == {"Concat": 1, "Gather": 1, "MatMul": 1, "Reshape": 1,
                                "Shape": 1, "Unsqueeze": 1}


@pytest.mark.parametrize("batch", [1, 5])
def test_shape_chain_is_folded_and_batch_comes_from_the_input(batch):
  model = _dynamic_reshape_model()
  x = np.random.default_rng(batch).standard_normal((batch, 3, 4)).astype(np.float32)
  m = kg.onnx.load(model.SerializeToString())
  out = m.run({"x": x}, device="PYTHON")
  assert list(out) == ["y"] and out["y"].shape == (batch, 1)
  kernels = kg.compile(list(out.values()), target="wgsl")     # before realizing
  assert len(kernels) == 1, "the shape chain folds away: one matmul kernel is left"
  np.testing.assert_allclose(out["y"].numpy(), _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_run_is_lazy_and_compiles_for_every_target():
  model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "b"],
                                                                          ["y"])],
                 [_vi("x", TensorProto.FLOAT, [2, 3])], [_vi("y", TensorProto.FLOAT, [2, 3])],
                 [numpy_helper.from_array(np.ones((3,), np.float32), "b")])
  out = kg.onnx.load(model.SerializeToString()).run({"x": kg.Tensor.randn(2, 3, seed=1)},
                                                    device="PYTHON")
  for target in ("wgsl", "ptx", "python"):
    kernels = kg.compile(out["y"], target=target)
    assert len(kernels) == 1 and kernels[0].source
  x = kg.Tensor.randn(2, 3, seed=1).numpy()
  np.testing.assert_allclose(out["y"].numpy(), np.maximum(x, 0) + 1, rtol=1e-6)


def test_int64_data_is_narrowed_and_checked():
  model = _model([helper.make_node("Add", ["x", "c"], ["y"])],
                 [_vi("x", TensorProto.INT64, [3])], [_vi("y", TensorProto.INT64, [3])],
                 [numpy_helper.from_array(np.array([1, 2, 3], np.int64), "c")])
  m = kg.onnx.load(model.SerializeToString())
  out = m.run({"x": np.array([10, -20, 2 ** 30], np.int64)}, device="PYTHON")["y"]
  assert out.dtype == kg.dtypes.int32 and out.tolist() == [11, -18, 2 ** 30 + 3]
  with pytest.raises(kg.ShapeError, match="input 'x' holds 4294967296"):
    m.run({"x": np.array([1, 2, 2 ** 32], np.int64)}, device="PYTHON")


def test_int64_initializer_out_of_range_names_the_tensor():
  model = _model([helper.make_node("Add", ["x", "big"], ["y"])],
                 [_vi("x", TensorProto.INT64, [1])], [_vi("y", TensorProto.INT64, [1])],
                 [numpy_helper.from_array(np.array([2 ** 40], np.int64), "big")])
  with pytest.raises(kg.ShapeError, match="'big'"):
    kg.onnx.load(model.SerializeToString()).run({"x": np.array([1], np.int64)},
                                                device="PYTHON")


def _float64_model():
  return _model([helper.make_node("Mul", ["x", "x"], ["y"])],
                [_vi("x", TensorProto.DOUBLE, [2])], [_vi("y", TensorProto.DOUBLE, [2])])


def test_float64_on_webgpu_is_a_typed_error_with_the_fix():
  m = kg.onnx.load(_float64_model().SerializeToString())
  with pytest.raises(kg.UnsupportedError, match="float64='float32'"):
    m.run({"x": np.array([1.5, 2.0])}, device="WEBGPU")


def test_float64_runs_on_python_and_narrows_when_asked():
  x = np.array([1.1, -3.0])
  m = kg.onnx.load(_float64_model().SerializeToString())
  y = m.run({"x": x}, device="PYTHON")["y"]
  assert y.dtype == kg.dtypes.float64 and y.tolist() == (x * x).tolist()
  m32 = kg.onnx.load(_float64_model().SerializeToString(), float64="float32")
  y32 = m32.run({"x": x}, device="PYTHON")["y"]
  assert y32.dtype == kg.dtypes.float32
  np.testing.assert_allclose(y32.numpy(), (x * x).astype(np.float32), rtol=1e-7)
  big = m32.run({"x": np.array([1e300, -1e300])}, device="PYTHON")["y"]
  assert big.tolist() == [math.inf, math.inf]


def test_unsupported_operator_names_op_node_and_opset():
  node = helper.make_node("StringNormalizer", ["x"], ["y"], name="norm")
  model = _model([node], [_vi("x", TensorProto.FLOAT, [3])], [_vi("y", TensorProto.FLOAT, [3])])
  with pytest.raises(kg.UnsupportedError,
                     match=r"'norm' \(StringNormalizer, opset 17\).*StringNormalizer"):
    kg.onnx.load(model.SerializeToString())


def test_other_domains_are_unsupported():
  node = helper.make_node("Foo", ["x"], ["y"], domain="com.example")
  model = _model([node], [_vi("x", TensorProto.FLOAT, [3])], [_vi("y", TensorProto.FLOAT, [3])])
  with pytest.raises(kg.UnsupportedError, match="com.example"):
    kg.onnx.load(model.SerializeToString())


def test_dangling_name_is_a_model_error():
  model = _model([helper.make_node("Relu", ["nowhere"], ["y"])],
                 [_vi("x", TensorProto.FLOAT, [3])], [_vi("y", TensorProto.FLOAT, [3])])
  with pytest.raises(kg.ModelError, match="'nowhere'.*dangling"):
    kg.onnx.load(model.SerializeToString())


def test_cycle_is_a_model_error():
  nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])]
  model = _model(nodes, [_vi("x", TensorProto.FLOAT, [3])], [_vi("b", TensorProto.FLOAT, [3])])
  with pytest.raises(kg.ModelError, match="cycle"):
    kg.onnx.load(model.SerializeToString())


def test_nodes_out_of_order_are_sorted():
  nodes = [helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Neg", ["x"], ["a"])]
  model = _model(nodes, [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, [2])])
  y = kg.onnx.load(model.SerializeToString()).run({"x": np.array([1.0, -2.0], np.float32)},
                                                  device="PYTHON")["y"]
  assert y.tolist() == [0.0, 2.0]


def test_wrong_attribute_type_is_a_model_error():
  node = helper.make_node("Softmax", ["x"], ["y"], axis=1.5)
  model = _model([node], [_vi("x", TensorProto.FLOAT, [2, 2])],
                 [_vi("y", TensorProto.FLOAT, [2, 2])])
  m = kg.onnx.load(model.SerializeToString())
  with pytest.raises(kg.ModelError, match="'axis'.*FLOAT.*INT"):
    m.run({"x": np.zeros((2, 2), np.float32)}, device="PYTHON")


def test_missing_and_unknown_inputs_are_model_errors():
  m = kg.onnx.load(_dynamic_reshape_model().SerializeToString())
  with pytest.raises(kg.ModelError, match="missing inputs"):
    m.run({}, device="PYTHON")
  with pytest.raises(kg.ModelError, match="no model input named"):
    m.run({"x": np.zeros((1, 3, 4), np.float32), "z": 1}, device="PYTHON")
  with pytest.raises(kg.ShapeError, match="declares"):
    m.run({"x": np.zeros((1, 3, 5), np.float32)}, device="PYTHON")


def test_old_opsets_are_refused_with_the_converter_named():
  model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", TensorProto.FLOAT, [1])],
                 [_vi("y", TensorProto.FLOAT, [1])], opset=6)
  with pytest.raises(kg.UnsupportedError, match="version_converter"):
    kg.onnx.load(model.SerializeToString())


def test_a_constant_used_on_the_device_and_then_folded_stays_on_the_host():
  """Regression: a static value first uploaded for a device op, then read by a folded node,
  was taken from the device (a DeviceError mixing WEBGPU and PYTHON tensors)."""
  try:
    kg.Device["WEBGPU"]
  except kg.KernelgenError as error:
    from tools import missing_tool
    missing_tool("device WEBGPU", f"pip install wgpu ({error})")
  c = numpy_helper.from_array(np.array([3, 2], np.int64), "c")
  nodes = [helper.make_node("Add", ["i", "c"], ["j"]),          # c uploaded to the device
           helper.make_node("Mul", ["c", "c"], ["cc"]),         # folded on the host
           helper.make_node("Div", ["cc", "c"], ["shape"]),
           helper.make_node("Reshape", ["x", "shape"], ["y"])]
  model = _model(nodes, [_vi("i", TensorProto.INT64, [2]), _vi("x", TensorProto.FLOAT, [6])],
                 [_vi("j", TensorProto.INT64, [2]), _vi("y", TensorProto.FLOAT, [3, 2])], [c])
  out = kg.onnx.load(model.SerializeToString()).run(
    {"i": np.array([1, 2], np.int64), "x": np.arange(6, dtype=np.float32)}, device="WEBGPU")
  assert out["j"].tolist() == [4, 4] and out["y"].shape == (3, 2)
