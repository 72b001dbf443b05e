"""The linearizer: a kernel graph (SINK) -> an ordered list of UOps with scoped blocks (IR.md).

Placement: a node's scope is the set of loops it depends on through its sources, minus the
loops closed by an ENDRANGE it depends on; it is placed inside exactly those loops (plus the
loops they are themselves nested in), so loop-invariant code stays outside. Loops nest by a
fixed order (a loop whose end or accumulator depends on another loop goes inside it; otherwise
by RANGE id). Each block is ordered topologically, with the graph's depth-first order as the
tie-break, so the result is deterministic. Gated STOREs become IF/ENDIF blocks around ungated
STOREs (consecutive stores with one gate share a block); open loops are closed at the end.

`make_kernel` builds the `Kernel` (buffer table, launch sizes, scalar arguments) from the list.
"""
from __future__ import annotations

import heapq

from ..errors import VerifyError
from .ops import Ops, UOp, describe, sink_order, toposort
from .program import BufferSpec, Kernel, launch_sizes

_DEFINITIONS = (Ops.PARAM, Ops.VAR, Ops.DEFINE_LOCAL, Ops.SPECIAL)
_MARKS = frozenset({Ops.RANGE, Ops.ENDRANGE, Ops.ASSIGN})   # the nodes loop nesting looks at


def _definition_key(u: UOp):
  """Definitions come first: PARAM by slot, then VAR by name, DEFINE_LOCAL by id, SPECIAL."""
  rank = _DEFINITIONS.index(u.op)
  return (rank, u.arg[0] if u.op is Ops.VAR else u.arg, str(u.dtype))


# ---- scopes ----------------------------------------------------------------------------------

def _acc_loops(marks: list[UOp]) -> dict[UOp, frozenset]:
  """DEFINE_ACC -> the loops whose ENDRANGEs close its ASSIGN (the loops its update runs in,
  even those whose index the update does not use: sum over an expanded axis). `marks`: the
  RANGE, ENDRANGE and ASSIGN nodes, in order."""
  loops: dict[UOp, frozenset] = {}
  for u in marks:
    if u.op is not Ops.ENDRANGE:
      continue
    closing, bodies = {u.src[0]}, list(u.src[1:])
    while bodies:                  # every side effect the loop closes, through nested ENDRANGEs
      body = bodies.pop()
      if body.op is Ops.ENDRANGE:
        closing.add(body.src[0])
        bodies.extend(body.src[1:])
      elif body.op is Ops.ASSIGN:
        acc = body.src[0]
        loops[acc] = loops.get(acc, frozenset()) | closing
  return loops


def _scopes(order: list[UOp], marks: list[UOp]) -> dict[UOp, frozenset]:
  """Each node's loops: the RANGEs it depends on (a read of an accumulator, except the final
  AFTER, depends on the loops its update runs in), minus those closed by an ENDRANGE it depends
  on."""
  state: dict[UOp, tuple] = {}     # node -> (the loops it depends on, the loops closed below it)
  scope: dict[UOp, frozenset] = {}
  empty = frozenset()
  acc_loops = _acc_loops(marks)
  for u in order:
    o = c = empty
    for s in u.src:           # unions that reuse a set when nothing new is added
      so, sc = state[s]
      if so and so is not o and not so <= o:
        o = o | so if o else so
      if sc and sc is not c and not sc <= c:
        c = c | sc if c else sc
      if s.op is Ops.DEFINE_ACC and u.op is not Ops.AFTER:
        al = acc_loops.get(s)
        if al and not al <= o:
          o = o | al
    if u.op is Ops.RANGE:
      o = o | {u}
    elif u.op is Ops.ENDRANGE:
      c = c | {u.src[0]}
    state[u] = o, c
    scope[u] = o - c if c else o
  return scope


def _must_nest(marks: list[UOp], scope: dict) -> dict[UOp, set]:
  """Loops that must be outside each loop: those its end depends on, the loops still open where
  it is closed (its ENDRANGE's scope: a body that does not use the loop's index still runs in
  it), and an accumulator's reset loops are outside the other loops its ASSIGNs run in."""
  outside: dict[UOp, set] = {u: set(scope[u.src[0]]) for u in marks if u.op is Ops.RANGE}
  for u in marks:
    if u.op is Ops.ENDRANGE:
      outside[u.src[0]] |= scope[u]
    elif u.op is Ops.ASSIGN:
      reset = scope[u.src[0]]
      for r in scope[u] - reset:
        outside[r] |= reset
  return outside


def _loop_order(marks: list[UOp], scope: dict, position: dict) -> dict[UOp, tuple]:
  """A sort key per RANGE: outer loops first (forced nesting depth), then RANGE id, then order."""
  outside = _must_nest(marks, scope)
  depth: dict[UOp, int] = {}
  for r in outside:           # depth = 1 + the deepest loop outside it, walked with a stack
    stack, on_path = [(r, iter(outside[r]))], {r}
    while stack:
      u, pending = stack[-1]
      o = next((o for o in pending if o not in depth), None)
      if o is None:
        depth[u] = 1 + max((depth[x] for x in outside[u]), default=0)
        on_path.discard(u)
        stack.pop()
      elif o in on_path:
        raise VerifyError("loops that must each be inside the other:\n" + describe(o))
      else:
        on_path.add(o)
        stack.append((o, iter(outside[o])))
  return {r: (depth[r], r.arg if isinstance(r.arg, int) else 0, position[r]) for r in depth}


def _nesting(marks: list[UOp], scope: dict, key: dict) -> dict[UOp, tuple]:
  """The loops each loop sits in, outermost first, closed so that loops form a tree."""
  outer: dict[UOp, set] = {r: set() for r in key}
  for loops in set(scope.values()):  # each set of loops nodes sit in (one loop adds nothing)
    if len(loops) > 1:
      for r in loops:
        outer[r].update(x for x in loops if key[x] < key[r])
  for u in marks:
    if u.op is Ops.ENDRANGE:       # a loop closed inside others sits in them
      outer[u.src[0]].update(scope[u])
  ranked = sorted(key, key=key.get)
  for r in reversed(ranked):       # an enclosing loop sits in the outer loops of its children
    for o in outer[r]:
      outer[o].update(x for x in outer[r] if key[x] < key[o])
  for r in ranked:                 # and a loop sits in what its enclosing loops sit in
    for o in list(outer[r]):
      outer[r] |= outer[o]
  return {r: tuple(sorted(outer[r], key=key.get)) for r in ranked}


def _paths(order: list[UOp], marks: list[UOp], scope: dict, position: dict) -> dict[UOp, tuple]:
  """The loops each node is placed in, outermost first. A RANGE is in its own loop (it opens
  it); an ENDRANGE too (it closes it). `marks`: the RANGE, ENDRANGE and ASSIGN nodes of `order`;
  `position`: each node's index in it."""
  key = _loop_order(marks, scope, position)
  nest = _nesting(marks, scope, key)
  paths: dict[UOp, tuple] = {}
  memo: dict[frozenset, tuple] = {}
  for u in order:
    loops = scope[u] | {u.src[0]} if u.op is Ops.ENDRANGE else scope[u]
    if loops not in memo:
      innermost = max(loops, key=key.get, default=None)
      memo[loops] = () if innermost is None else nest[innermost] + (innermost,)
      if not loops <= set(memo[loops]):
        raise VerifyError("the loops of this node do not nest: " + ", ".join(
          f"RANGE[{r.arg}]" for r in loops) + "\n" + describe(u))
    paths[u] = memo[loops]
  return paths


# ---- ordering --------------------------------------------------------------------------------

class _Block:
  """The nodes of one loop body (or the kernel), and the loops nested directly in it."""
  __slots__ = ("range", "nodes", "children", "end")

  def __init__(self, rng: UOp | None):
    self.range, self.nodes, self.children, self.end = rng, [], {}, []


def _build_blocks(order: list[UOp], paths: dict) -> _Block:
  root = _Block(None)
  blocks = {(): root}      # path -> its block
  for u in order:
    path = paths[u]
    block = blocks.get(path)
    if block is None:
      block = root
      for r in path:
        child = block.children.get(r)
        if child is None:
          child = block.children[r] = _Block(r)
        block = child
      blocks[path] = block
    if u.op is Ops.ENDRANGE:
      if block.range is not u.src[0]:
        raise VerifyError("ENDRANGE has side effects in a loop it is not nested in: close the "
                          f"inner loop (RANGE[{block.range.arg}]) first\n" + describe(u))
      block.end.append(u)
    elif u is not block.range:
      block.nodes.append(u)
  return root


def _emit(root: _Block, position: dict, out: list) -> None:
  """Append the blocks' items in topological order (ties: stores last, then depth-first graph
  order), each loop's body after its RANGE and before its end (a stack of open loops, not
  recursion: loops may nest as deep as a graph does)."""
  frames = [_frame(root, position, out)]
  while frames:
    block, ready, deps, users = frames[-1]
    if not ready:
      frames.pop()
      if block.range is not None:
        out.extend(block.end or [UOp(Ops.ENDRANGE, None, (block.range,))])
      continue
    _, it = heapq.heappop(ready)
    out.append(it)
    for user in users[it]:
      left = deps[user]
      left.discard(it)
      if not left:
        heapq.heappush(ready, ((user.op is Ops.STORE, position[user]), user))
    if it in block.children:
      frames.append(_frame(block.children[it], position, out))


def _frame(block: _Block, position: dict, out: list) -> tuple:
  """(block, ready heap, deps, users) for emitting `block`'s items; a block with no loops and
  no stores is emitted at once (graph order is already that order: a loop body, mostly)."""
  store = Ops.STORE
  if not block.children and all(u.op is not store for u in block.nodes):
    out.extend(block.nodes)
    return block, [], {}, {}
  items = block.nodes + list(block.children)
  members = {r: _members(b) for r, b in block.children.items()}
  # the item of this block each node inside a child loop belongs to: that loop's RANGE (the
  # loops form a tree, so a node in the child's subtree has it at this depth of its path)
  item_of = {m: r for r, ms in members.items() for m in ms}
  deps: dict[UOp, set] = {}
  users: dict[UOp, list] = {it: [] for it in items}
  for it in items:
    if not members:          # no loops in this block: an item's sources in it are its deps
      found = {s for s in it.src if s in users}
    else:
      found = set()
      for m in members.get(it, (it,)):
        for s in m.src:
          d = item_of.get(s, s)  # s's item: an item of this block, or a node outside it
          if d is not it and d in users:
            found.add(d)
    deps[it] = found
    for d in found:
      users[d].append(it)
  # priority: stores go last, so stores with one gate end up together; then graph order
  ready = [((it.op is store, position[it]), it) for it in items if not deps[it]]
  heapq.heapify(ready)
  return block, ready, deps, users


def _members(block: _Block) -> list[UOp]:
  """Every node inside a loop block, nested loops included (their RANGE and ENDRANGE too)."""
  out, stack = [], [block]
  while stack:
    b = stack.pop()
    out += [b.range] + b.nodes + b.end
    stack.extend(reversed(list(b.children.values())))
  return out


# ---- gated stores -> IF blocks, ENDRANGEs merged -----------------------------------------------

def _ungate(uops: list[UOp]) -> list[UOp]:
  """Rebuild the list with gated STOREs inside IF/ENDIF and one ENDRANGE per loop."""
  for first, u in enumerate(uops):
    if u.op is Ops.STORE and len(u.src) == 4:
      break
  else:
    return uops                    # no gated store: nothing to rebuild
  new: dict[UOp, UOp] = {}
  out: list[UOp] = uops[:first]    # (before the first gated store nothing changes)
  open_if: UOp | None = None
  count = 0
  for u in uops[first:]:
    src = tuple([new.get(s, s) for s in u.src]) if new else u.src
    gate = src[3] if u.op is Ops.STORE and len(src) == 4 else None
    if open_if is not None and (gate is None or open_if.src[0] is not gate):
      out.append(UOp(Ops.ENDIF, None, (open_if,)))
      open_if = None
    if gate is not None:
      src = src[:3]
      if open_if is None:   # arg: the block's number, so that two IFs of one gate differ
        open_if = UOp(Ops.IF, None, (gate,), count)
        count += 1
        out.append(open_if)
    node = u
    if src != u.src:     # only rebuilt nodes are recorded: new.get(s, s) finds the rest
      node = new[u] = UOp(u.op, u.dtype, src, u.arg)
    out.append(node)
  if open_if is not None:
    out.append(UOp(Ops.ENDIF, None, (open_if,)))
  return out


def _merge_ends(order: list[UOp]) -> list[UOp]:
  """Make every loop have one ENDRANGE holding all its side effects (rebuilding its users)."""
  ends: dict[UOp, list] = {}
  for u in order:
    if u.op is Ops.ENDRANGE:
      ends.setdefault(u.src[0], []).append(u)
  if all(len(e) == 1 for e in ends.values()):
    return order
  merged = {}
  for r, es in ends.items():
    if len(es) > 1:
      one = UOp(Ops.ENDRANGE, None, (r,) + tuple([s for x in es for s in x.src[1:]]))
      merged.update((e, one) for e in es)
  new: dict[UOp, UOp] = dict(merged)   # only the nodes that change
  for u in order:
    if u in merged or not u.src:
      continue
    src = tuple([new.get(s, s) for s in u.src])
    if src != u.src:
      new[u] = UOp(u.op, u.dtype, src, u.arg)
  return toposort([new.get(u, u) for u in order])


def linearize(sink: UOp) -> list[UOp]:
  """The kernel under `sink` as an ordered list per IR.md ("After linearizing")."""
  order = _merge_ends(sink_order(sink))
  if order and order[-1].op is Ops.SINK:     # (the root: last)
    order = order[:-1]
  definitions, body, position, marks, loops = [], [], {}, [], False
  for i, u in enumerate(order):   # one pass: definitions, the rest, positions, loop nodes
    position[u] = i
    if u.op in _DEFINITIONS:
      definitions.append(u)
    else:
      body.append(u)
      if u.op in _MARKS:
        marks.append(u)
        loops = loops or u.op is Ops.RANGE
  definitions.sort(key=_definition_key)
  # (no loops, as in elementwise kernels: every node at the top level)
  paths = _paths(order, marks, _scopes(order, marks), position) if loops else \
    dict.fromkeys(body, ())
  root = _build_blocks(body, paths)
  out: list[UOp] = list(definitions)
  _emit(root, position, out)
  return _ungate(out)


# ---- the Kernel ------------------------------------------------------------------------------

def make_kernel(name: str, uops: list[UOp], buffer_names: dict[int, str]) -> Kernel:
  """A Kernel from a linearized list: buffer table by slot, launch sizes and scalar arguments."""
  params, used, variables, specials = [], set(), [], []
  for u in uops:      # one pass: buffers, every buffer's access, scalar arguments, thread ids
    op = u.op
    if op is Ops.LOAD or op is Ops.STORE:
      if u.src[0].op is Ops.PARAM:
        used.add((op, u.src[0].arg))
    elif op is Ops.PARAM:
      params.append(u)
    elif op is Ops.VAR:
      variables.append(u)
    elif op is Ops.SPECIAL:
      specials.append(u)
  params.sort(key=lambda u: u.arg)
  access = {p.arg: "readwrite" if (Ops.LOAD, p.arg) in used and (Ops.STORE, p.arg) in used
            else "write" if (Ops.STORE, p.arg) in used else "read" for p in params}
  buffers = tuple(BufferSpec(p.arg, buffer_names.get(p.arg, f"buf{p.arg}"), p.dtype.base.scalar,
                             p.dtype.size, access[p.arg]) for p in params)
  global_size, local_size = launch_sizes(specials)
  return Kernel(name, tuple(uops), buffers, global_size, local_size, tuple(variables))


__all__ = ["linearize", "make_kernel"]
