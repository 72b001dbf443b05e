"""pattern.py: matching by op/dtype/arg/sources/names, either-order sources, fixed points, the
non-termination guard."""
from __future__ import annotations

import pytest

from kernelgen.dtype import dtypes
from kernelgen.errors import RewriteError
from kernelgen.uop.ops import Ops, UOp
from kernelgen.uop.pattern import PatternMatcher, UPat, graph_rewrite

I32 = dtypes.int32
x = UOp(Ops.SPECIAL, I32, (), ("gid", 0, 8))


def test_match_captures_and_repeated_names():
  pat = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a")))
  assert pat.match(x + x, {}) == {"a": x}
  assert pat.match(x + 1, {}) is None
  assert UPat(Ops.MUL, dtype=dtypes.float32).match(x * 2, {}) is None


def test_either_order_sources_and_constants():
  pat = UPat(Ops.MUL, src=[UPat.var("v"), UPat.const(I32, 1)])
  assert pat.match(x * 1, {})["v"] is x
  assert pat.match(UOp.const(I32, 1) * x, {})["v"] is x
  assert UPat.const(I32, 1).match(UOp.const(dtypes.bool, True), {}) is None


def test_graph_rewrite_reaches_a_fixed_point():
  pm = PatternMatcher([
    # x + 0 -> x
    (UPat(Ops.ADD, src=[UPat.var("v"), UPat.const(I32, 0)]), lambda v: v),
    # x * 1 -> x
    (UPat(Ops.MUL, src=[UPat.var("v"), UPat.const(I32, 1)]), lambda v: v)])
  assert graph_rewrite(((x * 1) + 0) * 1 + 0, pm) is x


def test_context_is_passed_to_rules_that_ask():
  seen = []

  def note(ctx, n):
    ctx.append(n.arg)
  graph_rewrite(x + 1, PatternMatcher([(UPat(Ops.CONST, name="n"), note)]), ctx=seen)
  assert seen == [1]


def test_a_rule_set_that_never_stops_raises():
  flip = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b"))),
                          lambda a, b: UOp(Ops.ADD, I32, (b, a)))])
  with pytest.raises(RewriteError, match="did not reach a fixed point"):
    graph_rewrite(x + 1, flip, max_rewrites=100)


def test_scalar_matches_the_dtype_and_every_vector_of_it():
  h = dtypes.float16
  pm = PatternMatcher([(UPat(Ops.NEG, name="n", scalar=h), lambda n: n.src[0])])
  for dt in (h, h.vec(2), h.vec(16)):
    v = UOp(Ops.VAR, dt, (), ("v", 0, 1))
    assert graph_rewrite(UOp(Ops.NEG, dt, (v,)), pm) is v
  f = UOp(Ops.VAR, dtypes.float32, (), ("f", 0, 1))
  assert graph_rewrite(-f, pm) is not f
  assert UPat(scalar=h).match(f, {}) is None and UPat(scalar=h).match(UOp(Ops.SINK), {}) is None


def test_compiled_rules_capture_what_upat_match_captures():
  # the matcher runs each pattern as generated code: same verdicts and captures as UPat.match
  c = UOp.const(I32, 3)
  pats = [UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a"))),
          UPat(Ops.ADD, name="s", src=(UPat.var("a"), UPat.cvar("k"))),
          UPat(Ops.MUL, src=[UPat.var("v"), UPat.const(I32, 3)]),
          UPat((Ops.ADD, Ops.MUL), I32, src=(UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b"))),
                                             UPat.var("b"))),
          UPat(Ops.WHERE, src=(UPat.var("g"),), allow_any_len=True),
          UPat(Ops.ADD, src=(UPat(), UPat(arg=3))),
          UPat(Ops.ADD, src=(UPat.var("a"), UPat(custom=lambda u: u.op is Ops.CONST, name="a")))]
  nodes = [x + x, x + c, c + x, x * c, c * x, (x + c) + c, (x + c) * c, (x + x) + x,
           x.lt(c).where(x, c), x.lt(c).where(c, x), c + c]
  for pat in pats:
    seen = []
    pm = PatternMatcher([(pat, lambda **caps: seen.append(caps))])
    for node in nodes:
      seen.clear()
      pm.rewrite(node)
      assert (seen[0] if seen else None) == pat.match(node, {}), (pat, node)
