"""ops.py: interning, operator overloads, constants, printing."""
from __future__ import annotations

import math

import pytest

from kernelgen.dtype import dtypes
from kernelgen.uop.ops import Ops, UOp, describe, print_graph, print_uops, sink_order, toposort

I32 = dtypes.int32


def test_nodes_are_interned():
  a = UOp(Ops.SPECIAL, I32, (), ("gid", 0, 4))
  assert (a + 1) is (a + 1)
  assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
  assert UOp.const(I32, 1) is not UOp.const(dtypes.bool, True)
  nan = UOp.const(dtypes.float32, math.nan)
  assert nan is UOp.const(dtypes.float32, math.nan)


def test_uops_are_immutable_and_have_no_truth_value():
  a = UOp.const(I32, 1)
  with pytest.raises(AttributeError, match="immutable"):
    a.op = Ops.ADD
  with pytest.raises(TypeError, match="no truth value"):
    bool(a)


def test_overloads_build_typed_nodes():
  a = UOp(Ops.SPECIAL, I32, (), ("lid", 0, 8))
  assert (a * 2).op is Ops.MUL and (a * 2).src[1].arg == 2
  assert (3 - a).src[0].arg == 3
  assert a.lt(4).dtype == dtypes.bool and a.ge(4).op is Ops.NOT
  assert (a // 2).op is Ops.IDIV and (a % 2).op is Ops.MOD
  w = a.lt(2).where(a, 0)
  assert w.op is Ops.WHERE and w.dtype == I32
  v = UOp.const(dtypes.float32.vec(3), 1.5)
  assert v.op is Ops.VECTORIZE and len(v.src) == 3 and v.gep(1).dtype == dtypes.float32


def test_const_truncates_to_the_dtype():
  assert UOp.const(dtypes.int8, 300).arg == 44
  assert UOp.const(dtypes.float16, 1e6).arg == math.inf


def test_toposort_puts_sources_first():
  a = UOp.const(I32, 1)
  b = a + 2
  c = b * a
  order = toposort([c])
  assert order.index(a) < order.index(b) < order.index(c) and len(order) == 4


def test_sink_order_is_the_toposort_and_a_new_list_each_call():
  a = UOp.const(I32, 1)
  first = UOp(Ops.SINK, None, (a + 2,))
  second = UOp(Ops.SINK, None, ((a + 2) * 3,))
  order = sink_order(first)
  assert order == toposort([first])
  order.clear()                          # the caller's list: the remembered walk is unharmed
  assert sink_order(first) == toposort([first])
  assert sink_order(second) == toposort([second])       # another sink: walked afresh
  assert sink_order(first) == toposort([first])


def test_printer_format():
  a = UOp(Ops.SPECIAL, I32, (), ("gid", 0, 4))
  text = print_graph(a + 1)
  assert text.splitlines() == ["%0 = special [('gid', 0, 4)] : int32", "%1 = const [1] : int32",
                               "%2 = add %0, %1 : int32"]
  r = UOp(Ops.RANGE, I32, (UOp.const(I32, 3),), 0)
  listing = print_uops([r.src[0], r, UOp(Ops.ENDRANGE, None, (r,))])
  assert listing.splitlines()[1:] == ["%1 = range [0] %0 : int32", "%2 = endrange %1"]
  assert describe(a + 1).splitlines()[-1].startswith("> %2 = add")
