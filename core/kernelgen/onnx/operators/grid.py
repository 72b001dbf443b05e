"""ONNX GridSample and AffineGrid, N-D (2-D images and 3-D volumes), and RoiAlign, as Tensor
code.

GridSample follows the operator's definition (and its reference): each grid point is
denormalized (align_corners), rounded to nearest-even for `nearest`, brought inside by the
padding mode (border clamps, reflection folds at the borders), then interpolated from its 2**k
(linear) or 4**k (cubic, Keys a=-0.75) neighbours; neighbours outside the image are 0 (zeros),
clamped (border) or reflected. Every neighbour is one gather of the flattened spatial dims.
RoiAlign's sample points depend on the RoIs' values (their number per RoI too), so they are
placed on the host from the RoIs (realized first when computed on the device); the image values
are gathered on the device.
"""
from __future__ import annotations

import itertools
import math

from ...dtype import dtypes
from ...errors import ShapeError, UnsupportedError
from ...tensor.tensor import Tensor, cat, stack, where
from ..registry import op

_ALPHA = -0.75


def _denormalize(g, d: int, align: bool):
  return (g + 1) / 2 * (d - 1) if align else ((g + 1) * d - 1) / 2


def _reflect(x, lo: float, hi: float):
  """x folded back into [lo, hi] at the borders (as many times as needed)."""
  rng = hi - lo
  if rng <= 0:
    return x * 0 + lo
  below, above = lo - x, x - hi
  dx = where(x < lo, below, above)
  n = (dx / rng).floor()
  r = dx - n * rng
  even = (n - (n / 2).floor() * 2) == 0
  low_side = where(even, lo + r, hi - r)
  high_side = where(even, hi - r, lo + r)
  return where(x < lo, low_side, where(x > hi, high_side, x))


def _bounds(d: int, align: bool) -> tuple:
  return (0.0, d - 1.0) if align else (-0.5, d - 0.5)


def _inside(x, d: int, align: bool, padding: str):
  lo, hi = _bounds(d, align)
  if padding == "border":
    return where((x < lo) | (x > hi), x.clip(0, d - 1), x)
  if padding == "reflection":
    return _reflect(x, lo, hi)
  return x


def _index(i, d: int, align: bool, padding: str):
  """(index into the axis, valid mask or None) of integer positions i (float Tensor)."""
  if padding == "zeros":
    valid = (i >= 0) & (i <= d - 1)
    return i.clip(0, d - 1), valid
  if padding == "border":
    return i.clip(0, d - 1), None
  lo, hi = _bounds(d, align)
  return _reflect(i, lo, hi).trunc().clip(0, d - 1), None


def _cubic_weights(t) -> list:
  a = _ALPHA
  w0 = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a
  w1 = ((a + 2) * t - (a + 3)) * t * t + 1
  s = 1 - t
  w2 = ((a + 2) * s - (a + 3)) * s * s + 1
  u = 2 - t
  w3 = ((a * u - 5 * a) * u + 8 * a) * u - 4 * a
  return [w0, w1, w2, w3]


def _taps(x, mode: str) -> list:
  """[(integer position, weight or None)] per neighbour along one axis."""
  if mode == "nearest":
    return [(x, None)]
  base = x.floor()
  t = x - base
  if mode == "linear":
    return [(base, 1 - t), (base + 1, t)]
  return [(base + o, w) for o, w in zip((-1, 0, 1, 2), _cubic_weights(t))]


def grid_sample(x, grid, mode: str, padding: str, align: bool):
  n, c = x.shape[:2]
  dims = x.shape[2:]
  k = len(dims)
  if grid.shape[-1] != k or grid.shape[0] != n or grid.ndim != k + 2:
    raise ShapeError(f"GridSample: grid shape {grid.shape} does not fit input {x.shape}")
  out_dims = grid.shape[1:-1]
  m = math.prod(out_dims)
  g = grid.cast(dtypes.float32).reshape(n, m, k)
  coords = []
  for i, d in enumerate(dims):               # the grid lists coordinates last axis first
    v = _denormalize(g[:, :, k - 1 - i], d, align)
    v = v.round() if mode == "nearest" else v
    coords.append(_inside(v, d, align, padding))
  flat = x.reshape(n, c, math.prod(dims))
  strides = [math.prod(dims[i + 1:]) for i in range(k)]
  total = None
  for combo in itertools.product(*[_taps(v, mode) for v in coords]):
    lin, weight, valid = None, None, None
    for i, (pos, w) in enumerate(combo):
      idx, ok = _index(pos, dims[i], align, padding)
      part = idx.cast(dtypes.int32) * strides[i]
      lin = part if lin is None else lin + part
      weight = w if weight is None else (weight if w is None else weight * w)
      valid = ok if valid is None else (valid if ok is None else valid & ok)
    val = flat.gather(2, lin.reshape(n, 1, m).expand(n, c, m)).cast(dtypes.float32)
    if weight is not None:
      val = val * weight.reshape(n, 1, m)
    if valid is not None:
      val = where(valid.reshape(n, 1, m), val, 0.0)
    total = val if total is None else total + val
  return total.reshape((n, c) + tuple(out_dims)).cast(x.dtype)


@op("GridSample")
def _grid_sample(ins, at):
  mode = at.str("mode", "linear" if ins.opset >= 20 else "bilinear")
  mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
  if mode not in ("nearest", "linear", "cubic"):
    raise UnsupportedError(f"GridSample mode {mode!r}: ONNX defines nearest, linear, cubic")
  padding = at.str("padding_mode", "zeros")
  if padding not in ("zeros", "border", "reflection"):
    raise UnsupportedError(f"GridSample padding_mode {padding!r}")
  return grid_sample(ins[0], ins[1], mode, padding, bool(at.int("align_corners", 0)))


def _base_axis(d: int, align: bool, device: str):
  i = Tensor.arange(d, device=device).cast(dtypes.float32)
  if align:
    return i * (2 / (d - 1)) - 1 if d > 1 else i * 0
  return (i * 2 + 1) / d - 1


@op("AffineGrid")
def _affine_grid(ins, at):
  theta = ins[0]
  size = ins.ints(1)
  align = bool(at.int("align_corners", 0))
  n, spatial = size[0], size[2:]
  k = len(spatial)
  if theta.shape != (n, k, k + 1):
    raise ShapeError(f"AffineGrid: theta shape {theta.shape} does not fit size {size}")
  axes = [_base_axis(d, align, theta.device) for d in spatial]
  coords = []                       # x (last spatial axis) first, then y (, z), then 1
  for j in range(k - 1, -1, -1):
    shape = [1] * k
    shape[j] = spatial[j]
    coords.append(axes[j].reshape(shape).expand(*spatial))
  coords.append(Tensor.ones(*spatial, device=theta.device))
  base = stack(coords, -1).reshape(1, math.prod(spatial), k + 1)
  out = base.cast(theta.dtype) @ theta.permute(0, 2, 1)          # (n, points, k)
  return out.reshape((n,) + tuple(spatial) + (k,))


# ---- RoiAlign ----------------------------------------------------------------------------------

def _roi_samples(box, scale, h, w, oh, ow, ratio, half_pixel) -> tuple:
  """([(4 flat positions, 4 weights)] per output cell and sample, samples per cell) of one
  RoI, as the operator's definition places its bilinear samples."""
  off = 0.5 if half_pixel else 0.0
  x0, y0, x1, y1 = (v * scale - off for v in box)
  rw, rh = x1 - x0, y1 - y0
  if not half_pixel:
    rw, rh = max(rw, 1.0), max(rh, 1.0)
  bh, bw = rh / oh, rw / ow
  gh = ratio if ratio > 0 else math.ceil(rh / oh)
  gw = ratio if ratio > 0 else math.ceil(rw / ow)
  cells = []
  for ph in range(oh):
    for pw in range(ow):
      pts = []
      for iy in range(gh):
        y = y0 + ph * bh + (iy + 0.5) * bh / gh
        for ix in range(gw):
          x = x0 + pw * bw + (ix + 0.5) * bw / gw
          pts.append(_bilinear_taps(y, x, h, w))
      cells.append(pts)
  return cells, max(gh * gw, 1)


def _bilinear_taps(y, x, h, w) -> tuple:
  if y < -1.0 or y > h or x < -1.0 or x > w:
    return (0, 0, 0, 0), (0.0, 0.0, 0.0, 0.0)
  y, x = max(y, 0.0), max(x, 0.0)
  yl, xl = int(y), int(x)
  if yl >= h - 1:
    yl = yh = h - 1
    y = float(yl)
  else:
    yh = yl + 1
  if xl >= w - 1:
    xl = xh = w - 1
    x = float(xl)
  else:
    xh = xl + 1
  ly, lx = y - yl, x - xl
  hy, hx = 1 - ly, 1 - lx
  return ((yl * w + xl, yl * w + xh, yh * w + xl, yh * w + xh),
          (hy * hx, hy * lx, ly * hx, ly * lx))


@op("RoiAlign")
def _roi_align(ins, at):
  """Sample positions and weights come from the RoIs' values on the host (their count per RoI
  depends on the RoI's size), the image values are gathered on the device."""
  from .indexing import host_data
  x = ins[0]
  n, c, h, w = x.shape
  rois, _, _ = host_data(ins, 1)
  batch, _, _ = host_data(ins, 2)
  oh, ow = at.int("output_height", 1), at.int("output_width", 1)
  mode = at.str("mode", "avg")
  half = at.str("coordinate_transformation_mode", "half_pixel") == "half_pixel"
  scale, ratio = at.float("spatial_scale", 1.0), at.int("sampling_ratio", 0)
  per_roi = [_roi_samples(rois[4 * r:4 * r + 4], scale, h, w, oh, ow, ratio, half)
             for r in range(len(batch))]
  s = max(len(cells[0]) for cells, _ in per_roi)
  idx, wts, valid, counts = [], [], [], []
  for r, (cells, count) in enumerate(per_roi):
    base = int(batch[r]) * h * w
    for pts in cells:
      for k in range(s):
        pos, wt = pts[k] if k < len(pts) else ((0, 0, 0, 0), (0.0,) * 4)
        idx.extend(base + p for p in pos)
        wts.extend(wt)
        valid.append(k < len(pts))
    counts.append(count)
  r_n, o = len(batch), oh * ow
  rows = x.permute(0, 2, 3, 1).reshape(n * h * w, c).cast(dtypes.float32)
  vals = rows.take(Tensor(idx, dtype=dtypes.int32, device=x.device), axis=0)
  vals = vals.reshape(r_n, o, s, 4, c) * \
    Tensor(wts, dtype=dtypes.float32, device=x.device).reshape(r_n, o, s, 4, 1)
  if mode == "avg":
    cnt = Tensor([float(v) for v in counts], dtype=dtypes.float32, device=x.device)
    out = vals.sum((2, 3)) / cnt.reshape(r_n, 1, 1)
  else:
    ok = Tensor(valid, dtype=dtypes.bool, device=x.device).reshape(r_n, o, s, 1)
    out = where(ok, vals.max(3), -math.inf).max(2)
  return out.reshape(r_n, oh, ow, c).permute(0, 3, 1, 2).cast(x.dtype)


# ---- DeformConv --------------------------------------------------------------------------------

def _sample_zeros(flat, ys, xs, h: int, w: int):
  """Bilinear samples of flat (N, C, h*w) at pixel positions ys, xs (N, M); corners outside the
  image count 0 (GridSample's zeros padding with align_corners=1): (N, C, M)."""
  n, c = flat.shape[:2]
  m = ys.shape[1]
  total = None
  for (py, wy), (px, wx) in itertools.product(_taps(ys, "linear"), _taps(xs, "linear")):
    iy, oky = _index(py, h, True, "zeros")
    ix, okx = _index(px, w, True, "zeros")
    lin = (iy * w + ix).cast(dtypes.int32)
    val = flat.gather(2, lin.reshape(n, 1, m).expand(n, c, m)).cast(dtypes.float32)
    val = where((oky & okx).reshape(n, 1, m), val * (wy * wx).reshape(n, 1, m), 0.0)
    total = val if total is None else total + val
  return total


@op("DeformConv")
def _deform_conv(ins, at):
  """Each kernel tap samples the input at its offset position (bilinear), times the mask; the
  samples are then contracted with the weights per group, like a convolution's columns."""
  x, wt, off = ins[0], ins[1], ins[2]
  if x.ndim != 4:
    raise UnsupportedError(f"DeformConv of a {x.ndim}-d input: kernelgen has the 2-d one")
  n, c, h, w = x.shape
  oc, icg, kh, kw = wt.shape
  oh, ow = off.shape[2:]
  groups, og = at.int("group", 1), at.int("offset_group", 1)
  pads = at.ints("pads", [0, 0, 0, 0])
  sh, sw = at.ints("strides", [1, 1])
  dh, dw = at.ints("dilations", [1, 1])
  k, o = kh * kw, oh * ow
  offs = off.cast(dtypes.float32).reshape(n, og, kh, kw, 2, oh, ow)
  dev = x.device
  base_y = (Tensor.arange(kh, device=dev).reshape(kh, 1, 1, 1) * dh +
            Tensor.arange(oh, device=dev).reshape(1, 1, oh, 1) * sh - pads[0]).cast(dtypes.float32)
  base_x = (Tensor.arange(kw, device=dev).reshape(1, kw, 1, 1) * dw +
            Tensor.arange(ow, device=dev).reshape(1, 1, 1, ow) * sw - pads[1]).cast(dtypes.float32)
  mask = ins[4].cast(dtypes.float32).reshape(n, og, k, o) if ins.has(4) else None
  cpg = c // og
  flat = x.reshape(n, c, h * w)
  parts = []
  for g in range(og):
    ys = (offs[:, g, :, :, 0] + base_y).reshape(n, k * o)
    xs = (offs[:, g, :, :, 1] + base_x).reshape(n, k * o)
    s = _sample_zeros(flat[:, g * cpg:(g + 1) * cpg], ys, xs, h, w).reshape(n, cpg, k, o)
    parts.append(s * mask[:, g].reshape(n, 1, k, o) if mask is not None else s)
  cols = cat(parts, 1) if len(parts) > 1 else parts[0]             # (N, C, K, O)
  ocg = oc // groups
  outs = []
  for gr in range(groups):
    wg = wt[gr * ocg:(gr + 1) * ocg].cast(dtypes.float32).reshape(ocg, icg * k)
    outs.append(wg @ cols[:, gr * icg:(gr + 1) * icg].reshape(n, icg * k, o))
  y = cat(outs, 1) if len(outs) > 1 else outs[0]
  if ins.has(3):
    y = y + ins[3].cast(dtypes.float32).reshape(1, oc, 1)
  return y.reshape(n, oc, oh, ow).cast(x.dtype)
