"""A transposed convolution whose kernel equals its stride (issue 42: PP-OCRv4 detection's head
upsamples 24 -> 24 -> 1 channels by ConvTranspose 2x2 stride 2) is a 1x1 convolution to
C_out * kh * kw channels whose taps move into each input pixel's output tile
(onnx/operators/conv_transpose.tile_taps): its kernel reduces over the input channels only, where
the zero-stuffed convolution read kh * kw taps per output, all but one zero. Values as
onnxruntime's on both sides of the rule (kernel == stride; a kernel larger than its stride, a
dilation, stride 1), with groups, pads, output_padding, bias and a 1-d input, on PYTHON and
WEBGPU."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

from tools import device_runtime

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(x_shape, w_shape, bias: bool, **attrs) -> bytes:
  rng = np.random.default_rng(3)
  inits = [numpy_helper.from_array(rng.standard_normal(w_shape).astype(np.float32), "w")]
  names = ["x", "w"]
  if bias:
    channels = w_shape[1] * attrs.get("group", 1)
    inits.append(numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b"))
    names.append("b")
  graph = helper.make_graph(
    [helper.make_node("ConvTranspose", names, ["y"], **attrs)], "convt",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _x(shape) -> np.ndarray:
  return np.random.default_rng(7).standard_normal(shape).astype(np.float32)


def _kernels(raw: bytes, x: np.ndarray) -> list:
  outs = kg.onnx.load(raw).run({"x": kg.Tensor(x, device="PYTHON")}, device="PYTHON",
                               replay=False)
  return kg.compile(list(outs.values()), target="wgsl", adapter="lavapipe")


# (x shape, w shape (C_in, C_out / group, *kernel), bias, attributes)
TAPS = [
  ((1, 6, 5, 7), (6, 4, 2, 2), True, {"strides": [2, 2]}),
  ((2, 4, 3, 4), (4, 3, 3, 2), False, {"strides": [3, 2]}),
  ((1, 6, 4, 4), (6, 2, 2, 2), True, {"strides": [2, 2], "group": 3}),
  ((1, 4, 4, 5), (4, 3, 2, 2), True, {"strides": [2, 2], "pads": [1, 0, 0, 1],
                                      "output_padding": [1, 1]}),
  ((1, 4, 3, 3), (4, 2, 2, 2), False, {"strides": [2, 2], "output_shape": [7, 5]}),
  ((1, 4, 6), (4, 3, 2), True, {"strides": [2]}),
]
GENERAL = [
  ((1, 6, 5, 7), (6, 4, 3, 3), True, {"strides": [2, 2]}),
  ((1, 4, 4, 4), (4, 3, 2, 2), False, {"strides": [2, 2], "dilations": [2, 2]}),
  ((1, 4, 4, 4), (4, 3, 2, 2), True, {"strides": [1, 1]}),
]


@pytest.mark.parametrize("case", TAPS)
def test_kernel_equal_to_stride_reduces_over_input_channels_only(case):
  """One kernel, its reduction the input channels per group (the name's part after __)."""
  x_shape, w_shape, bias, attrs = case
  kernels = _kernels(_model(x_shape, w_shape, bias, **attrs), _x(x_shape))
  reductions = [k.name.split("__")[1] for k in kernels if "__" in k.name]
  assert reductions == [f"{x_shape[1] // attrs.get('group', 1)}_1_1"], \
    [k.name for k in kernels]


@pytest.mark.parametrize("case", GENERAL)
def test_other_transposed_convs_keep_the_stuffed_window(case):
  x_shape, w_shape, bias, attrs = case
  kernels = _kernels(_model(x_shape, w_shape, bias, **attrs), _x(x_shape))
  kh, kw = w_shape[2:]
  assert any(k.name.endswith(f"__{x_shape[1]}_{kh}_{kw}") for k in kernels), \
    [k.name for k in kernels]


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("case", TAPS + GENERAL)
def test_values_as_onnxruntime(device, case):
  if device == "WEBGPU":
    device_runtime("WEBGPU")
  x_shape, w_shape, bias, attrs = case
  raw, x = _model(x_shape, w_shape, bias, **attrs), _x(x_shape)
  want = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  got = kg.onnx.load(raw).run({"x": kg.Tensor(x, device=device)}, device=device)["y"].numpy()
  assert got.shape == want.shape
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
