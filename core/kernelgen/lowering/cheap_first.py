"""The kernel a one-off run's capped register tile over a symbolic grid dim starts from (issues
35 and 37): a page's load() builds each kernel, not its variants (export/loader.js), so the first
result of a symbolic bundle waited for its capped tiles' builds (SmolLM2-135M's q4 prompt GEMMs:
8x16 rolled on SwiftShader, 8x8 rolled on lavapipe). With an adapter's option cheap_first the
kernel is the cheapest tile to build instead and the capped tile its variant up to the dim's top
(compiler.py cheap_first), which model.js builds in the background after the first run that asks
for it; natively every variant is built with the kernel, so every value runs what it ran.

Measured (bench/lm_page.py, SmolLM2-135M q4 2 layers, 128-token prompt, Mesa's cache off,
alternated with main, on 2 CPUs at load 7-13, wall s):
SwiftShader time to first token 7.2, 5.3, 8.9, 9.2 against 13.8, 8.7, 14.7, 11.6 (load() 3.4-6.2
against 7.1-12.7), 7.4 and 8.0 against 18.4 and 25.3 (load 12-13); 6 rounds: prefill 104 against
88 tok/s, decode 5.1 against 5.8 (load 11-13); 3 rounds: decode 4.5 and 3.8 against 6.5 and 6.3
tok/s (load 12-13): the capped tiles' background builds (one at a time, before the decode
variants that their runs buy later) slow the first answers' decoding.
Not lavapipe's: in Chromium its first prefill (~10 s of the ~13 s to first token) is mostly
driver work at the first dispatches, not in load(); with this the first token took 12.8-14.8 s
against 12.5-28.5, and the first prefill on the capped tiles after it 2.3-10.6 s (main 0.4-0.7).
"""
from __future__ import annotations

from ..graph.schedule import ScheduleItem
from ..graph.view import prod
from ..render.target import Target
from . import compile_cost
from .opts import Opts
from .optimize import with_adapter_defaults
from .tile_shape import TILES, clip
from .variants import grid_dim

# the cheap kernel's options: the smallest of TILES (cheap_first), rolled
CHEAP_FIRST = {"tile_unroll": 0, "group": 0}
# Tried (issue 35), not kept: the top variant as the 16x16 tile rolled on SwiftShader. Natively its
# q4 GEMMs at 128 rows ran faster (one layer, CPU ms per run, capped / 16x16, load 10-11: qkv 54 /
# 41, gate 83 / 66, up 105 / 74, down 96 / 66; bench/lm_bundle_native.py prefill best CPU s, main /
# it, 3 alternated pairs, load 5-12: 1.04, 1.12, 1.19 / 1.11, 0.86, 0.88), but its builds cost 2.5x
# (the first prefill's 6.5-8.6 -> 16.7-18.0 CPU s), and in the page (bench/lm_page.py, Mesa's cache
# off, one run each, load 8-12) prefill fell 116 -> 47 and 52 -> 41 tok/s, decode 4.9 -> 2.8 and
# 3.3 -> 2.3: the background builds outlast the rounds.
# Nor a copy of the output projection's heads-first rows (vec4 loads, not scalars at a computed
# index): no faster (its CPU ms 77-85 -> 79-88): SwiftShader gathers a vec4 per lane as scalars.


def cheap_first(item: ScheduleItem, target: Target, options: dict, opts: Opts | None,
                gridded: bool) -> tuple | None:
  """((axis, name, lo, hi), options): the symbolic grid dim of a one-off run's capped register
  tile (Opts.capped) and the options of the kernel that serves its first runs (CHEAP_FIRST: the
  smallest of TILES, rolled); None where the kernel is not such a tile (no run-time grid, a
  forced, staged or windowed tile, no budget) or already takes that tile."""
  if not gridded or opts is None or not opts.capped or not opts.tile or opts.stage or \
     opts.tile_inner or "tile" in options:
    return None
  dim, merged = grid_dim(item), with_adapter_defaults(item, target, options)
  if dim is None or dim[0] not in (opts.tile_axes or ()) or not merged.get("cheap_first") or \
     not compile_cost.capped(merged):
    return None
  cheap = clip(item, TILES[-1], opts.tile_axes)
  if prod(cheap) >= prod(opts.tile):
    return None
  return dim, {**CHEAP_FIRST, "tile": cheap}
