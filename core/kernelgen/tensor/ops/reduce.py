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


_IDENTITY = {Ops.ADD: lambda dt: 0, Ops.MUL: lambda dt: 1, Ops.MAX: min_value,
             Ops.MIN: max_value}


# split reductions: a reduction of at least SPLIT_MIN_REDUCE elements into fewer than
# SPLIT_MAX_OUTPUTS outputs runs as two kernels, partials over about SPLIT_GROUPS chunks (each a
# grouped reduction, so many workgroups share the work), then the reduction of the partials
SPLIT_MIN_REDUCE, SPLIT_MAX_OUTPUTS, SPLIT_GROUPS = 1 << 16, 256, 256


def _reduce_node(x: TensorOps, op: Ops, axes: tuple[int, ...]) -> TensorOps:
  shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
  return record(type(x)(LazyOp(L.REDUCE, x.dtype, shape, (x.node,), (op, axes))), (x,), "reduce",
                (op, axes))


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
  return size >= SPLIT_MIN_REDUCE and x.numel() // size < SPLIT_MAX_OUTPUTS


def _reduce(x: TensorOps, op: Ops, axis, keepdim: bool) -> TensorOps:
  axes = resolve_axes(axis, x.ndim)
  shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
  if any(x.shape[a] == 0 for a in axes):      # nothing to reduce: the identity (sum 0, prod 1)
    out = type(x).full(shape, 1 if op is Ops.MUL else 0, dtype=x.dtype, device=x.device)
  elif axes and _splits(x, axes):
    out = _split_reduce(x, op, axes, shape)
  else:
    out = _reduce_node(x, op, axes) if axes else x
  if not keepdim:
    out = out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))
  return out


def _check_nonempty(x: TensorOps, axis, what: str):
  axes = resolve_axes(axis, x.ndim)
  if any(x.shape[a] == 0 for a in axes):
    raise ShapeError(f"{what} of an empty axis has no identity: the tensor has shape "
                     f"{x.shape}; check the axis or use sum")


def sum_(x, axis=None, keepdim=False, dtype=None):
  acc = dtypes.from_name(dtype) if dtype else acc_dtype(x.dtype)
  work = dtypes.float32 if acc in (dtypes.float16, dtypes.bfloat16) else acc
  return _reduce(x.cast(work), Ops.ADD, axis, keepdim).cast(acc)


def prod_(x, axis=None, keepdim=False, dtype=None):
  acc = dtypes.from_name(dtype) if dtype else acc_dtype(x.dtype)
  work = dtypes.float32 if acc in (dtypes.float16, dtypes.bfloat16) else acc
  return _reduce(x.cast(work), Ops.MUL, axis, keepdim).cast(acc)


def max_(x, axis=None, keepdim=False):
  _check_nonempty(x, axis, "max")
  return _reduce(x, Ops.MAX, axis, keepdim)


def min_(x, axis=None, keepdim=False):
  _check_nonempty(x, axis, "min")
  return _reduce(x, Ops.MIN, axis, keepdim)


def any_(x, axis=None, keepdim=False):
  """numpy's any: whether some element along axis is nonzero (NaN counts); False when empty."""
  return _reduce((x != 0).cast(dtypes.int32), Ops.ADD, axis, keepdim) > 0


def all_(x, axis=None, keepdim=False):
  """numpy's all: whether every element along axis is nonzero (NaN counts); True when empty."""
  return _reduce((x == 0).cast(dtypes.int32), Ops.ADD, axis, keepdim) == 0


def _count(x: TensorOps, axis) -> int:
  return math.prod(x.shape[a] for a in resolve_axes(axis, x.ndim))


def mean(x, axis=None, keepdim=False):
  out = float_of(x.dtype) if x.dtype.is_float() else dtypes.float32
  # halves: summed and divided in float32, rounded once (a float16 sum of 65536 values of 5 is
  # inf, their mean 5)
  work = dtypes.float32 if out in (dtypes.float16, dtypes.bfloat16) else out
  total = x.cast(work).sum(axis, keepdim)
  n = _count(x, axis)
  return (total / n if n else total * math.nan).cast(out)


def var(x, axis=None, ddof=0, keepdim=False):
  out = float_of(x.dtype) if x.dtype.is_float() else dtypes.float32
  xf = x.cast(dtypes.float32 if out in (dtypes.float16, dtypes.bfloat16) else out)
  centered = xf - xf.mean(axis, keepdim=True)
  n = _count(x, axis) - ddof
  total = (centered * centered).sum(axis, keepdim)
  return (total / n if n > 0 else total * math.nan).cast(out)


def std(x, axis=None, ddof=0, keepdim=False):
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


def argmax(x, axis=None, keepdim=False): return _arg_extreme(x, axis, keepdim, True)
def argmin(x, axis=None, keepdim=False): return _arg_extreme(x, axis, keepdim, False)


def softmax(x, axis=-1):
  xf = x.cast(float_of(x.dtype))
  e = (xf - xf.max(axis, keepdim=True)).exp()
  return e / e.sum(axis, keepdim=True)


def log_softmax(x, axis=-1):
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
