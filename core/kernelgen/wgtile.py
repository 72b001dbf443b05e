"""Tiling of matmul/conv2d through workgroup memory (`Opts.stage`).

A workgroup of TR x TC threads (lid1 x lid0) computes a block of BR x BC outputs of the two
tiled axes (BR = TR*R, BC = TC*C: each thread an R x C register tile, `Opts.tile`, its rows
lid1 + TR*i and columns lid0 + TC*j); gid0 counts the column blocks, gid1 the row blocks times
the other output axes. The reduction runs in steps of BK elements. Per step the workgroup
cooperatively computes its operands into workgroup memory: the "A" values (the largest parts of
the reduction's source, through elementwise ops, that do not depend on the column axis) for
BR x BK, the "B" values (not depending on the row axis) for BK x BC; BARRIER; each thread
accumulates its tile from workgroup memory; BARRIER; next step. Fused elementwise ops, casts,
masks (conv padding) and broadcasts below an operand are applied while loading, so each is
computed once per block. Rows and columns past the edge load at clamped indices and gate their
stores; the last step's elements past the reduction are gated out. The step loop has a uniform
trip count and the only gated stores are single stores, so both barriers are in uniform control
flow.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from .dtype import dtypes
from .errors import UnsupportedError
from .lazy import L, LazyOp
from .lower import I32, Lowerer, _and, _c, _identity, _lin, _REDUCE_BOOL, unravel
from .ops import Ops, UOp, toposort
from .schedule import ScheduleItem
from .view import contiguous_strides, prod

# nodes computed per element, in the index space of their sources
_ELEMENTWISE = (L.ALU, L.CAST, L.BITCAST, L.CONTIGUOUS)


@dataclass(frozen=True)
class Plan:
  reduce: LazyOp
  axes: tuple       # the tiled axes in the reduction's index space (the output's may differ)
  a: tuple          # operand nodes staged per (row, k)
  b: tuple          # per (k, column)

  def local_bytes(self, rows: int, cols: int, step: int) -> int:
    """Workgroup memory for a block of rows x cols outputs and `step` reduced elements."""
    return step * (rows * sum(n.dtype.itemsize for n in self.a) +
                   cols * sum(n.dtype.itemsize for n in self.b))


class _Lowerer(Lowerer):
  """The normal lowering, except that the one reduction gives `result` (recording where)."""

  def __init__(self, item: ScheduleItem, reduce: LazyOp):
    super().__init__(item)
    self.reduce, self.result, self.seen = reduce, None, []

  def _reduce(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    if node is not self.reduce:
      return super()._reduce(node, idxs, gate)
    self.seen.append(idxs)
    return self.result if self.result is not None else UOp.const(node.dtype, 0)


def _probe(shape, name: str) -> tuple:
  return tuple(UOp(Ops.VAR, I32, (), (f"{name}{a}", 0, max(n - 1, 0))) for a, n in enumerate(shape))


def plan(item: ScheduleItem, axes: tuple) -> Plan | None:
  """The operands to stage for tiling output `axes` of `item`, or None where the kernel has not
  exactly one reduction, reached once with the tiled axes as two of its own, or an operand
  needs both tiled axes (or is bool)."""
  inputs = {id(n) for n in item.inputs}

  def is_leaf(node):
    return node.realized or (id(node) in inputs and node is not item.out)

  reduces, stack, seen = [], [item.out], set()
  while stack:
    node = stack.pop()
    if id(node) in seen or is_leaf(node):
      continue
    seen.add(id(node))
    if node.op is L.REDUCE:
      reduces.append(node)
    stack.extend(node.src)
  if len(reduces) != 1 or reduces[0].dtype == dtypes.bool:
    return None
  reduce = reduces[0]
  lw = _Lowerer(item, reduce)
  out_probe = _probe(item.out.shape, "out")
  lw.value(item.out, out_probe, None)
  if len(lw.seen) != 1:
    return None
  where = lw.seen[0]
  raxes = tuple(next((d for d, u in enumerate(where) if u is out_probe[a]), None) for a in axes)
  if None in raxes or any(out_probe[a] in set(toposort([u]))
                          for d, u in enumerate(where) if d not in raxes for a in axes):
    return None
  src = reduce.src[0]
  probe = _probe(src.shape, "probe")
  row, col = probe[raxes[0]], probe[raxes[1]]
  a, b = [], []

  def split(node) -> bool:
    if node.op is L.CONST and not is_leaf(node):
      return True
    used = set(toposort([lw.value(node, probe, None)]))
    if col not in used or row not in used:
      if node.dtype == dtypes.bool:
        return False
      (a if col not in used else b).append(node)
      return True
    return node.op in _ELEMENTWISE and not is_leaf(node) and all(split(s) for s in node.src)

  if not split(src):
    return None
  return Plan(reduce, raxes, tuple(dict.fromkeys(a)), tuple(dict.fromkeys(b)))


def staged_stores(lw: Lowerer, opts) -> list[UOp]:
  """The stores of a kernel tiled through workgroup memory (see the module docstring)."""
  item, out = lw.item, lw.item.out   # lowered again here, the reduction read from the tiles
  (rows, cols), (ar, ac) = opts.tile, opts.tile_axes
  trows, tcols, step = opts.stage
  p = plan(item, (ar, ac))
  if p is None:     # optimize only stages kernels plan() accepts; a hand-made Opts may not
    raise UnsupportedError(f"Opts.stage does not apply to kernel {item.name!r}: its reduction "
                           f"cannot be read as row x column tiles; lower it without stage")
  lw = _Lowerer(item, p.reduce)
  rr, rc = p.axes
  brows, bcols = trows * rows, tcols * cols
  nr, nc = out.shape[ar], out.shape[ac]
  others = [a for a in range(len(out.shape)) if a not in (ar, ac)]
  other_shape = [out.shape[a] for a in others]
  row_blocks = math.ceil(nr / brows)
  gid0 = UOp(Ops.SPECIAL, I32, (), ("gid", 0, math.ceil(nc / bcols)))
  gid1 = UOp(Ops.SPECIAL, I32, (), ("gid", 1, row_blocks * prod(other_shape)))
  lid0 = UOp(Ops.SPECIAL, I32, (), ("lid", 0, tcols))
  lid1 = UOp(Ops.SPECIAL, I32, (), ("lid", 1, trows))
  block_row = gid1 % _c(row_blocks) if gid1.arg[2] > row_blocks else gid1
  base = [_c(0)] * len(out.shape)
  if prod(other_shape) > 1:
    rest = gid1 // _c(row_blocks) if row_blocks > 1 else gid1
    for a, u in zip(others, unravel([(rest, 1, prod(other_shape))], 0, other_shape)):
      base[a] = u
  row0, col0 = block_row * _c(brows), gid0 * _c(bcols)
  lw.value(out, tuple(base), None)          # where the reduction is read: its other indices
  src_base = list(lw.seen[-1])
  lw.cache.clear()

  def clamp(index: UOp, n: int, block: int) -> UOp:
    return index.lt(_c(n)).where(index, _c(n - 1)) if n % block else index

  src = p.reduce.src[0]
  red_axes = p.reduce.arg[1]
  red_shape = [src.shape[a] for a in red_axes]
  total = prod(red_shape)
  steps = math.ceil(total / step)
  k0 = lw._range(steps) if steps > 1 else _c(0)
  threads = trows * tcols
  tid = lid1 * _c(tcols) + lid0 if tcols > 1 else lid1

  # load phase: every thread computes its share of each operand into workgroup memory
  locals_, stores = {}, []
  for node, kind in [(n, "a") for n in p.a] + [(n, "b") for n in p.b]:
    width = brows if kind == "a" else bcols
    count = width * step
    local = UOp(Ops.DEFINE_LOCAL, node.dtype.ptr(count, local=True), (), lw._id())
    locals_[id(node)] = local
    for s in range(math.ceil(count / threads)):
      e = tid + _c(threads * s) if s else tid
      inside = e.lt(_c(count)) if threads * (s + 1) > count else None
      if kind == "a":
        at, kk = e // _c(step), e % _c(step)
        idxs = list(src_base)
        idxs[rr] = clamp(row0 + at, nr, brows)
      else:
        kk, at = e // _c(width), e % _c(width)
        idxs = list(src_base)
        idxs[rc] = clamp(col0 + at, nc, bcols)
      k = k0 * _c(step) + kk if steps > 1 else kk
      valid = k.lt(_c(total)) if steps * step > total else None
      for a, u in zip(red_axes, unravel([(k, 1, total)], 0, red_shape)):
        idxs[a] = u
      value = lw.value(node, tuple(idxs), _and(inside, valid))
      stores.append(local.store(e, value, inside) if inside is not None else local.store(e, value))
  barrier = UOp(Ops.BARRIER, None, tuple(stores))
  ready = {k: UOp(Ops.AFTER, v.dtype, (v, barrier)) for k, v in locals_.items()}

  # compute phase: each thread accumulates its register tile from workgroup memory
  memo: dict = {}
  a_ids = {id(n) for n in p.a}

  def compute(node: LazyOp, i: int, j: int, kk: int) -> UOp:
    staged = id(node) in ready
    key = (id(node), 0 if staged and id(node) not in a_ids else i,
           0 if staged and id(node) in a_ids else j, kk)
    if key in memo:
      return memo[key]
    if staged:
      if id(node) in a_ids:
        index = (lid1 + _c(trows * i)) * _c(step) + _c(kk) if trows > 1 else _c(i * step + kk)
      else:
        index = lid0 + _c(kk * bcols + tcols * j) if tcols > 1 else _c(kk * bcols + j)
      got = ready[id(node)].load(index)
    elif node.op is L.CONST:
      got = UOp.const(node.dtype, node.arg)
    else:
      srcs = [compute(s, i, j, kk) for s in node.src]
      if node.op is L.CAST:
        got = srcs[0].cast(node.dtype)
      elif node.op is L.BITCAST:
        got = srcs[0].bitcast(node.dtype)
      elif node.op is L.CONTIGUOUS:
        got = srcs[0]
      else:
        got = lw._alu(node, srcs)
    memo[key] = got
    return got

  op = p.reduce.arg[0]
  dtype = src.dtype
  if dtype == dtypes.bool:
    op = _REDUCE_BOOL[op]
  init = UOp.const(dtype, _identity(op, dtype))
  accs, assigns = {}, []
  for i, j in itertools.product(range(rows), range(cols)):
    body = None
    for kk in range(step):
      v = compute(src, i, j, kk)
      if steps * step > total:
        k = k0 * _c(step) + _c(kk) if steps > 1 else _c(kk)
        v = k.lt(_c(total)).where(v, init)
      body = v if body is None else UOp(op, dtype, (body, v))
    acc = UOp(Ops.DEFINE_ACC, dtype, (init,), lw._id())
    accs[(i, j)] = acc
    assigns.append(UOp(Ops.ASSIGN, dtype, (acc, UOp(op, dtype, (acc, body)))))
  if steps > 1:
    end = UOp(Ops.ENDRANGE, None, (k0, *assigns, UOp(Ops.BARRIER, None, tuple(assigns))))
    results = {ij: UOp(Ops.AFTER, dtype, (acc, end)) for ij, acc in accs.items()}
  else:
    results = {ij: UOp(Ops.AFTER, dtype, (acc, a)) for (ij, acc), a in zip(accs.items(), assigns)}

  # the output: elementwise ops after the reduction at each point, stores gated at the edges
  strides = contiguous_strides(out.shape)
  out_stores = []
  for i, j in itertools.product(range(rows), range(cols)):
    idxs, at, gate = list(base), list(base), None
    for axis, n, block, index in ((ar, nr, brows, row0 + lid1 + _c(trows * i)),
                                  (ac, nc, bcols, col0 + lid0 + _c(tcols * j))):
      idxs[axis] = index
      at[axis] = clamp(index, n, block)
      if n % block:
        gate = _and(gate, index.lt(_c(n)))
    lw.result = results[(i, j)]
    flat = _lin([(u, s, n) for u, s, n in zip(idxs, strides, out.shape) if n > 1], 0)
    out_stores.append(lw.params[0].store(flat, lw.value(out, tuple(at), None), gate))
  return out_stores
