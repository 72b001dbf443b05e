"""The elements of a kernel's output that an elementwise expression reads (graph/join.py joins
an in-place write whose value reads a member of a thread-per-output group this way: a decode
layer's rotated key from the QKV projection; lowering/exchange.py checks, with these lists, that
a workgroup computes every element a write element reads), listed with Python integers.
"""
from __future__ import annotations

from .lazy import L, LazyOp
from .view import contiguous_strides, prod

_SAME = (L.ALU, L.CAST, L.BITCAST, L.CONTIGUOUS)   # ops reading their sources at their indices


def member_reads(value: LazyOp, member: LazyOp, leaves: set) -> list[set[int]] | None:
  """For each flat element of `value` (a static elementwise expression: ALU ops, casts, views),
  the flat elements of `member` it reads where its views' masks hold; None where `value` reads
  `member` otherwise (through a reduction, a gather, a symbolic view) or not at all. `leaves`:
  ids of nodes read as buffers (the kernel's inputs)."""
  if value.sym is not None or not value.size:
    return None
  reads = [set() for _ in range(value.size)]
  for e, idxs in enumerate(_indices(value.shape)):
    if not _walk(value, idxs, member, leaves, reads[e]):
      return None
  return reads if any(reads) else None


def _indices(shape: tuple):
  """Every index tuple of `shape`, row-major."""
  out = [()]
  for n in shape:
    out = [i + (k,) for i in out for k in range(n)]
  return out


def _walk(node: LazyOp, idxs: tuple, member: LazyOp, leaves: set, got: set) -> bool:
  """Add to `got` the member elements `node` at `idxs` reads; False where it reads the member in
  a way member_reads cannot follow."""
  if node is member:
    got.add(sum(i * s for i, s in zip(idxs, contiguous_strides(node.shape))))
    return True
  if node.realized or id(node) in leaves or node.op in (L.CONST, L.VAR, L.IOTA):
    return True
  if node.op is L.VIEW:
    view = node.arg
    if not isinstance(view.offset, int) or node.src[0].sym is not None:
      return not _reaches(node, member, leaves)
    if view.mask is not None and any(not lo <= i < hi for i, (lo, hi) in zip(idxs, view.mask)):
      return True
    flat = view.offset + sum(i * s for i, s in zip(idxs, view.strides))
    src = node.src[0]
    inner = tuple(flat // prod(src.shape[a + 1:]) % n for a, n in enumerate(src.shape))
    return _walk(src, inner, member, leaves, got)
  if node.op in _SAME:
    return all(_walk(s, idxs, member, leaves, got) for s in node.src)
  return not _reaches(node, member, leaves)


def _reaches(node: LazyOp, member: LazyOp, leaves: set) -> bool:
  """Whether `member` is below `node` (not through a leaf)."""
  stack, seen = [node], set()
  while stack:
    n = stack.pop()
    if n is member:
      return True
    if id(n) in seen or n.realized or id(n) in leaves:
      continue
    seen.add(id(n))
    stack.extend(n.src)
  return False


__all__ = ["member_reads"]
