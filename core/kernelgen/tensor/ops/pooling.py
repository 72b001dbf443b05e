"""Pooling as Tensor methods: max and average pooling over windows (views) of the last two (or,
for the 1-d forms, the last) dims, and torch's adaptive average pooling; the PoolOps mixin that
`Tensor` lists among its bases.
"""
from __future__ import annotations

import math

from ...dtype import min_value
from ...errors import ShapeError
from ..operands import TensorOps
from .conv import check_1d, pair


def _pool(x, kernel_size, stride, padding, dilation, fill):
  k = pair(kernel_size)
  s = pair(stride if stride is not None else kernel_size)
  (ph, pw) = pair(padding)
  pads = ((0, 0),) * (x.ndim - 2) + ((ph, ph), (pw, pw))
  xp = x.pad(pads, value=fill) if ph or pw else x
  return xp._windows(k, s, pair(dilation))


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1):
  """The maximum of each kernel_size window (an int or (kh, kw)) over the last two dims of (..., H,
  W), windows `stride` apart (default: kernel_size), the input padded by `padding` with -inf (the
  dtype's minimum for ints) and window taps `dilation` apart (torch's max_pool2d). Result (...,
  OH, OW) with OH = (H + 2 ph - dh (kh - 1) - 1) // sh + 1; same dtype.

  Raises ShapeError when the window is larger than the padded input."""
  fill = -math.inf if x.dtype.is_float() else min_value(x.dtype)
  return _pool(x, kernel_size, stride, padding, dilation, fill).max((-2, -1))


def avg_pool2d(x, kernel_size, stride=None, padding=0):
  """The mean of each kernel_size window (an int or (kh, kw)) over the last two dims of (..., H, W),
  windows `stride` apart (default: kernel_size), padded zeros counted (torch's
  count_include_pad). Result (..., OH, OW) with OH = (H + 2 ph - kh) // sh + 1; a float dtype
  (float32 for integer inputs).

  Raises ShapeError when the window is larger than the padded input."""
  return _pool(x, kernel_size, stride, padding, 1, 0).mean((-2, -1))


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1):
  """`max_pool2d` along the last dim of an (N, C, L) input: (N, C, OL).

  Raises ShapeError unless the input is 3-d, or when the window is larger than the padded input."""
  check_1d(x, None, "max_pool1d")
  return max_pool2d(x.unsqueeze(2), (1, kernel_size), (1, stride or kernel_size),
                    (0, padding), (1, dilation)).squeeze(2)


def avg_pool1d(x, kernel_size, stride=None, padding=0):
  """`avg_pool2d` along the last dim of an (N, C, L) input: (N, C, OL).

  Raises ShapeError unless the input is 3-d, or when the window is larger than the padded input."""
  check_1d(x, None, "avg_pool1d")
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
  oh, ow = pair(output_size)
  oh, ow = h if oh is None else oh, w if ow is None else ow
  if min(oh, ow) < 1:
    raise ShapeError(f"adaptive_avg_pool2d output_size {output_size} must be >= 1")
  if h % oh == 0 and w % ow == 0:
    return avg_pool2d(x, (h // oh, w // ow))
  if not x.dtype.is_float():
    x = x.float()
  return _adaptive_matrix(x, h, oh) @ x @ _adaptive_matrix(x, w, ow).transpose(1, 0)


class PoolOps(TensorOps):
  """Pooling: max_pool1d/2d, avg_pool1d/2d, adaptive_avg_pool2d."""
  __slots__ = ()
  max_pool1d, max_pool2d, avg_pool1d, avg_pool2d = max_pool1d, max_pool2d, avg_pool1d, avg_pool2d
  adaptive_avg_pool2d = adaptive_avg_pool2d
