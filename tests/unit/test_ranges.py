"""Value ranges (rules/ranges.py): every value a node takes lies in its range, and the ranges of
index math are tight."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from kernelgen.dtype import dtypes
from kernelgen.uop.ops import Ops, UOp, toposort
from kernelgen.rules.ranges import dtype_range, fits, value_range
from test_symbolic import divmod_case, evaluate, index_case, int_case, special, var

I32 = dtypes.int32
GID, LID = special("gid", 100), special("lid", 64)
X = var("x", -10, 20)


def _all_values(root: UOp, env: dict) -> dict:
  return {u: evaluate(u, env) for u in toposort([root]) if u.op not in (Ops.PARAM,)}


def _check_sound(root: UOp, env: dict):
  for u, value in _all_values(root, env).items():
    lo, hi = value_range(u)
    assert lo <= value <= hi, f"{value} outside {lo}..{hi} for\n{u}\nwith {env}"


@settings(max_examples=300, deadline=None)
@given(int_case())
def test_ranges_hold_every_value_of_int32_trees(case):
  _check_sound(*case)


@settings(max_examples=200, deadline=None)
@given(index_case())
def test_ranges_hold_every_value_of_index_trees(case):
  _check_sound(*case)


@settings(max_examples=200, deadline=None)
@given(divmod_case())
def test_ranges_hold_every_value_of_divmod_trees(case):
  _check_sound(*case)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint32, dtypes.int64]),
       st.sampled_from([Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.MIN, Ops.AND,
                        Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.CMPLT, Ops.CMPNE]), st.data())
def test_ranges_hold_on_every_integer_dtype(dt, op, data):
  """Wrap-around included: a range that could wrap is the dtype's full range."""
  lo, hi = dtype_range(dt)
  bounds = [sorted(data.draw(st.lists(st.integers(lo, hi), min_size=2, max_size=2)))
            for _ in range(2)]
  a, b = (UOp(Ops.VAR, dt, (), (n, *r)) for n, r in zip("ab", bounds))
  rhs = b & (dt.bits - 1) if op in (Ops.SHL, Ops.SHR) else b
  node = UOp(op, dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else dt, (a, rhs))
  env = {a: data.draw(st.integers(*bounds[0])), b: data.draw(st.integers(*bounds[1]))}
  _check_sound(node, env)


@pytest.mark.parametrize("expr,want", [
  (UOp.const(I32, 7), (7, 7)),
  (GID, (0, 99)),
  (var("n", 3, 9), (3, 9)),
  (GID * 64 + LID, (0, 6399)),
  ((GID * 64 + LID) // 16, (0, 399)),
  ((GID * 64 + LID) % 16, (0, 15)),
  (X % 4, (-3, 3)),
  (X // 4, (-2, 5)),
  (X // -4, (-5, 2)),
  (X * -3, (-60, 30)),
  (-X, (-20, 10)),
  (~X, (-21, 9)),
  (X - GID, (-109, 20)),
  (X.maximum(0), (0, 20)),
  (X.minimum(LID), (-10, 20)),
  (LID & 7, (0, 7)),
  (LID | 7, (7, 63)),
  (LID << 2, (0, 252)),
  (LID >> 3, (0, 7)),
  (X.lt(21), (True, True)),
  (X.lt(-10), (False, False)),
  (X.lt(0), (False, True)),
  (LID.eq(-1), (False, False)),
  (LID.ne(64), (True, True)),
  (X.lt(0).where(LID, GID + 200), (0, 299)),
  (X.cast(dtypes.uint8), (0, 255)),
  (LID.cast(dtypes.uint8), (0, 63)),
  (LID.cast(dtypes.bool), (False, True)),
  ((LID + 1).cast(dtypes.bool), (True, True)),
  (X // var("d", -2, 2), (-20, 20)),      # division by 0 gives 0
  (X % var("d", -2, 2), (-1, 1)),
  (UOp(Ops.RANGE, I32, (UOp.const(I32, 10),), 0), (0, 9)),
])
def test_ranges_of_nodes(expr, want):
  got = value_range(expr)
  assert got == want
  assert type(got[0]) is type(want[0])


def test_overflowing_ops_get_the_dtype_range():
  big = var("big", 0, 2 ** 31 - 1)
  assert value_range(big + 1) == dtype_range(I32)
  assert value_range(big * 2) == dtype_range(I32)
  assert value_range(-var("m", -2 ** 31, 0)) == dtype_range(I32)
  assert not fits(big + 1) and fits(GID * 64 + LID)
  u = UOp(Ops.VAR, dtypes.uint32, (), ("u", 0, 5))
  assert value_range(u - 1) == (0, 2 ** 32 - 1)


def test_floats_and_memory_have_no_bounds():
  buf = UOp(Ops.PARAM, dtypes.float32.ptr(4), (), 0)
  val = buf.load(0)
  assert value_range(val) == (-math.inf, math.inf)
  assert value_range(UOp.const(dtypes.float32, 1.0)) == (-math.inf, math.inf)
  assert value_range(val.lt(1.0)) == (False, True)
  assert value_range(val.cast(dtypes.int8)) == (-128, 127)
  ibuf = UOp(Ops.PARAM, dtypes.int16.ptr(4), (), 1)
  assert value_range(ibuf.load(0)) == (-32768, 32767)


def test_deep_graphs_do_not_recurse():
  x = LID
  for i in range(20000):
    x = x + (i % 3) if i % 2 else x - 1
  lo, hi = value_range(x)
  assert lo <= evaluate(x, {LID: 0}) <= hi
