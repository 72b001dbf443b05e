"""Kernels that bind too many buffers, split (schedule.py's loop): one subexpression of such a
kernel becomes a kernel of its own, chosen so that the cut saves the most buffers (bind_limit.py
counts them), until every kernel fits.
"""
from __future__ import annotations

from .bind_limit import BufferLimit, kernel_fits
from .lazy import L, LazyOp


def split_wide(items: dict, boundary: set, users: dict, max_buffers: BufferLimit | int,
               walk_kernel, row_max: int = 0) -> bool:
  """Make one subexpression of a kernel that binds more than `max_buffers` buffers a kernel of
  its own (adding it to `boundary`); False when every kernel fits or none can be split.
  Candidates are tried most reachable inputs first, and those that cannot save more buffers than
  the best so far are not walked (cutting at a node saves at most the inputs it reaches, less
  the one it becomes): without that, every node of a long fused chain (an unrolled LSTM's cell
  state) cost two walks of the chain per split, O(n^2) a split. `walk_kernel`: the scheduler's
  walk of one kernel (schedule._walk_kernel: its inputs first)."""
  for item in sorted(items.values(), key=lambda it: -len(it.inputs)):
    if kernel_fits(item.inputs, item.out, max_buffers):
      return False
    best, best_key, even = None, None, None
    for bound, order, node in candidates(item, boundary):
      if best_key is not None and bound - 1 < best_key[0]:
        break
      own, _, _, _ = walk_kernel(node, set(boundary), users, row_max)
      if not kernel_fits(own, node, max_buffers):
        continue
      rest, _, _, _ = walk_kernel(item.out, boundary | {id(node)}, users, row_max)
      saved = len(item.inputs) - len(rest)
      key = (saved, len(own), -node.size, -order)    # among equals, the first in walk order
      if saved > 0 and (best_key is None or key > best_key):
        best, best_key = node, key
      elif saved == 0 and even is None:
        even = node
    # no cut saves a buffer alone (two operands reading the same buffers: a joined projection's
    # rotated q and k): one that costs none, so that a later cut can
    best = even if best is None else best
    if best is not None:
      boundary.add(id(best))
      return True
  return False


# nodes that a kernel reads as inputs when unfused (schedule._walk): a subexpression reaching k
# of them saves at most k - 1 of its parent's buffers when cut off
INPUT_OPS = (L.REDUCE, L.CONTIGUOUS, L.SORTNET, L.ATTENTION, L.WRITE)


def candidates(item, boundary: set) -> list[tuple[int, int, LazyOp]]:
  """(how many possible inputs it reaches, its place in fused_nodes, node) for each node
  split_wide may cut `item` at, most inputs first (one pass over the kernel; bit sets)."""
  nodes = fused_nodes(item, boundary)
  bits: dict[int, int] = {}
  reach: dict[int, int] = {}
  for node in nodes:
    mask = 0
    for s in node.src:
      if s.realized or id(s) in boundary or s.op in INPUT_OPS:
        mask |= bits.setdefault(id(s), 1 << len(bits))
      mask |= reach.get(id(s), 0) if not (s.realized or id(s) in boundary) else 0
    reach[id(node)] = mask
  out = [(reach[id(n)].bit_count(), i, n) for i, n in enumerate(nodes)
         if n is not item.out and n.op not in (L.CONST, L.IOTA, L.VAR)]
  out.sort(key=lambda t: (-t[0], t[1]))
  return out


def fused_nodes(item, boundary: set) -> list[LazyOp]:
  """The unrealized nodes computed inside `item`'s kernel (a ScheduleItem; not its inputs),
  sources first."""
  order, seen, inputs = [], set(), {id(i) for i in item.inputs}
  stack = [(item.out, False)]
  while stack:
    node, expanded = stack.pop()
    if expanded:
      order.append(node)
    elif id(node) not in seen and (node is item.out or id(node) not in inputs):
      seen.add(id(node))
      stack.append((node, True))
      stack.extend((s, False) for s in node.src if not s.realized)
  return order
