"""pattern.py: matching by op/dtype/arg/sources/names, either-order sources, fixed points, the
non-termination guard."""
from __future__ import annotations

import pytest

from kernelgen.dtype import dtypes
from kernelgen.errors import RewriteError
from kernelgen.ops import Ops, UOp
from kernelgen.pattern import PatternMatcher, UPat, graph_rewrite

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
