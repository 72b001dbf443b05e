"""Lowering: the UOp graph a scheduled kernel becomes (IR.md), and its index math."""
from __future__ import annotations

import itertools

import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.lower import Opts, lower, unravel
from kernelgen.ops import Ops, UOp, toposort
from kernelgen.rules.symbolic import simplify
from kernelgen.schedule import schedule
from kernelgen.verify import verify
from kernelgen.dtype import dtypes


@pytest.fixture(autouse=True)
def python_device(monkeypatch):
  monkeypatch.delenv("KERNELGEN_DEVICE", raising=False)
  previous = kg.Device._default
  kg.Device.DEFAULT = "PYTHON"
  yield
  kg.Device._default = previous


def lowered(t: Tensor, opts=Opts(local=4)) -> list[UOp]:
  (item,) = schedule([t.node])
  sink, _ = lower(item, opts)
  verify(sink)
  return toposort([simplify(sink)])


def ops_of(nodes) -> set:
  return {u.op for u in nodes}


def test_permute_and_expand_need_no_division():
  x = Tensor([[1.0] * 8] * 4)
  nodes = lowered((x.T + Tensor([1.0, 2.0, 3.0, 4.0])) * 2, Opts(local=32))
  # the only division is unravelling the thread index into the (8, 4) output: i // 4, i % 4
  assert sum(u.op is Ops.IDIV for u in nodes) == 1 and sum(u.op is Ops.MOD for u in nodes) == 1
  loads = [u for u in nodes if u.op is Ops.LOAD]
  assert len(loads) == 2 and all(len(u.src) == 2 for u in loads)   # no gates needed


def test_padding_becomes_gated_loads():
  nodes = lowered(Tensor([[1.0, 2.0], [3.0, 4.0]]).pad(((1, 1), (0, 0))), Opts(local=8))
  loads = [u for u in nodes if u.op is Ops.LOAD]
  assert len(loads) == 1 and len(loads[0].src) == 4    # (buf, index, gate, alt)


def test_bounds_gate_when_the_grid_overshoots():
  nodes = lowered(Tensor([1.0] * 100) * 2, Opts(local=64))
  stores = [u for u in nodes if u.op is Ops.STORE]
  assert len(stores) == 1 and len(stores[0].src) == 4
  assert any(u.op is Ops.SPECIAL and u.arg == ("gid", 0, 2) for u in nodes)


def test_reduction_is_a_loop_over_an_accumulator():
  nodes = lowered(Tensor([[1.0] * 8] * 4).sum(1), Opts(local=4))
  assert {Ops.RANGE, Ops.DEFINE_ACC, Ops.ASSIGN, Ops.ENDRANGE, Ops.AFTER} <= ops_of(nodes)
  (rng,) = [u for u in nodes if u.op is Ops.RANGE]
  assert rng.src[0].arg == 8


def test_upcast_stores_several_outputs_per_thread():
  nodes = lowered(Tensor([1.0] * 64) + 1, Opts(local=4, upcast=4))
  assert len([u for u in nodes if u.op is Ops.STORE]) == 4


def _eval_int(u: UOp, env: dict) -> int:
  if u.op is Ops.CONST:
    return u.arg
  if u.op in env:
    return env[u.op]
  a = [_eval_int(s, env) for s in u.src]
  if u.op is Ops.ADD:
    return a[0] + a[1]
  if u.op is Ops.MUL:
    return a[0] * a[1]
  if u.op is Ops.IDIV:
    return int(a[0] / a[1])
  if u.op is Ops.MOD:
    return a[0] - int(a[0] / a[1]) * a[1]
  raise AssertionError(u.op)


@pytest.mark.parametrize("shape,strides,offset", [
  ((6,), (1,), 0), ((3, 4), (4, 1), 0), ((4, 3), (1, 4), 0), ((2, 3, 4), (1, 8, 2), 0),
  ((3, 4), (-4, 1), 8), ((2, 2, 3), (0, 3, 1), 0),
])
def test_unravel_matches_python(shape, strides, offset):
  """unravel(linear) into a contiguous source shape == divmod arithmetic, for every index."""
  src_shape = (3, 4) if len(shape) == 2 or shape == (6,) else (2, 3, 4)
  src_shape = (2, 3) if shape == (6,) else src_shape
  src_shape = (2, 3) if shape == (2, 2, 3) else src_shape
  specials = [Ops.SPECIAL, Ops.RANGE, Ops.VAR][:len(shape)]
  idxs = [UOp(op, dtypes.int32, (), ("x", d, n)) if op is Ops.SPECIAL else
          UOp(op, dtypes.int32, (UOp.const(dtypes.int32, n),), d) if op is Ops.RANGE else
          UOp(op, dtypes.int32, (), ("v", 0, n - 1)) for d, (op, n) in enumerate(zip(specials,
                                                                                     shape))]
  terms = [(i, s, n) for i, s, n in zip(idxs, strides, shape)]
  got = unravel(terms, offset, src_shape)
  for point in itertools.product(*(range(n) for n in shape)):
    env = dict(zip(specials, point))
    lin = sum(p * s for p, s in zip(point, strides)) + offset
    want = []
    for k in range(len(src_shape)):
      inner = 1
      for n in src_shape[k + 1:]:
        inner *= n
      want.append(lin // inner % src_shape[k])
    assert [_eval_int(g, env) for g in got] == want, point
