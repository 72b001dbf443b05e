"""Probing a kernel's register tiles: `item` lowered once per (tile, axes, window), memoized per
item (_PROBED), and the loads per loop step and the UOps read from that lowering. The tile
choice (optimize.py, tile_shape.py) and the compile-budget rules (tile_budget.py) ask the same
probes several times per optimize().
"""
from __future__ import annotations

import weakref

from .lower import lower
from .opts import Opts
from ..uop.ops import Ops, toposort
from ..graph.schedule import ScheduleItem
from ..rules.symbolic import simplify


def probe_uops(item: ScheduleItem, tile: tuple, axes: tuple) -> int:
  """The UOps of `item` lowered with register tile `tile` of `axes`."""
  return _probe(item, tile, axes)[1]


# item -> {(tile, axes): (loads, UOps), ("window", axes, inner): window loads of two tiles,
# ("sink", tile, axes, inner): the lowering}:
# best_tile_axes, _tile, _shares_loads, shared_only and _window_tile probe
# the same tiles of an item several times per optimize() (a lowering each; a CNN step's first
# compile spent half its optimize time there), the loads and the UOps from one lowering
_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def window_loads(item: ScheduleItem, axes: tuple, inner: int) -> tuple:
  """The loads per loop step of `item` in a 2 x 1 and a 1 x 1 tile of `axes` with
  Opts.tile_inner `inner`, simplified (a row's window and the next row's, shifted, are the same
  loads only once their indices are)."""
  probed = _PROBED.setdefault(item, {})
  key = ("window", tuple(axes), inner)
  if key not in probed:
    probed[key] = tuple(sum(u.op is Ops.LOAD for u in toposort([simplify(lowered(
      item, t, axes, inner))])) for t in ((2, 1), (1, 1)))
  return probed[key]


def lowered(item: ScheduleItem, tile: tuple, axes: tuple, inner: int = 0):
  """`item` lowered with register tile `tile` of `axes` (and Opts.tile_inner), once per item."""
  probed = _PROBED.setdefault(item, {})
  key = ("sink", tuple(tile), tuple(axes), inner)
  if key not in probed:
    probed[key] = lower(item, Opts(tile=tile, tile_axes=axes, tile_inner=inner))[0]
  return probed[key]


def _probe(item: ScheduleItem, tile: tuple, axes: tuple) -> tuple:
  """(loads per loop step, UOps) of `item` lowered with register tile `tile` of `axes`."""
  probed = _PROBED.setdefault(item, {})
  key = (tuple(tile), tuple(axes))
  if key not in probed:
    uops = toposort([lowered(item, tile, axes)])
    probed[key] = (_loop_loads(uops), len(uops))
  return probed[key]


def _loop_loads(uops: list) -> int:
  """The loads of a lowered kernel's (toposorted) `uops` that its loop repeats: those whose
  address depends on a RANGE (all of them where there is no loop). An epilogue's loads (a
  batchnorm's per-channel parameters, once per output) are not per step: counted, they made a
  conv with a batchnorm epilogue tile rows x columns of one channel instead of channels x columns
  (PP-OCRv4 detection's head conv, issue 42). lavapipe, runs=100, GPU timestamps, best of 5-9
  interleaved at load ~14, all loads -> loop loads (ms): 3x3 + bn + relu 96->24 80x80 179 -> 47,
  64->64 56x56 253 -> 42; DenseNet's 1x1 with bn-relu on both sides 416->128 14x14 76 -> 1.7,
  96->128 56x56 179 -> 7.9; ResNet's 1x1 + bn + relu 64->64 56x56, 256->64 unchanged."""
  looped: set = set()
  for u in uops:
    if u.op is Ops.RANGE or any(s in looped for s in u.src):
      looped.add(u)
  loads = [u for u in uops if u.op is Ops.LOAD]
  return sum(u in looped for u in loads) if looped else len(loads)


def probe_loads(item: ScheduleItem, tile: tuple, axes: tuple) -> int:
  """The loads of `item` lowered with register tile `tile` of `axes` (per loop step)."""
  return _probe(item, tile, axes)[0]
