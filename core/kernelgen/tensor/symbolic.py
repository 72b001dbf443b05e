"""Tensors with symbolic sizes (graph/dims.py: `kg.Dim`): creation, movement, slicing at run-time
offsets, and masking the padding before a reduction.

A symbolic axis of size s holds s.hi elements (the padded layout, graph/dims.py); its first s are
the tensor's values. What this module adds to the ordinary ops:

- `valid(x, axes)`: True at the positions that hold values (an index ramp compared with s, s a
  run-time argument); reductions replace the rest by their identity (`masked`), pad fills it.
- reads at a symbolic offset (`x[:, pos:pos + 1]`, `x[pos]`, `cat` along a symbolic axis): a
  gather whose index is the ramp plus the offset, so the offset stays a run-time argument
  (`gather_at`; indexing itself, with steps, and conv windows: symbolic_steps.py).
- reading back: the first s.value elements of each symbolic axis.
"""
from __future__ import annotations

import math
from ..dtype import dtypes
from ..errors import ShapeError, UnsupportedError
from ..graph.dims import Count, Sym, describe_sym, physical, split_shape
from ..graph.lazy import L, LazyOp, chain_view


def has_sym(shape) -> bool:
  return any(isinstance(s, Sym) for s in shape)


def logical(x) -> tuple:
  """The tensor's logical shape: its sizes, the symbolic ones as Sym."""
  return x.node.logical


def concrete_shape(x) -> tuple[int, ...]:
  """The logical shape under the dims' bindings (ShapeError when one is unbound)."""
  return tuple(s.value if isinstance(s, Sym) else s for s in logical(x))


def scalar(cls, s, device: str):
  """An int32 tensor of shape () holding the value of `s` (an int, a Sym: a sum of its dims'
  run-time values, L.VAR nodes, or a Count: a product of them)."""
  if isinstance(s, Count):
    out = None
    for each in s.syms:
      out = scalar(cls, each, device) if out is None else out * scalar(cls, each, device)
    out = out * s.factor if s.factor != 1 else out
    return out - s.offset if s.offset else out
  if not isinstance(s, Sym):
    return cls.full((), s, dtype=dtypes.int32, device=device)
  return s.runtime(lambda name, lo, hi: cls(LazyOp(L.VAR, dtypes.int32, (), arg=(name, lo, hi),
                                                   device=device, bound=s.values.get(name))),
                   lambda k: k)


def with_sym(x, sym):
  """x with logical shape `sym` (same physical shape): an identity view that carries it."""
  node = x.node
  if node.sym == (tuple(sym) if sym is not None else None):
    return x
  return type(x)(chain_view(node, "reshape", node.shape, sym=tuple(sym) if sym else ()))


def valid(x, axes) -> object | None:
  """A bool tensor broadcastable to x: True where every symbolic axis among `axes` indexes a
  value (i < s); None when none of them is symbolic."""
  sym, out = logical(x), None
  for a in axes:
    s = sym[a]
    if not isinstance(s, Sym):
      continue
    shape = [1] * x.ndim
    shape[a] = x.shape[a]
    ramp = type(x).arange(x.shape[a], device=x.device).reshape(shape)
    ok = ramp < scalar(type(x), s, x.device)
    out = ok if out is None else out & ok
  return out


def masked(x, axes, fill):
  """x with the padding along the symbolic `axes` replaced by `fill` and those axes made static
  (their physical size: a reduction over them then needs no mask)."""
  ok = valid(x, axes)
  if ok is None:
    return x
  out = ok.where(x, type(x).full((), fill, dtype=x.dtype, device=x.device))
  sym = tuple(x.shape[a] if a in axes else s for a, s in enumerate(logical(x)))
  return with_sym(out, sym)


def static_island(x, fn):
  """fn(x) computed as if x's symbolic axes were static (their padding zeroed), the result given
  x's logical shape back: for ops whose outputs at value positions read only values (scans)."""
  sym = logical(x)
  static = masked(x, range(x.ndim), 0)
  out = fn(static)
  return with_sym(out, sym)


def count(x, axes):
  """The number of values along `axes`: an int, a Sym, or a Count (graph/dims.py: n * m is no
  affine size, but a reduction divides by its run-time value) where two or more are symbolic, or
  one is floored ((n + 1) // 2) and others are static (64 * ((n + 1) // 2) is no size either)."""
  out, syms = 1, []
  for a in axes:
    s = logical(x)[a]
    if isinstance(s, Sym):
      syms.append(s)
    else:
      out *= s
  if (len(syms) > 1 or syms and syms[0].div != 1 and out != 1) and out:
    return Count(out, tuple(syms))
  return out * syms[0] if syms else out


def numel(x):
  """Tensor.numel of `x` with symbolic sizes: the count of its values as a Sym (an UnsupportedError
  where two or more axes are symbolic: no Sym is their product)."""
  out = count(x, range(x.ndim))
  if isinstance(out, Count):
    raise UnsupportedError(f"numel() of a tensor of shape {tuple(logical(x))}: the count of its "
                           f"values, {out}, is no size expression (sizes are affine in the dims, "
                           f"or floored); read symbolic_shape, and each size's .value under its "
                           f"binding or .hi, the padded size")
  return out


# ---- creation ---------------------------------------------------------------------------------

def full(cls, shape, value, dtype, device):
  """Tensor.full with symbolic sizes: the physical shape, carrying the logical one."""
  phys, sym = split_shape(shape)
  return with_sym(cls.full(phys, value, dtype=dtype, device=device), sym)


def empty(cls, shape, dtype, device, name, requires_grad: bool):
  phys, sym = split_shape(shape)
  x = cls.empty(*phys, dtype=dtype, device=device, name=name, requires_grad=requires_grad)
  x.node.sym = sym
  return x


def arange(cls, n: Sym, device):
  """0, 1, ..., n - 1 for a symbolic n (an index ramp over n.hi, carrying n)."""
  return with_sym(cls.arange(n.hi, device=device), (n,))


def symbolic(x, shape):
  """x, whose sizes are the bound values of the symbolic sizes in `shape`, as a tensor of that
  logical shape (padded to each size's hi; host data is padded on the host: no kernel)."""
  shape = tuple(shape)
  if len(shape) != x.ndim:
    raise ShapeError(f"symbolic{shape} of a {x.ndim}-d tensor: give one size per axis")
  for a, (s, n) in enumerate(zip(shape, x.shape)):
    if (s.value if isinstance(s, Sym) else s) != n:
      raise ShapeError(f"axis {a} has {n} elements, but {s} is "
                       f"{s.value if isinstance(s, Sym) else s}: bind it to {n}")
  phys, sym = split_shape(shape)
  if sym is None:
    return x
  node = x.node
  if node.realized and node.buffer.host_only and node.sym is None:
    return _host_padded(x, phys, sym)
  pads = tuple((0, p - n) for p, n in zip(phys, x.shape))
  return with_sym(x._move("pad", pads), sym)


def _host_padded(x, phys, sym):
  from ..graph.lazy import Buffer
  item = x.dtype.itemsize
  data = padded(x.node.buffer.copyout(), x.shape, phys, item)
  buffer = Buffer(x.device, x.dtype, len(data) // item, data, x.node.buffer.name)
  buffer.is_input = x.node.buffer.is_input
  return type(x)(LazyOp(L.BUFFER, x.dtype, phys, device=x.device, buffer=buffer, sym=sym))


# ---- movement -------------------------------------------------------------------------------

def reshape(x, shape):
  """Tensor.reshape with symbolic sizes in `shape` (at most one -1)."""
  shape = list(shape)
  if shape.count(-1) > 1:
    raise ShapeError(f"reshape to {tuple(shape)}: only one dim can be -1")
  if -1 in shape:
    total = count(x, range(x.ndim))
    known = count_of([s for s in shape if not (isinstance(s, int) and s == -1)])
    shape[shape.index(-1)] = _exact(total, known)
  phys, sym = split_shape(shape)
  try:
    out = x._move("reshape", phys)
  except ShapeError:
    raise ShapeError(f"cannot reshape {describe_sym(logical(x))} to {describe_sym(shape)}: the "
                     f"sizes hold different numbers of elements (for a bound value, or as laid "
                     f"out padded: {x.shape} and {phys}); give sizes whose product is the "
                     f"tensor's") from None
  got = logical(out)
  if tuple(got) != tuple(shape):
    raise ShapeError(f"cannot reshape {logical(x)} to {tuple(shape)}: the sizes differ "
                     f"(as laid out the result is {got})")
  return out


def count_of(sizes):
  out = 1
  for s in sizes:
    out = out * s
  return out


def _exact(total, known):
  if isinstance(total, Count):
    raise UnsupportedError(f"reshape: -1 would hold {total} elements, a product of symbolic "
                           f"sizes, which no padded layout holds (its values are not the first "
                           f"ones): keep the symbolic axes apart (reductions take several axes, "
                           f"x.sum((1, 2))), or make all but one of them static")
  if isinstance(known, Sym):
    ratio = _ratio(total, known)
    if ratio is None:
      raise UnsupportedError(f"reshape: -1 would be {total} / ({known}), which is no whole number "
                             f"for every value of the dims: give the sizes")
    return ratio
  if isinstance(total, Sym):
    return total // known
  return total // known if known else 0


def _ratio(total, known: Sym) -> int | None:
  """The int k with known * k == total (both symbolic: (n, 4, 16) -> (n, -1) infers 64), else
  None."""
  if not isinstance(total, Sym) or known.names != total.names:
    return None
  name = known.names[0]
  k, rest = divmod(dict(total.terms)[name], dict(known.terms)[name])
  return k if not rest and k > 0 and known * k == total else None


def expand(x, shape):
  """Tensor.expand to a shape with symbolic sizes (size-1 axes grow to them)."""
  shape = tuple(shape)
  x = x.reshape((1,) * (len(shape) - x.ndim) + tuple(logical(x)))
  sym = []
  for a, (s, n) in enumerate(zip(shape, logical(x))):
    if isinstance(s, int) and s == -1:
      s = n
    if n != 1 and s != n:
      raise ShapeError(f"cannot expand {logical(x)} to {shape}: only size-1 dims can grow")
    sym.append(s)
  phys, _ = split_shape(sym)
  out = x._move("expand", phys) if tuple(phys) != x.shape else x
  return with_sym(out, tuple(sym))


def pad(x, pads, value):
  """Tensor.pad (constant) of a tensor with symbolic axes: the fill after a symbolic axis's values
  comes where its padding was (positions s + before.., masked), the rest as usual."""
  sym = logical(x)
  after = [a for a, (s, (b, e)) in enumerate(zip(sym, pads)) if isinstance(s, Sym) and e]
  moved = tuple((b, e) for b, e in pads)
  out_sym = tuple(s + b + e for s, (b, e) in zip(sym, pads))
  inner = with_sym(x, tuple(n if a in after else s for a, (s, n) in enumerate(zip(sym, x.shape))))
  out = inner._move("pad", moved)
  keep = None
  for a in range(x.ndim):
    if isinstance(sym[a], Sym) or any(pads[a]):
      shape = [1] * x.ndim
      shape[a] = out.shape[a]
      ramp = type(x).arange(out.shape[a], device=x.device).reshape(shape)
      lo, hi = pads[a][0], sym[a] + pads[a][0]
      ok = (ramp >= lo) & (ramp < scalar(type(x), hi, x.device))
      keep = ok if keep is None else keep & ok
  fill = type(x).full((), value, dtype=x.dtype, device=x.device)
  return with_sym(keep.where(out, fill), out_sym)


def cat(tensors, axis: int):
  """kg.cat along an axis where some size is symbolic: each part read at its run-time offset."""
  first = tensors[0]
  sizes = [logical(t)[axis] for t in tensors]
  try:
    total = count_sum(sizes)
  except UnsupportedError:
    raise UnsupportedError(f"kg.cat along axis {axis} of parts of sizes "
                           f"{', '.join(map(str, sizes))}: their total is no size kernelgen can "
                           f"express (sizes are affine in the dims, or one affine expression "
                           f"floor-divided by an int); stack the parts on a new axis instead "
                           f"(kg.stack), or give the stepped axis a size the step divides (2*h "
                           f"rows for h = kg.Dim('h', lo, hi))") from None
  out, offset = None, 0
  for t, n in zip(tensors, sizes):
    part = _shifted(t, axis, offset, physical(total))
    ok = _between(first, axis, offset, offset + n, physical(total))
    out = part if out is None else ok.where(part, out)
    offset = offset + n
  sym = list(logical(out))
  sym[axis] = total
  return with_sym(out, tuple(sym))


def count_sum(sizes):
  out = 0
  for s in sizes:
    out = out + s
  return out


def _between(x, axis: int, lo, hi, n: int):
  shape = [1] * x.ndim
  shape[axis] = n
  ramp = type(x).arange(n, device=x.device).reshape(shape)
  return (ramp >= scalar(type(x), lo, x.device)) & (ramp < scalar(type(x), hi, x.device))


def _shifted(x, axis: int, offset, n: int):
  """y with y[..., i, ...] = x[..., i - offset, ...] along `axis` for i in 0..n-1 (other
  positions: unspecified), the offset a run-time value when symbolic (a floored one is negated
  at run time: no size is minus a floored one)."""
  if isinstance(offset, Sym) and offset.div != 1:
    return gather_at(x, axis, -scalar(type(x), offset, x.device), n)
  return gather_at(x, axis, scalar(type(x), -offset, x.device), n)


def gather_at(x, axis: int, start, n: int, step: int = 1):
  """x read along `axis` at start + 0, start + step, ... (n positions; `start` an int32 tensor of
  shape ()): a gather, so a run-time start needs no new kernel. Positions outside the axis read
  0. Other axes keep their logical sizes; `axis` becomes static n."""
  shape = [1] * x.ndim
  shape[axis] = n
  ramp = type(x).arange(n, device=x.device).reshape(shape)
  index = (ramp * step if step != 1 else ramp) + start
  full = tuple(n if a == axis else s for a, s in enumerate(x.shape))
  index = index.expand(full) if tuple(index.shape) != full else index
  sym = tuple(n if a == axis else s for a, s in enumerate(logical(x)))
  index = with_sym(index, sym)
  return x.gather(axis, index)


def prod_all(sizes) -> int:
  out = 1
  for n in sizes:
    out *= n
  return out


def symbolic_index(index) -> bool:
  """Whether an index holds a symbolic bound or position (then getitem above handles it)."""
  items = index if isinstance(index, tuple) else (index,)
  return any(isinstance(i, Sym) or isinstance(i, slice) and
             (isinstance(i.start, Sym) or isinstance(i.stop, Sym)) for i in items)


def compact(raw: bytes, phys: tuple, shape: tuple, item: int) -> bytes:
  """The bytes of the leading `shape` block of a row-major array of shape `phys`."""
  if not phys:
    return raw
  if any(n == 0 for n in shape):
    return b""
  if tuple(shape[1:]) == tuple(phys[1:]):      # the rows are whole: a prefix
    return raw[:item * shape[0] * prod_all(phys[1:])]
  inner_phys = item
  for n in phys[1:]:
    inner_phys *= n
  out = bytearray()
  for i in range(shape[0]):
    out += compact(raw[i * inner_phys:(i + 1) * inner_phys], phys[1:], shape[1:], item)
  return bytes(out)


# ---- attention ----------------------------------------------------------------------------------

def attention_operands(q, k, v, mask, causal: bool, offset, length: bool = True):
  """(k, v, mask) for sdpa over symbolic sizes: the keys' padding zeroed (so no unspecified
  value meets a zero weight) and left out by a bool mask, which also holds the causal rule with
  query i at position i + offset (`offset` an int or a Sym: a run-time value) and the given
  mask. Without `length` the mask leaves the keys past a symbolic key length in (the fused
  kernel walks only the keys before it: key_count)."""
  cls, n, m = type(q), q.shape[-2], k.shape[-2]
  keys = cls.arange(m, device=q.device).reshape(1, m)
  ok = None
  length = logical(k)[-2] if length else None
  if isinstance(length, Sym):
    ok = keys < scalar(cls, length, q.device)
  if causal:
    queries = cls.arange(n, device=q.device).reshape(n, 1)
    seen = keys <= queries + scalar(cls, offset, q.device)
    ok = seen if ok is None else ok & seen
  if mask is not None and ok is not None:
    if mask.dtype == dtypes.bool:
      ok = ok & mask
    else:     # a float mask: added where a key is kept
      ok = ok.where(mask, cls.full((), -math.inf, dtype=mask.dtype, device=q.device))
  elif ok is None:
    ok = mask
  k = masked(k, (k.ndim - 2,), 0)
  v = masked(v, (v.ndim - 2,), 0)
  return k, v, ok


# ---- in-place writes ----------------------------------------------------------------------------

def write(t, index, value) -> None:
  """`t[..., start:stop, ...] = value` (or `t[..., pos, ...] = value`) with a symbolic start, in
  place: t's buffer (realized first, if it is not) gets value's elements along that axis at
  positions start..stop-1, by one small kernel (L.WRITE) that binds the buffer and writes
  nothing else; no copy of t. Every other axis is whole (`:`). t now reads the written buffer;
  a lazy tensor built from t's earlier value and realized after the write sees it too (as a
  view of a buffer updated in place does)."""
  axis, start, stop, squeeze = _write_spec(t, index)
  cls = type(t)
  if not t.node.realized:
    t.realize()
  width = stop - start
  region = tuple(physical(width) if a == axis else n for a, n in enumerate(t.shape))
  v = value if isinstance(value, cls) else cls(value, device=t.device)
  v = v.cast(t.dtype)
  if squeeze:
    v = v.reshape(tuple(logical(v)[:axis]) + (1,) + tuple(logical(v)[axis:]))
  v = masked(v, range(v.ndim), 0) if v.node.sym is not None else v
  if v.shape != region:
    v = v.expand(region)
  nodes = (t.node, v.node, scalar(cls, start, t.device).node, scalar(cls, stop, t.device).node)
  t.node = LazyOp(L.WRITE, t.dtype, t.shape, nodes, axis, sym=t.node.sym or ())


def _write_spec(t, index):
  """(axis, start, stop, whether value lacks the axis) of a write's index."""
  index = index if isinstance(index, tuple) else (index,)
  if index and index[-1] is Ellipsis:
    index = index[:-1]
  found = None
  for a, item in enumerate(index):
    whole = isinstance(item, slice) and item == slice(None)
    if whole:
      continue
    if found is not None:
      raise UnsupportedError("an in-place write takes one position or slice with a symbolic "
                             "start, every other axis whole (:)")
    if isinstance(item, Sym):
      found = (a, item, item + 1, True)
    elif isinstance(item, slice) and item.step in (None, 1) and item.start is not None:
      stop = logical(t)[a] if item.stop is None else item.stop
      found = (a, item.start, stop, False)
    else:
      raise UnsupportedError(f"an in-place write takes a symbolic position or slice, got "
                             f"{item!r} at axis {a}")
  if found is None or not isinstance(found[1], (Sym, int)):
    raise UnsupportedError("an in-place write needs a symbolic start: t[:, pos:pos + 1] = v")
  return found


def key_count(k):
  """How many keys attention over k (..., S, E) walks: S as an int32 scalar tensor when S is
  symbolic (the loop stops at the bound value, not at S.hi), else None."""
  length = logical(k)[-2]
  return scalar(type(k), length, k.device) if isinstance(length, Sym) else None


def padded(raw: bytes, shape: tuple, phys: tuple, item: int) -> bytes:
  """The bytes of a row-major array of `shape` laid out at the front of each axis of `phys`
  (zeros after): compact's inverse."""
  if not phys:
    return raw
  inner = item * prod_all(phys[1:])
  out = bytearray(phys[0] * inner)
  if tuple(shape[1:]) == tuple(phys[1:]):
    out[:len(raw)] = raw
    return bytes(out)
  step = item * prod_all(shape[1:])
  for i in range(shape[0]):
    row = padded(raw[i * step:(i + 1) * step], shape[1:], phys[1:], item)
    out[i * inner:(i + 1) * inner] = row
  return bytes(out)


def flip(x, axes):
  """x reversed along `axes`; a symbolic axis of size s reads position s - 1 - i (a gather at a
  run-time index: its values stay at the front)."""
  static = tuple(a for a in axes if not isinstance(logical(x)[a], Sym))
  out = x._move("flip", static) if static else x
  for a in axes:
    s = logical(x)[a]
    if isinstance(s, Sym):
      shape = [1] * x.ndim
      shape[a] = x.shape[a]
      ramp = type(x).arange(x.shape[a], device=x.device).reshape(shape)
      index = with_sym((scalar(type(x), s - 1, x.device) - ramp).expand(out.shape),
                       logical(out))
      out = with_sym(out.gather(a, index), logical(out))
  return out
