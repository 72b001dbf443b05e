"""A conv whose weights are held taps-last, [C][kh][kw][O] (an ONNX Conv's initializer on the CPU
adapters: onnx/operators/weights.py held_taps_last), read through the permuted OIHW view: its
register tile's rows are output channels, whose weights at one tap are then consecutive, and the
lowering reads 4 rows' weights as one vector load (lowering/regtile.py tile_accumulators).
Counted here, never timed (bench/conv_taps_ab.py times it on lavapipe): the one-off conv's
vector weight loads, and values against numpy on PYTHON and WEBGPU, held and OIHW weights, with
output channels that do and do not fill the tile's rows, strides, pads and dilation."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor

from tools import device_runtime, run_named


def _want(x, w, stride, pad, dilation):
  """numpy's correlation, in float64, tap by tap."""
  (sh, sw), (ph, pw), (dh, dw) = stride, pad, dilation
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
  _, _, kh, kw = w.shape
  oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
  ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
  out = 0
  for i in range(kh):
    for j in range(kw):
      win = xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
      out = out + np.einsum("nchw,oc->nohw", win, w[:, :, i, j])
  return out


def _held(w: np.ndarray, device: str = "PYTHON") -> Tensor:
  """OIHW weights as a view of their taps-last copy."""
  return Tensor(np.ascontiguousarray(w.transpose(1, 2, 3, 0))).to(device).permute(3, 0, 1, 2)


def _weight_reads(source: str) -> tuple[str, int]:
  """(the weights' vector read binding, how often the source indexes it): the conv's second input
  (its first, the input, may be read as words too: regtile.py ALIGNED_WINDOWS)."""
  names = [line.split("var<storage, read> ")[1].split(":")[0] for line in source.splitlines()
           if "var<storage, read> b2_" in line and "vec4<f32>" in line]
  assert len(names) == 1, names
  return names[0], source.count(f"{names[0]}[")


def test_one_off_conv_reads_held_weights_as_vectors():
  """64 -> 64 3x3 at 56x56, a one-off run on lavapipe (8x8 tile, the window's 3 columns a
  trip): 8 rows x 3 taps of weights in 6 vector loads a trip (were 24 scalar loads)."""
  x = Tensor(np.zeros((1, 64, 56, 56), np.float32), device="PYTHON")
  w = np.zeros((64, 64, 3, 3), np.float32)
  (kernel,) = kg.compile(x.conv2d(_held(w), padding=1), target="wgsl", adapter="lavapipe",
                         runs=1)
  assert _weight_reads(kernel.source)[1] == 6


# (in channels, out channels, side, stride, pad, dilation): on WEBGPU (lavapipe's options: the
# register tiles) and on PYTHON at a quarter of the side
CASES = [
  (16, 12, 32, (1, 1), (1, 1), (1, 1)),     # 12 outputs in 8-row tiles: clamped rows
  (16, 16, 40, (2, 2), (1, 1), (1, 1)),     # stride 2
  (8, 8, 32, (1, 1), (2, 2), (2, 2)),       # dilation 2
  (5, 6, 24, (2, 1), (0, 1), (1, 1)),       # 6 outputs, 5 inputs: no 4 divides them
]


@pytest.mark.parametrize("cin,cout,side,stride,pad,dilation", CASES)
@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_held_weights_conv_matches_numpy(cin, cout, side, stride, pad, dilation, device):
  if device == "PYTHON":                   # the interpreter is slow
    side //= 4
  else:
    device_runtime(device)
  rng = np.random.default_rng(cin * cout + side)
  x = rng.standard_normal((1, cin, side, side)).astype(np.float32)
  w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
  want = _want(x, w, stride, pad, dilation)
  for weights in (_held(w, device), Tensor(w).to(device)):
    got = Tensor(x).to(device).conv2d(weights, stride=stride, padding=pad,
                                      dilation=dilation).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("cout", [16, 24])
def test_lavapipe_one_off_kernel_matches_numpy(cout):
  """The one-off kernel lavapipe takes, its weights' rows read as vectors, run here."""
  runtime = device_runtime("WEBGPU")
  rng = np.random.default_rng(cout)
  x = rng.standard_normal((1, 16, 20, 20)).astype(np.float32)
  w = rng.standard_normal((cout, 16, 3, 3)).astype(np.float32)
  held = np.ascontiguousarray(w.transpose(1, 2, 3, 0))
  (kernel,) = kg.compile(Tensor(x, device="PYTHON").conv2d(_held(w), padding=1), target="wgsl",
                         adapter="lavapipe", runs=1)
  name, _ = _weight_reads(kernel.source)
  data = {spec.name: held if spec.size == held.size else x for spec in kernel.buffers
          if spec.name != kernel.buffers[0].name}
  got = run_named(runtime, kernel, data, {}, out_fill=np.nan)
  want = _want(x, w, (1, 1), (1, 1), (1, 1))
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4,
                             atol=1e-4 * np.abs(want).max())
