"""Fuzzer vocabulary for scans, sorts and einsum (issue 18): the generator step (GROW kind
"scan_sort"), its numpy oracle (ORACLE, merged into fuzz_oracle_ops.OPS) and its kernelgen
builder (BUILD, merged into fuzz_runner.BUILD). Ops:

    cumsum(v, axis)                     numpy.cumsum (kernelgen's sum dtypes)
    cumprod(v, axis)                    numpy.cumprod (the same dtypes)
    cummax(v, axis) / cummax_index      maximum.accumulate / torch.cummax's indices
    sort(v, axis, descending)           numpy sort kind="stable"; descending as torch (NaN first)
    argsort(v, axis, descending)        the stable order (defined when the row is exact)
    topk(v, k, axis, largest) / topk_index
    einsum(v..., subscripts)            numpy.einsum, error bound as matmul's

Oracle rules: sorted values carry the largest error of their row (sorting is 1-Lipschitz in the
max norm); an order (argsort, topk indices, cummax indices) is defined only where every value it
depends on is exact and defined. Scans bound their error like sum over the whole axis.
"""
from __future__ import annotations

import numpy as np

from fuzz_programs import DTYPES, FLOATS, MAX_ELEMENTS, acc_dtype, result_dtype

SORTS = ("sort", "argsort", "topk", "topk_index")
OPS = ("cumsum", "cumprod", "cummax", "cummax_index", *SORTS, "einsum")


# ---- the generator ---------------------------------------------------------------------------

def grow_scan_sort(b, src: int):
  """One scan, sort or einsum step on value `src` (an einsum may add new inputs)."""
  shape, dtype = b.values[src]
  c = b.c
  op = c.choice(OPS)
  if op == "einsum":
    return _grow_einsum(b, src)
  if not shape:
    return
  axis = c.integer(-len(shape), len(shape) - 1)
  n = shape[axis]
  if op in ("cumsum", "cumprod"):
    out = acc_dtype(dtype)
    b.push(op, [src], shape, out, axis=axis)
  elif op in ("cummax", "cummax_index"):
    b.push(op, [src], shape, dtype if op == "cummax" else "int32", axis=axis)
  elif op in ("sort", "argsort"):
    b.push(op, [src], shape, dtype if op == "sort" else "int32", axis=axis,
           descending=c.chance(0.5))
  else:
    k = c.integer(0, n)
    new = tuple(k if i == axis % len(shape) else s for i, s in enumerate(shape))
    b.push(op, [src], new, dtype if op == "topk" else "int32", axis=axis, k=k,
           largest=c.chance(0.6))


def _grow_einsum(b, src: int):
  shape, dtype = b.values[src]
  c = b.c
  if dtype == "bool" or len(shape) not in (1, 2, 3):
    return
  rank = len(shape)
  if rank == 1:
    subscripts, others = c.choice((("i->", []), ("i,i", [shape]), ("i,j->ij", [(3,)]))), None
  elif rank == 2:
    i, j = shape
    options = [("ij->ji", []), ("ij->", []), ("ij->i", []), ("ij,jk->ik", [(j, 2)]),
               ("ij,ij->j", [shape]), ("ij,j", [(j,)])]
    if i == j:
      options += [("ii->i", []), ("ii", [])]
    subscripts, others = c.choice(tuple(options)), None
  else:
    bt, i, j = shape
    subscripts, others = c.choice((("bij,bjk->bik", [(bt, j, 3)]), ("ijk->kj", []),
                                   ("...j,j->...", [(j,)]), ("bij,bkj->bik", [(bt, 2, j)]))), None
  subscripts, shapes = subscripts
  refs = [src] + [b.new_input(s, dtype if c.chance(0.7) else c.choice(DTYPES[1:]))
                  for s in shapes]
  dtypes = [b.values[r][1] for r in refs]
  out_dtype = dtypes[0]
  for d in dtypes[1:]:
    out_dtype = result_dtype(out_dtype, d)
  if out_dtype == "bool":
    return
  arrays = [np.zeros(b.values[r][0]) for r in refs]
  out_shape = np.einsum(subscripts, *arrays).shape
  if int(np.prod(out_shape)) <= MAX_ELEMENTS:
    b.push("einsum", refs, out_shape, out_dtype, subscripts=subscripts)


# ---- the oracle ------------------------------------------------------------------------------

def _prefix_all(ok: np.ndarray, axis: int) -> np.ndarray:
  return np.logical_and.accumulate(ok, axis=axis) if ok.size else ok.copy()


def _cumsum(step, xs):
  from fuzz_oracle import U, FMAX, ulp, work_dtype, zero_sign, round_to, storage
  from fuzz_oracle_ops import _out
  x, axis = xs[0], step.param("axis")
  out = acc_dtype(x.dtype)
  ok = _prefix_all(np.broadcast_to(x.ok, x.a.shape), axis)
  if out not in FLOATS:
    return _out(np.cumsum(x.a.astype(storage(out)), axis=axis, dtype=storage(out)), out, 0.0, ok)
  work = work_dtype(out)
  a = round_to(x.a, out).astype(np.float64)
  n = x.a.shape[axis]
  total = np.cumsum(a, axis=axis)
  finite_abs = np.cumsum(np.where(np.isfinite(a), np.abs(a), 0), axis=axis)
  err = np.cumsum(np.broadcast_to(x.err, a.shape), axis=axis) + n * U[work] * finite_abs
  r = round_to(total, out)
  return _out(r, out, err + ulp(r, out) + zero_sign(r), ok & (finite_abs < FMAX[work] / 2))


def _cumprod(step, xs):
  """Running products: ints wrap (exact); floats carry prod's bound per prefix (each multiply
  rounds once), defined where no order of the multiplies can overflow or underflow."""
  from fuzz_oracle import FMAX, TINY, U, round_to, storage, ulp, work_dtype
  from fuzz_oracle_ops import _out
  x, axis = xs[0], step.param("axis")
  out = acc_dtype(x.dtype)
  ok = _prefix_all(np.broadcast_to(x.ok, x.a.shape), axis)
  if out not in FLOATS:
    return _out(np.cumprod(x.a.astype(storage(out)), axis=axis, dtype=storage(out)), out, 0.0, ok)
  a = round_to(x.a, out).astype(np.float64)
  mag, e = np.abs(a), np.broadcast_to(x.err, a.shape)
  count = np.cumsum(np.ones(a.shape), axis=axis)
  u = U[out] + U[work_dtype(out)]
  big = np.cumprod(np.maximum(mag + e, 1), axis=axis)
  zero = np.logical_or.accumulate((a == 0) & (e == 0), axis=axis)
  small = np.cumprod(np.where(mag > 0, np.minimum(mag, 1), 1), axis=axis)
  r = round_to(np.cumprod(a, axis=axis), out)
  prod_mag = np.cumprod(mag, axis=axis)
  err = np.cumprod(mag + e, axis=axis) - prod_mag + prod_mag * (count + 1) * u
  ok = ok & np.logical_and.accumulate(np.isfinite(a), axis=axis) & (big < FMAX[out] / 2) & \
    (zero | (small > TINY[out] * 2.0 ** 30))
  return _out(r, out, err + ulp(r, out), ok)


def _rows(a: np.ndarray, axis: int) -> np.ndarray:
  moved = np.moveaxis(a, axis, -1)
  return moved.reshape(-1, moved.shape[-1]) if moved.size else moved.reshape(0, moved.shape[-1])


def _unrows(rows: np.ndarray, like: np.ndarray, axis: int, n: int | None = None) -> np.ndarray:
  moved = np.moveaxis(like, axis, -1)
  shape = moved.shape[:-1] + ((moved.shape[-1] if n is None else n),)
  return np.moveaxis(np.asarray(rows).reshape(shape), -1, axis)


def _cummax(step, xs):
  from fuzz_oracle_ops import _out
  x, axis = xs[0], step.param("axis")
  ok = _prefix_all(np.broadcast_to(x.ok, x.a.shape), axis)
  err = np.maximum.accumulate(np.broadcast_to(x.err, x.a.shape), axis=axis) if x.a.size else \
    np.zeros(x.a.shape)
  values = np.maximum.accumulate(x.a, axis=axis) if x.a.size else x.a
  return _out(values, x.dtype, err, ok)


def _cummax_index(step, xs):
  """torch.cummax's indices, by its loop: a NaN, or a value >= a non-NaN maximum, moves it."""
  from fuzz_oracle_ops import _out
  x, axis = xs[0], step.param("axis")
  rows = _rows(x.a, axis).tolist()
  out = []
  for row in rows:
    best, at, idx = None, 0, []
    for j, v in enumerate(row):
      if j == 0 or v != v or (best == best and v >= best):
        best, at = v, j
      idx.append(at)
    out.append(idx)
  exact = np.broadcast_to(x.ok, x.a.shape) & (np.broadcast_to(x.err, x.a.shape) == 0)
  return _out(_unrows(np.array(out, np.int64), x.a, axis).astype(np.int32), "int32", 0.0,
              _prefix_all(exact, axis))


def _order(row: list, descending: bool) -> list[int]:
  """The stable order of one row: NaN last ascending, first descending (torch)."""
  def key(j):
    v = row[j]
    if v != v:
      return (1 if not descending else 0, 0)
    return (0 if not descending else 1, -v if descending else v)
  return sorted(range(len(row)), key=key)


def _sorted(step, xs, k=None, descending=None):
  """(values OVal, indices OVal) of the first k of the stable order along the axis."""
  from fuzz_oracle import exact
  from fuzz_oracle_ops import _out
  x, axis = xs[0], step.param("axis")
  n = x.a.shape[axis]
  k = n if k is None else k
  a = x.a
  rows = _rows(a, axis)
  order = np.array([_order(r, descending)[:k] for r in rows.tolist()], np.int64)
  order = order.reshape(rows.shape[0], k)
  values = np.take_along_axis(rows, order, 1) if rows.size else rows[:, :k]
  ok = np.broadcast_to(x.ok, a.shape)
  row_ok = np.all(_rows(ok, axis), axis=1, keepdims=True)
  err_rows = _rows(np.broadcast_to(x.err, a.shape), axis)
  row_err = np.max(err_rows, axis=1, keepdims=True) if n else np.zeros((rows.shape[0], 1))
  shape_k = np.ones((rows.shape[0], k))
  vals = _out(_unrows(values, a, axis, k), x.dtype, _unrows(row_err * shape_k, a, axis, k),
              _unrows(row_ok & (shape_k > 0), a, axis, k))
  idx_ok = row_ok & (row_err == 0)
  idx = exact(_unrows(order, a, axis, k).astype(np.int32), "int32")
  idx.ok = _unrows(idx_ok & (shape_k > 0), a, axis, k).copy()
  return vals, idx


def _sort(step, xs):
  return _sorted(step, xs, descending=step.param("descending"))[0]


def _argsort(step, xs):
  return _sorted(step, xs, descending=step.param("descending"))[1]


def _topk(step, xs):
  return _sorted(step, xs, step.param("k"), step.param("largest"))[0]


def _topk_index(step, xs):
  return _sorted(step, xs, step.param("k"), step.param("largest"))[1]


def _einsum(step, xs):
  """numpy.einsum in float64 (ints: int64, wrapped); error bound as matmul's."""
  from fuzz_oracle import U, FMAX, round_to, ulp, work_dtype, zero_sign
  from fuzz_oracle_ops import _out
  subscripts = step.param("subscripts")
  dtype = xs[0].dtype
  for x in xs[1:]:
    dtype = result_dtype(dtype, x.dtype)
  arrays = [round_to(x.a, dtype) for x in xs]
  ok = np.all([np.all(x.ok) for x in xs])
  if dtype not in FLOATS:
    wide = np.uint64 if dtype == "uint64" else np.int64
    r = np.einsum(subscripts, *(a.astype(wide) for a in arrays))
    return _out(r, dtype, 0.0, ok)
  a64 = [a.astype(np.float64) for a in arrays]
  finite = [np.where(np.isfinite(a), np.abs(a), 0.0) for a in a64]
  r = np.einsum(subscripts, *a64)
  terms = np.einsum(subscripts, *finite)
  err = np.zeros(np.shape(r))
  for i, x in enumerate(xs):
    parts = [np.broadcast_to(x.err, x.a.shape) if j == i else f for j, f in enumerate(finite)]
    err = err + np.einsum(subscripts, *parts)
  k = max(a.size for a in arrays)
  err = err + (U[dtype] + k * U[work_dtype(dtype)]) * terms
  r = round_to(r, dtype)
  return _out(r, dtype, err + ulp(r, dtype) + zero_sign(r), ok & (terms < FMAX[dtype] / 2))


ORACLE = {"cumsum": _cumsum, "cumprod": _cumprod, "cummax": _cummax,
          "cummax_index": _cummax_index, "sort": _sort,
          "argsort": _argsort, "topk": _topk, "topk_index": _topk_index, "einsum": _einsum}


# ---- kernelgen -------------------------------------------------------------------------------

def _build_einsum(step, xs):
  import kernelgen as kg
  return kg.einsum(step.param("subscripts"), *xs)


BUILD = {
  "cumsum": lambda s, xs: xs[0].cumsum(s.param("axis")),
  "cumprod": lambda s, xs: xs[0].cumprod(s.param("axis")),
  "cummax": lambda s, xs: xs[0].cummax(s.param("axis"))[0],
  "cummax_index": lambda s, xs: xs[0].cummax(s.param("axis"))[1],
  "sort": lambda s, xs: xs[0].sort(s.param("axis"), descending=s.param("descending")),
  "argsort": lambda s, xs: xs[0].argsort(s.param("axis"), descending=s.param("descending")),
  "topk": lambda s, xs: xs[0].topk(s.param("k"), s.param("axis"), s.param("largest"))[0],
  "topk_index": lambda s, xs: xs[0].topk(s.param("k"), s.param("axis"), s.param("largest"))[1],
  "einsum": _build_einsum,
}
