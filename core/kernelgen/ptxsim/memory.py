"""The simulator's memory: global buffers in one 64-bit address space, per-CTA shared memory.

Global buffers sit at 256-byte aligned addresses with an unmapped guard gap after each, so an
access one element past a buffer never lands in the next one: it is reported as out of bounds.
Shared memory remembers, per byte, which thread last wrote it in which barrier epoch; a read of
a byte another thread wrote since the last `bar.sync` is reported as a race.
"""
from __future__ import annotations

import bisect
from functools import reduce
from operator import or_

from .operands import LaneFault

GLOBAL_BASE = 1 << 40
SHARED_BASE = 1 << 16
_ALIGN, _GUARD = 256, 256


class Buffer:
  __slots__ = ("base", "size", "data", "name")

  def __init__(self, base: int, size: int, name: str = ""):
    self.base, self.size, self.data, self.name = base, size, bytearray(size), name

  def __repr__(self) -> str:
    return f"Buffer({self.name or 'unnamed'} at {self.base:#x}, {self.size} bytes)"


class GlobalMemory:
  """All global buffers of one simulated device."""

  def __init__(self):
    self.buffers: dict[int, Buffer] = {}
    self.bases: list[int] = []
    self.next = GLOBAL_BASE
    self.last = Buffer(0, 0)   # the buffer the last access hit (most accesses hit it again)

  def alloc(self, nbytes: int, name: str = "") -> Buffer:
    buf = Buffer(self.next, nbytes, name)
    self.next += -(-max(nbytes, 1) // _ALIGN) * _ALIGN + _GUARD
    self.buffers[buf.base] = buf
    bisect.insort(self.bases, buf.base)
    return buf

  def snapshot(self) -> "GlobalMemory":
    """A copy with the same buffers at the same addresses (for comparing two runs)."""
    copy = GlobalMemory()
    copy.next, copy.bases = self.next, list(self.bases)
    for base, buf in self.buffers.items():
      copy.buffers[base] = Buffer(base, buf.size, buf.name)
      copy.buffers[base].data[:] = buf.data
    return copy

  def free(self, buf: Buffer) -> None:
    if self.buffers.pop(buf.base, None) is not None:
      self.bases.remove(buf.base)
    if self.last is buf:
      self.last = Buffer(0, 0)

  def lookup(self, addr: int, size: int, lane: int, what: str) -> Buffer:
    """The buffer holding [addr, addr+size); a LaneFault describing the miss otherwise."""
    i = bisect.bisect_right(self.bases, addr) - 1
    if i >= 0:
      buf = self.buffers[self.bases[i]]
      if addr + size <= buf.base + buf.size:
        return buf
    raise LaneFault(lane, f"out-of-bounds global {what} of {size} bytes at {addr:#x} "
                          f"({self.describe(addr)})")

  def _containing(self, lo: int, end: int) -> Buffer | None:
    """The buffer holding the whole range [lo, end), or None."""
    buf = self.last
    if buf.base <= lo and end <= buf.base + buf.size:
      return buf
    i = bisect.bisect_right(self.bases, lo) - 1
    if i >= 0:
      buf = self.buffers[self.bases[i]]
      if end <= buf.base + buf.size:
        return buf
    return None

  def describe(self, addr: int) -> str:
    i = bisect.bisect_right(self.bases, addr) - 1
    if i < 0:
      return "below every buffer"
    buf = self.buffers[self.bases[i]]
    past = addr - buf.base - buf.size
    if past < 0:
      return f"runs past the end of {buf.name or 'a buffer'} of {buf.size} bytes"
    return f"{past} bytes past the end of {buf.name or 'a buffer'} of {buf.size} bytes"

  def load(self, addrs: list, idx, unpack, size: int, scalar: bool) -> list:
    if len(idx) == 32 and scalar:    # whole warp: one range/alignment check, then unpack
      buf = self._containing(min(addrs), max(addrs) + size)
      if buf is not None and not reduce(or_, addrs) & (size - 1):
        base, data = buf.base, buf.data
        self.last = buf
        return [unpack(data, a - base)[0] for a in addrs]
    out = [0] * 32
    buf = self.last
    base, end, data = buf.base, buf.base + buf.size, buf.data
    for i in idx:
      a = addrs[i]
      if a < base or a + size > end:
        buf = self.lookup(a, size, i, "load")
        base, end, data = buf.base, buf.base + buf.size, buf.data
      if a % size:
        raise LaneFault(i, f"misaligned global load of {size} bytes at {a:#x}")
      out[i] = unpack(data, a - base)[0] if scalar else unpack(data, a - base)
    self.last = buf
    return out

  def store(self, addrs: list, idx, pack, size: int, values: list) -> None:
    buf = self.last
    base, end, data = buf.base, buf.base + buf.size, buf.data
    for i in idx:
      a = addrs[i]
      if a < base or a + size > end:
        buf = self.lookup(a, size, i, "store")
        base, end, data = buf.base, buf.base + buf.size, buf.data
      if a % size:
        raise LaneFault(i, f"misaligned global store of {size} bytes at {a:#x}")
      pack(data, a - base, *values[i])
    self.last = buf


class SharedMemory:
  """One CTA's shared memory, with a read-after-write race detector across bar.sync epochs."""

  def __init__(self, size: int, layout: list, check_races: bool = True):
    self.data = bytearray(size)
    self.size, self.layout = size, layout      # layout: (name, offset, nbytes)
    self.last = ("", 0, 0)
    self.epoch = 0
    self.check = check_races
    self.writer = [-1] * size if check_races else None
    self.written = [-1] * size if check_races else None

  def _offset(self, a: int, size: int, lane: int, what: str) -> int:
    off = a - SHARED_BASE
    var = self.last     # the variable the last access hit (most accesses hit it again)
    if not var[1] <= off < var[1] + var[2]:
      var = next((v for v in self.layout if v[1] <= off < v[1] + v[2]), None)
      if var is not None:
        self.last = var
    if var is None or off + size > var[1] + var[2]:
      where = f"in shared variable {var[0]} of {var[2]} bytes" if var else \
        "outside every shared variable"
      raise LaneFault(lane, f"out-of-bounds shared {what} of {size} bytes at {a:#x} ({where})")
    if a % size:
      raise LaneFault(lane, f"misaligned shared {what} of {size} bytes at {a:#x}")
    return off

  def load(self, addrs, idx, unpack, size, scalar, tid0: int) -> list:
    out = [0] * 32
    for i in idx:
      off = self._offset(addrs[i], size, i, "load")
      if self.check:
        self._check_read(off, size, tid0 + i, i)
      out[i] = unpack(self.data, off)[0] if scalar else unpack(self.data, off)
    return out

  def _check_read(self, off: int, size: int, tid: int, lane: int) -> None:
    if self.epoch not in self.written[off:off + size]:
      return
    for b in range(off, off + size):
      if self.written[b] == self.epoch and self.writer[b] != tid:
        raise LaneFault(lane, f"shared-memory race: thread {tid} reads shared byte "
                              f"{b} (address {SHARED_BASE + b:#x}) that thread {self.writer[b]} "
                              f"wrote since the last barrier; add a bar.sync between them")

  def store(self, addrs, idx, pack, size, values, tid0: int) -> None:
    for i in idx:
      off = self._offset(addrs[i], size, i, "store")
      pack(self.data, off, *values[i])
      if self.check:
        for b in range(off, off + size):
          self.writer[b] = tid0 + i
          self.written[b] = self.epoch
