"""Lanes that each read one run of a symbolic row (Opts.group_chunk, the CPU adapters' default)
share the row's bound length, not its padded one (Lowerer._run_loop, issue 34): a softmax over
rows of n in 1..512 with 8 lanes per row gave lane 0 every element of a row of 77 while the
other lanes idled (runs of 512 / 8), 3x the static kernel's GPU time on lavapipe. Each lane's
trip count is read from the kernel (its loops' ends evaluated at a lane and a bound value), and
the kernels run against numpy at the range's ends and at values that divide no lane count,
vector or unroll, with the padding NaN (never read as a value), on PYTHON, WEBGPU and PTXSIM."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.uop.ops import Ops
from tools import device_runtime, ptxas_check, wgsl_validate

ROWS, HI, LANES = 8, 512, 8
VALUES = (1, 2, 3, 5, 8, 15, 16, 17, 31, 33, 77, 127, 255, 511, HI)
OPTIONS = {"row_lanes": LANES, "group_chunk": True}


def _kernel(op="softmax", target="wgsl", **options):
  x = kg.Tensor.empty(ROWS, kg.Dim("n", 1, HI), name="x")
  (kernel,) = kg.compile(getattr(x, op)(-1), target, **{**OPTIONS, **options})
  return kernel


_INT = {Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
        Ops.IDIV: lambda a, b: int(a / b), Ops.MOD: lambda a, b: int(math.fmod(a, b)),
        Ops.MAX: max, Ops.MIN: min, Ops.CMPLT: lambda a, b: a < b,
        Ops.SHL: lambda a, b: a << b, Ops.SHR: lambda a, b: a >> b, Ops.AND: lambda a, b: a & b}


def _value(u, env: dict):
  """An int expression of the kernel at a lane (SPECIAL lid) and bound values (VAR)."""
  if u.op is Ops.CONST:
    return u.arg
  if u.op is Ops.VAR:
    return env[u.arg[0]]
  if u.op is Ops.SPECIAL:
    return env[u.arg[0]]
  if u.op is Ops.WHERE:
    return _value(u.src[1], env) if _value(u.src[0], env) else _value(u.src[2], env)
  return _INT[u.op](*(_value(s, env) for s in u.src))


def _lane_trips(kernel, v: int) -> list[list[int]]:
  """For each loop whose end depends on the lane: its trip count in each lane at n = v."""
  out = []
  for u in kernel.kernel.uops:
    if u.op is Ops.RANGE and any(s.op is Ops.SPECIAL for s in _walk(u.src[0])):
      out.append([_value(u.src[0], {"n": v, "lid": lane, "gid": 0}) for lane in range(LANES)])
  return out


def _walk(u):
  stack, seen = [u], set()
  while stack:
    x = stack.pop()
    if x not in seen:
      seen.add(x)
      yield x
      stack.extend(x.src)


@pytest.mark.parametrize("op", ["softmax", "layernorm"])
def test_each_lane_takes_its_share_of_a_short_symbolic_row(op):
  kernel = _kernel(op)
  assert kernel.local_size[0] == LANES
  for v in VALUES:
    loops = _lane_trips(kernel, v)
    assert loops, "no loop over the row per lane"
    for trips in loops:
      assert max(trips) <= -(-sum(trips) // LANES) + 1, f"n = {v}: trips per lane {trips}"
  wgsl_validate(kernel.source)


def _rows(v):
  return np.random.default_rng(v).standard_normal((ROWS, v)).astype(np.float32) * 3


def _want(op, v):
  a = _rows(v).astype(np.float64)
  if op == "softmax":
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
  return (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)


def _run(runtime, kernel, v) -> np.ndarray:
  padded = np.full((ROWS, HI), np.nan, np.float32)
  padded[:, :v] = _rows(v)
  handles = [runtime.alloc(spec.size * 4) for spec in kernel.buffers]
  for spec, handle in zip(kernel.buffers, handles):
    if spec.name == "x":
      runtime.copyin(handle, padded.tobytes())
    else:
      out = handle
  runtime.run(kernel, handles, {"n": v})
  return np.frombuffer(runtime.copyout(out), np.float32).reshape(ROWS, HI)[:, :v]


@pytest.mark.parametrize("device, target", [("PYTHON", "wgsl"), ("WEBGPU", "wgsl"),
                                            ("PTXSIM", "ptx")])
@pytest.mark.parametrize("op", ["softmax", "layernorm"])
@pytest.mark.parametrize("extra", [{}, {"group_vec": 1, "group_unroll": 1},
                                   {"group_vec": 4, "group_unroll": 2}])
def test_lanes_over_runs_of_a_symbolic_row_are_right_at_every_value(device, target, op, extra):
  options = {"arch": "sm_80", **extra} if target == "ptx" else extra
  kernel = _kernel(op, target, **options)
  if target == "ptx":
    ptxas_check(kernel.source, "sm_80")
  runtime = device_runtime(device)
  for v in VALUES:
    np.testing.assert_allclose(_run(runtime, kernel, v), _want(op, v).astype(np.float32),
                               rtol=2e-5, atol=2e-5, err_msg=f"n = {v}")
