"""Normalizations with torch's definitions (torch.nn.functional): layernorm, rms_norm, batchnorm
(the inference form), group_norm and instance_norm, built from reductions and broadcasts; the
NormOps mixin that `Tensor` lists among its bases.
"""
from __future__ import annotations

import math

from ...errors import ShapeError
from ...graph.dims import Sym
from ..operands import TensorOps
from ..data import resolve_axes


def rms_norm(x, normalized_shape, weight=None, eps=None):
  """x / sqrt(mean(x^2) + eps) over the trailing normalized_shape dims, times weight (torch's
  F.rms_norm; eps None is the dtype's machine epsilon, as torch)."""
  dims = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
  if tuple(x.shape[x.ndim - len(dims):]) != dims:
    raise ShapeError(f"rms_norm over {dims}: the input's trailing dims are {x.shape}")
  if eps is None:
    eps = {2: 9.765625e-4, 4: 1.1920929e-07}.get(x.dtype.itemsize, 2.220446049250313e-16)
  axes = tuple(range(x.ndim - len(dims), x.ndim))
  xs = x.float() if x.dtype.itemsize < 4 else x
  out = (xs * ((xs * xs).mean(axes, keepdim=True) + eps).rsqrt()).cast(x.dtype)
  return out * weight if weight is not None else out


def layernorm(x, axis=-1, eps=1e-5, weight=None, bias=None):
  """(x - mean) / sqrt(var + eps) over `axis`, then the affine. Half floats take their statistics
  in float32, as torch does: a centered value past 256 would overflow float16 when squared.

  The statistics come from shifted data, d = x - x0 with x0 the median of each normalized group's
  first, middle and last elements: mean(d) and mean(d^2) are independent sums, so a thread per
  row takes both in one pass (lowering/reductions.py, sibling_reduces) and reads the row twice, not
  three times. var = mean(d^2) - mean(d)^2 loses nothing to an offset of the data (d is exact
  where x is near x0), only the variance's relative rounding times (1 + (mean - x0)^2 / var):
  x0 is a far outlier only where two of the three sampled elements are."""
  half = x.dtype.is_float() and x.dtype.itemsize < 4
  xs = x.float() if half else x
  axes = resolve_axes(axis, xs.ndim)
  if all(xs.shape[a] for a in axes) and xs.ndim:
    def element(at):
      return xs[tuple(slice(at(a), at(a) + 1) if a in axes else slice(None)
                      for a in range(xs.ndim))]
    first = element(lambda a: 0)
    if xs.node.sym is not None and any(isinstance(xs.node.sym[a], Sym) for a in axes):
      middle = last = first     # past the first, a symbolic axis's elements may be padding
    else:
      middle, last = element(lambda a: xs.shape[a] // 2), element(lambda a: xs.shape[a] - 1)
    d = xs - first.minimum(middle).maximum(first.maximum(middle).minimum(last))
    shift = d.mean(axes, keepdim=True)
    var = ((d * d).mean(axes, keepdim=True) - shift * shift).maximum(0)
    centered = d - shift
  else:            # nothing to shift by (an empty group: NaN statistics, as numpy's)
    centered = xs - xs.mean(axis, keepdim=True)
    var = (centered * centered).mean(axis, keepdim=True)
  out = centered * (var + eps).rsqrt()
  out = out.cast(x.dtype) if half else out
  if weight is not None:
    out = out * weight
  if bias is not None:
    out = out + bias
  return out


def _per_channel(x, p, what: str):
  """A per-channel (C,) parameter shaped to broadcast over (N, C, *spatial)."""
  if not hasattr(p, "shape"):
    p = type(x)(p, device=x.device)
  if p.shape != (x.shape[1],):
    raise ShapeError(f"{what} needs shape ({x.shape[1]},) (one value per channel), got {p.shape}")
  return p.reshape((1, x.shape[1]) + (1,) * (x.ndim - 2))


def _affine(x, out, weight, bias, what: str):
  if weight is not None:
    out = out * _per_channel(x, weight, f"{what} weight")
  if bias is not None:
    out = out + _per_channel(x, bias, f"{what} bias")
  return out


def batchnorm(x, mean, var, weight=None, bias=None, eps: float = 1e-5):
  """Inference batch norm over channel axis 1: (x - mean) / sqrt(var + eps) * weight + bias."""
  if x.ndim < 2:
    raise ShapeError(f"batchnorm needs (N, C, ...), got shape {x.shape}")
  m, v = _per_channel(x, mean, "batchnorm mean"), _per_channel(x, var, "batchnorm var")
  return _affine(x, (x - m) * (v + eps).rsqrt(), weight, bias, "batchnorm")


def group_norm(x, groups: int, weight=None, bias=None, eps: float = 1e-5):
  """torch's group_norm: (N, C, *) normalized over each group of C/groups channels (and the
  spatial dims), biased variance, then a per-channel affine."""
  if x.ndim < 2 or groups <= 0 or x.shape[1] % groups:
    raise ShapeError(f"group_norm: {groups} groups must divide the channels of {x.shape}")
  flat = x.reshape(x.shape[0], groups, -1)
  out = flat.layernorm(axis=-1, eps=eps)
  # the affine in the grouped shape, reshaped back last: one row kernel (graph/schedule.py)
  per_group = (1, groups, x.shape[1] // groups, math.prod(x.shape[2:]))
  for p, what in ((weight, "weight"), (bias, "bias")):
    if p is not None:
      p = _per_channel(x, p, f"group_norm {what}").reshape(per_group[:3] + (1,))
      p = p.expand(per_group).reshape((1,) + flat.shape[1:])
      out = out * p if what == "weight" else out + p
  return out.reshape(x.shape)


def instance_norm(x, weight=None, bias=None, eps: float = 1e-5):
  """torch's instance_norm without running statistics: each (n, c) plane normalized."""
  if x.ndim < 3:
    raise ShapeError(f"instance_norm needs (N, C, *spatial), got shape {x.shape}")
  return group_norm(x, x.shape[1], weight, bias, eps)


class NormOps(TensorOps):
  """Tensor methods: layernorm, rms_norm, batchnorm, group_norm, instance_norm."""
  __slots__ = ()
  layernorm, rms_norm = layernorm, rms_norm

  def batchnorm(self, mean, var, weight=None, bias=None, eps: float = 1e-5):
    """Inference batch norm of (N, C, *spatial): (x - mean) / sqrt(var + eps) * weight + bias with
    per-channel (C,) mean, var and optional weight and bias (Tensors or lists). Same shape and
    dtype.

    Raises ShapeError for fewer than 2 dims or a parameter not of shape (C,)."""
    return batchnorm(self, mean, var, weight, bias, eps)

  def group_norm(self, groups: int, weight=None, bias=None, eps: float = 1e-5):
    """torch's group_norm of (N, C, *spatial): each group of C / groups channels (with the spatial
    dims) normalized to mean 0 and variance 1 (biased variance, `eps` added), then the optional
    per-channel (C,) weight and bias. Same shape and dtype.

    Raises ShapeError when `groups` does not divide C or a parameter is not of shape (C,)."""
    return group_norm(self, groups, weight, bias, eps)

  def instance_norm(self, weight=None, bias=None, eps: float = 1e-5):
    """torch's instance_norm without running statistics: each (n, c) plane of (N, C, *spatial)
    normalized over its spatial dims, then the optional per-channel (C,) weight and bias. Same
    shape and dtype.

    Raises ShapeError for fewer than 3 dims or a parameter not of shape (C,)."""
    return instance_norm(self, weight, bias, eps)
