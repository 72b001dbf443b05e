"""interpolate with torch's definition (torch.nn.functional.interpolate): nearest, linear and
bilinear resizing of the trailing dims, the source coordinates computed in float32 as torch
does; the InterpolateOps mixin that `Tensor` lists among its bases.
"""
from __future__ import annotations

import math
import struct

from ...dtype import dtypes
from ...errors import ShapeError
from .advanced_indexing import take_static
from ..operands import TensorOps


INTERPOLATE_MODES = ("nearest", "linear", "bilinear")


def f32(v: float) -> float:
  """v rounded to float32 (torch computes interpolation coordinates in float32)."""
  return struct.unpack("<f", struct.pack("<f", v))[0]


def _out_sizes(x, size, scale_factor) -> tuple[list, list]:
  spatial = x.shape[2:]
  n = len(spatial)
  if (size is None) == (scale_factor is None):
    raise ShapeError("interpolate needs exactly one of size= and scale_factor=")
  if size is not None:
    sizes = [size] * n if isinstance(size, int) else list(size)
    if len(sizes) != n or any(s <= 0 for s in sizes):
      raise ShapeError(f"interpolate size {size} needs {n} positive sizes for the spatial dims "
                       f"of {x.shape}")
    return sizes, [None] * n
  scales = [float(scale_factor)] * n if isinstance(scale_factor, (int, float)) \
    else [float(s) for s in scale_factor]
  if len(scales) != n or any(s <= 0 for s in scales):
    raise ShapeError(f"interpolate scale_factor {scale_factor} needs {n} positive factors")
  return [int(math.floor(i * s)) for i, s in zip(spatial, scales)], scales


def nearest_sources(n_in: int, n_out: int, scale) -> list:
  """torch's nearest: src = min(floor(dst * scale), in - 1), scale = 1/scale_factor or in/out
  (float32)."""
  if n_out == n_in:
    return list(range(n_out))
  if n_out == 2 * n_in:
    return [d >> 1 for d in range(n_out)]
  s = f32(1.0 / scale) if scale else f32(n_in / n_out)
  return [min(int(math.floor(f32(d * s))), n_in - 1) for d in range(n_out)]


def linear_sources(n_in: int, n_out: int, scale, align_corners: bool) -> tuple:
  """torch's linear interpolation along one axis: per output, the two source positions and
  their weights (i0, i1, 1 - lambda, lambda). Half-pixel centres (src = (dst + 0.5) * scale -
  0.5, clamped at 0) or, with align_corners, corners onto corners (src = dst * (in - 1) / (out -
  1)); float32 arithmetic, as torch."""
  if align_corners:
    s = f32((n_in - 1) / (n_out - 1)) if n_out > 1 else 0.0
  else:
    s = f32(1.0 / scale) if scale else f32(n_in / n_out)
  i0s, i1s, w0s, w1s = [], [], [], []
  for d in range(n_out):
    src = f32(s * d) if align_corners else max(f32(f32(s * f32(d + 0.5)) - 0.5), 0.0)
    i0 = int(src)
    lam = f32(src - i0)
    i0s.append(i0)
    i1s.append(i0 + 1 if i0 < n_in - 1 else i0)
    w0s.append(f32(1.0 - lam))
    w1s.append(lam)
  return i0s, i1s, w0s, w1s


def _lerp_axis(x, axis: int, sources: tuple):
  """x along `axis` as x[i0] * w0 + x[i1] * w1 (two gathers of host-known positions: only the
  two neighbours are read, so an inf elsewhere stays out, as in torch)."""
  i0, i1, w0, w1 = sources
  shape = [1] * x.ndim
  shape[axis] = len(i0)
  weight = lambda w: type(x)(w, dtype=dtypes.float32, device=x.device).reshape(tuple(shape))
  return take_static(x, axis, i0) * weight(w0) + take_static(x, axis, i1) * weight(w1)


def interpolate(x, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
  """torch.nn.functional.interpolate of an (N, C, *spatial) tensor: "nearest" (torch's legacy
  nearest: src = floor(dst * in / out), views where the pattern allows, else a gather),
  "linear" (1 spatial dim) or "bilinear" (2): per axis (the last first, as torch) the two
  neighbours, gathered, weighted and added; half-pixel centres unless align_corners=True."""
  if mode not in INTERPOLATE_MODES:
    raise ShapeError(f"interpolate mode {mode!r} is not one of {', '.join(INTERPOLATE_MODES)}")
  if x.ndim < 3:
    raise ShapeError(f"interpolate needs (N, C, *spatial), got shape {x.shape}")
  want = {"linear": 1, "bilinear": 2}.get(mode)
  if want is not None and x.ndim - 2 != want:
    raise ShapeError(f"interpolate mode {mode!r} needs {want} spatial dims, got {x.shape}")
  if mode == "nearest" and align_corners is not None:
    raise ShapeError("align_corners only applies to linear and bilinear modes")
  sizes, scales = _out_sizes(x, size, scale_factor)
  out = x if mode == "nearest" or x.dtype.is_float() else x.cast(dtypes.float32)
  for axis in range(x.ndim - 1, 1, -1):                 # the last axis first, as torch
    n_in, n_out, scale = x.shape[axis], sizes[axis - 2], scales[axis - 2]
    if mode == "nearest":
      out = take_static(out, axis, nearest_sources(n_in, n_out, scale))
    else:
      out = _lerp_axis(out, axis, linear_sources(n_in, n_out, scale, bool(align_corners)))
  return out.cast(x.dtype) if mode == "nearest" or x.dtype.is_float() else out


class InterpolateOps(TensorOps):
  """Tensor methods: interpolate."""
  __slots__ = ()

  def interpolate(self, size=None, scale_factor=None, mode: str = "nearest",
                  align_corners=None):
    """torch.nn.functional.interpolate of an (N, C, *spatial) tensor to `size` (an int or one per
    spatial dim) or by `scale_factor`: mode "nearest" (torch's legacy nearest), "linear" (1
    spatial dim) or "bilinear" (2), with half-pixel centres unless align_corners=True. Result (N,
    C, *new sizes), self's dtype (linear modes of integer inputs give float32).

    Raises ShapeError for an unknown mode, fewer than 3 dims, a mode that does not fit the number
    of spatial dims, align_corners with "nearest", or neither/both of size and scale_factor."""
    return interpolate(self, size, scale_factor, mode, align_corners)
