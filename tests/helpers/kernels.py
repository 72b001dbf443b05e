"""Hand-built kernel graphs (IR.md form) with numpy references, for every backend's tests.

Each builder returns a `Case`: the kernel's SINK, its buffers in slot order as numpy arrays
(slot 0 is the output, already holding its initial contents), the expected output, and the
values of its scalar variables. Iterate over `ALL_KERNELS` ({name: builder}):

    for name, build in ALL_KERNELS.items():
      case = build()
      kernel = compile_kernel(case.sink, name, "python")
      out = run_python(case)           # or your own runtime
      case.check(out)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernelgen.dtype import DType, dtypes
from kernelgen.uop.wmma import fragment_position
from kernelgen.uop.ops import Ops, UOp

I32 = dtypes.int32
F32 = dtypes.float32


@dataclass
class Case:
  sink: UOp
  buffers: list            # numpy arrays in slot order; slot 0 is the output
  expected: np.ndarray     # what slot 0 holds afterwards
  var_values: dict = field(default_factory=dict)
  exact: bool = True       # False: compare with rtol/atol below (float sums in another order)
  rtol: float = 0.0
  atol: float = 0.0

  def check(self, out: np.ndarray) -> None:
    if self.exact:
      np.testing.assert_array_equal(out, self.expected)
    else:
      np.testing.assert_allclose(out, self.expected, rtol=self.rtol, atol=self.atol)


def np_dtype(dt: DType):
  return np.dtype("uint16") if dt == dtypes.bfloat16 else np.dtype(dt.name)


def c(v: int) -> UOp:
  return UOp.const(I32, v)


def param(slot: int, dt: DType, size: int) -> UOp:
  return UOp(Ops.PARAM, dt.ptr(size), (), slot)


def gid(dim: int, n: int) -> UOp:
  return UOp(Ops.SPECIAL, I32, (), ("gid", dim, n))


def lid(dim: int, n: int) -> UOp:
  return UOp(Ops.SPECIAL, I32, (), ("lid", dim, n))


def sink(*stores: UOp) -> UOp:
  return UOp(Ops.SINK, None, stores)


def reduce_loop(acc_id: int, init: UOp, rng: UOp, body) -> UOp:
  """acc = init; for r in rng: acc = body(acc, r); the value after the loop."""
  acc = UOp(Ops.DEFINE_ACC, init.dtype, (init,), acc_id)
  update = UOp(Ops.ASSIGN, init.dtype, (acc, body(acc, rng)))
  return UOp(Ops.AFTER, init.dtype, (acc, UOp(Ops.ENDRANGE, None, (rng, update))))


def _rng(seed: int) -> np.random.Generator:
  return np.random.default_rng(seed)


# ---- elementwise -----------------------------------------------------------------------------

def add_gated() -> Case:
  """out[i] = a[i] + b[i] for 1000 elements on 16 workgroups of 64 threads (the last partly idle)."""
  n, local = 1000, 64
  out, a, b = param(0, F32, n), param(1, F32, n), param(2, F32, n)
  i = gid(0, -(-n // local)) * c(local) + lid(0, local)
  ok = i.lt(c(n))
  value = a.load(i, ok, 0.0) + b.load(i, ok, 0.0)
  x, y = _rng(0).standard_normal((2, n)).astype(np.float32)
  return Case(sink(out.store(i, value, ok)), [np.zeros(n, np.float32), x, y], x + y)


def gated_store() -> Case:
  """out[i] = 2 * x[i] only where x[i] > 0 (the rest keeps its initial -1)."""
  n = 37
  out, x = param(0, F32, n), param(1, F32, n)
  i = gid(0, n)
  v = x.load(i)
  data = _rng(1).standard_normal(n).astype(np.float32)
  init = np.full(n, -1, np.float32)
  return Case(sink(out.store(i, v * 2.0, UOp.const(F32, 0.0).lt(v))), [init.copy(), data],
              np.where(data > 0, data * 2, init))


# ---- loops -----------------------------------------------------------------------------------

def row_sum() -> Case:
  """out[r] = sum(x[r, :]) with a loop per thread, for a 5 x 7 matrix."""
  rows, cols = 5, 7
  out, x = param(0, F32, rows), param(1, F32, rows * cols)
  row = gid(0, rows)
  rng = UOp(Ops.RANGE, I32, (c(cols),), 0)
  total = reduce_loop(0, UOp.const(F32, 0.0), rng, lambda acc, r: acc + x.load(row * c(cols) + r))
  data = _rng(2).standard_normal((rows, cols)).astype(np.float32)
  expected = np.zeros(rows, np.float32)
  for j in range(cols):      # the loop's order: float32 sums from left to right
    expected += data[:, j]
  return Case(sink(out.store(row, total)), [np.zeros(rows, np.float32), data.ravel()], expected)


def zero_trip_loop() -> Case:
  """out[i] = 7 + sum of x[j] for j < n with n = 0: the loop must not run."""
  m = 4
  out, x = param(0, I32, m), param(1, I32, m)
  n = UOp(Ops.VAR, I32, (), ("n", 0, m))
  rng = UOp(Ops.RANGE, I32, (n,), 0)
  total = reduce_loop(0, c(7), rng, lambda acc, r: acc + x.load(r))
  i = gid(0, m)
  return Case(sink(out.store(i, total)), [np.zeros(m, np.int32), np.arange(1, m + 1, dtype=np.int32)],
              np.full(m, 7, np.int32), var_values={"n": 0})


def triangular_loop() -> Case:
  """out[t] = sum(x[0:t]): a trip count that differs per thread of one workgroup."""
  m = 8
  out, x = param(0, I32, m), param(1, I32, m)
  t = lid(0, m)
  rng = UOp(Ops.RANGE, I32, (t,), 0)
  total = reduce_loop(0, c(0), rng, lambda acc, r: acc + x.load(r))
  data = np.arange(10, 10 + m, dtype=np.int32)
  expected = np.concatenate([[0], np.cumsum(data)[:-1]]).astype(np.int32)
  return Case(sink(out.store(t, total)), [np.zeros(m, np.int32), data], expected)


def nested_reduce() -> Case:
  """out[i] = sum over j of (sum over k of x[i, j, k]) ** 2: the inner accumulator restarts
  in every outer iteration."""
  a, b, k = 3, 4, 5
  out, x = param(0, I32, a), param(1, I32, a * b * k)
  i = gid(0, a)
  outer = UOp(Ops.RANGE, I32, (c(b),), 0)
  inner = UOp(Ops.RANGE, I32, (c(k),), 1)
  acc_in = UOp(Ops.DEFINE_ACC, I32, (c(0), outer), 1)
  upd_in = UOp(Ops.ASSIGN, I32, (acc_in, acc_in + x.load(i * c(b * k) + outer * c(k) + inner)))
  s = UOp(Ops.AFTER, I32, (acc_in, UOp(Ops.ENDRANGE, None, (inner, upd_in))))
  total = reduce_loop(0, c(0), outer, lambda acc, r: acc + s * s)
  data = _rng(3).integers(-9, 10, (a, b, k)).astype(np.int32)
  return Case(sink(out.store(i, total)), [np.zeros(a, np.int32), data.ravel()],
              (data.sum(axis=2) ** 2).sum(axis=1).astype(np.int32))


# ---- workgroup memory ------------------------------------------------------------------------

def local_two_stage_sum() -> Case:
  """out[g] = sum of x[g*16 : g*16+16]: each thread stores its element into workgroup memory,
  a barrier, then thread 0 sums the 16 values with a loop (4 workgroups)."""
  groups, local = 4, 16
  out, x = param(0, I32, groups), param(1, I32, groups * local)
  smem = UOp(Ops.DEFINE_LOCAL, I32.ptr(local, local=True), (), 0)
  g, t = gid(0, groups), lid(0, local)
  put = smem.store(t, x.load(g * c(local) + t))
  ready = UOp(Ops.AFTER, smem.dtype, (smem, UOp(Ops.BARRIER, None, (put,))))
  rng = UOp(Ops.RANGE, I32, (c(local),), 0)
  total = reduce_loop(0, c(0), rng, lambda acc, r: acc + UOp(Ops.LOAD, I32, (ready, r)))
  data = _rng(4).integers(-1000, 1000, groups * local).astype(np.int32)
  return Case(sink(out.store(g, total, t.eq(c(0)))), [np.zeros(groups, np.int32), data],
              data.reshape(groups, local).sum(axis=1).astype(np.int32))


def local_tree_sum() -> Case:
  """out[0] = sum of 8 values by a tree in workgroup memory: 3 rounds of barrier + add."""
  n = 8
  out, x = param(0, I32, 1), param(1, I32, n)
  smem = UOp(Ops.DEFINE_LOCAL, I32.ptr(n, local=True), (), 0)
  t = lid(0, n)
  done = smem.store(t, x.load(t))
  step = n // 2
  while step:
    view = UOp(Ops.AFTER, smem.dtype, (smem, UOp(Ops.BARRIER, None, (done,))))
    mine = UOp(Ops.LOAD, I32, (view, t))
    other = UOp(Ops.LOAD, I32, (view, t + c(step), t.lt(c(step)), c(0)))
    summed = mine + other
    # every thread has read before anyone writes: a barrier after this round's loads
    view2 = UOp(Ops.AFTER, smem.dtype, (smem, UOp(Ops.BARRIER, None, (summed,))))
    done = view2.store(t, summed, t.lt(c(step)))
    step //= 2
  final = UOp(Ops.AFTER, smem.dtype, (smem, UOp(Ops.BARRIER, None, (done,))))
  data = np.array([3, -1, 4, 1, -5, 9, 2, -6], np.int32)
  return Case(sink(out.store(c(0), UOp(Ops.LOAD, I32, (final, c(0))), t.eq(c(0)))),
              [np.zeros(1, np.int32), data], np.array([data.sum()], np.int32))


# ---- dtypes ----------------------------------------------------------------------------------

def _binary(dt: DType, n: int, fn, xs, ys):
  out, a, b = param(0, dt, n), param(1, dt, n), param(2, dt, n)
  i = gid(0, n)
  return sink(out.store(i, fn(a.load(i), b.load(i)))), [np.zeros(n, np_dtype(dt)), xs, ys]


def int8_wrap_add() -> Case:
  xs = np.array([127, -128, 100, -100, 5, 0], np.int8)
  ys = np.array([1, -1, 100, -100, -7, 0], np.int8)
  s, bufs = _binary(dtypes.int8, 6, lambda a, b: a + b, xs, ys)
  return Case(s, bufs, (xs + ys).astype(np.int8))


def uint8_wrap_add() -> Case:
  xs = np.array([255, 0, 200, 17], np.uint8)
  ys = np.array([1, 255, 100, 3], np.uint8)
  s, bufs = _binary(dtypes.uint8, 4, lambda a, b: a - b + b + b, xs, ys)
  return Case(s, bufs, (xs + ys).astype(np.uint8))


def f16_fma() -> Case:
  """out = a * b + c in float16 with one rounding (MULACC)."""
  n = 64
  h = dtypes.float16
  out, a, b, cc = param(0, h, n), param(1, h, n), param(2, h, n), param(3, h, n)
  i = gid(0, n)
  fma = UOp(Ops.MULACC, h, (a.load(i), b.load(i), cc.load(i)))
  xs, ys, zs = (_rng(5 + k).standard_normal(n).astype(np.float16) for k in range(3))
  exact = xs.astype(np.float64) * ys.astype(np.float64) + zs.astype(np.float64)
  return Case(sink(out.store(i, fma)), [np.zeros(n, np.float16), xs, ys, zs], exact.astype(np.float16))


def bool_logic() -> Case:
  """out = (a and not b) or (a xor b) == ... on bool buffers (one byte per element)."""
  xs = np.array([False, False, True, True])
  ys = np.array([False, True, False, True])
  s, bufs = _binary(dtypes.bool, 4, lambda a, b: (a & ~b) | (a ^ b).ne(UOp.const(dtypes.bool, True)),
                    xs, ys)
  return Case(s, bufs, (xs & ~ys) | ((xs ^ ys) != True))  # noqa: E712


def int_shift_div_mod() -> Case:
  """out = ((a << 3) >> (b & 7)) + a / b * 10 + a % b (C division), int32."""
  xs = np.array([-17, 17, -1, 1000, -2 ** 31 + 5, 7], np.int32)
  ys = np.array([5, -5, 3, 7, 3, 1], np.int32)

  def fn(a, b):
    return ((a << 3) >> (b & 7)) + (a // b) * 10 + a % b
  s, bufs = _binary(I32, 6, fn, xs, ys)
  wide, amount = xs.astype(np.int64), (ys & 7).astype(np.int64)
  shifted = (wide << 3).astype(np.int32).astype(np.int64) >> amount      # << wraps in int32
  q = np.trunc(wide / ys).astype(np.int64)                                # C division
  expected = shifted + q * 10 + np.fmod(wide, ys)
  return Case(s, bufs, expected.astype(np.int32))


def uint32_logical_shift() -> Case:
  xs = np.array([0x80000000, 0xFFFFFFFF, 12345], np.uint32)
  ys = np.array([31, 4, 1], np.uint32)
  s, bufs = _binary(dtypes.uint32, 3, lambda a, b: a >> b, xs, ys)
  return Case(s, bufs, xs >> ys)


def casts_and_bitcast() -> Case:
  """out[i] = int32(float(x) * 1.5) + bitcast<int32>(float(x)) >> 23 (the exponent)."""
  n = 6
  out, x = param(0, I32, n), param(1, dtypes.int16, n)
  i = gid(0, n)
  f = x.load(i).cast(F32)
  value = (f * 1.5).cast(I32) + (f.bitcast(I32) >> c(23))
  xs = np.array([1, -3, 7, 1000, -32768, 0], np.int16)
  fs = xs.astype(np.float32)
  expected = (fs * np.float32(1.5)).astype(np.int32) + (fs.view(np.int32) >> 23)
  return Case(sink(out.store(i, value)), [np.zeros(n, np.int32), xs], expected)


# ---- vectors ---------------------------------------------------------------------------------

def vec4_scale() -> Case:
  """out[4i:4i+4] = x[4i:4i+4] * (1, 2, 3, 4) + lane 0, with vec4 loads and stores."""
  n = 16
  v4 = F32.vec(4)
  out, x = param(0, F32, n), param(1, F32, n)
  i = gid(0, n // 4) * c(4)
  v = x.load(i, dtype=v4)
  scale = UOp(Ops.VECTORIZE, v4, tuple(UOp.const(F32, k + 1.0) for k in range(4)))
  first = v.gep(0)
  value = v * scale + UOp(Ops.VECTORIZE, v4, (first,) * 4)
  data = _rng(6).standard_normal(n).astype(np.float32)
  rows = data.reshape(-1, 4)
  expected = (rows * np.arange(1, 5, dtype=np.float32) + rows[:, :1]).ravel()
  return Case(sink(out.store(i, value)), [np.zeros(n, np.float32), data], expected)


# ---- tensor cores ----------------------------------------------------------------------------

def _wmma_fragment(buf: UOp, shape, operand, g, t, count, row_stride, dtype_in) -> UOp:
  elems = []
  for k in range(count):
    r, col = fragment_position(shape, dtype_in, operand, g, t, k)
    elems.append(buf.load(r * c(row_stride) + col))
  return UOp(Ops.VECTORIZE, buf.dtype.base.vec(count), tuple(elems))


def wmma_m16n8k16() -> Case:
  """D (16x8, f32) = A (16x16) @ B (16x8) + C with one warp's mma m16n8k16."""
  m, n, k = 16, 8, 16
  shape, dtype_in = (m, n, k), dtypes.float16
  d_buf, a_buf = param(0, F32, m * n), param(1, dtype_in, m * k)
  b_buf, c_buf = param(2, dtype_in, k * n), param(3, F32, m * n)
  lane = lid(0, 32)
  g, t = lane // c(4), lane % c(4)
  a = _wmma_fragment(a_buf, shape, "a", g, t, 8, k, dtype_in.name)
  b = _wmma_fragment(b_buf, shape, "b", g, t, 4, n, dtype_in.name)
  acc = _wmma_fragment(c_buf, shape, "c", g, t, 4, n, dtype_in.name)
  arg = (f"wmma_m16n8k16_{dtype_in.name}", shape, dtype_in, F32)
  d = UOp(Ops.WMMA, F32.vec(4), (a, b, acc), arg)
  stores = []
  for e in range(4):
    r, col = fragment_position(shape, dtype_in.name, "d", g, t, e)
    stores.append(d_buf.store(r * c(n) + col, d.gep(e)))
  rng = _rng(7)
  A = rng.standard_normal((m, k)).astype(np.float16)
  B = rng.standard_normal((k, n)).astype(np.float16)
  C = rng.standard_normal((m, n)).astype(np.float32)
  expected = (A.astype(np.float64) @ B.astype(np.float64) + C).astype(np.float32)
  return Case(sink(*stores), [np.zeros(m * n, np.float32), A.ravel(), B.ravel(), C.ravel()],
              expected.ravel(), exact=False, rtol=1e-6, atol=1e-6)


ALL_KERNELS = {
  "add_gated": add_gated, "gated_store": gated_store, "row_sum": row_sum,
  "zero_trip_loop": zero_trip_loop, "triangular_loop": triangular_loop,
  "nested_reduce": nested_reduce, "local_two_stage_sum": local_two_stage_sum,
  "local_tree_sum": local_tree_sum, "int8_wrap_add": int8_wrap_add,
  "uint8_wrap_add": uint8_wrap_add, "f16_fma": f16_fma, "bool_logic": bool_logic,
  "int_shift_div_mod": int_shift_div_mod, "uint32_logical_shift": uint32_logical_shift,
  "casts_and_bitcast": casts_and_bitcast, "vec4_scale": vec4_scale, "wmma_m16n8k16": wmma_m16n8k16,
}


def run_python(case: Case, name: str = "kernel") -> np.ndarray:
  """Compile `case` for the reference interpreter, run it, and return slot 0 as numpy."""
  from kernelgen.compiler import compile_kernel
  from kernelgen.uop.interpret import execute
  kernel = compile_kernel(case.sink, name, "python")
  data = [bytearray(np.ascontiguousarray(b).tobytes()) for b in case.buffers]
  execute(kernel, data, case.var_values)
  return np.frombuffer(bytes(data[0]), dtype=case.buffers[0].dtype).reshape(case.expected.shape)
