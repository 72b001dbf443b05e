"""Which operands of a matmul-like kernel form row and column tiles: `plan(item, axes)` splits
the one reduction's source into the "A" operands (not depending on the column axis) and "B"
operands (not depending on the row axis), read by register tiles (regtile.py) and tiles through
workgroup memory (wgtile.py). `StageLowerer` lowers a kernel with that reduction's value given.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from ..dtype import dtypes
from ..graph.lazy import L, LazyOp
from ..graph.schedule import ScheduleItem
from ..uop import trampoline
from ..uop.ops import Ops, UOp, toposort
from .index_math import I32
from .lowerer import Lowerer

# nodes computed per element, in the index space of their sources
_ELEMENTWISE = (L.ALU, L.CAST, L.BITCAST, L.CONTIGUOUS)

@dataclass(frozen=True)
class TileOperands:
  """The operands of a matmul-like kernel's one reduction, split for tiling two output axes."""
  reduce: LazyOp
  axes: tuple       # the tiled axes in the reduction's index space (the output's may differ)
  a: tuple          # operand nodes staged per (row, k)
  b: tuple          # per (k, column)

  def local_bytes(self, rows: int, cols: int, step: int) -> int:
    """Workgroup memory for a block of rows x cols outputs and `step` reduced elements."""
    return step * (rows * sum(n.dtype.itemsize for n in self.a) +
                   cols * sum(n.dtype.itemsize for n in self.b))


class StageLowerer(Lowerer):
  """The normal lowering, except that the one reduction gives `result` (recording where)."""

  def __init__(self, item: ScheduleItem, reduce: LazyOp):
    super().__init__(item)
    self.reduce, self.result, self.seen = reduce, None, []

  def _reduce(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    if node is not self.reduce:
      return super()._reduce(node, idxs, gate)
    self.seen.append(idxs)
    return self.result if self.result is not None else UOp.const(node.dtype, 0)


def probe_vars(shape, name: str) -> tuple:
  """A VAR per axis of `shape` (name0, name1, ..., ranging over the axis): symbolic indices that
  show which of them a lowered value reads."""
  return tuple(UOp(Ops.VAR, I32, (), (f"{name}{a}", 0, max(n - 1, 0))) for a, n in enumerate(shape))


def read_axes(item: ScheduleItem, reduce: LazyOp, axes: tuple) -> tuple | None:
  """(a StageLowerer of `reduce`, the axes of its source that output `axes` are) where `item`
  reads its reduction `reduce` at one place, with each of `axes` as one of the source's own
  indices and in no other; else None."""
  lw = StageLowerer(item, reduce)
  out_probe = probe_vars(item.out.shape, "out")
  lw.value(item.out, out_probe, None)
  if len(lw.seen) != 1:
    return None
  where = lw.seen[0]
  raxes = tuple(next((d for d, u in enumerate(where) if u is out_probe[a]), None) for a in axes)
  if None in raxes or any(out_probe[a] in set(toposort([u]))
                          for d, u in enumerate(where) if d not in raxes for a in axes):
    return None
  return lw, raxes


# item -> {axes: TileOperands or None}: the optimizer's probes (optimize.py) and the kernel's
# lowering ask for the plan of the same axes of an item several times (a lowering of its source
# each)
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def plan(item: ScheduleItem, axes: tuple) -> TileOperands | None:
  """The operands to stage for tiling output `axes` of `item`, or None where the kernel has not
  exactly one reduction, reached once with the tiled axes as two of its own, or an operand
  needs both tiled axes (or is bool)."""
  plans = _PLANS.setdefault(item, {})
  key = tuple(axes)
  if key not in plans:
    plans[key] = _plan(item, key)
  return plans[key]


def _plan(item: ScheduleItem, axes: tuple) -> TileOperands | None:
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
  found = read_axes(item, reduce, axes)
  if found is None:
    return None
  lw, raxes = found
  src = reduce.src[0]
  probe = probe_vars(src.shape, "probe")
  row, col = probe[raxes[0]], probe[raxes[1]]
  a, b = [], []

  def split(node):     # a trampolined walk (uop/trampoline.py): no recursion on graph depth
    if node.op is L.CONST and not is_leaf(node):
      return True
    used = set(toposort([lw.value(node, probe, None)]))
    if col not in used or row not in used:
      if node.dtype == dtypes.bool:
        return False
      (a if col not in used else b).append(node)
      return True
    if node.op not in _ELEMENTWISE or is_leaf(node):
      return False
    for s in node.src:
      if not (yield split(s)):
        return False
    return True

  if not trampoline.run(split(src)):
    return None
  return TileOperands(reduce, raxes, tuple(dict.fromkeys(a)), tuple(dict.fromkeys(b)))
