"""Floored sizes (graph/dims.py): floor((affine) / d), the count of a slice with a step along a
symbolic axis. One canonical form (a divisor that shares a factor with every coefficient is
reduced, an exact one leaves an affine size), ranges and values by floor division, `+` of an
int or an affine size folded into the numerator, and the arithmetic no floored expression holds
as typed errors; its run-time value stays right where integer division truncates."""
from __future__ import annotations

import pytest

import kernelgen as kg
from kernelgen.graph.dims import rebind


def test_floored_sizes_are_canonical():
  n, m = kg.Dim("n", 1, 77), kg.Dim("m", 0, 5)
  assert (2 * n) // 2 == n and (2 * n + 3) // 2 == n + 1 and (6 * n + 2) // 4 == (3 * n + 1) // 2
  assert (n + 1) // 2 + 1 == (n + 3) // 2 and (n + 1) // 2 + m == (n + 2 * m + 1) // 2
  assert ((n + 1) // 2) // 2 == (n + 1) // 4 and hash((n + 1) // 2) == hash((1 + n) // 2)
  assert (n + 1) // 2 != n // 2 and n // 2 != n
  assert str((n + 1) // 2) == "(n + 1) // 2" and str(n // 3) == "n // 3"


def test_floored_ranges_and_values():
  n = kg.Dim("n", 1, 77)
  half = (n + 1) // 2
  assert (half.lo, half.hi) == (1, 39) and (n // 2).lo == 0
  for v in (1, 2, 3, 17, 76, 77):
    assert ((n.bind(v) + 1) // 2).value == (v + 1) // 2 == -(-v // 2)
  assert not half.is_dim and n.is_dim and not half.divides(1)
  assert half // 1 == half and (2 * n) // 2 == n and (4 * n + 1) // 2 == 2 * n


@pytest.mark.parametrize("bad, match", [
  (lambda h, n: 2 * h, "multiple of a floored size"),
  (lambda h, n: n - h, "negated floored size"),
  (lambda h, n: h + n // 3, "sum of two floored sizes"),
  (lambda h, n: h // 0, "positive int"),
  (lambda h, n: h.bind(3), "only a dim can be bound"),
])
def test_what_no_floored_size_holds_is_a_typed_error(bad, match):
  n = kg.Dim("n", 1, 77)
  with pytest.raises(kg.KernelgenError, match=match):
    bad((n + 1) // 2, n)


class _Trunc:
  """An int whose // truncates toward zero, as integer division on a device does."""

  def __init__(self, v):
    self.v = v

  def __add__(self, o):
    return _Trunc(self.v + o.v)

  def __mul__(self, o):
    return _Trunc(self.v * o.v)

  def __floordiv__(self, o):
    q = abs(self.v) // abs(o.v)
    return _Trunc(q if (self.v >= 0) == (o.v >= 0) else -q)


def test_the_run_time_value_is_floored_where_division_truncates():
  n = kg.Dim("n", 1, 9)
  for size in (n // 2 - 1, (n - 4) // 3, (n + 1) // 2, 5 - 2 * n):
    for v in range(1, 10):
      got = size.runtime(lambda name, lo, hi: _Trunc(v), _Trunc).v
      assert got == rebind((size,), {"n": v})[0].value, (size, v, got)
