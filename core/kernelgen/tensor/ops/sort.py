"""Sorting (sort, argsort, topk) as a Tensor mixin: a bitonic sorting network run on the device
with no round trip to the host.

Each element becomes a pair (key, index) of unsigned integers, stacked on a last axis of 2:
- the key is the value's bits remapped so that unsigned order is the value order (floats: the
  sign bit flipped, negative values' bits inverted; ints: the sign bit flipped), with every NaN
  one key above +inf and -0.0 equal to 0.0; `descending` inverts the key.
- the index is the element's position: ties compare by it, so the sort is stable (numpy
  kind="stable"; torch stable=True). Bit 31 (63) of the index word marks a -0.0, so values come
  back bit for bit.
The axis is padded to a power of two m with elements after every real one (the largest key and
indices >= n). The bitonic network has log2(m) * (log2(m) + 1) / 2 compare-exchange steps (pair p
meets p ^ 2^h); consecutive steps whose partner bits h number at most SORT_BITS are one kernel
(`L.SORTNET`, lowering/sortnet.py): each thread holds the 2^SORT_BITS pairs that differ in those
bits in registers and runs the steps on them, with no workgroup memory. 2^20 elements: 210 steps
in 51 kernels, then one for the values (one kernel per step was 211; blocks of 2048 pairs sorted
in workgroup memory with a barrier per step ran slower than that on lavapipe).

A symbolic axis (kg.Dim) of size s sorts its physical elements with the padding past s given the
largest key, so the s values come first (stable: after values of equal key too); the result keeps
the input's logical shape. topk along it takes k <= the dim's lowest value.

NaN order: ascending puts NaN last (numpy); descending puts NaN first, as torch does (NaN counts
as larger than every number). 64-bit dtypes sort with 64-bit words (not on WEBGPU).
"""
from __future__ import annotations

from ...dtype import dtypes
from ...errors import ShapeError
from ...graph.lazy import L, LazyOp
from ..autograd import is_grad_enabled
from ..combine import stack, where
from ..data import resolve_axes
from ..symbolic import logical, valid, with_sym


SORT_BITS = 4   # a thread holds 2^SORT_BITS pairs and runs the steps among them in one kernel


class SortMixin:
  """sort, argsort (numpy spellings, torch's `descending`), topk (torch)."""
  __slots__ = ()

  def sort(self, axis=-1, descending=False):
    """The values sorted along `axis` (None: flattened, a 1-d result; else self's shape and
    dtype); stable; NaN last (first if descending).

    Raises ShapeError for an axis out of range."""
    keys, n, axis, x = _sorted_pairs(self, axis, descending)
    return _logical(_values(keys, n, axis, x, descending), x, axis)

  def argsort(self, axis=-1, descending=False):
    """The int32 positions that sort the values along `axis` (numpy kind="stable"; None:
    of the flattened tensor), shaped as `sort`'s result.

    Raises ShapeError for an axis out of range."""
    keys, n, axis, x = _sorted_pairs(self, axis, descending)
    return _logical(_indices(keys, n, axis, x), x, axis)

  def topk(self, k: int, axis=-1, largest=True):
    """(values, int32 indices) of the k largest (smallest) along `axis`, in sorted order; ties
    keep their original order; NaN counts as the largest value (torch)."""
    if axis is None:
      raise ShapeError("topk needs an axis (an int): flatten the tensor first")
    keys, n, axis, x = _sorted_pairs(self, axis, largest)
    low = getattr(logical(x)[-1], "lo", n)      # (a symbolic axis: its lowest size)
    if not isinstance(k, int) or not 0 <= k <= low:
      raise ShapeError(f"topk k={k!r} along an axis of {logical(x)[-1]} elements: k must be "
                       f"0..{low}")
    return (_logical(_values(keys, k, axis, x, largest), x, axis, k),
            _logical(_indices(keys, k, axis, x), x, axis, k))


# ---- keys ------------------------------------------------------------------------------------

def _word(dtype):
  return dtypes.uint64 if dtype.itemsize == 8 else dtypes.uint32


def _work_dtype(dtype):
  """The dtype the keys are made from: float16/bfloat16 sort as float32, narrow ints as 32-bit."""
  if dtype.is_float():
    return dtype if dtype.itemsize >= 4 else dtypes.float32
  if dtype == dtypes.bool or dtype.is_unsigned():
    return dtype if dtype.itemsize == 8 else dtypes.uint32
  return dtype if dtype.itemsize >= 4 else dtypes.int32


def _to_key(x, word, descending: bool):
  """x (work dtype) -> (key, negative-zero flag) as `word` unsigned ints in value order."""
  top = 1 << (word.bits - 1)
  if x.dtype.is_float():
    negzero = (x == 0) & ((x.bitcast(_int_of(x.dtype)).bitcast(word) & top) != 0)
    bits = where(x == 0, x._const(0), x).bitcast(_int_of(x.dtype)).bitcast(word)
    key = where((bits & top) != 0, ~bits, bits | top)
    key = where(x.isnan(), x._const((1 << word.bits) - 1, word), key)
  else:
    key = x.bitcast(word) if x.dtype.itemsize == word.itemsize else x.cast(word)
    if not x.dtype.is_unsigned():
      key = key ^ top
    negzero = None
  return (~key if descending else key), negzero


def _from_key(key, dtype, negzero, descending: bool):
  """The inverse of _to_key: key words -> values of the work dtype `dtype`."""
  word = key.dtype
  top = 1 << (word.bits - 1)
  key = ~key if descending else key
  if dtype.is_float():
    bits = where((key & top) != 0, key & (top - 1), ~key)
    value = bits.bitcast(_int_of(dtype)).bitcast(dtype)
    return where(negzero, value._const(-0.0), value)
  if not dtype.is_unsigned():
    key = key ^ top
  return key.bitcast(dtype) if dtype.itemsize == word.itemsize else key.cast(dtype)


def _int_of(dtype):
  return dtypes.int64 if dtype.itemsize == 8 else dtypes.int32


# ---- the network -----------------------------------------------------------------------------

def _sorted_pairs(x, axis, descending: bool):
  """(pairs (..., m, 2) sorted along m, n, axis, the moved input) for x sorted along axis."""
  if axis is None:
    x, axis = x.flatten(), 0
  if x.ndim == 0:
    x, axis = x.reshape(1), 0
  if not hasattr(axis, "__index__"):
    raise ShapeError(f"sort takes one axis (an int) or None, got {axis!r}")
  axis = resolve_axes(axis, x.ndim)[0]
  moved = x.swapaxes(axis, -1)
  n = moved.shape[-1]
  if moved._elements() == 0:
    return None, n, axis, moved
  pairs = _pairs(moved, descending)
  for bits, steps in _kernels(pairs.shape[-2]):
    pairs = type(pairs)(LazyOp(L.SORTNET, pairs.dtype, pairs.shape, (pairs.node,), (bits, steps)))
  return pairs, n, axis, moved


def _kernels(m: int) -> list:
  """The network's steps (h, d) grouped into kernels (bits, steps): consecutive steps whose
  partner bits h number at most SORT_BITS (lowering/sortnet.py)."""
  out, bits, steps = [], set(), []
  for h, d in _network(m):
    if h not in bits and len(bits) == SORT_BITS:
      out.append((tuple(sorted(bits)), tuple(steps)))
      bits, steps = set(), []
    bits.add(h)
    steps.append((h, d))
  if steps:
    out.append((tuple(sorted(bits)), tuple(steps)))
  return out


def _network(m: int):
  """The bitonic network's steps (h, d) for m = 2^k pairs: p meets p ^ 2^h, ascending where bit d
  of p is 0 (lowering/sortnet.py)."""
  k = m.bit_length() - 1
  for stage in range(1, k + 1):
    for h in range(stage - 1, -1, -1):
      yield h, stage


def _pairs(x, descending: bool):
  """(..., n) values -> (..., m, 2) words (key, index | -0.0 flag), m = n padded to 2^k."""
  word = _word(x.dtype)
  n = x.shape[-1]
  m = 1 << max(n - 1, 0).bit_length()
  key, negzero = _to_key(x.cast(_work_dtype(x.dtype)), word, descending)
  key, negzero = _past_values_last(x, key, negzero)
  lead = ((0, 0),) * (x.ndim - 1)
  key = key.pad(lead + ((0, m - n),), (1 << word.bits) - 1) if m > n else key
  index = type(x).arange(m, device=x.device).cast(word).expand(x.shape[:-1] + (m,))
  if negzero is not None:
    flag = negzero.cast(word).pad(lead + ((0, m - n),)) if m > n else negzero.cast(word)
    index = index | (flag << (word.bits - 1))
  return stack([key, index], -1)


def _past_values_last(x, key, negzero):
  """(key, negzero) with the padding past a symbolic last axis' values keyed after every value,
  both made static (the network sorts the physical axis); unchanged when it is not symbolic."""
  if x.node.sym is None:
    return key, negzero
  ok = valid(x, (x.ndim - 1,))
  if ok is not None:
    key = ok.where(key, key._const((1 << key.dtype.bits) - 1, key.dtype))
  return with_sym(key, x.shape), (with_sym(negzero, x.shape) if negzero is not None else None)


def _logical(out, moved, axis: int, k=None):
  """The sorted `out` with the logical shape of the input (`moved` swapped back; the sorted
  axis k long for topk), when it had a symbolic axis: a sorted one holds its values first."""
  if moved.node.sym is None:
    return out
  sym = list(logical(moved))
  sym[-1] = sym[-1] if k is None else k
  sym[axis], sym[-1] = sym[-1], sym[axis]
  return with_sym(out, sym)


# ---- results ---------------------------------------------------------------------------------

def _values(pairs, k: int, axis: int, x, descending: bool):
  if pairs is None:
    return x.shrink(tuple((0, s) for s in x.shape[:-1]) + ((0, k),)).swapaxes(axis, -1)
  if x.requires_grad and is_grad_enabled():   # differentiable: x gathered at the sorted positions
    return x.gather(x.ndim - 1, _positions(pairs, k)).swapaxes(axis, -1)
  word = pairs.dtype
  top = pairs[..., :k, :]
  negzero = ((top[..., 1] >> (word.bits - 1)) != 0) if x.dtype.is_float() else None
  values = _from_key(top[..., 0], _work_dtype(x.dtype), negzero, descending)
  return values.cast(x.dtype).swapaxes(axis, -1)


def _indices(pairs, k: int, axis: int, x):
  if pairs is None:
    shape = x.shape[:-1] + (k,)
    return type(x).zeros(*shape, dtype=dtypes.int32, device=x.device).swapaxes(axis, -1)
  return _positions(pairs, k).swapaxes(axis, -1)


def _positions(pairs, k: int):
  """The int32 original positions of the first k sorted pairs (the index word's low bits)."""
  low = (1 << (pairs.dtype.bits - 1)) - 1
  return (pairs[..., :k, 1] & low).cast(dtypes.int32)


# ---- module-level spellings ------------------------------------------------------------------

def sort(x, axis=-1, descending=False):
  """The values of Tensor `x` sorted along `axis` (stable; NaN last), the same as `x.sort(axis,
  descending)` (see `Tensor.sort`)."""
  return x.sort(axis, descending)


def argsort(x, axis=-1, descending=False):
  """The int32 positions that sort Tensor `x` along `axis` (stable), the same as `x.argsort(axis,
  descending)` (see `Tensor.argsort`)."""
  return x.argsort(axis, descending)


def topk(x, k: int, axis=-1, largest=True):
  """(values, int32 indices) of the k largest (largest=False: smallest) elements of Tensor `x` along
  `axis`, the same as `x.topk(k, axis, largest)` (see `Tensor.topk`).

  Raises ShapeError when k is not in 0..size of the axis, or axis is None."""
  return x.topk(k, axis, largest)


def sort_last(x):
  """(values, int32 positions) of x sorted along its last axis, ascending and stable, from one
  sorting network (a scatter's segments: tensor/ops/sorted_scatter.py)."""
  pairs, n, axis, moved = _sorted_pairs(x, -1, False)
  return _values(pairs, n, axis, moved, False), _indices(pairs, n, axis, moved)
