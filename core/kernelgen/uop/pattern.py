"""Declarative rewriting: `UPat` patterns, a `PatternMatcher` of (pattern, rewrite) rules, and
`graph_rewrite`, which applies a matcher bottom-up until nothing changes.

A rule's rewrite function receives the pattern's named captures as keyword arguments (and the
rewrite context as `ctx` when its first parameter is named so); it returns a new node, or None
to leave the node alone. Rules are indexed by (op, dtype) of the node their pattern's root can
match, each pattern is compiled to plain Python once per matcher, and results are memoized by
node identity (nodes are interned), so one `graph_rewrite` visits each node once plus once per
rewrite.
"""
from __future__ import annotations

from typing import Callable, Iterable

from ..dtype import DType, dtypes
from ..errors import RewriteError
from .ops import Ops, UOp, describe, set_simple, sink_order

_ANY = object()
_COMMON_DTYPES = (None,) + dtypes.all


class UPat:
  """A pattern over UOps.

  op:    an Ops, or a set/tuple of them, or None for any op
  dtype: a DType, or a set/tuple of them, or None for any dtype (a vector matches its own dtype)
  scalar: a scalar DType, or a set/tuple of them: the node's dtype is one of them or a vector of
         one (None: any)
  src:   None (any sources); a tuple (sources in order); a list (the two sources in either order)
  arg:   a value the node's arg must equal (use `_ANY`, the default, for any)
  name:  capture the matched node under this name; a name used twice must match one node
  allow_any_len: with a tuple `src`, match when the node has at least that many sources
  """
  __slots__ = ("ops", "dtypes", "src", "arg", "name", "allow_any_len", "custom", "scalars")

  def __init__(self, op=None, dtype=None, src=None, arg=_ANY, name: str | None = None,
               allow_any_len: bool = False, custom: Callable[[UOp], bool] | None = None,
               scalar=None):
    self.ops = None if op is None else (frozenset([op]) if isinstance(op, Ops) else frozenset(op))
    self.dtypes = None if dtype is None else (
      frozenset([dtype]) if isinstance(dtype, DType) else frozenset(dtype))
    self.scalars = None if scalar is None else (
      frozenset([scalar]) if isinstance(scalar, DType) else frozenset(scalar))
    self.src, self.arg, self.name = src, arg, name
    self.allow_any_len, self.custom = allow_any_len, custom

  # ---- shorthands ----
  @staticmethod
  def var(name: str | None = None, dtype=None) -> UPat:
    """Any node."""
    return UPat(dtype=dtype, name=name)

  @staticmethod
  def cvar(name: str | None = None, dtype=None) -> UPat:
    """Any constant."""
    return UPat(Ops.CONST, dtype, name=name)

  @staticmethod
  def const(dtype, value) -> UPat:
    """The constant `value` (compared by value and type: 0 matches 0 and 0.0, not False)."""
    return UPat(Ops.CONST, dtype, custom=lambda u: u.arg == value and not (
      isinstance(u.arg, bool) ^ isinstance(value, bool)))

  def __repr__(self) -> str:
    ops = "|".join(sorted(o.name for o in self.ops)) if self.ops else "*"
    return f"UPat({ops}{', name=' + self.name if self.name else ''})"

  # ---- matching ----
  def match(self, node: UOp, caps: dict) -> dict | None:
    """Captures after matching `node` (extending `caps`), or None when it does not match."""
    out = dict(caps)
    return out if self._match(node, out) else None

  def _match(self, node: UOp, caps: dict) -> bool:
    """Match `node`, adding captures to `caps` in place; after a False `caps` is garbage."""
    if self.ops is not None and node.op not in self.ops:
      return False
    if self.dtypes is not None and node.dtype not in self.dtypes:
      return False
    if self.scalars is not None and (node.dtype is None or node.dtype.scalar not in self.scalars):
      return False
    if self.arg is not _ANY and node.arg != self.arg:
      return False
    if self.custom is not None and not self.custom(node):
      return False
    if self.name is not None:
      seen = caps.get(self.name)
      if seen is None:
        caps[self.name] = node
      elif seen is not node:
        return False
    src = self.src
    if src is None:
      return True
    if src.__class__ is list:
      return self._match_either_order(node, caps)
    if len(node.src) != len(src) and not (self.allow_any_len and len(node.src) >= len(src)):
      return False
    for pat, s in zip(src, node.src):
      if not pat._match(s, caps):
        return False
    return True

  def _match_either_order(self, node: UOp, caps: dict) -> bool:
    if len(node.src) != 2:
      return False
    a, b = self.src
    for x, y in ((node.src[0], node.src[1]), (node.src[1], node.src[0])):
      got = dict(caps)
      if a._match(x, got) and b._match(y, got):
        caps.update(got)
        return True
    return False


Rule = tuple[UPat, Callable]


# ---- compiled rules --------------------------------------------------------------------------
# Each rule becomes straight-line Python (one function per rule, all of a matcher's rules
# compiled in one go): the pattern's checks in the same order as UPat._match, its captures in
# local variables, then the call of the rewrite function, so `rule(node, ctx)` is the rule's
# rewrite of the node or None. A pattern with sources in either order keeps its captures in a
# dict and falls back to UPat._match_either_order there.

class _Codegen:
  def __init__(self):
    self.consts: dict[str, object] = {}
    self.lines: list[str] = []
    self.count = 0
    self.caps = False   # the rule being compiled keeps its captures in the dict `caps`

  def const(self, value) -> str:
    name = f"K{len(self.consts)}"
    self.consts[name] = value
    return name

  def var(self) -> str:
    self.count += 1
    return f"n{self.count}"

  def cap(self, name: str) -> str:
    return f"caps[{name!r}]" if self.caps else f"c_{name}"

  def rule(self, i: int, pat: UPat, fn: Callable) -> None:
    """`def r{i}(n0, ctx)`: fn's rewrite when the node matches `pat`, else None."""
    self.caps = _either_order(pat)
    self.lines.append(f"def r{i}(n0, ctx):")
    if self.caps:
      self.lines.append("  caps = {}")
    names: set = set()
    self.node(pat, "n0", names, 2)
    wants_ctx = fn.__code__.co_argcount > 0 and fn.__code__.co_varnames[0] == "ctx"
    args = ["ctx"] if wants_ctx else []
    if self.caps:
      args.append("**caps")
    else:
      args += [f"{n}=c_{n}" for n in sorted(names)]
    self.lines.append(f"  return {self.const(fn)}({', '.join(args)})")

  def node(self, pat: UPat, var: str, names: set, depth: int) -> None:
    """Lines that return None unless node `var` matches `pat` (capturing its named nodes)."""
    pad, emit = " " * depth, self.lines.append
    if pat.ops is not None:
      if len(pat.ops) == 1:
        emit(f"{pad}if {var}.op is not {self.const(next(iter(pat.ops)))}: return None")
      else:
        emit(f"{pad}if {var}.op not in {self.const(pat.ops)}: return None")
    if pat.dtypes is not None:
      emit(f"{pad}if {var}.dtype not in {self.const(pat.dtypes)}: return None")
    if pat.scalars is not None:
      emit(f"{pad}if {var}.dtype is None or {var}.dtype.scalar not in {self.const(pat.scalars)}: "
           f"return None")
    if pat.arg is not _ANY:
      emit(f"{pad}if {var}.arg != {self.const(pat.arg)}: return None")
    if pat.name is not None:
      if pat.name in names:
        emit(f"{pad}if {self.cap(pat.name)} is not {var}: return None")
      else:
        emit(f"{pad}{self.cap(pat.name)} = {var}")
        names.add(pat.name)
    if pat.src is not None:
      self.sources(pat, var, names, depth)
    if pat.custom is not None:      # after the cheap structural checks of the sources
      emit(f"{pad}if not {self.const(pat.custom)}({var}): return None")

  def sources(self, pat: UPat, var: str, names: set, depth: int) -> None:
    pad, emit = " " * depth, self.lines.append
    if isinstance(pat.src, list):   # either order: the general matcher, names and all
      emit(f"{pad}if not {self.const(pat)}._match_either_order({var}, caps): return None")
      names.update(_names(pat))
      return
    src = self.var()
    emit(f"{pad}{src} = {var}.src")
    n = len(pat.src)
    emit(f"{pad}if len({src}) {'<' if pat.allow_any_len else '!='} {n}: return None")
    for i, sub in enumerate(pat.src):
      if sub.ops is None and sub.dtypes is None and sub.arg is _ANY and sub.custom is None \
         and sub.name is None and sub.src is None and sub.scalars is None:
        continue      # matches anything
      child = self.var()
      emit(f"{pad}{child} = {src}[{i}]")
      self.node(sub, child, names, depth)


def _names(pat: UPat) -> set:
  out = {pat.name} if pat.name is not None else set()
  for sub in pat.src or ():
    out |= _names(sub)
  return out


def _either_order(pat: UPat) -> bool:
  return isinstance(pat.src, list) or any(_either_order(p) for p in pat.src or ())


def _compile(rules: list[Rule]) -> list[Callable]:
  """One function `f(node, ctx) -> UOp | None` per rule: its rewrite, or None (no match)."""
  gen = _Codegen()
  for i, (pat, fn) in enumerate(rules):
    gen.rule(i, pat, fn)
  namespace = dict(gen.consts)
  exec(compile("\n".join(gen.lines), "<kernelgen patterns>", "exec"), namespace)  # noqa: S102
  return [namespace[f"r{i}"] for i in range(len(rules))]


class PatternMatcher:
  """An ordered list of rules, indexed by the op each pattern's root can match."""

  def __init__(self, rules: Iterable[Rule]):
    self.rules = list(rules)
    self.by_op: dict[Ops, list[tuple[UPat, Callable]]] = {op: [] for op in Ops}
    for (pat, _), compiled in zip(self.rules, _compile(self.rules)):
      for op in (pat.ops or Ops):
        self.by_op[op].append((pat, compiled))
    self._by_key: dict = {}   # (op, dtype) -> the rules of by_op[op] that dtype can match
    for op, rules in self.by_op.items():    # the scalar dtypes' lists up front (vectors and
      if rules:                             # pointers: on first sight)
        for dt in _COMMON_DTYPES:
          self._rules_for(op, dt)

  def __add__(self, other: PatternMatcher) -> PatternMatcher:
    return PatternMatcher(self.rules + other.rules)

  def _rules_for(self, op: Ops, dtype) -> list:
    """The compiled rules whose root can match a node of `op` and `dtype` (built once per
    pair)."""
    key = (op, dtype)
    rules = self._by_key.get(key)
    if rules is None:
      rules = self._by_key[key] = tuple(
        compiled for pat, compiled in self.by_op[op]
        if (pat.dtypes is None or dtype in pat.dtypes) and (
          pat.scalars is None or dtype is not None and dtype.scalar in pat.scalars))
    return rules

  def rewrite(self, node: UOp, ctx=None) -> UOp | None:
    """The first rule's rewrite of `node`, or None when no rule changes it."""
    rules = self._by_key.get((node.op, node.dtype))
    if rules is None:
      rules = self._rules_for(node.op, node.dtype)
    for rule in rules:
      out = rule(node, ctx)
      if out is not None and out is not node:
        return out
    return None


# UOp._simple of a node that `graph_rewrite(..., memo=True)` leaves as it is
SIMPLE = object()


def graph_rewrite(root: UOp, pm: PatternMatcher, ctx=None, max_rewrites: int | None = None,
                  memo: bool = False) -> UOp:
  """Rewrite the graph under `root` bottom-up with `pm` until no rule applies anywhere.

  Sources are rewritten before their users; a node a rule produces is itself rewritten to a
  fixed point. A rule set that keeps rewriting (more than `max_rewrites`, by default 50 per
  node of the input plus 10,000) raises RewriteError naming the node it was stuck on.
  `memo=True` (one matcher only, whose rewrites need no ctx: `simplify`) records each node's
  result on the node (UOp._simple), so a later call skips the subgraphs done before.

  A SINK's graph is taken in the order ops.sink_order walks it (the walk the later passes share);
  what a rule produces, and any other root's graph, depth first.
  """
  if memo and root._simple is not None:
    return root if root._simple is SIMPLE else root._simple
  done: dict[UOp, UOp] = {}
  # the default budget needs the graph's size: counted only if 10,000 rewrites run out
  budget = [max_rewrites if max_rewrites is not None else 10_000, max_rewrites is not None]
  by_key, rules_for = pm._by_key, pm._rules_for

  def rewritten(node: UOp) -> UOp | None:
    """The first rule's rewrite of `node` (its sources done), or None."""
    rules = by_key.get((node.op, node.dtype))    # pm.rewrite, inlined
    if rules is None:
      rules = rules_for(node.op, node.dtype)
    for rule in rules:
      out = rule(node, ctx)
      if out is not None and out is not node:
        return charged(node, out)
    return None

  def charged(node: UOp, out: UOp) -> UOp:
    """`out`, a rewrite of `node`, counted against the budget."""
    budget[0] -= 1
    if budget[0] < 0 and not budget[1]:
      budget[0], budget[1] = budget[0] + 50 * len(root.toposort()), True
    if budget[0] < 0:
      raise RewriteError("the rewrite rules did not reach a fixed point; last rewrite was of\n"
                         + describe(node) + "\ninto\n" + describe(out))
    return out

  if root.op is Ops.SINK:
    for node in sink_order(root):   # sources first: each node's sources are done before it
      if node in done:
        continue
      if memo:
        got = node._simple
        if got is not None:
          done[node] = node if got is SIMPLE else got
          continue
      src = node.src
      rebuilt = node
      if src:
        new_src = tuple(map(done.__getitem__, src))
        if new_src != src:
          rebuilt = UOp(node.op, node.dtype, new_src, node.arg)
      rules = by_key.get((rebuilt.op, rebuilt.dtype))    # rewritten(rebuilt), inlined
      if rules is None:
        rules = rules_for(rebuilt.op, rebuilt.dtype)
      for rule in rules:
        out = rule(rebuilt, ctx)
        if out is not None and out is not rebuilt:
          break
      else:
        done[node] = done[rebuilt] = rebuilt
        continue
      out = charged(rebuilt, out)
      done[node] = done[out] if out in done else _settle(out, done, rewritten, memo)
  else:
    _settle(root, done, rewritten, memo)
  if memo:
    for node, out in done.items():
      if node._simple is None:
        set_simple(node, SIMPLE if out is node else out)
  return done[root]


def _settle(root: UOp, done: dict, rewritten: Callable, memo: bool) -> UOp:
  """graph_rewrite's depth-first walk: `root`'s final form (and its new nodes') into `done`."""
  # depth first, sources in order: (node, iterator over its sources, the node it was rewritten
  # into, whose own rewriting is under way, or None)
  stack: list = [(root, iter(root.src), None)]
  pop, push = stack.pop, stack.append
  while stack:
    node, it, produced = stack[-1]
    if produced is not None:          # its rewrite is done: the node's final form is that one's
      pop()
      done[node] = done[produced]
      continue
    for s in it:
      if s not in done:
        if memo:
          got = s._simple
          if got is not None:
            done[s] = s if got is SIMPLE else got
            continue
        push((s, iter(s.src), None))
        break
    else:                             # every source done: rebuild on them and rewrite
      src = node.src
      if src:
        new_src = tuple(map(done.__getitem__, src))
        rebuilt = node if new_src == src else UOp(node.op, node.dtype, new_src, node.arg)
      else:
        rebuilt = node
      out = rewritten(rebuilt)
      if out is None:
        pop()
        done[node] = rebuilt
        done[rebuilt] = rebuilt
      elif out in done:
        pop()
        done[node] = done[out]
      else:
        stack[-1] = (node, None, out)
        push((out, iter(out.src), None))
  return done[root]


__all__ = ["UPat", "PatternMatcher", "graph_rewrite"]
