"""tensor/ops/ (interpolate.py, norms.py, dropout.py, losses.py, attention.py): interpolate,
batchnorm, group_norm, instance_norm, dropout, nll_loss, cross_entropy and
scaled_dot_product_attention against torch's definitions written out in numpy, on PYTHON, PTXSIM
and WEBGPU."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from ops_util import check_compiles, same, sdpa_np

RNG = np.random.default_rng(7)
TOL = dict(rtol=2e-5, atol=2e-6)


def data(*shape):
  return RNG.standard_normal(shape).astype(np.float32)


# ---- interpolate: torch's coordinate rules, in float32 as torch computes them ----------------

def nearest_np(n_in, n_out, scale_factor):
  if n_out == n_in:
    return np.arange(n_out)
  if n_out == 2 * n_in:
    return np.arange(n_out) >> 1
  s = np.float32(1.0 / scale_factor) if scale_factor else np.float32(n_in) / np.float32(n_out)
  return np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * s).astype(int), n_in - 1)


def linear_np(x, axis, n_out, scale_factor, align_corners):
  """torch's upsample_linear along one axis: (src index, lambda) per output, float32."""
  n_in = x.shape[axis]
  d = np.arange(n_out, dtype=np.float32)
  if align_corners:
    s = np.float32((n_in - 1) / (n_out - 1)) if n_out > 1 else np.float32(0)
    src = s * d
  else:
    s = np.float32(1.0 / scale_factor) if scale_factor else np.float32(n_in) / np.float32(n_out)
    src = np.maximum(s * (d + np.float32(0.5)) - np.float32(0.5), np.float32(0))
  i0 = src.astype(int)
  i1 = np.minimum(i0 + 1, n_in - 1)
  lam = (src - i0).astype(np.float32)
  shape = [1] * x.ndim
  shape[axis] = n_out
  a, b = np.take(x, i0, axis), np.take(x, i1, axis)
  return (np.float32(1) - lam).reshape(shape) * a + lam.reshape(shape) * b


INTERP = [  # (input shape, size, scale_factor, mode, align_corners)
  ((1, 2, 3, 4), (6, 8), None, "nearest", None),          # 2x: views
  ((2, 1, 5, 3), (3, 7), None, "nearest", None),          # down and odd up: one-hot gathers
  ((1, 1, 4, 4), None, 1.5, "nearest", None),
  ((1, 2, 3, 4), (6, 8), None, "bilinear", False),
  ((1, 1, 5, 3), (2, 7), None, "bilinear", True),
  ((2, 1, 4, 3), None, (2.5, 1.5), "bilinear", False),
  ((1, 2, 6), (4,), None, "linear", False),
]


@pytest.mark.parametrize("shape,size,scale,mode,corners", INTERP,
                         ids=[str(i) for i in range(len(INTERP))])
def test_interpolate(device, shape, size, scale, mode, corners):
  x = data(*shape)
  spatial = len(shape) - 2
  sizes = (list(size) if size else
           [int(math.floor(n * (scale if isinstance(scale, float) else scale[i])))
            for i, n in enumerate(shape[2:])])
  scales = ([None] * spatial if size else
            [scale if isinstance(scale, float) else scale[i] for i in range(spatial)])
  expected = x
  for axis in range(len(shape) - 1, 1, -1):
    n_out, s = sizes[axis - 2], scales[axis - 2]
    if mode == "nearest":
      expected = np.take(expected, nearest_np(shape[axis], n_out, s), axis)
    else:
      expected = linear_np(expected, axis, n_out, s, corners)
  got = kg.interpolate(Tensor(x), size=size, scale_factor=scale, mode=mode, align_corners=corners)
  same(got, expected.astype(np.float32), **TOL)
  same(Tensor(x).interpolate(size=size, scale_factor=scale, mode=mode, align_corners=corners),
       expected.astype(np.float32), **TOL)


def test_bilinear_reads_only_the_two_neighbours(device):
  """An inf far from an output does not reach it (a dense weight matrix gave 0 * inf = NaN
  across the whole row: fuzz seed 35 of test_fuzz_ops_models). Outputs next to it are not
  finite, as in torch (its weight-0 neighbour still counts: 0 * inf)."""
  x = np.array([[[[1.0, 2.0, 3.0, np.inf]]]], np.float32)
  got = Tensor(x).interpolate(size=(1, 6), mode="bilinear", align_corners=True).numpy()
  np.testing.assert_allclose(got[0, 0, 0, :4], [1.0, 1.6, 2.2, 2.8], rtol=1e-6)
  assert not np.isfinite(got[0, 0, 0, 4:]).any(), got


def test_interpolate_errors():
  with pytest.raises(kg.ShapeError, match="exactly one of size= and scale_factor="):
    Tensor.zeros(1, 1, 2, 2).interpolate()
  with pytest.raises(kg.ShapeError, match="needs 2 spatial dims"):
    Tensor.zeros(1, 1, 2).interpolate(size=4, mode="bilinear")


# ---- normalization and dropout ----------------------------------------------------------------

def test_batchnorm(device):
  x, mean, var = data(2, 3, 4, 2), data(3), np.abs(data(3)) + 0.1
  w, b = data(3), data(3)
  shape = (1, 3, 1, 1)
  expected = ((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-5) * w.reshape(shape)
              + b.reshape(shape))
  got = Tensor(x).batchnorm(Tensor(mean), Tensor(var), Tensor(w), Tensor(b))
  same(got, expected.astype(np.float32), **TOL)
  same(Tensor(x).batchnorm(Tensor(mean), Tensor(var), eps=0.5),
       ((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 0.5)).astype(np.float32), **TOL)


def group_norm_np(x, groups, w, b, eps):
  n, c = x.shape[:2]
  g = x.reshape(n, groups, -1).astype(np.float64)
  out = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)
  out = out.reshape(x.shape)
  shape = (1, c) + (1,) * (x.ndim - 2)
  if w is not None:
    out = out * w.reshape(shape) + b.reshape(shape)
  return out.astype(np.float32)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm(device, groups):
  x, w, b = data(2, 4, 3, 3) * 3 + 1, data(4), data(4)
  same(Tensor(x).group_norm(groups, Tensor(w), Tensor(b)), group_norm_np(x, groups, w, b, 1e-5),
       rtol=1e-4, atol=1e-5)


def test_instance_norm(device):
  x = data(2, 3, 5) + 2
  same(Tensor(x).instance_norm(eps=1e-3), group_norm_np(x, 3, None, None, 1e-3),
       rtol=1e-4, atol=1e-5)


def test_dropout(device):
  x = Tensor.ones(400) * 2
  y = x.dropout(0.25, seed=3).numpy()
  kept = y != 0
  assert np.all(y[kept] == np.float32(2 / 0.75))
  assert 0.65 < kept.mean() < 0.85                          # about 1 - p of 400 kept
  again = x.dropout(0.25, seed=3).numpy()
  np.testing.assert_array_equal(y, again)                   # deterministic in the seed
  assert not np.array_equal(y, x.dropout(0.25, seed=4).numpy())
  mask = Tensor.rand(400, seed=3).numpy() >= 0.25           # the mask is Tensor.rand's
  np.testing.assert_array_equal(kept, mask)
  same(x.dropout(0.25, training=False), np.full(400, 2, np.float32))
  same(x.dropout(1.0), np.zeros(400, np.float32))


# ---- losses: torch's nll_loss / cross_entropy written out --------------------------------------

def log_softmax_np(x):
  x = x.astype(np.float64)
  s = x - x.max(1, keepdims=True)
  return s - np.log(np.exp(s).sum(1, keepdims=True))


def nll_np(logp, target, weight, ignore_index, reduction):
  c = logp.shape[1]
  w = np.ones(c) if weight is None else weight.astype(np.float64)
  moved = np.moveaxis(logp, 1, -1)
  valid = target != ignore_index
  safe = np.where(valid, target, 0)
  picked = np.take_along_axis(moved, safe[..., None], -1)[..., 0]
  wt = np.where(valid, w[safe], 0)
  loss = -picked * wt
  if reduction == "none":
    return loss
  return loss.sum() if reduction == "sum" else loss.sum() / wt.sum()


def cross_entropy_np(x, target, weight, ignore_index, reduction, eps):
  logp = log_softmax_np(x)
  c = x.shape[1]
  wshape = (1, c) + (1,) * (x.ndim - 2)
  w = np.ones(c) if weight is None else weight.astype(np.float64)
  if target.dtype.kind == "f":
    p = target * (1 - eps) + eps / c
    loss = -(logp * p * w.reshape(wshape)).sum(1)
    if reduction == "none":
      return loss
    return loss.sum() if reduction == "sum" else loss.sum() / (x.size / c)
  nll = nll_np(logp, target, weight, ignore_index, reduction)
  valid = target != ignore_index
  smooth = np.where(valid, -(logp * w.reshape(wshape)).sum(1), 0)
  if reduction == "none":
    ret = smooth
  elif reduction == "sum":
    ret = smooth.sum()
  else:
    wt = np.where(valid, w[np.where(valid, target, 0)], 0)
    ret = smooth.sum() / (wt.sum() if weight is not None else valid.sum())
  return (1 - eps) * nll + ret * (eps / c)


LOSSES = [  # (input shape, weighted, ignore_index, reduction, label_smoothing)
  ((4, 5), False, -100, "mean", 0.0),
  ((4, 5), True, 2, "mean", 0.0),
  ((3, 4, 2), False, 1, "sum", 0.0),
  ((3, 4, 2), True, -100, "none", 0.0),
  ((4, 5), True, 0, "mean", 0.1),
  ((5,), False, -100, "none", 0.2),
]


@pytest.mark.parametrize("shape,weighted,ignore,reduction,smoothing", LOSSES,
                         ids=[str(i) for i in range(len(LOSSES))])
def test_cross_entropy_and_nll_with_class_indices(device, shape, weighted, ignore, reduction,
                                                  smoothing):
  x = data(*shape) * 2
  c = shape[1] if len(shape) > 1 else shape[0]
  tshape = (shape[0],) + shape[2:] if len(shape) > 1 else ()
  target = RNG.integers(0, c, tshape).astype(np.int32)
  weight = np.abs(data(c)) + 0.5 if weighted else None
  w = Tensor(weight) if weighted else None
  bx = x if len(shape) > 1 else x[None]
  bt = target if len(shape) > 1 else target[None]
  expected = cross_entropy_np(bx, bt, weight, ignore, reduction, smoothing)
  expected = expected[0] if len(shape) == 1 and reduction == "none" else expected
  got = Tensor(x).cross_entropy(Tensor(target), weight=w, ignore_index=ignore,
                                reduction=reduction, label_smoothing=smoothing)
  same(got, np.asarray(expected, np.float32), rtol=1e-5, atol=1e-6)
  nll = nll_np(log_softmax_np(bx), bt, weight, ignore, reduction)
  nll = nll[0] if len(shape) == 1 and reduction == "none" else nll
  got = Tensor(x).log_softmax(axis=0 if len(shape) == 1 else 1).nll_loss(
    Tensor(target), weight=w, ignore_index=ignore, reduction=reduction)
  same(got, np.asarray(nll, np.float32), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction,smoothing,weighted", [("mean", 0.0, False),
                                                          ("sum", 0.1, True),
                                                          ("none", 0.0, True)])
def test_cross_entropy_with_probabilities(device, reduction, smoothing, weighted):
  x = data(3, 4, 2)
  p = np.exp(data(3, 4, 2))
  p = (p / p.sum(1, keepdims=True)).astype(np.float32)
  weight = np.abs(data(4)) + 0.5 if weighted else None
  expected = cross_entropy_np(x, p, weight, -100, reduction, smoothing)
  got = Tensor(x).cross_entropy(Tensor(p), weight=Tensor(weight) if weighted else None,
                                reduction=reduction, label_smoothing=smoothing)
  same(got, np.asarray(expected, np.float32), rtol=1e-5, atol=1e-6)


# ---- attention ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["plain", "causal", "bool", "float", "scale"])
def test_scaled_dot_product_attention(device, kind):
  q, k, v = data(2, 3, 4), data(2, 5, 4), data(2, 5, 3)
  mask = {"bool": RNG.random((3, 5)) > 0.3, "float": data(2, 3, 5)}.get(kind)
  if kind == "bool":
    mask[:, 0] = True                                     # no row fully masked
  causal = kind == "causal"
  if causal:
    k, v = data(2, 3, 4), data(2, 3, 3)
  scale = 0.3 if kind == "scale" else None
  expected = sdpa_np(q, k, v, mask, causal, scale).astype(np.float32)
  got = kg.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v),
                                        mask=None if mask is None else Tensor(mask),
                                        is_causal=causal, scale=scale)
  same(got, expected, rtol=1e-4, atol=1e-5)


def test_sdpa_kernel_count_and_compiles():
  """L = 1024: one fused kernel (tests/unit/test_attention_fused.py has the fallbacks' counts)."""
  q, k, v = (Tensor.randn(1, 2, 1024, 64, seed=s) for s in (1, 2, 3))
  kernels = kg.compile(kg.scaled_dot_product_attention(q, k, v, is_causal=True))
  assert len(kernels) == 1
  small = kg.scaled_dot_product_attention(*(Tensor.randn(2, 8, 4, seed=s) for s in (1, 2, 3)),
                                          is_causal=True)
  check_compiles(small)


def test_embedding_then_causal_attention(device):
  """A tiny transformer step: token embedding lookup, causal self-attention, a loss."""
  table = data(10, 4)
  tokens = np.array([[1, 7, 7, 3]], np.int32)
  x = table[tokens]
  expected = sdpa_np(x, x, x, causal=True)
  emb = Tensor(table)[Tensor(tokens)]
  out = kg.scaled_dot_product_attention(emb, emb, emb, is_causal=True)
  same(out, expected.astype(np.float32), rtol=1e-4, atol=1e-5)


ERRORS = [
  (lambda: Tensor.zeros(2, 4).group_norm(3), kg.ShapeError, "3 groups must divide"),
  (lambda: Tensor.zeros(2, 3).cross_entropy(Tensor([0, 1, 2])), kg.ShapeError,
   "class indices need shape (2,)"),
  (lambda: Tensor.zeros(2, 3).nll_loss(Tensor([0.5, 1.0])), kg.DTypeError, "integer dtype"),
  (lambda: Tensor.zeros(2, 3).cross_entropy(Tensor([0, 1]), reduction="avg"), kg.ShapeError,
   "reduction must be"),
  (lambda: Tensor.zeros(4).dropout(1.5), kg.ShapeError, "in [0, 1]"),
  (lambda: Tensor.zeros(2, 3).batchnorm(Tensor.zeros(2), Tensor.ones(3)), kg.ShapeError,
   "needs shape (3,)"),
  (lambda: kg.scaled_dot_product_attention(Tensor.zeros(2, 4), Tensor.zeros(3, 4),
                                           Tensor.zeros(3, 2), mask=Tensor.ones(2, 3),
                                           is_causal=True), kg.ShapeError, "not both"),
  (lambda: kg.scaled_dot_product_attention(Tensor.zeros(2, 4), Tensor.zeros(3, 5),
                                           Tensor.zeros(3, 2)), kg.ShapeError, "(..., L, E)"),
  (lambda: Tensor.zeros(1, 1, 2, 2).interpolate(size=3, mode="bicubic"), kg.ShapeError,
   "not one of nearest, linear, bilinear"),
  (lambda: Tensor.zeros(1, 1, 2, 2).interpolate(size=3, align_corners=True), kg.ShapeError,
   "align_corners only applies"),
]


@pytest.mark.parametrize("build,error,phrase", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_typed_errors_say_what_to_do(build, error, phrase):
  with pytest.raises(error) as info:
    build()
  assert phrase in str(info.value)


def test_upsampling_by_integer_factors_is_one_kernel():
  """Nearest and bilinear x2 / x4 gather by views (each source repeated r times, in a few
  pieces): no one-hot reduction, one fused kernel; 16 -> 24 gathers at uploaded positions
  (indirect loads), fused as well."""
  x = Tensor.randn(2, 3, 16, 16, seed=1)
  for kw in (dict(scale_factor=2), dict(scale_factor=2, mode="bilinear"),
             dict(scale_factor=4, mode="bilinear"),
             dict(size=(8, 8), mode="bilinear")):
    assert len(kg.compile(x.interpolate(**kw))) == 1, kw
  assert len(kg.compile(x.interpolate(size=(24, 24), mode="bilinear"))) == 1
