"""A one-row kernel's RMS norm taken out of its matmul (issue 35: a q4 LM's decode step).

A sum over k whose source is a product with a factor that is the same for every k of an output,
    out[n] = sum_k x[k] * r * g[k] * W[k, n],    r = f(R),  R = sum_k h(x[k]),
equals r * sum_k x[k] g[k] W[k, n]: the factor leaves the sum. `factored(item)` rewrites each
such sum `red` of a kernel (an RMS norm's rsqrt(mean(x^2) + eps), h = x^2, read by the
projection after it) as
    red' * f(R'),   red' = red without the factor,   R' = the sum of h over red's own elements,
R' a sum over red's source shape and axes that reads h(x[k]) where red reads the factor: red'
and R' are siblings (reductions.sibling_reduces), so a thread's one loop takes both, each x[k]
loaded once for both. graph/one_row.py joins a norm's sum kernel into the one-row (seq = 1)
kernels that read it (norm_joins) with this: a decode step launches neither norm-sum kernel of
a layer, a prompt's tiled kernels are left as they are (Stop 60's `nrm60` took the sum in a
register tile's loop at every seq: each prompt tile's column block took its rows' sums again,
+9 % prefill).

The factor is V, a view that broadcasts f(R) along R's reduced axes, reached from red's source
through products and views only (no mask, no padding); f: elementwise ops of R and constants.
`factored` checks that red's loop walks R's reduced elements as it walks its own (_walks_stat:
the index V is read at, as symbolic index math of red's source indices, moves over R's reduced
axes as red's reduced indices do, flat, and with none of them on R's other axes). The result
rounds as r * sum(...) does, not as sum(r * ...): a rounding per product, no error bound's worth
(tests/devices/test_row_factor.py compares both with numpy).
"""
from __future__ import annotations

from ..graph.lazy import L, LazyOp
from ..graph.schedule import ScheduleItem
from ..graph.view import View, contiguous_strides, prod
from ..rules.sums import linear_sum
from ..rules.symbolic import simplify
from ..uop.ops import Ops, UOp, toposort
from .index_math import I32, int_const, unravel
from .reductions import nested_reduces


def factored(item: ScheduleItem) -> ScheduleItem | None:
  """`item` with every float sum that has a row factor rewritten as the module docstring says;
  None where none has one, where a reduction is left inside another's source (a sum the rewrite
  did not take out: its kernel would compute it per output), or `item` is a row kernel or
  recomputes reductions."""
  if item.rows or item.recomputed:
    return None
  leaves = {id(i) for i in item.inputs}
  memo, done, shared = {}, [], {}
  roots = (item.out, *item.extra)
  stack = list(roots)
  while stack:            # sources first, iteratively
    node = stack[-1]
    if id(node) in memo:
      stack.pop()
      continue
    if id(node) in leaves or node.realized or not node.src:
      memo[id(node)] = node
      stack.pop()
      continue
    todo = [s for s in node.src if id(s) not in memo]
    if todo:
      stack.extend(todo)
      continue
    stack.pop()
    got = _factor(node, shared) if node.op is L.REDUCE else None
    done += [node] if got is not None else []
    memo[id(node)] = got if got is not None else _rebuilt(node, [memo[id(s)] for s in node.src])
  if not done:
    return None
  out = ScheduleItem(memo[id(item.out)], item.inputs, item.name,
                     extra=tuple(memo[id(e)] for e in item.extra))
  return out if not nested_reduces(out) else None


def _rebuilt(node: LazyOp, srcs: list) -> LazyOp:
  """`node` over `srcs` (itself where they are its own)."""
  if all(a is b for a, b in zip(srcs, node.src)):
    return node
  return LazyOp(node.op, node.dtype, node.shape, tuple(srcs), node.arg, device=node.device,
                sym=node.sym if node.sym is not None else (), bound=node.bound)


def factor_stats(red: LazyOp) -> list[tuple[LazyOp, LazyOp]]:
  """[(V, R)]: the factors V of float sum `red`'s source, each a VIEW that broadcasts an
  elementwise function of one sum R (over as many elements as red sums) along R's reduced
  axes, reached from the source through products and views."""
  if red.op is not L.REDUCE or red.arg[0] is not Ops.ADD or not red.src or \
     not red.dtype.is_float():
    return []
  length = _length(red)
  found, stack, seen = [], [red.src[0]], set()
  while stack:
    node = stack.pop()
    if id(node) in seen or node.realized or not node.src:
      continue
    seen.add(id(node))
    if node.op is L.VIEW:
      stat = _stat_of(node)
      if stat is not None and _length(stat) == length:
        found.append((node, stat))
      else:
        stack.append(node.src[0])
    elif node.op is L.ALU and node.arg is Ops.MUL:
      stack.extend(node.src)
  return found


def _stat_of(view: LazyOp) -> LazyOp | None:
  """R where VIEW `view` broadcasts f(R) (elementwise ops of R and constants, of R's shape)
  along R's reduced axes to R's source shape; else None."""
  f, stats, stack, seen = view.src[0], [], [view.src[0]], set()
  while stack:
    node = stack.pop()
    if id(node) in seen:
      continue
    seen.add(id(node))
    if node.op is L.REDUCE and not node.realized and node.src and node.arg[0] is Ops.ADD:
      stats.append(node)
    elif _constant(node) is not None:
      continue
    elif node.op in (L.ALU, L.CAST) and not node.realized and node.shape == f.shape:
      stack.extend(node.src)
    else:
      return None
  if len(stats) != 1 or stats[0].shape != f.shape or f.sym is not None:
    return None
  stat, v = stats[0], view.arg
  want = tuple(0 if a in stat.arg[1] else s for a, s in enumerate(contiguous_strides(f.shape)))
  if v.shape != stat.src[0].shape or v.offset or v.mask is not None or v.strides != want:
    return None
  return stat


def _constant(node: LazyOp) -> LazyOp | None:
  """The CONST `node` is, or is a view of (a broadcast scalar); else None."""
  while node.op is L.VIEW and node.src and not node.realized:
    node = node.src[0]
  return node if node.op is L.CONST and not node.realized else None


def _length(red: LazyOp) -> int:
  return prod(red.src[0].shape[a] for a in red.arg[1])


def _factor(red: LazyOp, memo: dict) -> LazyOp | None:
  """red' * f(R') for sum `red` with one row factor (module docstring); None where it has none,
  or more, or its loop does not walk R's elements (_walks_stat)."""
  found = factor_stats(red)
  if len(found) != 1 or red.sym is not None:
    return None
  view, stat = found[0]
  f, src = view.src[0], red.src[0]
  if f.dtype != red.dtype or not _walks_stat(red, view, stat):
    return None
  rest, reads = _without(src, view, memo), _swapped(src, view, stat.src[0], memo)
  if rest is None or rest is _ONE or reads is None:
    return None
  key = ("total", id(reads), red.arg[1], id(f))    # one R' for the sums that read x alike
  if key not in memo:
    total = LazyOp(L.REDUCE, stat.dtype, red.shape, (reads,), (Ops.ADD, red.arg[1]),
                   device=red.device)
    memo[key] = _refit(f, stat, total)
  scale = memo[key]
  if scale is None:
    return None
  body = LazyOp(L.REDUCE, red.dtype, red.shape, (rest,), red.arg, device=red.device,
                bound=red.bound)
  return LazyOp(L.ALU, red.dtype, red.shape, (body, scale), Ops.MUL)


_ONE = object()     # _without's result where a node was the factor itself (a product's 1)


def _holds(node: LazyOp, view: LazyOp, memo: dict) -> bool:
  """Whether `node` reaches `view` through products and views."""
  key = ("holds", id(node), id(view))
  if key not in memo:
    memo[key] = node is view or node.op is L.VIEW and node.arg.mask is None and \
      bool(node.src) and _holds(node.src[0], view, memo) or \
      node.op is L.ALU and node.arg is Ops.MUL and any(_holds(s, view, memo) for s in node.src)
  return memo[key]


def _without(node: LazyOp, view: LazyOp, memo: dict):
  """`node` with `view` read as 1 (dropped from its product): _ONE where node is the factor
  (or a view of it), None where a product holds it twice."""
  if node is view:
    return _ONE
  if node.op is L.VIEW:
    inner = _without(node.src[0], view, memo)
    return inner if inner is _ONE or inner is None else \
      LazyOp(L.VIEW, node.dtype, node.shape, (inner,), node.arg, device=node.device, sym=())
  held = [s for s in node.src if _holds(s, view, memo)]
  if len(held) != 1:
    return None
  inner = _without(held[0], view, memo)
  other = [s for s in node.src if s is not held[0]]
  if inner is _ONE or inner is None:
    return other[0] if inner is _ONE else None
  return LazyOp(L.ALU, node.dtype, node.shape, tuple(inner if s is held[0] else s
                                                     for s in node.src), Ops.MUL)


def _swapped(node: LazyOp, view: LazyOp, h: LazyOp, memo: dict) -> LazyOp | None:
  """The chain of views from `node` down to `view` over `h` (of view's shape) instead: h read
  where node reads the factor (memoized: the sums of one row share their reads)."""
  key = ("swap", id(node), id(view))
  if key in memo:
    return memo[key]
  if node is view:
    got = h if h.shape == view.shape else None
  elif node.op is L.VIEW:
    inner = _swapped(node.src[0], view, h, memo)
    got = inner and LazyOp(L.VIEW, h.dtype, node.shape, (inner,), node.arg, device=node.device,
                           sym=())
  else:
    held = [s for s in node.src if _holds(s, view, memo)]
    got = _swapped(held[0], view, h, memo) if len(held) == 1 else None
  memo[key] = got
  return got


def _refit(f: LazyOp, stat: LazyOp, total: LazyOp) -> LazyOp | None:
  """f(R) rebuilt over `total` (R' : its shape), R `stat`; None where f holds anything but
  elementwise ops of R and constants."""
  memo: dict = {}

  def build(node: LazyOp) -> LazyOp | None:
    if node is stat:
      return total
    if id(node) in memo:
      return memo[id(node)]
    const = _constant(node)
    if const is not None:
      scalar = LazyOp(L.CONST, const.dtype, (), arg=const.arg, device=const.device)
      got = LazyOp(L.VIEW, const.dtype, total.shape, (scalar,),
                   View(total.shape, (0,) * len(total.shape)), device=const.device, sym=())
    else:
      srcs = [build(s) for s in node.src]
      got = None if any(s is None for s in srcs) else \
        LazyOp(node.op, node.dtype, total.shape, tuple(srcs), node.arg, device=node.device)
    memo[id(node)] = got
    return got
  return build(f)


def _walks_stat(red: LazyOp, view: LazyOp, stat: LazyOp) -> bool:
  """Whether red's source, read at symbolic indices, reads `view` where the flat index of R's
  reduced axes is that of red's reduced axes, and R's other axes are free of red's reduced
  indices (so each output sums R's elements once, in one row)."""
  src = red.src[0]
  probe = tuple(UOp(Ops.VAR, I32, (), (f"rf{a}", 0, max(n - 1, 0)))
                for a, n in enumerate(src.shape))
  idxs, node, memo = list(probe), src, {}
  while node is not view:
    if node.op is L.VIEW:
      v = node.arg
      if v.mask is not None:
        return False
      idxs = unravel(v.terms(idxs), v.offset, node.src[0].shape)
      node = node.src[0]
    else:
      held = [s for s in node.src if _holds(s, view, memo)]
      if len(held) != 1:
        return False
      node = held[0]
  idxs = [simplify(u) for u in idxs]
  reduced = {probe[a] for a in red.arg[1]}
  for a, u in enumerate(idxs):
    if a not in stat.arg[1] and reduced & set(toposort([u])):
      return False
  walk = _flat([idxs[a] for a in stat.arg[1]], [view.shape[a] for a in stat.arg[1]])
  want = _flat([probe[a] for a in red.arg[1]], [src.shape[a] for a in red.arg[1]])
  return walk is not None and walk == want


def _flat(idxs: list, shape: list) -> tuple | None:
  """The row-major flat index of `idxs` in `shape` as linear_sum's ({term: coefficient},
  constant), simplified; None where it is not a sum of terms."""
  total = int_const(0)
  for u, stride in zip(idxs, contiguous_strides(tuple(shape))):
    total = total + (u * int_const(stride) if stride != 1 else u)
  return linear_sum(simplify(total))
