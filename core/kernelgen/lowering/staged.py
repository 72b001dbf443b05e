"""Staged prologues: a kernel whose outputs all read the same one row of its prologue (graph/
prologue.py: a decode step's LayerNorm or RMSNorm row, read by the next projection) computes
that row once per workgroup instead of once per output.

Before its outputs, each workgroup of a thread-per-output kernel (lower._thread_stores, and an
in-place write's, lower.write_stores) computes the row's statistics (the norm's mean and
variance: nested reductions of the kernel) as grouped reductions over all its threads (each
thread a strided share of the row, folded through workgroup memory, every thread folding), then
each thread normalizes its share of the row into workgroup memory (DEFINE_LOCAL) and, after a
BARRIER, every output's loop reads the normalized row from there (Lowerer.staged). So the
prologue costs a workgroup one pass over the row, not each output one pass and a normalization
of every element it reads: what made prologues lose at d = 256 on lavapipe (PROLOGUE_WORK).

The optimizer (optimize.py) gives such kernels a thread per output, not a workgroup per output
(a grouped reduction would repeat the staging per output); each output's loop then reads
STAGED_VEC consecutive elements per step (Lowerer.seq_vec: the weights' row as vector loads).

Attention staged the same way (graph/prologue.py STAGED_ATTENTION): a decode step's fused
attention output (one query row per head) read whole by the output projection is computed by
that projection's kernel, its threads taking a query row each (lowering/attention.py
attention_values; threads past the rows walk no key), into workgroup memory; the schedule lets
that happen only where the projection is one workgroup, so attention runs once.
"""
from __future__ import annotations

import math

from ..graph import prologue
from ..graph.lazy import L, LazyOp
from ..graph.prologue import STAGED_MAX, reads_whole_rows
from ..graph.schedule import ScheduleItem, row_spec
from ..graph.view import prod
from ..uop.ops import Ops, UOp
from .attention import attention_values
from .index_math import int_const, linear_index, unravel

# elements per step of a staged kernel's reductions over one axis (where it divides the axis)
STAGED_VEC = 4


def staged_rows(item: ScheduleItem) -> dict:
  """{id(S): S} for each row expression S fused into `item` (not one of its inputs) that holds
  one row of at most STAGED_MAX elements and that a reduction of the kernel reads whole for each
  output (prologue.reads_whole_rows): the rows a thread-per-output layout stages (none with
  prologue.STAGED off)."""
  if not prologue.STAGED:
    return {}
  inputs = {id(n) for n in item.inputs}
  found, stack, seen = {}, [(item.out, None)], set()
  while stack:
    node, red = stack.pop()
    if (id(node), id(red)) in seen or node.realized or (id(node) in inputs and
                                                         node is not item.out):
      continue
    seen.add((id(node), id(red)))
    if node.op is L.VIEW and red is not None and _one_row(node, red, inputs):
      found[id(node.src[0])] = node.src[0]
      continue
    stack.extend((s, node if node.op is L.REDUCE else red) for s in node.src)
  return found


def _one_row(view: LazyOp, red: LazyOp, inputs: set) -> bool:
  """Whether VIEW `view`, read in reduction `red`'s source, reads the one row of a fused row
  expression whole for each output of `red`."""
  src = view.src[0]
  if src.size > STAGED_MAX or src.realized or id(src) in inputs or \
     src.op not in (L.ALU, L.CAST, L.BITCAST, L.ATTENTION) or view.shape != red.src[0].shape:
    return False
  if src.op is L.ATTENTION:
    return reads_whole_rows(view, red, tuple(range(len(src.shape))))
  row = row_spec(src, inputs, STAGED_MAX)
  return row is not None and prod(src.shape[a] for a in row.arg[1]) == src.size and \
    reads_whole_rows(view, red, row.arg[1])


def stage_rows(lw, lid: UOp, local: int) -> None:
  """Stage each of staged_rows(lw.item) into workgroup memory (see the module docstring), the
  workgroup's `local` threads (lane `lid`) sharing the work; lw.staged then maps each row's id
  to its memory, ready after the BARRIER. Call before lowering the outputs."""
  rows = staged_rows(lw.item)
  if not rows:
    return
  saved = (lw.group, lw.lane, lw.unroll, lw.vec, lw.chunk, lw.subgroups, lw.gates)
  lw.group, lw.lane, lw.unroll, lw.vec, lw.chunk, lw.subgroups = local, lid, 1, 1, False, ()
  lw.gates = [None]      # the statistics, read at every element, are computed once, up front
  try:
    staged = {key: _reader(row, (_stage_attention if row.op is L.ATTENTION else _stage)(
      lw, row, lid, local)) for key, row in rows.items()}
  finally:
    lw.group, lw.lane, lw.unroll, lw.vec, lw.chunk, lw.subgroups, lw.gates = saved
  lw.staged.update(staged)
  lw.seq_vec = STAGED_VEC


def _stage(lw, row: LazyOp, lid: UOp, local: int) -> UOp:
  """Row `row`'s values in workgroup memory, each thread storing every local-th element; the
  memory AFTER the BARRIER that ends the stores."""
  n = row.size
  mem = UOp(Ops.DEFINE_LOCAL, row.dtype.ptr(n, local=True), (), lw._id())
  ranges, points = lw._loop(math.ceil(n / local), local, lid, n)
  stores = []
  for index, valid in points:
    at = valid.where(index, int_const(n - 1)) if valid is not None else index    # clamped
    value = lw.value(row, tuple(unravel([(at, 1, n)], 0, row.shape)), None)
    stores.append(mem.store(index, value, valid))
  body = (UOp(Ops.ENDRANGE, None, (ranges[0], *stores)),) if ranges else tuple(stores)
  return UOp(Ops.AFTER, mem.dtype, (mem, UOp(Ops.BARRIER, None, body)))


def _stage_attention(lw, node: LazyOp, lid: UOp, local: int) -> UOp:
  """ATTENTION node `node`'s output in workgroup memory, each thread computing one query row
  (blocks of `local` rows, unrolled, where there are more); the memory AFTER the BARRIER."""
  lead, n_q, ev = node.shape[:-2], node.shape[-2], node.shape[-1]
  rows = prod(lead) * n_q
  mem = UOp(Ops.DEFINE_LOCAL, node.dtype.ptr(node.size, local=True), (), lw._id())
  stores = []
  for block in range(math.ceil(rows / local)):
    t = lid + int_const(block * local) if block else lid
    ok = t.lt(int_const(rows)) if (block + 1) * local > rows else None
    at = ok.where(t, int_const(rows - 1)) if ok is not None else t      # clamped
    where = unravel([(at, 1, rows)], 0, tuple(lead) + (n_q,))
    (values,) = attention_values(lw, node, tuple(where[:-1]), [(where[-1], ok)], ok)
    first = at * int_const(ev)
    stores += [mem.store(first + int_const(e) if e else first, x, ok)
               for e, x in enumerate(values)]
  return UOp(Ops.AFTER, mem.dtype, (mem, UOp(Ops.BARRIER, None, tuple(stores))))


def _reader(node: LazyOp, mem: UOp):
  """Lowerer.staged's reader of staged `node` from `mem`: its element at (idxs, gate); under a
  gate the index is clamped into the row instead (what a gated-off read gives is not used)."""
  strides = [prod(node.shape[a + 1:]) for a in range(len(node.shape))]

  def read(idxs: tuple, gate: UOp | None) -> UOp:
    lin = linear_index([(u, s, n) for u, s, n in zip(idxs, strides, node.shape) if n > 1], 0)
    if gate is not None:
      lin = lin.minimum(int_const(node.size - 1)).maximum(int_const(0))
    return mem.load(lin)
  return read
