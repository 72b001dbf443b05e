"""Joined writes that read other threads' elements (issue 35): an in-place write joined into a
thread-per-output group (graph/join.py) whose value reads elements of a member's output that
other threads of the workgroup compute. A decode layer's rotated key: element i of a head is
k[i] * cos - k[i + d/2] * sin (k[i^1] with interleaved pairs), and the thread that computes
k[i] of the QKV projection does not hold k[i + d/2].

The thread computing member element `offset + e` stores write element e, `offset` the least
member element the write reads. Each thread puts its `upcast` member values into workgroup
memory; after a BARRIER, the write's value reads the member from there (Lowerer.staged) instead
of computing it again. That holds where every member element a write element reads (where its
masks let it) lies in the workgroup block (`local * upcast` consecutive elements) of the one
that stores it: graph/member_reads.py lists them with Python integers, `exchangeable` checks
the blocks. Elsewhere the write computes what it reads itself (the member's reductions again at
those indices): the same values, more work.

SmolLM2-135M widths, q4, kg.generate's decode step natively on lavapipe (bench/
lm_decode_kernels.py, GPU timestamps, median of 9, main then branch twice, load 7-9): a layer's
projection and cache write 0.35 + 0.12 and 0.28 + 0.04 ms, joined 0.35 and 0.27 ms; 19 -> 17
launches a 2-layer step. The page's symbolic-step bundles join the pair cut to one row for a
decode run (graph/one_row.py write_joined_at): 11 buffers, 3 of them small inputs bound as
uniform buffers, so 8 storage buffers, WebGPU's default.
"""
from __future__ import annotations

from ..graph.lazy import LazyOp
from ..graph.view import contiguous_strides
from ..uop.ops import Ops, UOp
from .index_math import int_const, linear_index


def exchangeable(reads: list[set[int]], offset: int, block: int) -> bool:
  """Whether every member element that write element e reads lies in the block of `block`
  elements holding member element offset + e (`reads`: graph/member_reads.py)."""
  return all(r // block == (offset + e) // block for e, got in enumerate(reads) for r in got)


def exchange(lw, member: LazyOp, values: list[UOp], base: UOp, at: UOp, block: int) -> None:
  """Put a thread's `values` (member elements base + at + j of the workgroup's `block` from
  `base`) into workgroup memory and read `member` from there after a BARRIER (lw.staged)."""
  mem = UOp(Ops.DEFINE_LOCAL, member.dtype.ptr(block, local=True), (), lw._id())
  stores = [mem.store(at + int_const(j) if j else at, v) for j, v in enumerate(values)]
  ready = UOp(Ops.AFTER, mem.dtype, (mem, UOp(Ops.BARRIER, None, tuple(stores))))
  strides = contiguous_strides(member.shape)

  def read(idxs: tuple, gate: UOp | None) -> UOp:
    terms = [(u, s, n) for u, s, n in zip(idxs, strides, member.shape) if n > 1]
    lin = linear_index(terms, 0) - base
    return ready.load(lin.minimum(int_const(block - 1)).maximum(int_const(0)))
  lw.staged[id(member)] = read
