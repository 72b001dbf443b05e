"""Tiles through workgroup memory (wgtile.py, option stage; the PTX default, Target.stage_default):
whether a kernel is staged, its 2-D workgroup of threads, their register tiles and reduction
step, within the target's threads and workgroup memory (stage_opts).
"""
from __future__ import annotations

import itertools
import math

from ..errors import LimitError, UnsupportedError
from .lowerer import MAX_TRIPS
from .opts import Opts
from .tile_shape import best_tile_axes, short_axes
from .tileplan import plan
from ..graph.schedule import ScheduleItem
from ..graph.view import prod
from ..render.target import Target

# tiles through workgroup memory (wgtile.py, option stage): threads' tiles of at most STAGE_TILE,
# steps of STAGE_STEP reduced elements
STAGE_TILE, STAGE_STEP = (4, 4), 8


def _pow2_at_least(n: int) -> int:
  return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def stage_opts(item: ScheduleItem, target: Target, options: dict, tile: tuple) -> Opts | None:
  """Opts tiling `item` through workgroup memory, or None (not wanted or not applicable);
  options["stage"] forces it on (True, or (TR, TC, BK)) or off (False)."""
  want = options.get("stage")
  forced = want is not None and want is not False
  if isinstance(want, (tuple, list)):
    if len(want) != 3 or any(not isinstance(v, int) or v < 1 for v in want):
      raise UnsupportedError(f"stage={want!r}: give (thread rows, thread cols, reduce step), "
                             f"all >= 1, or True / False")
  elif want not in (None, True, False):
    raise UnsupportedError(f"stage={want!r}: give True, False or (thread rows, thread cols, "
                           f"reduce step)")
  if not forced and (want is False or not tile or not target.stage_default or
                     short_axes(item, tile[1])):
    return None                     # (a short axis taken whole stays a register tile)
  axes = tile[1] if tile else best_tile_axes(item)
  p = _stage_plan(item, axes) if axes else None
  if p is None and axes:           # the register tile's axes cannot be staged: another pair
    sizes = [a for a, n in enumerate(item.out.shape) if n > 1]
    for pair in reversed(list(itertools.combinations(sizes, 2))):
      if (p := _stage_plan(item, pair)) is not None:
        axes, tile = pair, (tile[0], pair) if tile else tile
        break
  if p is None:
    return None
  shape = item.out.shape
  rows, cols = tile[0] if tile else \
    (min(STAGE_TILE[0], shape[axes[0]]), min(STAGE_TILE[1], shape[axes[1]]))
  total = prod(p.reduce.src[0].shape[a] for a in p.reduce.arg[1])
  if isinstance(want, (tuple, list)):
    trows, tcols, step = want
  else:
    most = target.stage_threads
    trows = min(most[0], _pow2_at_least(math.ceil(shape[axes[0]] / rows)))
    tcols = min(most[1], _pow2_at_least(math.ceil(shape[axes[1]] / cols)))
    if not tile:                 # no more register tile than the axis needs
      rows, cols = math.ceil(shape[axes[0]] / trows) if rows > 1 else 1, \
        math.ceil(shape[axes[1]] / tcols) if cols > 1 else 1
      rows, cols = min(rows, STAGE_TILE[0]), min(cols, STAGE_TILE[1])
    step = min(STAGE_STEP, _pow2_at_least(total))
    while step > 1 and p.local_bytes(trows * rows, tcols * cols, step) > \
        target.max_local_bytes:
      step //= 2
  what = f"tiling through workgroup memory ({trows}x{tcols} threads of {rows}x{cols} outputs, "\
         f"steps of {step})"
  need, limit = p.local_bytes(trows * rows, tcols * cols, step), target.max_local_bytes
  problem = None
  if trows * tcols > target.max_local:
    problem = f"needs {trows * tcols} threads per workgroup; {target.name} allows " \
              f"{target.max_local}: force fewer threads with stage=(rows, cols, step)"
  elif need > limit:
    problem = f"needs {need} bytes of workgroup memory; {target} allows {limit}: force a " \
              f"smaller tile=(R, C) or stage=(rows, cols, step)"
  elif math.ceil(total / step) > MAX_TRIPS:
    problem = f"loops {math.ceil(total / step)} times over {total} reduced elements; the most " \
              f"is {MAX_TRIPS}: force a larger step with stage=(rows, cols, step)"
  if problem:
    if forced:
      raise LimitError(f"{what} {problem}")
    return None                     # the default falls back to register tiles
  return Opts(local=trows * tcols, tile=(rows, cols), tile_axes=axes, stage=(trows, tcols, step),
              fma=target.tile_fma)


def _stage_plan(item: ScheduleItem, axes: tuple):
  """plan(item, axes) where wgtile.py can stage it (not over a symbolic length: exact), else
  None."""
  p = plan(item, axes)
  return None if p is None or p.exact else p
