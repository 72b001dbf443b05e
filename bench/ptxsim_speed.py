"""How fast the PTX simulator runs: a 1M-element f32 add and a 64x64x64 f32 matmul, on both of
its engines in the same run (the reference engine, warp by warp in pure Python, and the fast
engine, numpy over batches of CTAs; and the pure-Python fast engine, fused.py, which runs where
numpy is missing, as in the page), plus optionally an exported PTX bundle on the fast engine.

Both kernels are hand-written PTX in the renderer's style (so the bench runs without the front
end); each result is checked against numpy. Prints seconds, simulated threads/s and warp
instructions/s per engine, the speedup, and the machine's load average.
Usage: python bench/ptxsim_speed.py [--quick] [--bundle DIR]
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "core"))
from kernelgen import ptxsim  # noqa: E402

HEADER = ".version 7.8\n.target sm_80\n.address_size 64\n"

ADD = HEADER + """
.visible .entry add(.param .u64 out, .param .u64 a, .param .u64 b, .param .s32 n)
{
  .reg .pred %p<1>;
  .reg .b32 %r<5>;
  .reg .b64 %rd<8>;
  .reg .f32 %f<3>;
  mov.u32 %r0, %ctaid.x;
  mov.u32 %r1, %tid.x;
  mad.lo.s32 %r2, %r0, 256, %r1;
  ld.param.s32 %r3, [n];
  setp.ge.s32 %p0, %r2, %r3;
  @%p0 bra $Ldone;
  ld.param.u64 %rd0, [out];
  ld.param.u64 %rd1, [a];
  ld.param.u64 %rd2, [b];
  mul.wide.s32 %rd3, %r2, 4;
  add.s64 %rd4, %rd1, %rd3;
  add.s64 %rd5, %rd2, %rd3;
  add.s64 %rd6, %rd0, %rd3;
  ld.global.f32 %f0, [%rd4];
  ld.global.f32 %f1, [%rd5];
  add.rn.f32 %f2, %f0, %f1;
  st.global.f32 [%rd6], %f2;
$Ldone:
  ret;
}
"""

MATMUL = HEADER + """
.visible .entry matmul(.param .u64 out, .param .u64 a, .param .u64 b, .param .s32 n)
{
  .reg .pred %p<1>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<10>;
  .reg .f32 %f<3>;
  mov.u32 %r0, %ctaid.x;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.y;
  mov.u32 %r3, %tid.y;
  mad.lo.s32 %r4, %r0, 16, %r1;
  mad.lo.s32 %r5, %r2, 16, %r3;
  ld.param.s32 %r6, [n];
  ld.param.u64 %rd0, [out];
  ld.param.u64 %rd1, [a];
  ld.param.u64 %rd2, [b];
  mul.lo.s32 %r7, %r5, %r6;
  mov.f32 %f0, 0f00000000;
  mov.u32 %r8, 0;
$Lloop:
  setp.ge.s32 %p0, %r8, %r6;
  @%p0 bra $Lend;
  add.s32 %r9, %r7, %r8;
  mul.wide.s32 %rd3, %r9, 4;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.f32 %f1, [%rd4];
  mad.lo.s32 %r10, %r8, %r6, %r4;
  mul.wide.s32 %rd5, %r10, 4;
  add.s64 %rd6, %rd2, %rd5;
  ld.global.f32 %f2, [%rd6];
  fma.rn.f32 %f0, %f1, %f2, %f0;
  add.s32 %r8, %r8, 1;
  bra $Lloop;
$Lend:
  add.s32 %r11, %r7, %r4;
  mul.wide.s32 %rd7, %r11, 4;
  add.s64 %rd8, %rd0, %rd7;
  st.global.f32 [%rd8], %f0;
  ret;
}
"""


def _buffers(mem, arrays):
  bufs = []
  for arr in arrays:
    buf = mem.alloc(arr.nbytes)
    buf.data[:] = arr.tobytes()
    bufs.append(buf)
  return bufs


def bench_add(n: int, engine: str) -> float:
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
  mem = ptxsim.GlobalMemory()
  out, ba, bb = _buffers(mem, [np.zeros(n, np.float32), a, b])
  ptxsim.program(ADD)   # parse + compile outside the timing
  start, cpu = time.perf_counter(), time.process_time()
  ran = ptxsim.run(ADD, (-(-n // 256), 1, 1), (256, 1, 1), [out.base, ba.base, bb.base, n], mem,
                   engine=engine)
  secs, cpu = time.perf_counter() - start, time.process_time() - cpu
  assert ran == engine and np.array_equal(np.frombuffer(out.data, np.float32), a + b)
  warp_instrs = -(-n // 32) * 21
  print(f"  {engine:9s} add, {n} f32 elements: {secs:6.3f} s, {cpu:6.3f} CPU s  "
        f"({n / secs / 1e6:6.2f} M threads/s, {warp_instrs / secs / 1e6:6.2f} M "
        f"warp-instructions/s; per CPU second {n / cpu / 1e6:6.2f} M threads/s)")
  return secs, cpu


def bench_matmul(n: int, engine: str) -> float:
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
  mem = ptxsim.GlobalMemory()
  out, ba, bb = _buffers(mem, [np.zeros((n, n), np.float32), a, b])
  ptxsim.program(MATMUL)
  start, cpu = time.perf_counter(), time.process_time()
  ran = ptxsim.run(MATMUL, (n // 16, n // 16, 1), (16, 16, 1), [out.base, ba.base, bb.base, n],
                   mem, engine=engine)
  secs, cpu = time.perf_counter() - start, time.process_time() - cpu
  assert ran == engine
  got = np.frombuffer(out.data, np.float32).reshape(n, n)
  np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
  warp_instrs = n * n // 32 * (n * 12 + 20)
  print(f"  {engine:9s} matmul {n}x{n}x{n} f32: {secs:6.3f} s, {cpu:6.3f} CPU s  "
        f"({2 * n ** 3 / secs / 1e6:6.2f} MFLOP/s, {warp_instrs / secs / 1e6:6.2f} M "
        f"warp-instructions/s; per CPU second {2 * n ** 3 / cpu / 1e6:6.2f} MFLOP/s)")
  return secs, cpu


def bench_parse() -> None:
  start = time.perf_counter()
  for k in range(20):
    ptxsim.load(MATMUL + f"// {k}\n")
  print(f"parse + compile of the matmul PTX: {(time.perf_counter() - start) / 20 * 1e3:.2f} ms")


def bench_bundle(path: str) -> None:
  """An exported PTX bundle's first input filled with arange / n, run on the fast engine."""
  import kernelgen as kg
  bundle = kg.load_bundle(path)
  inputs = {}
  for spec in bundle.inputs:
    n = int(np.prod(spec["shape"]))
    inputs[spec["name"]] = (np.arange(n).reshape(spec["shape"]) / n).astype(spec["dtype"])
  start, cpu = time.perf_counter(), time.process_time()
  bundle.run(inputs, device="PTXSIM")
  print(f"  fast      bundle {path} ({len(bundle.manifest['kernels'])} kernels) on PTXSIM: "
        f"{time.perf_counter() - start:.1f} s ({time.process_time() - cpu:.1f} CPU s)")


def _both(bench, size) -> None:
  (ref, ref_cpu), (fast, fast_cpu) = bench(size, "reference"), bench(size, "fast")
  print(f"  speedup {ref / fast:.1f}x in wall time, {ref_cpu / fast_cpu:.1f}x in CPU time")
  py, py_cpu = bench(size, "fused")
  print(f"  fused engine (pure Python, no numpy, as in the page): speedup {ref / py:.1f}x in wall time, "
        f"{ref_cpu / py_cpu:.1f}x in CPU time")


if __name__ == "__main__":
  quick = "--quick" in sys.argv
  print(f"load average at the start: {os.getloadavg()[0]:.2f} (this machine has "
        f"{os.cpu_count()} CPUs)")
  bench_parse()
  _both(bench_matmul, 32 if quick else 64)
  _both(bench_add, 1 << 16 if quick else 1 << 20)
  if "--bundle" in sys.argv:
    bench_bundle(sys.argv[sys.argv.index("--bundle") + 1])
  print(f"load average at the end: {os.getloadavg()[0]:.2f}")
