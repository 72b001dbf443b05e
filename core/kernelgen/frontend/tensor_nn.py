"""The Tensor's linear algebra and nn operations (matmul, conv2d, pooling, layernorm), built from
broadcast multiplies, windows (views) and reductions; the NNOps mixin that `Tensor` lists among
its bases holds them as methods.
"""
from __future__ import annotations

import math

from ..dtype import min_value
from ..errors import ShapeError
from .conv import conv
from .operands import TensorOps, acc_dtype, result_dtype


def matmul(a, b, reverse=False):
  a, b = (b, a) if reverse else (a, b)
  a = a if isinstance(a, TensorOps) else type(b)(a, device=b.device)
  b = b if isinstance(b, TensorOps) else type(a)(b, device=a.device)
  if a.ndim == 0 or b.ndim == 0:
    raise ShapeError("matmul needs tensors with at least 1 dim: use * for scalars")
  x = a.reshape(1, -1) if a.ndim == 1 else a
  y = b.reshape(-1, 1) if b.ndim == 1 else b
  if x.shape[-1] != y.shape[-2]:
    raise ShapeError(f"matmul of shapes {a.shape} and {b.shape}: the inner dims "
                     f"{x.shape[-1]} and {y.shape[-2]} must match; transpose or reshape one")
  dtype = result_dtype(x, y)
  xs = x.cast(dtype).unsqueeze(-2)                       # (..., n, 1, k)
  ys = y.cast(dtype).swapaxes(-1, -2).unsqueeze(-3)      # (..., 1, m, k)
  out = (xs * ys).sum(-1, dtype=acc_dtype(dtype) if not dtype.is_float() else None)
  out = out.cast(dtype)
  if a.ndim == 1:
    out = out.squeeze(-2)
  if b.ndim == 1:
    out = out.squeeze(-1)
  return out


def _pair(v) -> tuple[int, int]:
  return (v, v) if isinstance(v, int) else tuple(v)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
  """2-d convolution (cross-correlation), NCHW input and OIHW weight, as torch.conv2d."""
  if x.ndim != 4 or weight.ndim != 4:
    raise ShapeError(f"conv2d needs a 4-d NCHW input and OIHW weight, got {x.shape} and "
                     f"{weight.shape}")
  n, c, _, _ = x.shape
  o, cg, kh, kw = weight.shape
  if c % groups or o % groups or cg != c // groups:
    raise ShapeError(f"conv2d: input has {c} channels, weight {weight.shape} with groups="
                     f"{groups}: the weight's dim 1 must be channels/groups = {c // groups}")
  if min(_pair(stride)) < 1 or min(_pair(dilation)) < 1:
    raise ShapeError(f"conv2d stride {stride} and dilation {dilation} must be >= 1")
  if bias is not None and bias.shape != (o,):
    raise ShapeError(f"conv2d bias has shape {bias.shape}: it needs one value per output "
                     f"channel, shape ({o},)")
  return conv(x, weight, bias, _pair(stride), _pair(padding), _pair(dilation), groups)


def _pool(x, kernel_size, stride, padding, dilation, fill):
  k = _pair(kernel_size)
  s = _pair(stride if stride is not None else kernel_size)
  (ph, pw) = _pair(padding)
  pads = ((0, 0),) * (x.ndim - 2) + ((ph, ph), (pw, pw))
  xp = x.pad(pads, value=fill) if ph or pw else x
  return xp._windows(k, s, _pair(dilation))


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1):
  fill = -math.inf if x.dtype.is_float() else min_value(x.dtype)
  return _pool(x, kernel_size, stride, padding, dilation, fill).max((-2, -1))


def avg_pool2d(x, kernel_size, stride=None, padding=0):
  return _pool(x, kernel_size, stride, padding, 1, 0).mean((-2, -1))


def layernorm(x, axis=-1, eps=1e-5, weight=None, bias=None):
  """(x - mean) / sqrt(var + eps) over `axis`, then the affine. Half floats take their statistics
  in float32, as torch does: a centered value past 256 would overflow float16 when squared."""
  half = x.dtype.is_float() and x.dtype.itemsize < 4
  xs = x.float() if half else x
  centered = xs - xs.mean(axis, keepdim=True)
  out = centered * ((centered * centered).mean(axis, keepdim=True) + eps).rsqrt()
  out = out.cast(x.dtype) if half else out
  if weight is not None:
    out = out * weight
  if bias is not None:
    out = out + bias
  return out


def dot(a, b):
  return matmul(a, b)


class NNOps(TensorOps):
  """Linear algebra and nn layers: matmul (and @), dot, conv2d, pooling, layernorm."""
  __slots__ = ()
  matmul, dot, conv2d, layernorm = matmul, dot, conv2d, layernorm
  max_pool2d, avg_pool2d = max_pool2d, avg_pool2d
  __matmul__ = matmul

  def __rmatmul__(self, other): return matmul(self, other, True)
