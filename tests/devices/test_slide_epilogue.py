"""A slid depthwise conv's epilogue (lowering/slide.py, hoist_row_free_loads; issue 42): the
per-channel tensors read after the sum (a bias, a batch norm's mean, variance, scale and shift, as
PP-OCRv4 det's depthwise convs have them) are read once per thread before the strip's loop, not
once per trip; what moves with the row (a residual added after the norm) stays in the loop, gated
by its row.

Values against numpy on every device with slide on (forced strips: ragged last rows and columns)
and off, strides 1 and 2, padding 0-2, dilation 2, a grouped conv with 2 channels per group; and
the WGSL's loop reads the window and the residual only (on main it read the four norm tensors
in every trip too). Outputs of 10 and 20 columns take C = 10 columns per thread (whole_blocks)
where C = 8 left a ragged last block."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.graph.schedule import schedule
from kernelgen.lowering import optimize as opt
from kernelgen.render.targets import WGSL

from tools import ALL_DEVICES, forced_options, tint_validate, wgsl_validate

EPS = 1e-5


def _conv_np(x, w, stride, padding, dilation, groups):
  """conv2d in float64 numpy, tap by tap (no bias)."""
  n, c, h, wd = x.shape
  o, cg, kh, kw = w.shape
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding,) * 2, (padding,) * 2))
  oh = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
  ow = (wd + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
  out, og = np.zeros((n, o, oh, ow)), o // groups
  for i in range(kh):
    for j in range(kw):
      r, q = i * dilation, j * dilation
      patch = xp[:, :, r:r + stride * (oh - 1) + 1:stride, q:q + stride * (ow - 1) + 1:stride]
      for g in range(groups):
        out[:, g * og:(g + 1) * og] += np.einsum(
          "nchw,oc->nohw", patch[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og, :, i, j])
  return out


def _norm(y, mean, var, scale, shift):
  """A batch norm (inference) and hard-swish, on Tensors or numpy arrays alike."""
  def per_channel(t):
    return t.reshape(1, -1, 1, 1)
  z = (y - per_channel(mean)) / (per_channel(var) + EPS) ** 0.5 * per_channel(scale) + \
    per_channel(shift)
  return z * (z + 3).clip(0, 6) / 6


# (x shape, k, stride, padding, dilation, channels per group, slide)
CASES = [
  ((1, 4, 11, 13), 3, 1, 1, 1, 1, (4, 4)),
  ((1, 3, 13, 11), 5, 1, 2, 1, 1, (3, 8)),
  ((2, 3, 12, 14), 3, 2, 1, 1, 1, (4, 4)),
  ((1, 2, 15, 14), 5, 2, 2, 1, 1, (2, 3)),
  ((1, 3, 14, 13), 3, 1, 2, 2, 1, (5, 4)),
  ((1, 4, 10, 13), 3, 1, 0, 1, 2, (4, 4)),
  ((1, 4, 18, 20), 5, 1, 2, 1, 1, True),
]


def _case(shape, k, cg, seed):
  rng = np.random.default_rng(seed)
  c = shape[1]
  x = rng.standard_normal(shape).astype(np.float32)
  w = rng.standard_normal((c, cg, k, k)).astype(np.float32)
  mean, scale, shift = (rng.standard_normal(c).astype(np.float32) for _ in range(3))
  var = rng.random(c).astype(np.float32) + 0.5
  return x, w, (mean, var, scale, shift)


@pytest.mark.parametrize("device", ALL_DEVICES)
@pytest.mark.parametrize("slid", [True, False])
@pytest.mark.parametrize("shape,k,stride,padding,dilation,cg,forced", CASES)
def test_slid_convs_with_a_norm_and_a_residual_match_numpy(device, slid, shape, k, stride,
                                                           padding, dilation, cg, forced,
                                                           monkeypatch):
  x, w, bn = _case(shape, k, cg, seed=sum(shape) + k + stride)
  groups = shape[1] // cg
  want = _norm(_conv_np(x, w, stride, padding, dilation, groups), *bn)
  res = np.random.default_rng(7).standard_normal(want.shape).astype(np.float32)
  dev = forced_options(device, monkeypatch, slide=forced if slid else False)
  y = Tensor(x).to(dev).conv2d(Tensor(w).to(dev), stride=stride, padding=padding,
                               dilation=dilation, groups=groups)
  got = (_norm(y, *(Tensor(t).to(dev) for t in bn)) + Tensor(res).to(dev)).numpy()
  np.testing.assert_allclose(got, want + res, rtol=1e-4, atol=1e-4)


def _loop_reads(source: str) -> set:
  """The input buffers (b1, b2, ...) the WGSL reads inside its first loop."""
  body = source[source.index("for ("):]
  return set(re.findall(r"\b(b[1-9]\d*)_in\d+\[", body))


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_the_norm_tensors_are_read_before_the_loop(adapter):
  """PP-OCRv4 det's depthwise 3x3 with its batch norm (four per-channel tensors) and a residual:
  inside the loop only the window and the residual are read (the weights, the norm's four
  tensors before it)."""
  E = lambda *s: Tensor.empty(*s, device="PYTHON")   # noqa: E731
  y = E(1, 16, 160, 160).conv2d(E(16, 1, 3, 3), padding=1, groups=16)
  y = _norm(y, E(16), E(16), E(16), E(16)) + E(1, 16, 160, 160)
  kernels = kg.compile([y], target="wgsl", adapter=adapter)   # (1 / sqrt(var + eps): its own)
  (kernel,) = [k for k in kernels if "for (" in k.source]         # the slid conv's loop
  inputs = re.findall(r"var<storage, read> (b\d+)_in\d+: array<([^;]+)>;", kernel.source)
  per_channel = {b for b, _ in inputs} - _loop_reads(kernel.source)
  assert len(inputs) == 7 and len(per_channel) == 5, (inputs, _loop_reads(kernel.source))
  wgsl_validate(kernel.source, kernel.launch.entry_point)
  tint_validate(kernel.source, kernel.launch.entry_point)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
@pytest.mark.parametrize("c,side,k,stride,cols", [
  (384, 10, 5, 1, 10),    # C = 8 over 10 columns: 6 idle in the last block
  (192, 20, 5, 1, 10),    # 4 idle of 20
  (96, 40, 3, 2, 10),     # 3x3 stride 2 to 20 columns (16 does not divide them)
  (96, 72, 3, 2, 8),      # 36 columns: 4 idle, within slide.SLIDE_RAGGED: C = 8 kept
  (96, 80, 5, 1, 8)])     # 80 columns: whole blocks of 8 already
def test_ragged_column_blocks_take_columns_that_divide_the_row(adapter, c, side, k, stride, cols):
  """PP-OCRv4 det's slid convs over 10 and 20 output columns: C = 10 (slide.whole_blocks), not
  C = 8 with a ragged last block."""
  E = lambda *s: Tensor.empty(*s, device="PYTHON")   # noqa: E731
  y = E(1, c, side, side).conv2d(E(c, 1, k, k), E(c), stride=stride, padding=k // 2, groups=c)
  (item,) = schedule([y.node])
  assert opt.optimize(item, WGSL, {"adapter": adapter}).slide[1] == cols
