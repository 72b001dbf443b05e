"""The scheduler's kernel walks, each done again only when a boundary it read has changed.

schedule() (schedule.py) finds its kernels again after every change to its boundary set (a
boundary a walk found, an epilogue promoted, a wide kernel split), walking every kernel each
round: ResNet-50 took 45 rounds, 2,479 walks, half of its compile. Most rounds change one
kernel's boundaries and leave the others' walks as they were.

A walk of the kernel of `root` reads the boundary set only at nodes it reaches from `root`
through nodes that are neither realized nor boundaries (its footprint: those nodes, and the
boundaries where it stops). So a walk that added no boundary gives the same result, and adds
none, whenever the boundaries among its footprint are the same: WalkCache keeps such walks and
answers from them while that holds. A walk that did add boundaries is not kept (the next one
starts from those boundaries, so it may differ), as schedule() would walk it again too. The
schedule is the same as walking every kernel every round; only the work differs.
"""
from __future__ import annotations

from typing import Callable

from .lazy import LazyOp


def footprint(root: LazyOp, boundary: set) -> frozenset:
  """Ids of the nodes a walk of `root`'s kernel may read the boundary set at: `root`, and what
  it reaches through nodes neither realized nor in `boundary` (those it stops at included;
  realized nodes, which never change, left out)."""
  seen, stack = {id(root)}, [root]
  while stack:
    node = stack.pop()
    for src in node.src:
      if id(src) not in seen and not src.realized:
        seen.add(id(src))
        if id(src) not in boundary:
          stack.append(src)
  return frozenset(seen)


class WalkCache:
  """`walk(root, boundary)` (which may add to `boundary`, never remove) answered from an earlier
  walk of `root` when that one added nothing and the boundaries among its footprint are the
  same now. `walks` and `kept` count the walks done and answered."""

  def __init__(self, walk: Callable[[LazyOp, set], tuple]):
    self._walk = walk
    self._kept: dict[int, tuple[frozenset, frozenset, tuple]] = {}
    self.walks = self.kept = 0

  def __call__(self, root: LazyOp, boundary: set) -> tuple:
    """The walk of `root`'s kernel given `boundary` (adding to it as the walk does)."""
    entry = self._kept.get(id(root))
    if entry is not None and boundary & entry[0] == entry[1]:
      self.kept += 1
      return entry[2]
    self.walks += 1
    known = len(boundary)
    result = self._walk(root, boundary)
    if len(boundary) == known:
      reads = footprint(root, boundary)
      self._kept[id(root)] = (reads, frozenset(boundary & reads), result)
    else:
      self._kept.pop(id(root), None)
    return result
