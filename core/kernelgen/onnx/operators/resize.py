"""ONNX Resize (and the older Upsample) as one matrix product per resized axis.

Resize is separable: along each axis every output element is a fixed weighted sum of input
elements, whose weights depend only on sizes and attributes. So the weights are computed here
on the host, as an (n_out, n_in) matrix per axis, following the ONNX operator's definition
(coordinate transformation modes, nearest modes, linear and cubic coefficients, antialias,
exclude_outside, tf_crop_and_resize's extrapolation value), and the device does
x @ W.T along each axis. An axis whose every row picks one input (a single 1: nearest modes)
is that pick instead (take_static: views, a repeat for integer upscales; no products, so an inf
elsewhere in the row stays out, as in onnxruntime). PP-OCRv4 det's six nearest 2x / 4x / 8x
upscales were matrix products over 96 x 80 x 80 x 40 (SwiftShader 31 ms, lavapipe 2.9 ms each
for the largest; issue 42).
"""
from __future__ import annotations

import math

from ... import limits
from ...errors import ModelError, ShapeError, UnsupportedError
from ...tensor.ops.advanced_indexing import take_static
from ...tensor.tensor import Tensor, where


def _x_original(mode, y, scale, n_in, n_out, roi):
  out_width = scale * n_in
  if mode == "align_corners":
    return 0.0 if out_width == 1 else y * (n_in - 1) / (out_width - 1)
  if mode == "asymmetric":
    return y / scale
  if mode == "tf_crop_and_resize":
    if out_width == 1:
      x = (roi[1] - roi[0]) * (n_in - 1) / 2
    else:
      x = y * (roi[1] - roi[0]) * (n_in - 1) / (out_width - 1)
    return x + roi[0] * (n_in - 1)
  if mode == "pytorch_half_pixel":
    return -0.5 if out_width == 1 else (y + 0.5) / scale - 0.5
  if mode == "half_pixel":
    return (y + 0.5) / scale - 0.5
  if mode == "half_pixel_symmetric":
    offset = n_in / 2 * (1 - n_out / out_width)
    return offset + (y + 0.5) / scale - 0.5
  raise UnsupportedError(f"Resize coordinate_transformation_mode {mode!r}")


def _nearest(ratio, scale, how):
  if float(ratio).is_integer():
    return [0.0, 1.0]
  table = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
           "floor": False, "ceil": True}
  if how not in table:
    raise UnsupportedError(f"Resize nearest_mode {how!r}")
  up = table[how]
  return [0.0 if up else 1.0, 1.0 if up else 0.0]


def _linear(ratio, scale, antialias):
  if not antialias or scale >= 1:
    return [1 - ratio, ratio]
  start = math.floor(-1 / scale) + 1
  coeffs = [max(0.0, min(1.0, 1 - abs((i - ratio) * scale))) for i in range(start, 2 - start)]
  total = sum(coeffs)
  return [c / total for c in coeffs]


def _cubic_at(x, a):
  x = abs(x)
  if x <= 1:
    return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
  if x < 2:
    return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
  return 0.0


def _cubic(ratio, scale, antialias, a):
  if not antialias or scale >= 1:
    return [_cubic_at(ratio + 1, a), _cubic_at(ratio, a), _cubic_at(1 - ratio, a),
            _cubic_at(2 - ratio, a)]
  start = math.floor(-2 / scale) + 1
  coeffs = [_cubic_at(scale * (i - ratio), a) for i in range(start, 2 - start)]
  total = sum(coeffs)
  return [c / total for c in coeffs]


def _neighbors(x: float, n: int, n_in: int) -> list[int]:
  """The n indexes nearest x (ties to the smaller) in the edge-padded axis, unpadded."""
  pad = math.ceil(n / 2)
  xp = x + pad
  base = math.floor(xp)
  cands = [i for i in range(base - n - 1, base + n + 2) if 0 <= i < n_in + 2 * pad]
  chosen = sorted(sorted(cands, key=lambda i: (abs(xp - i), i))[:n])
  return [i - pad for i in chosen]


def axis_weights(n_in, n_out, scale, attrs, roi) -> tuple[list, list]:
  """(rows of the (n_out, n_in) weight matrix, extrapolated flags) for one axis."""
  mode = attrs["mode"]
  rows, outside = [], []
  for y in range(n_out):
    x = _x_original(attrs["coord"], y, scale, n_in, n_out, roi)
    if attrs["coord"] == "tf_crop_and_resize" and (x < 0 or x > n_in - 1):
      rows.append([0.0] * n_in)
      outside.append(True)
      continue
    ratio = 1.0 if float(x).is_integer() else x - math.floor(x)
    if mode == "nearest":
      coeffs = _nearest(ratio, scale, attrs["nearest_mode"])
    elif mode == "linear":
      coeffs = _linear(ratio, scale, attrs["antialias"])
    else:
      coeffs = _cubic(ratio, scale, attrs["antialias"], attrs["cubic_a"])
    idxs = _neighbors(x, len(coeffs), n_in)
    if attrs["exclude_outside"]:
      coeffs = [0.0 if not 0 <= i < n_in else c for i, c in zip(idxs, coeffs)]
      total = sum(coeffs)
      coeffs = [c / total for c in coeffs]
    row = [0.0] * n_in
    for i, c in zip(idxs, coeffs):
      row[min(max(i, 0), n_in - 1)] += c
    rows.append(row)
    outside.append(False)
  return rows, outside


def picks(rows: list, outside: list) -> list | None:
  """The input index each row of an axis's weights takes whole (a single 1.0, zeros else), or
  None where a row mixes inputs or extrapolates."""
  if any(outside):
    return None
  out = []
  for row in rows:
    nonzero = [i for i, c in enumerate(row) if c != 0.0]
    if len(nonzero) != 1 or row[nonzero[0]] != 1.0:
      return None
    out.append(nonzero[0])
  return out


def out_size(n: int, scale) -> int:
  """floor(n * scale), the output length of an axis of n resized by `scale`: ModelError for a
  scale that is not a finite positive number, LimitError past the elements limit."""
  scale = float(scale)
  if not math.isfinite(scale) or scale <= 0:
    raise ModelError(f"Resize scale {scale}: scales must be finite and positive")
  return limits.check("elements", math.floor(n * scale), "a Resize output's length")


def resize(x: Tensor, scales: list, sizes: list, roi: list | None, attrs: dict) -> Tensor:
  """Resize x (all axes given: scales and sizes per dim of x); sizes and the dense weight
  matrices are checked against the limits before any is built."""
  total = 1
  for axis, n_out in enumerate(sizes):
    total *= max(n_out, 0)
    limits.check("resize_weights", n_out * x.shape[axis], f"Resize's weights along axis {axis} "
                 f"({n_out} x {x.shape[axis]})")
  limits.check("elements", total, f"a Resize output of shape {tuple(sizes)}: its elements")
  limits.check("buffer_bytes", total * x.dtype.itemsize, f"a Resize output of shape "
               f"{tuple(sizes)}: its bytes")
  weights = {}
  for axis in range(x.ndim):
    n_in, n_out, scale = x.shape[axis], sizes[axis], scales[axis]
    if n_in == n_out and scale == 1 and attrs["coord"] != "tf_crop_and_resize":
      continue
    if n_out <= 0:
      raise ShapeError(f"Resize to size {n_out} along axis {axis}")
    axis_roi = [roi[axis], roi[axis + x.ndim]] if roi else None
    weights[axis] = axis_weights(n_in, n_out, scale, attrs, axis_roi)
  taken = {axis: picks(*w) for axis, w in weights.items()}
  out = x
  work = x.dtype if x.dtype.is_float() or None not in taken.values() else None
  if work is None:
    out = out.float()
  for axis, (rows, outside) in weights.items():
    if taken[axis] is not None:
      out = take_static(out, axis, taken[axis])
      continue
    w = Tensor(rows, dtype=out.dtype, device=x.device)          # (n_out, n_in)
    moved = out.swapaxes(axis, -1)
    y = moved @ w.T
    if any(outside):
      mask = Tensor(outside, device=x.device)
      y = where(mask, attrs["extrapolation"], y)
    out = y.swapaxes(axis, -1)
  if work is None:
    out = out.round().cast(x.dtype)
  return out
