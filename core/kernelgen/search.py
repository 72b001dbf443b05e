"""Autotuning: time candidate launch options of one kernel on the actual device and keep the
fastest (register tiles with and without workgroup memory among them), cached by kernel.
KERNELGEN_SEARCH=1 makes realizing use it; `forced_options` turns its choice back into options
that make `optimize` (lowering/optimize.py) choose it again.
"""
from __future__ import annotations

import itertools

from .compiler import compile_item, target_of
from .errors import LimitError, UnsupportedError
from .graph.schedule import ScheduleItem
from .lowering.lower import lower
from .lowering.opts import Opts
from .lowering.optimize import optimize
from .render.target import Target
from .uop.ops import print_graph

# what search tries
SEARCH_LOCAL, SEARCH_UPCAST = (32, 64, 128, 256), (1, 2, 4)
SEARCH_TILES = ((8, 8), (4, 4), (8, 4), (4, 8), (2, 2))
SEARCH_ROW_LANES = (1, 16, 32, 64, 128, 256)    # row kernels (lowering/rows.py)

# kernel_key -> the Opts search chose (for the session; clear it to search again)
SEARCHED: dict[tuple, Opts] = {}


def kernel_key(item: ScheduleItem, target: Target) -> tuple:
  """What identifies a kernel for the search cache: its lowered graph and target."""
  sink, _ = lower(item, Opts())
  return target.name, print_graph(sink)


def forced_options(opts: Opts) -> dict:
  """Front-end options that make `optimize` choose `opts` again (what search found)."""
  if opts.row_lanes:
    return {"row_lanes": opts.row_lanes, "local": opts.local, "row_online": opts.row_online}
  if opts.group:
    return {"group": opts.group}
  return {"local": opts.local, "upcast": opts.upcast, "tile": opts.tile,
          "stage": opts.stage or False}


def candidates(item: ScheduleItem, target: Target, options: dict) -> list:
  """(Opts, options forcing them) for search: the heuristic's choice, register tiles of
  SEARCH_TILES with and without workgroup memory, then workgroup sizes x upcasts."""
  n = max(item.out.size, 1)
  limit = target.max_local
  out = [(optimize(item, target, options), options)]
  if item.rows:                   # row kernels: a thread per row, or lanes per row
    return _unique(out + [(optimize(item, target, {**options, "row_lanes": lanes}),
                           {**options, "row_lanes": lanes}) for lanes in SEARCH_ROW_LANES
                          if lanes <= limit])
  for tile, stage in itertools.product(SEARCH_TILES, (False, True)):
    forced = {**options, "tile": tile, "stage": stage}
    try:
      opts = optimize(item, target, forced)
    except (LimitError, UnsupportedError):
      continue
    if opts.tile == tile:
      out.append((opts, forced))
  out += [(Opts(local, upcast), {**options, "local": local, "upcast": upcast, "tile": (),
                                 "stage": False})
          for local, upcast in itertools.product(SEARCH_LOCAL, SEARCH_UPCAST)
          if local <= limit and n % upcast == 0 and local * upcast <= 4 * n]
  return _unique(out)


def _unique(out: list) -> list:
  unique = {}
  for opts, forced in out:
    unique.setdefault(opts, forced)
  return list(unique.items())


def search(item: ScheduleItem, runtime, handles: list, options: dict | None = None,
           repeats: int = 2) -> Opts:
  """Time each candidate Opts on `runtime` (with real buffers) and keep the fastest: the
  heuristic's, register tiles with and without workgroup memory, workgroup sizes x upcasts.
  Each call appends what it did to SEARCH_LOG (the page shows it)."""
  target = target_of(runtime)
  key = kernel_key(item, target)
  if key in SEARCHED:
    SEARCH_LOG.append({"kernel": item.name, "cached": True, "chosen": describe(SEARCHED[key])})
    return SEARCHED[key]
  best, best_time, first_time, count = None, None, None, 0
  for opts, forced in candidates(item, target, dict(options or {})):
    compiled = compile_item(item, target, forced)
    bound = [handles[b.slot] for b in compiled.buffers]   # what this variant still reads
    seconds = min(runtime.time_run(compiled, bound, {}) for _ in range(repeats))
    count += 1
    first_time = seconds if first_time is None else first_time
    if best_time is None or seconds < best_time:
      best, best_time = opts, seconds
  SEARCHED[key] = best
  SEARCH_LOG.append({"kernel": item.name, "cached": False, "chosen": describe(best),
                     "candidates": count, "best_ms": best_time * 1e3,
                     "heuristic_ms": first_time * 1e3})
  return best


# what each search call did, in order: {kernel, cached, chosen, candidates, best_ms,
# heuristic_ms} (the caller clears it when it wants only its own)
SEARCH_LOG: list[dict] = []


def describe(opts: Opts) -> str:
  """Launch options in words, e.g. "local 256, tile 8x8, staged 16x16 step 8"."""
  if opts.row_lanes:
    return ("row kernel, a thread per row" if opts.row_lanes == 1 else
            f"row kernel, {opts.row_lanes} lanes per row") + (" (subgroups)" * bool(opts.subgroups))
  if opts.group:
    return f"grouped reduction, {opts.group} threads per output" + \
      (" (subgroups)" if opts.subgroups else "")
  words = [f"local {opts.local}"]
  if opts.upcast > 1:
    words.append(f"upcast {opts.upcast}")
  if opts.tile:
    words.append(f"tile {opts.tile[0]}x{opts.tile[1]}")
  if opts.stage:
    words.append(f"staged {opts.stage[0]}x{opts.stage[1]} step {opts.stage[2]}")
  if opts.slide:
    words.append(f"window slid down {opts.slide[0]} rows x {opts.slide[1]} columns")
  return ", ".join(words)
