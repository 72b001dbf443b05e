"""Thread-per-output launch choices the optimizer (optimize.py) shares: the workgroup size for n
threads, and reductions over several axes lowered a thread per output with their trailing
reduced axes unrolled (option reduce_inner: a packed weight's matrix-vector product, MatMulNBits
as onnx/operators/quant_nbits.matmul_words writes it, where each step loads one 32-bit word for
its 8 fields and each block's scale and zero point once; render/wgsl/adapters.py measures it on
CPU adapters).
"""
from __future__ import annotations

from ..graph.lazy import chain_view
from ..graph.schedule import ScheduleItem, kernel_reduces
from ..graph.view import prod
from ..render.target import Target
from .lowerer import Opts, grid_axis

# workgroup sizes to try, best first: a size that divides the output avoids bounds checks
PREFERRED_LOCAL = (256, 128, 64, 32)
# below this many outputs, one workgroup of exactly that many threads (no gated last workgroup)
MIN_GATED_LOCAL = 64
# options that choose another layout: with any of them, reduce_inner does not apply
OTHER_LAYOUTS = ("group", "upcast", "tile", "stage")
# an in-place write (L.WRITE) takes WRITE_LOCAL threads per workgroup, a thread per element
WRITE_LOCAL = 64
# a register-tiled kernel over a symbolic axis (a run-time grid: compiler.with_grid) takes
# workgroups of at most GRID_LOCAL threads, so a small bound value, which launches few tiles,
# still spreads them over several workgroups (a CPU adapter runs a workgroup on one core)
GRID_LOCAL = 64


def local_size(n: int, limit: int) -> int:
  """Threads per workgroup for n threads: the first of PREFERRED_LOCAL (within `limit`) that
  divides n, else MIN_GATED_LOCAL (gated), or n itself when fewer."""
  for size in PREFERRED_LOCAL:
    if size <= limit and n % size == 0:
      return size
  if n >= MIN_GATED_LOCAL:
    return min(MIN_GATED_LOCAL, limit)
  if n <= limit:
    return n       # one workgroup of exactly n threads (MIN_GATED_LOCAL)
  size = 1
  while size * 2 <= min(n, limit) and n % (size * 2) == 0:
    size *= 2
  return size


def grid_local(item: ScheduleItem, limit: int) -> int:
  """The most threads per workgroup for register-tiled `item`: GRID_LOCAL where its output has a
  symbolic axis (lowerer.grid_axis), else `limit` (within `limit` either way)."""
  return min(limit, GRID_LOCAL) if grid_axis(item.out) is not None else limit


def _unrolled_tail(shape: list, most: int) -> int:
  """How many elements the trailing axes of `shape` (not the first) hold, taken while at most
  `most`."""
  tail = 1
  for size in reversed(shape[1:]):
    if tail * size > most:
      break
    tail *= size
  return tail


def reduce_inner(item: ScheduleItem, options: dict) -> int:
  """Option reduce_inner=R where it applies to `item`, else 0: no other layout is forced, there
  are at least MIN_GATED_LOCAL outputs, and every reduction is over several axes whose trailing
  ones (not all) hold 2..R elements."""
  most = int(options.get("reduce_inner", 0) or 0)
  if not most or any(k in options for k in OTHER_LAYOUTS) or item.out.size < MIN_GATED_LOCAL:
    return 0
  reduces = kernel_reduces(item)
  for r in reduces:
    shape = [r.src[0].shape[a] for a in r.arg[1]]
    tail = _unrolled_tail(shape, most)
    if len(shape) < 2 or tail < 2 or prod(shape) <= tail:
      return 0
  return most if reduces else 0


def inner_opts(item: ScheduleItem, target: Target, options: dict) -> Opts:
  """Opts of a reduce_inner kernel: a thread per output (option local= threads per workgroup,
  else local_size's), the trailing reduced axes unrolled (Opts.reduce_inner)."""
  n = max(item.out.size, 1)
  local = int(options.get("local", 0) or 0) or local_size(n, target.max_local)
  return Opts(local=local, reduce_inner=reduce_inner(item, options))


def write_opts(item: ScheduleItem, layout) -> Opts:
  """Opts of the in-place write `item` (L.WRITE): a thread per element of its value; where the
  value holds a reduction (graph/schedule.py's write fusion: a projection written into a KV
  cache), the layout `layout(value_item)` picks for the value as a flat kernel of its own when
  that is a thread or a workgroup per element (write_stores lowers those; others: a thread)."""
  value = item.out.src[1]
  plain = Opts(local=min(WRITE_LOCAL, max(value.size, 1)))
  if not kernel_reduces(item) or value.sym is not None:
    return plain
  flat = chain_view(value, "reshape", (value.size,))
  opts = layout(ScheduleItem(flat, item.inputs, recomputed=item.recomputed))
  if opts.group and opts.upcast == 1:
    return opts
  if opts.upcast == 1 and not (opts.tile or opts.stage or opts.slide or opts.row_lanes):
    return Opts(local=opts.local, reduce_inner=opts.reduce_inner)
  return plain
