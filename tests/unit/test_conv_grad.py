"""conv2d's backward rule (tensor/ops/conv.py): the input gradient as one stride-1 correlation per
stride phase, the weight gradient as split partial sums, the bias gradient as a sum, against a
float64 numpy oracle written tap by tap here, on PYTHON and PTXSIM (float64) and WEBGPU (float32);
plus the kernels the rule makes and the split's thresholds (WGRAD_CHUNK, WGRAD_PARTIALS)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.tensor.ops.conv import WGRAD_CHUNK, WGRAD_PARTIALS, wgrad_split

from tools import device_runtime

F64, F32 = kg.dtypes.float64, kg.dtypes.float32


def _pair(v):
  return (v, v) if isinstance(v, int) else tuple(v)


def np_conv_grads(x, w, g, stride, padding, dilation, groups):
  """(dx, dw, db) of torch.conv2d's semantics, tap by tap in float64."""
  (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
  n, c, h, wd = x.shape
  o, cg, kh, kw = w.shape
  og, (oh, ow) = o // groups, g.shape[2:]
  xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
  dxp, dwt = np.zeros_like(xp), np.zeros_like(w)
  for grp in range(groups):
    ci, oi = slice(grp * cg, (grp + 1) * cg), slice(grp * og, (grp + 1) * og)
    for i in range(kh):
      for j in range(kw):
        rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
        cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
        dxp[:, ci, rows, cols] += np.einsum("nohw,oc->nchw", g[:, oi], w[oi, :, i, j])
        dwt[oi, :, i, j] = np.einsum("nohw,nchw->oc", g[:, oi], xp[:, ci, rows, cols])
  return dxp[:, :, ph:ph + h, pw:pw + wd], dwt, g.sum((0, 2, 3))


# (x shape, w shape, stride, padding, dilation, groups)
CASES = {
  "stride 1 (one phase)": ((2, 3, 7, 6), (4, 3, 3, 3), 1, 1, 1, 1),
  "stride 2, odd rows": ((2, 2, 7, 8), (3, 2, 3, 2), 2, 1, 1, 1),
  "stride (2, 3), dilation (2, 1)": ((1, 2, 9, 10), (2, 2, 3, 3), (2, 3), (2, 0), (2, 1), 1),
  "1x1, padding beyond the taps": ((1, 2, 5, 5), (3, 2, 1, 1), 2, 1, 1, 1),
  "stride 3 > kernel 2 (a phase with no tap)": ((1, 2, 8, 8), (2, 2, 2, 2), 3, 0, 1, 1),
  "groups 2": ((2, 4, 6, 7), (6, 2, 2, 3), (1, 2), (1, 0), 1, 2),
  "dilation 3, stride 2": ((1, 1, 11, 11), (2, 1, 3, 3), 2, 3, 3, 1),
  "rows split (28x28 outputs)": ((2, 1, 28, 28), (3, 1, 3, 3), 1, 1, 1, 1),
}
PTXSIM_CASES = ["stride 2, odd rows", "groups 2", "stride 3 > kernel 2 (a phase with no tap)"]
WEBGPU_CASES = list(CASES)


def check(name, device, dtype, rtol):
  xs, ws, stride, padding, dilation, groups = CASES[name]
  rng = np.random.default_rng(len(name))
  xn, wn = rng.standard_normal(xs), rng.standard_normal(ws)
  bn = rng.standard_normal(ws[0])
  x, w, b = (kg.Tensor(a, dtype=dtype, device=device, requires_grad=True) for a in (xn, wn, bn))
  out = x.conv2d(w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
  gn = rng.standard_normal(out.shape)
  (out * kg.Tensor(gn, dtype=dtype, device=device)).sum().backward()
  want = np_conv_grads(xn, wn, gn, stride, padding, dilation, groups)
  for got, ref, what in zip((x.grad, w.grad, b.grad), want, "xwb"):
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    err = np.abs(got.numpy() - ref).max() / np.abs(ref).max()
    assert err <= rtol, (name, what, err)


@pytest.mark.parametrize("name", list(CASES))
def test_conv_gradients_python(name):
  check(name, "PYTHON", F64, 1e-12)


@pytest.mark.parametrize("name", PTXSIM_CASES)
def test_conv_gradients_ptxsim(name):
  check(name, "PTXSIM", F64, 1e-12)


@pytest.mark.parametrize("name", WEBGPU_CASES)
def test_conv_gradients_webgpu(name):
  device_runtime("WEBGPU")
  check(name, "WEBGPU", F32, 1e-5)


def _names(tensor):
  return [k.name for k in kg.compile([tensor], target="wgsl")]


@pytest.mark.parametrize("stride, phases", [(1, 1), (2, 4), ((3, 2), 6)])
def test_input_gradient_is_one_reduction_per_phase(stride, phases):
  """stride sh x sw: sh * sw reductions over (out channels, the phase's taps), each a stride-1
  correlation of the output gradient (computed once, E_), then one interleaving kernel."""
  x = kg.Tensor(np.ones((2, 3, 12, 12), np.float32), device="PYTHON", requires_grad=True)
  w = kg.Tensor(np.ones((4, 3, 3, 3), np.float32), device="PYTHON")
  (x.conv2d(w, stride=stride, padding=1) * 2).sum().backward()
  names = _names(x.grad)
  reductions = [n for n in names if n.startswith("r_2_")]
  assert len(reductions) == phases, names
  assert all("__4_" in n for n in reductions), names                # over the 4 out channels
  assert len(names) == phases + 1 + (phases > 1), names            # + g once (+ interleave)


@pytest.mark.parametrize("side, partial", [(16, "r_2_1_1_8_1_1_1_1_3_3__1_16_16"),
                                           (20, "r_2_1_1_8_1_2_1_1_3_3__1_10_20")])
def test_weight_gradient_partials_split_rows_only_past_the_chunk(side, partial):
  """Partial sums per batch element; output rows split into blocks only when a batch element's
  outputs exceed WGRAD_CHUNK (16x16 = 256: one block; 20x20: two of 10 rows), then one small
  sum of the partials, a kernel of its own."""
  x = kg.Tensor(np.ones((2, 1, side, side), np.float32), device="PYTHON")
  w = kg.Tensor(np.ones((8, 1, 3, 3), np.float32), device="PYTHON", requires_grad=True)
  (x.conv2d(w, padding=1) * 2).sum().backward()
  names = _names(w.grad)
  assert partial in names, names
  assert names[-1].startswith("r_8_1_3_3__2"), names


def test_wgrad_split_thresholds():
  assert WGRAD_CHUNK == 256 and WGRAD_PARTIALS == 1 << 20
  assert wgrad_split(32, 14, 14, 16 * 8 * 9) == (32, 1)        # 196 outputs: per batch element
  assert wgrad_split(32, 16, 16, 72) == (32, 1)                # 256: still one block
  assert wgrad_split(32, 17, 16, 72) == (32, 17)               # 272: 17 blocks of 1 row
  assert wgrad_split(32, 28, 28, 72) == (32, 4)                # 784: 4 blocks of 7 rows (196)
  assert wgrad_split(16, 28, 28, 1 << 16) == (16, 1)           # 16 x 65536 partials = the cap
  assert wgrad_split(64, 8, 8, 1 << 16) == (16, 1)             # 64 x 65536: 16 chunks of 4
  assert wgrad_split(4, 8, 8, (1 << 20) + 1) == (1, 1)         # too many weights: no split
