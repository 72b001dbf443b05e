"""Reductions over axes (sum, prod, max, min, any, all, mean, var, std, argmax/argmin) and the
reductions with a map around them (softmax, log_softmax, logsumexp): the ReduceOps mixin that
`Tensor` lists among its bases.

A large reduction into few outputs is split in two kernels (SPLIT_MIN_REDUCE, SPLIT_MAX_OUTPUTS:
partials over about SPLIT_GROUPS chunks, then the reduction of the partials). Half-precision
sums accumulate in float32 (operands.acc_dtype).
"""
from __future__ import annotations

import math

from ...dtype import dtypes, max_value, min_value
from ...errors import ShapeError
from ...graph.lazy import L, LazyOp
from ...uop.ops import Ops
from ..operands import TensorOps, public_names, acc_dtype, float_of
from ..data import resolve_axes
from ..autograd import record
from ...graph.dims import Sym
from ..symbolic import count, masked, scalar


_IDENTITY = {Ops.ADD: lambda dt: 0, Ops.MUL: lambda dt: 1, Ops.MAX: min_value,
             Ops.MIN: max_value}


# split reductions: a reduction of at least SPLIT_MIN_REDUCE elements into fewer than
# SPLIT_MAX_OUTPUTS outputs runs as two kernels, partials over about SPLIT_GROUPS chunks (each a
# grouped reduction, so many workgroups share the work), then the reduction of the partials
SPLIT_MIN_REDUCE, SPLIT_MAX_OUTPUTS, SPLIT_GROUPS = 1 << 16, 256, 256


def _reduce_node(x: TensorOps, op: Ops, axes: tuple[int, ...]) -> TensorOps:
  shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
  sym, lengths = None, ()
  if x.node.sym is not None:     # symbolic axes: their padding reduces as the identity
    lengths = tuple((a, scalar(type(x), x.node.sym[a], x.device).node) for a in axes
                    if isinstance(x.node.sym[a], Sym))
    x = masked(x, axes, _IDENTITY[op](x.dtype))
    sym = tuple(1 if i in axes else s for i, s in enumerate(x.node.logical))
  node = LazyOp(L.REDUCE, x.dtype, shape, (x.node,), (op, axes), sym=sym)
  node.bound = lengths or None   # the loops may stop there (lowering: Lowerer.limit)
  return record(type(x)(node), (x,), "reduce", (op, axes))


def _split_reduce(x: TensorOps, op: Ops, axes: tuple[int, ...], shape: tuple[int, ...]) -> TensorOps:
  """The reduction as chunk partials (padded with the op's identity) realized, then reduced."""
  keep = tuple(i for i in range(x.ndim) if i not in axes)
  outs = tuple(x.shape[i] for i in keep)
  size = math.prod(x.shape[a] for a in axes)
  chunk = -(-size // SPLIT_GROUPS)
  groups = -(-size // chunk)
  flat = x.permute(*keep, *axes).reshape(outs + (size,))
  if groups * chunk != size:
    flat = flat.pad(((0, 0),) * len(outs) + ((0, groups * chunk - size),),
                    _IDENTITY[op](x.dtype))
  parts = _reduce_node(flat.reshape(outs + (groups, chunk)), op, (len(outs) + 1,)).contiguous()
  return _reduce_node(parts, op, (len(outs),)).reshape(shape)


def _splits(x: TensorOps, axes: tuple[int, ...]) -> bool:
  size = math.prod(x.shape[a] for a in axes)
  return size >= SPLIT_MIN_REDUCE and x._elements() // size < SPLIT_MAX_OUTPUTS


def _reduce(x: TensorOps, op: Ops, axis, keepdim: bool) -> TensorOps:
  axes = resolve_axes(axis, x.ndim)
  if x.node.sym is not None and axes and _splits(x, axes):   # (a split reduction reshapes)
    x = masked(x, axes, _IDENTITY[op](x.dtype))
  shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
  if any(x.shape[a] == 0 for a in axes):      # nothing to reduce: the identity (sum 0, prod 1)
    out = type(x).full(shape, 1 if op is Ops.MUL else 0, dtype=x.dtype, device=x.device)
  elif axes and _splits(x, axes):
    out = _split_reduce(x, op, axes, shape)
  elif x.node.sym is None and all(x.shape[a] == 1 for a in axes):
    out = x          # one element each: the element (no kernel of its own; Silero VAD's mean)
  else:
    out = _reduce_node(x, op, axes)
  if not keepdim:
    out = out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))
  return out


def _check_nonempty(x: TensorOps, axis, what: str):
  axes = resolve_axes(axis, x.ndim)
  if any(x.shape[a] == 0 for a in axes):
    raise ShapeError(f"{what} of an empty axis has no identity: the tensor has shape "
                     f"{x.shape}; check the axis or use sum")


def sum_(x, axis=None, keepdim=False, dtype=None):
  """The sum over `axis` (an int, a tuple of ints, or None for every axis); `keepdim` keeps the
  reduced axes with size 1. Result dtype: `dtype` when given, else bool and ints narrower than 32
  bits give int32 (uint32 for unsigned), wider ints and floats keep theirs (float16 and bfloat16
  add in float32, rounded once). An empty axis sums to 0.

  Raises ShapeError for an axis out of range."""
  acc = dtypes.from_name(dtype) if dtype else acc_dtype(x.dtype)
  work = dtypes.float32 if acc in (dtypes.float16, dtypes.bfloat16) else acc
  return _reduce(x.cast(work), Ops.ADD, axis, keepdim).cast(acc)


def prod_(x, axis=None, keepdim=False, dtype=None):
  """The product over `axis` (an int, a tuple of ints, or None for every axis); `keepdim` keeps the
  reduced axes with size 1. Result dtype as `sum`'s (`dtype` when given). An empty axis gives 1.

  Raises ShapeError for an axis out of range."""
  acc = dtypes.from_name(dtype) if dtype else acc_dtype(x.dtype)
  work = dtypes.float32 if acc in (dtypes.float16, dtypes.bfloat16) else acc
  return _reduce(x.cast(work), Ops.MUL, axis, keepdim).cast(acc)


def max_(x, axis=None, keepdim=False):
  """The largest value over `axis` (an int, a tuple of ints, or None for every axis), same dtype;
  `keepdim` keeps the reduced axes with size 1.

  Raises ShapeError for an axis out of range or of size 0 (a max of nothing has no value)."""
  _check_nonempty(x, axis, "max")
  return _reduce(x, Ops.MAX, axis, keepdim)


def min_(x, axis=None, keepdim=False):
  """The smallest value over `axis` (an int, a tuple of ints, or None for every axis), same dtype;
  `keepdim` keeps the reduced axes with size 1.

  Raises ShapeError for an axis out of range or of size 0."""
  _check_nonempty(x, axis, "min")
  return _reduce(x, Ops.MIN, axis, keepdim)


def any_(x, axis=None, keepdim=False):
  """numpy's any: whether some element along axis is nonzero (NaN counts); False when empty."""
  return _reduce((x != 0).cast(dtypes.int32), Ops.ADD, axis, keepdim) > 0


def all_(x, axis=None, keepdim=False):
  """numpy's all: whether every element along axis is nonzero (NaN counts); True when empty."""
  return _reduce((x == 0).cast(dtypes.int32), Ops.ADD, axis, keepdim) == 0


def _count(x: TensorOps, axis):
  """The number of elements along `axis` (an int, or a Sym where some axis is symbolic)."""
  return count(x, resolve_axes(axis, x.ndim))


def _divide(total: TensorOps, n, x: TensorOps) -> TensorOps:
  """total / n for a count n: an int, or a symbolic one (a Sym or a Count: a run-time value)."""
  if not isinstance(n, int):
    return total / scalar(type(x), n, x.device).cast(total.dtype)
  return total / n if n > 0 else total * math.nan


def mean(x, axis=None, keepdim=False):
  """The arithmetic mean over `axis` (an int, a tuple of ints, or None for every axis); `keepdim`
  keeps the reduced axes with size 1. A float result: the input's float dtype (half types add in
  float32), float32 for integers and bool. An empty axis gives NaN."""
  out = float_of(x.dtype) if x.dtype.is_float() else dtypes.float32
  # halves: summed and divided in float32, rounded once (a float16 sum of 65536 values of 5 is
  # inf, their mean 5)
  work = dtypes.float32 if out in (dtypes.float16, dtypes.bfloat16) else out
  total = x.cast(work).sum(axis, keepdim)
  return _divide(total, _count(x, axis), x).cast(out)


def var(x, axis=None, ddof=0, keepdim=False):
  """The variance over `axis` (an int, a tuple, or None for every axis): the mean squared deviation
  from the mean, divided by N - ddof (ddof=1: the unbiased estimate; numpy's default ddof=0).
  Float result as `mean`'s; NaN when N - ddof <= 0."""
  out = float_of(x.dtype) if x.dtype.is_float() else dtypes.float32
  xf = x.cast(dtypes.float32 if out in (dtypes.float16, dtypes.bfloat16) else out)
  centered = xf - xf.mean(axis, keepdim=True)
  total = (centered * centered).sum(axis, keepdim)
  return _divide(total, _count(x, axis) - ddof, x).cast(out)


def std(x, axis=None, ddof=0, keepdim=False):
  """The standard deviation over `axis`, sqrt(var(axis, ddof)); float result as `mean`'s."""
  return x.var(axis, ddof, keepdim).sqrt()


def _arg_extreme(x: TensorOps, axis, keepdim: bool, largest: bool) -> TensorOps:
  _check_nonempty(x, axis, "argmax" if largest else "argmin")
  if axis is None:
    out = _arg_extreme(x.flatten(), 0, False, largest)
    return out.reshape((1,) * x.ndim) if keepdim else out
  if not hasattr(axis, "__index__"):
    raise ShapeError(f"{'argmax' if largest else 'argmin'} takes one axis (an int) or None, "
                     f"got {axis!r}: reduce the other axes first, or flatten")
  axis = resolve_axes(axis, x.ndim)[0]
  best = x.max(axis, keepdim=True) if largest else x.min(axis, keepdim=True)
  hit = (x == best) | x.isnan() if x.dtype.is_float() else x == best
  n = x.shape[axis]
  shape = [1] * x.ndim
  shape[axis] = n
  rev = (n - 1 - type(x).arange(n, device=x.device)).reshape(shape)
  first = hit.where(rev, 0).max(axis, keepdim)
  return (n - 1 - first).cast(dtypes.int32)


def argmax(x, axis=None, keepdim=False):
  """The int32 position of the largest value along `axis` (one int), or in the flattened tensor when
  None; the first one on ties, and the first NaN if there is one (numpy). `keepdim` keeps the
  axis with size 1.

  Raises ShapeError for a tuple of axes, an axis out of range or an empty axis."""
  return _arg_extreme(x, axis, keepdim, True)


def argmin(x, axis=None, keepdim=False):
  """The int32 position of the smallest value along `axis` (one int), or in the flattened tensor
  when None; the first one on ties, and the first NaN if there is one (numpy). `keepdim` keeps
  the axis with size 1.

  Raises ShapeError for a tuple of axes, an axis out of range or an empty axis."""
  return _arg_extreme(x, axis, keepdim, False)


def softmax(x, axis=-1):
  """exp(x) / sum(exp(x)) along `axis` (an int or a tuple), shifted by the max so large values do
  not overflow; same shape, a float dtype (float32 for integer inputs). Each slice along `axis`
  sums to 1."""
  xf = x.cast(float_of(x.dtype))
  e = (xf - xf.max(axis, keepdim=True)).exp()
  return e / e.sum(axis, keepdim=True)


def log_softmax(x, axis=-1):
  """log(softmax(x)) along `axis`, computed as x - max - log(sum(exp(x - max))) so it stays finite
  for large |x|; same shape, a float dtype (float32 for integer inputs)."""
  xf = x.cast(float_of(x.dtype))
  shifted = xf - xf.max(axis, keepdim=True)
  return shifted - shifted.exp().sum(axis, keepdim=True).log()


def logsumexp(x, axis=None, keepdim=False):
  """log(sum(exp(x))) over axis, shifted by the max for range (torch.logsumexp, scipy's):
  rows of -inf give -inf, an inf gives inf, NaN propagates; an empty reduction is -inf."""
  xf = x.cast(float_of(x.dtype))
  axes = resolve_axes(axis, x.ndim)
  if any(x.shape[a] == 0 for a in axes):
    return xf.sum(axis, keepdim) - math.inf
  m = xf.max(axis, keepdim=True).detach()
  m = m.isinf().where(0.0, m)
  out = (xf - m).exp().sum(axis, keepdim=True).log() + m
  return out if keepdim else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))


@public_names
class ReduceOps(TensorOps):
  """Reductions over axes: sum, prod, max, min, any, all, mean, var, std, argmax/argmin,
  softmax, log_softmax, logsumexp."""
  __slots__ = ()
  sum, prod, max, min, any, all = sum_, prod_, max_, min_, any_, all_
  mean, var, std, argmax, argmin = mean, var, std, argmax, argmin
  softmax, log_softmax, logsumexp = softmax, log_softmax, logsumexp
