"""Epilogues: a reduction that is a kernel of its own takes its elementwise tail with it.

When the scheduler makes a reduction (a matmul, say) a kernel of its own because its consumer
reads it inside another reduction or row (a residual stream read by the next layernorm, a
projection read by the next matmul), the elementwise ops that only it feeds (the bias, the
residual add, an activation) were computed by every kernel that reads it, from the reduction's
output and their own operands. Instead the kernel computes the top of that chain: the output of
the last node of `reduction -> op -> op ...` where each node has that op as its only user and the
op is elementwise over the reduction's own shape (or only reshapes it). The kernel count does not
grow, the tail is computed once per element instead of once per read, and its readers bind one
buffer where they
bound the reduction, the bias and the residual (the decoder's residual stream needed a kernel of
its own to stay within WebGPU's 8 storage buffers).

Not promoted: a chain whose other operands hold a reduction not yet a kernel (two reductions in
one kernel lose a matmul's tiles), a chain into a requested output's node (already a kernel), and
a kernel that would then bind more than the target's buffer limit.
"""
from __future__ import annotations

from .lazy import L, LazyOp

_ELEMENTWISE = (L.ALU, L.CAST, L.BITCAST)


def single_users(order: list[LazyOp]) -> dict[int, LazyOp]:
  """id(node) -> the node's user, for nodes of `order` (sources first) with exactly one user."""
  users: dict[int, list] = {}
  for node in order:
    if not node.realized:
      for s in {id(s): s for s in node.src}.values():
        users.setdefault(id(s), []).append(node)
  return {k: v[0] for k, v in users.items() if len(v) == 1}


def epilogue_top(node: LazyOp, user_of: dict, boundary: set) -> LazyOp:
  """The last node of the elementwise chain above reduction `node` (see the module docstring),
  or `node` itself when no op qualifies."""
  top, last = node, node
  while id(top) not in boundary or top is node:
    user = user_of.get(id(top))
    if user is None or user.size != node.size or not _in_chain(user) or \
       any(s is not top and _holds_reduce(s, boundary) for s in user.src):
      break
    top = user
    last = top if top.op is not L.VIEW else last
  return last


def _in_chain(node: LazyOp) -> bool:
  """An elementwise op, or a view that only reshapes (the matmul's reduced axis dropped)."""
  return node.op in _ELEMENTWISE or node.op is L.VIEW and node.arg.is_contiguous() and \
    not node.realized


def _holds_reduce(node: LazyOp, boundary: set) -> bool:
  """Whether `node` computes a reduction that is not yet a kernel (boundary) of its own."""
  stack, seen = [node], set()
  while stack:
    n = stack.pop()
    if id(n) in seen or n.realized or id(n) in boundary:
      continue
    seen.add(id(n))
    if n.op is L.REDUCE:
      return True
    stack.extend(n.src)
  return False
