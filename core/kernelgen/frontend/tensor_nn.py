"""The Tensor's linear algebra and nn operations (matmul, conv2d, pooling, layernorm), built from
broadcast multiplies, windows (views) and reductions; the NNOps mixin that `Tensor` lists among
its bases holds them as methods.
"""
from __future__ import annotations

import math

from ..graph.dims import Sym
from ..dtype import min_value
from ..errors import ShapeError
from .conv import conv
from .operands import TensorOps, acc_dtype, result_dtype
from .tensor_data import resolve_axes


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


def _one_d(x, weight, what: str):
  if x.ndim != 3 or (weight is not None and weight.ndim != 3):
    got = f"{x.shape}" + (f" and {weight.shape}" if weight is not None else "")
    raise ShapeError(f"{what} needs a 3-d NCL input" + (" and OIK weight" if weight is not None
                                                       else "") + f", got {got}")


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
  """1-d convolution, NCL input and OIK weight (torch.conv1d): conv2d over a height of 1."""
  _one_d(x, weight, "conv1d")
  out = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, stride), (0, padding),
               (1, dilation), groups)
  return out.squeeze(2)


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1):
  _one_d(x, None, "max_pool1d")
  return max_pool2d(x.unsqueeze(2), (1, kernel_size), (1, stride or kernel_size),
                    (0, padding), (1, dilation)).squeeze(2)


def avg_pool1d(x, kernel_size, stride=None, padding=0):
  _one_d(x, None, "avg_pool1d")
  return avg_pool2d(x.unsqueeze(2), (1, kernel_size), (1, stride or kernel_size),
                    (0, padding)).squeeze(2)


def _adaptive_matrix(x, n: int, out: int):
  """(out, n): row i averages torch's window floor(i n / out) .. ceil((i + 1) n / out)."""
  rows = []
  for i in range(out):
    lo, hi = (i * n) // out, -((-(i + 1) * n) // out)
    rows.append([1.0 / (hi - lo) if lo <= j < hi else 0.0 for j in range(n)])
  return type(x)(rows, dtype=x.dtype, device=x.device)


def adaptive_avg_pool2d(x, output_size):
  """torch's adaptive average pooling of (..., H, W) to output_size (an int, or a pair with None
  for "keep"): a plain pool when the sizes divide, else two small averaging matmuls."""
  if x.ndim < 2:
    raise ShapeError(f"adaptive_avg_pool2d needs (..., H, W), got shape {x.shape}")
  h, w = x.shape[-2:]
  oh, ow = _pair(output_size)
  oh, ow = h if oh is None else oh, w if ow is None else ow
  if min(oh, ow) < 1:
    raise ShapeError(f"adaptive_avg_pool2d output_size {output_size} must be >= 1")
  if h % oh == 0 and w % ow == 0:
    return avg_pool2d(x, (h // oh, w // ow))
  if not x.dtype.is_float():
    x = x.float()
  return _adaptive_matrix(x, h, oh) @ x @ _adaptive_matrix(x, w, ow).transpose(1, 0)


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


def dot(a, b):
  return matmul(a, b)


class NNOps(TensorOps):
  """Linear algebra and nn layers: matmul (and @), dot, conv1d/2d, pooling (adaptive too),
  layernorm, rms_norm."""
  __slots__ = ()
  matmul, dot, conv2d, layernorm = matmul, dot, conv2d, layernorm
  max_pool2d, avg_pool2d = max_pool2d, avg_pool2d
  conv1d, max_pool1d, avg_pool1d = conv1d, max_pool1d, avg_pool1d
  adaptive_avg_pool2d, rms_norm = adaptive_avg_pool2d, rms_norm
  __matmul__ = matmul

  def __rmatmul__(self, other): return matmul(self, other, True)
