"""The optimizer: choose launch options for one scheduled kernel on one target.

Heuristics, as data: each target's workgroup limits, the preferred workgroup sizes, and when
to give one thread several outputs (upcast). `optimize(item, target, options)` returns the Opts
the lowering uses; options may force them (`local=`, `upcast=`).
"""
from __future__ import annotations

from .lower import Opts
from .schedule import ScheduleItem

# target -> the most threads in one workgroup we use (WebGPU guarantees 256; PTX allows 1024)
MAX_LOCAL = {"wgsl": 256, "ptx": 256, "python": 64}
# workgroup sizes to try, best first: a size that divides the output avoids bounds checks
PREFERRED_LOCAL = (256, 128, 64, 32)
# below this many outputs per thread group, a partial (gated) last workgroup is not worth it
MIN_GATED_LOCAL = 64


def _local_size(n: int, limit: int) -> int:
  for size in PREFERRED_LOCAL:
    if size <= limit and n % size == 0:
      return size
  if n >= MIN_GATED_LOCAL:
    return min(MIN_GATED_LOCAL, limit)
  size = 1
  while size * 2 <= min(n, limit) and n % (size * 2) == 0:
    size *= 2
  return size


def optimize(item: ScheduleItem, target: str, options: dict | None = None) -> Opts:
  """Launch options for `item` on `target`."""
  options = options or {}
  n = max(item.out.size, 1)
  upcast = int(options.get("upcast", 1))
  if n % upcast:
    upcast = 1
  local = int(options.get("local", 0)) or _local_size(n // upcast, MAX_LOCAL.get(target, 256))
  return Opts(local=local, upcast=upcast)
