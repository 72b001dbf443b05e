"""ONNX Resize in a nearest mode picks one input per output (onnx/operators/resize.py picks):
an integer upscale (PP-OCRv4 det's FPN: nearest, asymmetric, floor, 2x / 4x / 8x) is a view
repeating each input, fused into its reader, where it was a matrix product per axis (a
reduction kernel over 96 x 80 x 80 x 40 in det, its third-slowest kernel; issue 42). Being a
pick and not a sum of products, an inf in the input reaches only the outputs that copy it, as in
onnxruntime (the products gave NaN to every output of its row: 0 * inf). Modes that mix inputs
(linear) keep the products."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

from tools import device_runtime

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _resize(scales: list, mode: str = "nearest", coord: str = "asymmetric",
            nearest: str = "floor", dtype=TensorProto.FLOAT, add: bool = False) -> bytes:
  """x (1, 2, 3, 4) -> Resize(scales) [-> + y, y shaped as the output: the FPN's sum]."""
  inits = [numpy_helper.from_array(np.array(scales, np.float32), "scales"),
           numpy_helper.from_array(np.zeros(0, np.float32), "roi")]
  nodes = [helper.make_node("Resize", ["x", "roi", "scales"], ["r" if add else "out"],
                            mode=mode, coordinate_transformation_mode=coord,
                            nearest_mode=nearest)]
  inputs = [helper.make_tensor_value_info("x", dtype, [1, 2, 3, 4])]
  if add:
    nodes.append(helper.make_node("Add", ["r", "y"], ["out"]))
    inputs.append(helper.make_tensor_value_info("y", dtype, None))
  graph = helper.make_graph(nodes, "resize", inputs,
                            [helper.make_tensor_value_info("out", dtype, None)], inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _x(dtype=np.float32) -> np.ndarray:
  x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4) - 7.0
  x[0, 0, 1, 2], x[0, 1, 2, 0] = np.inf, -np.inf
  return x.astype(dtype)


CASES = [([1, 1, 2, 2], "asymmetric", "floor"),             # det's FPN
         ([1, 1, 8, 4], "asymmetric", "floor"),
         ([1, 1, 3, 0.5], "half_pixel", "round_prefer_floor"),
         ([1, 1, 1.5, 2.5], "asymmetric", "ceil")]


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("scales,coord,nearest", CASES)
def test_nearest_values_as_onnxruntime_infinities_included(device, scales, coord, nearest):
  if device == "WEBGPU":
    device_runtime("WEBGPU")
  raw, x = _resize(scales, coord=coord, nearest=nearest), _x()
  want = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  got = kg.onnx.load(raw).run({"x": kg.Tensor(x, device=device)}, device=device)["out"].numpy()
  assert got.shape == want.shape
  np.testing.assert_array_equal(got, want)       # copies, NaN-free: to the bit


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_nearest_of_integers_as_onnxruntime(device):
  """int32 past float32's 2^24: a pick copies the value (the products ran in float32)."""
  if device == "WEBGPU":
    device_runtime("WEBGPU")
  raw = _resize([1, 1, 2, 2], dtype=TensorProto.INT32)
  x = (np.arange(24, dtype=np.int32).reshape(1, 2, 3, 4) + (1 << 24) + 1)
  want = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  got = kg.onnx.load(raw).run({"x": kg.Tensor(x, device=device)}, device=device)["out"].numpy()
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("adapter", ["swiftshader", "lavapipe", "discrete"])
def test_an_integer_upscale_and_its_sum_are_one_elementwise_kernel(adapter):
  """det's FPN step: Resize(x) 2x + y compiles to one kernel with no reduction in it."""
  raw = _resize([1, 1, 2, 2], add=True)
  feeds = {"x": kg.Tensor(_x(), device="PYTHON"),
           "y": kg.Tensor(np.ones((1, 2, 6, 8), np.float32), device="PYTHON")}
  outs = kg.onnx.load(raw).run(feeds, device="PYTHON", replay=False)
  kernels = kg.compile(list(outs.values()), target="wgsl", adapter=adapter)
  assert len(kernels) == 1 and kernels[0].name.startswith("E_"), [k.name for k in kernels]


def test_linear_keeps_its_products():
  """Linear rows mix two inputs: still the matrix product (a reduction kernel), values as
  onnxruntime's for finite inputs."""
  raw = _resize([1, 1, 2, 2], mode="linear")
  x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4) * 0.5
  want = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  outs = kg.onnx.load(raw).run({"x": kg.Tensor(x, device="PYTHON")}, device="PYTHON",
                               replay=False)
  kernels = kg.compile(list(outs.values()), target="wgsl", adapter="swiftshader")
  assert any(k.name.startswith("r_") for k in kernels), [k.name for k in kernels]
  np.testing.assert_allclose(outs["out"].numpy(), want, rtol=1e-6, atol=1e-6)
