"""Silero VAD's front end in fewer dispatches (issue 42): its STFT magnitude, sqrt(re ** 2 + im
** 2) with the exponent an ONNX Constant 2.0, is x * x (onnx Pow: a whole exponent the program
fixes is repeated squaring, exact, no exp2 / log2), and, that cheap and the first conv a tiny
kernel (graph/schedule.py REREAD_SMALL), the conv computes it from the STFT's output itself: the
magnitude has no kernel of its own. A model of Silero's shape (a 576-sample chunk padded to 640,
258 filters of 256 taps at stride 128, 129 bins by 4 frames, a 3-tap conv to 128 channels, relu)
compiles to 2 kernels where it took 3; its values match onnxruntime's on PYTHON and WEBGPU. With
the silero-vad wheel cached (bench/pypi_models.py fetches it), Silero's own models too: 9 kernels
a call where they took 10 (8 since the LSTM's c and h share a kernel, graph/join.py), both
outputs (the probability and the LSTM state) as onnxruntime's."""
from __future__ import annotations

import zipfile

import numpy as np
import pytest

import kernelgen as kg

from tools import REPO_ROOT, device_runtime, missing_tool

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

WHEEL = REPO_ROOT / ".tools" / "pypi-models" / "silero_vad-6.2.3-py3-none-any.whl"


def _front(exponent: float = 2.0) -> bytes:
  """x (1, 576) -> reflect-pad 32 each side -> STFT conv (258, 1, 256) stride 128 -> re, im
  slices of 129 -> Pow(., exponent) each -> Add -> Sqrt -> Conv (128, 129, 3) pad 1 -> Relu."""
  rng = np.random.default_rng(5)
  n = helper.make_node
  inits = [numpy_helper.from_array(a, name) for name, a in {
    "pads": np.array([0, 32, 0, 32], np.int64), "axis1": np.array([1], np.int64),
    "basis": (rng.standard_normal((258, 1, 256)) * 0.1).astype(np.float32),
    "lo": np.array([0], np.int64), "mid": np.array([129], np.int64),
    "hi": np.array([258], np.int64), "two": np.array(exponent, np.float32),
    "w": (rng.standard_normal((128, 129, 3)) * 0.1).astype(np.float32),
    "b": (rng.standard_normal(128) * 0.1).astype(np.float32)}.items()]
  nodes = [n("Pad", ["x", "pads"], ["padded"], mode="reflect"),
           n("Unsqueeze", ["padded", "axis1"], ["signal"]),
           n("Conv", ["signal", "basis"], ["spec"], strides=[128]),
           n("Slice", ["spec", "lo", "mid", "axis1"], ["re"]),
           n("Slice", ["spec", "mid", "hi", "axis1"], ["im"]),
           n("Pow", ["re", "two"], ["re2"]), n("Pow", ["im", "two"], ["im2"]),
           n("Add", ["re2", "im2"], ["power"]), n("Sqrt", ["power"], ["magnitude"]),
           n("Conv", ["magnitude", "w", "b"], ["conv"], pads=[1, 1]),
           n("Relu", ["conv"], ["y"])]
  graph = helper.make_graph(
    nodes, "silero_front", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 576])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _x() -> np.ndarray:
  return (np.random.default_rng(0).standard_normal((1, 576)) * 0.1).astype(np.float32)


def _kernels(raw: bytes, feeds: dict, adapter: str) -> list:
  """The WGSL kernels of one call for `adapter` (as kg.export builds a bundle's)."""
  outs = kg.onnx.load(raw).run({k: kg.Tensor(v, device="PYTHON") for k, v in feeds.items()},
                               device="PYTHON", replay=False)
  return kg.compile(list(outs.values()), target="wgsl", adapter=adapter)


@pytest.mark.parametrize("adapter", ["swiftshader", "lavapipe", "discrete"])
def test_the_magnitude_has_no_kernel_of_its_own(adapter):
  kernels = _kernels(_front(), {"x": _x()}, adapter)
  assert len(kernels) == 2, [k.name for k in kernels]      # the STFT; the conv and its relu
  assert "sqrt(" in kernels[1].source
  assert not any(f in k.source for k in kernels for f in ("exp2(", "log2("))


def test_a_general_exponent_keeps_its_own_kernel():
  """2.5 is no whole number: the general pow (exp2 of log2), too dear to recompute per read."""
  kernels = _kernels(_front(2.5), {"x": _x()}, "swiftshader")
  assert len(kernels) == 3 and "exp2(" in kernels[1].source


@pytest.mark.parametrize("exponent", [2.0, 2.5])
def test_values_as_onnxruntime(exponent):
  """On WEBGPU (PYTHON runs the 460K multiply-adds for ~40 s; its Pow: below)."""
  device_runtime("WEBGPU")
  device = "WEBGPU"
  raw, x = _front(exponent), _x()
  want = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  got = kg.onnx.load(raw).run({"x": kg.Tensor(x, device=device)}, device=device)["y"].numpy()
  assert got.shape == want.shape == (1, 128, 4)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _pow_model(shape: list, exponent) -> bytes:
  e = numpy_helper.from_array(np.asarray(exponent, np.float32), "e")
  graph = helper.make_graph(
    [helper.make_node("Pow", ["x", "e"], ["y"])], "pow",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [e])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


X_POW = np.array([-3.0, -0.0, 0.0, 0.5, 1.7, np.inf, -np.inf, np.nan, 1e-30, 3e19], np.float32)


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("exponent,shape", [
  (2.0, ()), (3.0, ()), (0.0, ()), (1.0, ()), (5.0, ()),
  (2.0, (1, 1))])       # an exponent of more axes: the result takes them (broadcast)
def test_pow_by_a_whole_constant_as_onnxruntime(device, exponent, shape):
  """Whole exponents in [0, 64) are products of x (x ** 0 is 1, NaN's too): as onnxruntime's,
  NaN, infinities and signed zeros included (3e19 ** 2: inf), to the bit up to x * x (a
  product of more rounds more than once: 5.0 is within an ulp)."""
  if device == "WEBGPU":
    device_runtime("WEBGPU")
  raw = _pow_model([10], np.full(shape, exponent))
  want = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(None, {"x": X_POW})[0]
  got = kg.onnx.load(raw).run({"x": kg.Tensor(X_POW, device=device)}, device=device)["y"]
  assert got.shape == want.shape
  if exponent <= 2:
    np.testing.assert_array_equal(got.numpy(), want)
  np.testing.assert_allclose(got.numpy(), want, rtol=2 ** -22, atol=0)
  assert np.array_equal(np.signbit(got.numpy()), np.signbit(want))
  kernels = _kernels(raw, {"x": X_POW}, "swiftshader")
  assert len(kernels) == 1 and not any(f in k.source for k in kernels for f in ("exp2(", "log2("))


def _silero(name: str) -> tuple:
  """(onnx bytes, feeds: the first chunk, state zeros, sr baked) of a cached Silero model."""
  if not WHEEL.exists():
    missing_tool("the silero-vad wheel", "python bench/pypi_models.py --models silero")
  with zipfile.ZipFile(WHEEL) as z:
    raw = z.read(f"silero_vad/data/{name}")
  x = (np.random.default_rng(0).standard_normal((1, 512)) * 0.1).astype(np.float32)
  return raw, {"input": x, "state": np.zeros((2, 1, 128), np.float32),
               "sr": np.array(16000, np.int64)}


SILERO = ["silero_vad_16k_op15.onnx", "silero_vad.onnx"]


@pytest.mark.parametrize("adapter", ["swiftshader", "lavapipe"])
@pytest.mark.parametrize("name", SILERO)
def test_silero_kernels_per_call(name, adapter):
  """STFT, 4 convs (the first with the magnitude), the LSTM's c and h (one kernel storing both:
  graph/join.py; 2 before), the head, the state."""
  raw, feeds = _silero(name)
  assert len(_kernels(raw, feeds, adapter)) == 8


@pytest.mark.parametrize("name", SILERO)
def test_silero_values_as_onnxruntime(name):
  device_runtime("WEBGPU")
  raw, feeds = _silero(name)
  session = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
  want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
  got = kg.onnx.load(raw).run({k: kg.Tensor(v, device="WEBGPU") for k, v in feeds.items()},
                              device="WEBGPU")
  for out in ("output", "stateN"):
    np.testing.assert_allclose(got[out].numpy(), want[out], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,replays", [("silero_vad_16k_op15.onnx", 3), ("silero_vad.onnx", 2)])
def test_silero_streams_by_replay_with_sr_a_python_tensor(name, replays):
  """Chunk after chunk, the state fed back and sr a kg.Tensor on PYTHON (the page's worker): the
  calls after the first few are replays (the 16k-only export from its third call; silero_vad.onnx,
  whose If on sr == 16000 keys the replay on sr's value, from its fourth: it ran eagerly every
  call, ~40 ms natively on lavapipe, reading the Equal back from the device); every chunk's
  outputs as onnxruntime's."""
  device_runtime("WEBGPU")
  raw, feeds = _silero(name)
  session = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
  model = kg.onnx.load(raw)
  rng = np.random.default_rng(1)
  state, want_state = kg.Tensor(feeds["state"], device="WEBGPU"), feeds["state"]
  sr = kg.Tensor(feeds["sr"], device="PYTHON")
  for _ in range(5):
    x = (rng.standard_normal((1, 512)) * 0.1).astype(np.float32)
    got = model.run({"input": kg.Tensor(x, device="WEBGPU"), "state": state, "sr": sr},
                    device="WEBGPU")
    want = session.run(None, {"input": x, "state": want_state, "sr": feeds["sr"]})
    np.testing.assert_allclose(got["output"].numpy(), want[0], rtol=1e-4, atol=1e-5)
    state, want_state = got["stateN"].realize(), want[1]
    np.testing.assert_allclose(state.numpy(), want_state, rtol=1e-4, atol=1e-5)
  assert model.replayer.replays == replays
