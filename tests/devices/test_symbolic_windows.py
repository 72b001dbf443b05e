"""Symbolic dims (issue 34) with strided reads and products of dims: slices with a step, conv and
pooling windows along a symbolic length, reductions over two symbolic axes (a count n * m that
is a run-time value), on PYTHON, PTXSIM and WEBGPU at both ends of each range and at odd values,
one compiled kernel per kernel for every value; and the cases that no size can hold (the product
n * m as a size) as typed errors that name the dim and say what to do (a slice's step or a
window's stride over any symbolic length, a floored size: test_symbolic_floored.py)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from ops_util import check_compiles
from test_symbolic_dims import close, runs_once

HI = 8
VALUES = (1, 5, HI)            # h's range ends and an odd value
RNG = np.random.default_rng(34)
DATA = RNG.standard_normal((3 * HI + 2, 4)).astype(np.float32)
SIGNAL = RNG.standard_normal((2, 3, 2 * HI + 2)).astype(np.float32)
WEIGHT = RNG.standard_normal((4, 3, 3)).astype(np.float32)
BIAS = RNG.standard_normal(4).astype(np.float32)


def _sym(a, *shape):
  return kg.Tensor(a).symbolic(*shape)


def conv_np(x, w, b, stride=1, pad=0):
  """conv1d in numpy (float64): (N, C, L) with (O, C, K)."""
  x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad)))
  k = w.shape[2]
  cols = [np.einsum("ncl,ocl->no", x[:, :, i:i + k], w) for i in range(0, x.shape[2] - k + 1,
                                                                        stride)]
  return np.stack(cols, -1) + b[None, :, None]


def pool_np(x, k, fn):
  """Pooling with windows of k, k apart, over the last axis."""
  return np.stack([fn(x[..., i:i + k], axis=-1) for i in range(0, x.shape[-1] - k + 1, k)], -1)


# ---- strided slices -----------------------------------------------------------------------------

def test_strided_slices_along_a_symbolic_axis(device):
  h, pos = kg.Dim("h", 1, HI), kg.Dim("pos", 0, HI)

  def build(v):
    x = _sym(DATA[:2 * v + 1], 2 * h.bind(v) + 1, 4)      # 2h + 1 rows: h + 1 even, h odd
    t = _sym(DATA[:3 * v].T.copy(), 4, 3 * h.bind(v))     # a step of 3 along the last axis
    p = pos.bind(v - 1)
    return (x[::2].sum(0) + x[1::2].max(0) * 2 + t[:, 2::3].sum(1) * 3 +
            kg.Tensor(DATA)[p:p + 2 * h.bind(v):2].sum(0) * 4)

  def want(v):
    x, t = DATA[:2 * v + 1], DATA[:3 * v].T
    return (x[::2].sum(0) + x[1::2].max(0) * 2 + t[:, 2::3].sum(1) * 3 +
            DATA[v - 1:3 * v - 1:2].sum(0) * 4)
  runs_once(build, lambda v, got: close(got, want(v), 1e-4), VALUES)


def test_a_strided_slice_keeps_its_symbolic_count():
  h = kg.Dim("h", 1, HI)
  x = _sym(DATA[:7], 2 * h.bind(3) + 1, 4)
  assert x[::2].node.logical[0] == h + 1 and x[1::2].node.logical[0] == h
  assert x[1::2].shape == (HI, 4)


# ---- conv and pooling windows ---------------------------------------------------------------

def test_conv1d_windows_over_a_symbolic_length(device):
  n = kg.Dim("n", 3, 2 * HI)
  w, b = kg.Tensor(WEIGHT), kg.Tensor(BIAS)

  def build(v):
    x = _sym(SIGNAL[:, :, :v], 2, 3, n.bind(v))
    return x.conv1d(w, b).sum(-1) + x.conv1d(w, b, padding=1).max(-1)
  runs_once(build, lambda v, got: close(got, conv_np(SIGNAL[:, :, :v], WEIGHT, BIAS).sum(-1) +
                                        conv_np(SIGNAL[:, :, :v], WEIGHT, BIAS, 1, 1).max(-1),
                                        1e-4), (3, 7, 2 * HI))


def test_strided_pooling_and_conv_over_an_even_symbolic_length(device):
  h = kg.Dim("h", 1, HI)
  w, b = kg.Tensor(WEIGHT), kg.Tensor(BIAS)

  def build(v):
    x = _sym(SIGNAL[:, :, :2 * v], 2, 3, 2 * h.bind(v))
    return (x.max_pool1d(2) + x.avg_pool1d(2)).sum(1) + x.conv1d(w, b, stride=2,
                                                                  padding=1).mean(1)

  def want(v):
    x = SIGNAL[:, :, :2 * v]
    return (pool_np(x, 2, np.max) + pool_np(x, 2, np.mean)).sum(1) + \
      conv_np(x, WEIGHT, BIAS, 2, 1).mean(1)
  runs_once(build, lambda v, got: close(got, want(v), 1e-4), VALUES)


# ---- products of two symbolic sizes -------------------------------------------------------------

CUBE = RNG.standard_normal((2, HI, HI - 1)).astype(np.float32)


def test_reductions_over_two_symbolic_axes_divide_by_their_product(device):
  n, m = kg.Dim("n", 1, HI), kg.Dim("m", 1, HI - 1)

  def build(vw):
    v, w = vw
    x = _sym(CUBE[:, :v, :w], 2, n.bind(v), m.bind(w))
    return x.mean((1, 2)) + x.var((1, 2)) * 2 + x.std((1, 2), ddof=0) + x.mean() + \
      x.layernorm((1, 2)).sum((1, 2))

  def want(vw):
    x = CUBE[:, :vw[0], :vw[1]].astype(np.float64)
    mu, var = x.mean((1, 2), keepdims=True), x.var((1, 2), keepdims=True)
    norm = ((x - mu) / np.sqrt(var + 1e-5)).sum((1, 2))
    return x.mean((1, 2)) + x.var((1, 2)) * 2 + x.std((1, 2)) + x.mean() + norm
  runs_once(build, lambda vw, got: close(got, want(vw), 1e-4), ((1, 1), (5, 3), (HI, HI - 1)))


# ---- what no affine size holds: typed errors ----------------------------------------------------

@pytest.mark.parametrize("bad, match", [
  (lambda x, n, m: x.reshape(n * m), r"product of two symbolic sizes.*keep the axes apart"),
  (lambda x, n, m: _sym(CUBE[:, :5, :3], 2, n.bind(5), m.bind(3)).reshape(2, -1),
   r"symbolic axes n and m.*keep the axes apart"),
  (lambda x, n, m: _sym(CUBE[:, :5, :3], 2, n.bind(5), m.bind(3)).flatten(),
   r"product.*keep the (symbolic )?axes apart"),
  (lambda x, n, m: x.reshape(1, n.bind(5), 4).permute(0, 2, 1).conv1d(
    kg.Tensor(np.ones((2, 4, 6), np.float32))), r"larger than the axis.*low end"),
])
def test_steps_and_products_no_affine_size_holds_are_typed_errors(bad, match):
  n, m = kg.Dim("n", 1, HI), kg.Dim("m", 1, HI - 1)
  x = kg.Tensor(DATA[:5], device="PYTHON").symbolic(n.bind(5), 4)
  with pytest.raises(kg.UnsupportedError if "larger" not in match else kg.ShapeError,
                     match=match):
    bad(x, n, m)


def test_strided_window_and_product_kernels_validate_and_assemble():
  h, n, m = kg.Dim("h", 1, HI), kg.Dim("n", 3, HI), kg.Dim("m", 1, HI)
  x = kg.Tensor.empty(2 * h + 1, 4, name="x")
  s = kg.Tensor.empty(2, 3, 2 * h, name="s")
  c = kg.Tensor.empty(2, n, m, name="c")
  w = kg.Tensor.empty(4, 3, 3, name="w")
  check_compiles([x[1::2].sum(0), s.max_pool1d(2), s.conv1d(w, stride=2, padding=1),
                  c.mean((1, 2)), c.var((1, 2))])
