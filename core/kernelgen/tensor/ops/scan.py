"""Scans (cumulative sum, product, maximum, minimum) as a Tensor mixin, built from Tensor
primitives so they fuse and differentiate like the rest.

A scan along an axis of n elements is a blocked parallel scan, never one thread walking the axis:
- n <= SCAN_BLOCK: every output is the reduction of its prefix, read through a triangular mask
  (x broadcast to (n, n), the identity above the diagonal, reduced): one kernel, O(n) work per
  output, all outputs in parallel.
- n > SCAN_BLOCK: the axis is cut into blocks of SCAN_BLOCK elements, each scanned as above
  (one kernel); the block totals (each block's last prefix) are scanned recursively and the
  exclusive prefix of the totals is combined into every block. O(SCAN_BLOCK) work per output and
  log_SCAN_BLOCK(n) levels (10^6 elements: blocks on three levels and a last window scan of 31
  totals, 7 kernels).

Dtypes follow the reductions (tensor.py): cumsum/cumprod accumulate and return what sum/prod
return (bool and narrow ints -> int32 / uint32; float16/bfloat16 add in float32 and return their
own dtype); cummax/cummin keep the dtype. NaN propagates (numpy's maximum.accumulate).

float32 cumsum of 10^6 values in [-1, 1) agrees with numpy's float64 cumsum to 1e-6 of the running
sum of magnitudes (tests/unit/test_scan_sort.py holds this on WEBGPU; measured 4.6e-8, numpy's own
sequential float32 cumsum 6.7e-8): a value passes through at most SCAN_BLOCK additions per
level, so the error grows with log(n), not with n.
"""
from __future__ import annotations

from ...dtype import dtypes, max_value, min_value
from ...errors import ShapeError
from ..combine import where
from ..operands import acc_dtype
from ..data import resolve_axes

SCAN_BLOCK = 32   # elements per block: the work per output (and the triangular mask's side)


class ScanMixin:
  """cumsum, cumprod, cummax, cummin (numpy / torch spellings)."""
  __slots__ = ()

  def cumsum(self, axis=None, dtype=None):
    """numpy.cumsum: running sums along `axis` (None: of the flattened tensor, a 1-d result;
    else self's shape). Result dtype: `dtype` when given, else as `sum`'s (bool and narrow
    ints give int32, unsigned uint32).

    Raises ShapeError for a tuple of axes or an axis out of range."""
    acc = dtypes.from_name(dtype) if dtype else acc_dtype(self.dtype)
    return _accumulate(self, "add", axis, acc)

  def cumprod(self, axis=None, dtype=None):
    """numpy.cumprod: running products along `axis` (None: of the flattened tensor, a 1-d
    result; else self's shape). Result dtype as `cumsum`'s.

    Raises ShapeError for a tuple of axes or an axis out of range."""
    acc = dtypes.from_name(dtype) if dtype else acc_dtype(self.dtype)
    return _accumulate(self, "mul", axis, acc)

  def cummax(self, axis=None):
    """Running maxima along `axis` (None: flattened), as torch.cummax: (values, indices).

    values = numpy's maximum.accumulate (NaN propagates); indices (int32) = the position of the
    last element equal to the running maximum so far (torch's tie rule), or of the latest NaN
    once the running maximum is NaN (torch likewise). Only what is used is computed."""
    return _running_extreme(self, "max", axis)

  def cummin(self, axis=None):
    """Running minima, as cummax (numpy's minimum.accumulate; torch.cummin's indices)."""
    return _running_extreme(self, "min", axis)


# ---- the scan --------------------------------------------------------------------------------

def _identity(op: str, dtype):
  return {"add": 0, "mul": 1, "max": min_value(dtype), "min": max_value(dtype)}[op]


def _combine(op: str, a, b):
  if op == "add":
    return a + b
  if op == "mul":
    return a * b
  return a.maximum(b) if op == "max" else a.minimum(b)


def _reduce_last(op: str, x):
  method = {"add": "sum", "mul": "prod", "max": "max", "min": "min"}[op]
  return getattr(x, method)(-1)


def _accumulate(x, op: str, axis, out_dtype):
  """The scan of `x` along `axis` by `op`, computed in out_dtype's work dtype, as out_dtype."""
  work = dtypes.float32 if out_dtype in (dtypes.float16, dtypes.bfloat16) else out_dtype
  if axis is None:
    x, axis = x.flatten(), 0
  elif not hasattr(axis, "__index__"):
    raise ShapeError(f"a scan takes one axis (an int) or None, got {axis!r}")
  axis = resolve_axes(axis, max(x.ndim, 1))[0]
  if x.ndim == 0:
    return x.cast(out_dtype).reshape(1)
  x = x.cast(work)
  if x.node.sym is not None:     # a scan over the padded layout: its values come first
    from ..symbolic import static_island
    return static_island(x, lambda s: _accumulate(s, op, axis, out_dtype))
  if x._elements() == 0:
    return x.cast(out_dtype)
  moved = x.swapaxes(axis, -1)
  return scan_last(moved, op).swapaxes(axis, -1).cast(out_dtype)


def scan_last(x, op: str):
  """The inclusive scan of `x` along its last axis by op ('add', 'mul', 'max', 'min')."""
  n = x.shape[-1]
  if n <= SCAN_BLOCK:
    return _window_scan(x, op)
  lead = x.shape[:-1]
  blocks = -(-n // SCAN_BLOCK)
  pad = blocks * SCAN_BLOCK - n
  padded = x.pad(((0, 0),) * len(lead) + ((0, pad),), _identity(op, x.dtype)) if pad else x
  inner = _window_scan(padded.reshape(lead + (blocks, SCAN_BLOCK)), op).contiguous()
  totals = inner.shrink(tuple((0, s) for s in lead) + ((0, blocks), (SCAN_BLOCK - 1,
                                                                      SCAN_BLOCK)))
  totals = totals.reshape(lead + (blocks,))
  before = scan_last(totals, op).contiguous() if blocks > 1 else totals
  # exclusive prefix of the totals: shift right by one block, the identity first
  before = before.pad(((0, 0),) * len(lead) + ((1, 0),), _identity(op, x.dtype))
  before = before.shrink(tuple((0, s) for s in lead) + ((0, blocks),))
  out = _combine(op, inner, before.reshape(lead + (blocks, 1)))
  out = out.reshape(lead + (blocks * SCAN_BLOCK,))
  return out.shrink(tuple((0, s) for s in lead) + ((0, n),)) if pad else out


def _window_scan(x, op: str):
  """Each output the reduction of its prefix: x broadcast to (..., n, n) under a triangular
  mask (identity where the input position is after the output's), reduced over the last axis."""
  n = x.shape[-1]
  ramp = type(x).arange(n, device=x.device)
  keep = ramp.reshape(1, n) <= ramp.reshape(n, 1)            # [out, in]: in <= out
  rows = x.unsqueeze(-2).expand(x.shape[:-1] + (n, n))
  return _reduce_last(op, where(keep, rows, _identity(op, x.dtype)))


# ---- cummax / cummin -------------------------------------------------------------------------

def _running_extreme(x, op: str, axis):
  if axis is None:
    x, axis = x.flatten(), 0
  work = x.cast(dtypes.int32) if x.dtype == dtypes.bool else x
  values = _accumulate(work, op, axis, work.dtype)
  flat = x.reshape(1) if x.ndim == 0 else x
  axis = axis % flat.ndim
  n = flat.shape[axis]
  shape = [1] * flat.ndim
  shape[axis] = n
  ramp = type(x).arange(n, device=x.device).reshape(shape)
  record = values == work.reshape(values.shape)
  if work.dtype.is_float():
    record = record | work.reshape(values.shape).isnan()
  indices = _accumulate(where(record, ramp, 0), "max", axis, dtypes.int32)
  return values.cast(x.dtype), indices


# ---- module-level spellings (kg.cumsum(x, axis) as numpy.cumsum) ------------------------------

def cumsum(x, axis=None, dtype=None):
  """The running sums of Tensor `x` along `axis` (None: of the flattened tensor), the same as
  `x.cumsum(axis, dtype)`: see `Tensor.cumsum` for the dtype rules."""
  return x.cumsum(axis, dtype)


def cumprod(x, axis=None, dtype=None):
  """The running products of Tensor `x` along `axis` (None: of the flattened tensor), the same as
  `x.cumprod(axis, dtype)` (see `Tensor.cumprod`)."""
  return x.cumprod(axis, dtype)


def cummax(x, axis=None):
  """(values, int32 indices) of the running maxima of Tensor `x` along `axis`, the same as
  `x.cummax(axis)` (see `Tensor.cummax`)."""
  return x.cummax(axis)


def cummin(x, axis=None):
  """(values, int32 indices) of the running minima of Tensor `x` along `axis`, the same as
  `x.cummin(axis)` (see `Tensor.cummin`)."""
  return x.cummin(axis)
