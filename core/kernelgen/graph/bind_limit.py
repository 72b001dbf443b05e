"""How many buffers one kernel may bind, as the scheduler counts them (schedule.py, join.py).

A target may bind only so many buffers of any size to one kernel (WebGPU: 8 storage buffers per
shader stage by default), and a few more read-only ones if they are small (WebGPU: 12 uniform
buffers of at most 64 KiB each; one of them holds a symbolic kernel's dims). `BufferLimit` holds
both counts; a kernel fits when its buffers, less the small read-only inputs that the spare small
bindings take, number at most `storage`. The renderer picks the same inputs (render/wgsl/target.py
uniform_slots: read-only, at most `small_bytes`, smallest first), so a kernel the scheduler keeps
whole renders. A plain int is a limit with no small bindings.

Measured (bench/lm_bundle_native.py, SmolLM2-135M widths, 2 layers, q4, lavapipe natively, 3
interleaved runs each, load 7-10 on 2 cores): at 8 storage buffers the symbolic-step bundle's
26 kernels -> 23 (as at 32), the one-token bundle's 21 -> 20; decode CPU per token 18.5-25.2 ms
before, 18.7-22.7 ms after (within the noise); export CPU 4.5-4.6 s -> 4.7-4.8 s.
"""
from __future__ import annotations

from dataclasses import dataclass

from .lazy import L, LazyOp


@dataclass(frozen=True, order=True)
class BufferLimit:
  storage: int            # buffers of any size one kernel may bind (its output included)
  small: int = 0          # read-only inputs it may bind besides, each of at most small_bytes
  small_bytes: int = 0    # bytes of one such input (after rounding up to 16)


def as_limit(limit: BufferLimit | int | None) -> BufferLimit | None:
  """`limit` as a BufferLimit (an int: that many buffers, no small ones; None: no limit)."""
  return BufferLimit(limit) if isinstance(limit, int) and limit else limit or None


def is_small(node: LazyOp, limit: BufferLimit) -> bool:
  """Whether the input `node` may take one of the limit's small bindings: its buffer's bytes,
  rounded up to 16, at most small_bytes."""
  nbytes = node.size * node.dtype.itemsize
  return limit.small > 0 and isinstance(nbytes, int) and -(-nbytes // 16) * 16 <= \
    limit.small_bytes


def storage_count(inputs, written, limit: BufferLimit) -> int:
  """The buffers of any size a kernel binds that reads `inputs` (none of them written by it) and
  writes `written` buffers: all of them, less the small inputs that the small bindings take."""
  read = list({id(n): n for n in inputs}.values())
  small = sum(is_small(n, limit) for n in read)
  return written + len(read) - min(small, limit.small)


def kernel_fits(inputs, root: LazyOp, limit: BufferLimit | int | None) -> bool:
  """Whether the kernel computing `root` from `inputs` fits `limit` (schedule.py binds: an
  in-place write's target is its output's own buffer, written, never a small binding)."""
  limit = as_limit(limit)
  if limit is None:
    return True
  target = root.src[0] if root.op is L.WRITE else None
  return storage_count([n for n in inputs if n is not target], 1, limit) <= limit.storage
