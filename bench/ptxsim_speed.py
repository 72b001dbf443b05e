"""How fast the PTX simulator runs: a 1M-element f32 add and a 64x64x64 f32 matmul, on both of
its engines in the same run (the reference engine, warp by warp in pure Python, and the fast
engine, numpy over batches of CTAs; and the pure-Python fast engine, fused.py, which runs where
numpy is missing), plus optionally an exported PTX bundle on the fast engine.

Both kernels are hand-written PTX in the renderer's style (so the bench runs without the front
end); each result is checked (the add exactly, the matmul within 1e-4 of a float64 product).
The workloads use the standard library only, so with --page the same functions run again in
the page: Pyodide in headless Chromium (the site ./build.sh site assembled), as a program the
page's worker runs on its PTXSIM device: the fast engine where numpy imports, the pure-Python
fused engine otherwise (as now: the page's Pyodide has no numpy; the line says which ran).
Prints seconds, simulated threads/s and warp instructions/s per engine, the speedup, and the
machine's load average.
Usage: python bench/ptxsim_speed.py [--quick] [--bundle DIR] [--page]
"""
from __future__ import annotations

import inspect
import json
import os
import random
import sys
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "core"))
from kernelgen import ptxsim  # noqa: E402

PAGE_MS = 900_000       # the page's whole measurement: boot, numpy, both kernels (ms)

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


def _buffers(mem, arrays: list) -> list:
  bufs = []
  for arr in arrays:
    buf = mem.alloc(len(arr) * arr.itemsize)
    buf.data[:] = arr.tobytes()
    bufs.append(buf)
  return bufs


def _values(n: int, seed: int) -> array:
  """n float32 values in [-1, 1), reproducible (the standard library only: runs in the page)."""
  rng = random.Random(seed)
  return array("f", [rng.random() * 2 - 1 for _ in range(n)])


def _timed(source: str, grid: tuple, block: tuple, args: list, mem, engine: str) -> tuple:
  """(the engine that ran, wall seconds, CPU seconds) of one launch, its compile outside."""
  ptxsim.program(source)
  start, cpu = time.perf_counter(), time.process_time()
  ran = ptxsim.run(source, grid, block, args, mem, engine=engine)
  return ran, time.perf_counter() - start, time.process_time() - cpu


def add_run(n: int, engine: str) -> tuple:
  """The add of n f32 elements on `engine`: (engine that ran, seconds, CPU seconds), the sums
  checked exactly (a float32 sum is the float64 sum rounded once)."""
  a, b = _values(n, 0), _values(n, 1)
  mem = ptxsim.GlobalMemory()
  out, ba, bb = _buffers(mem, [array("f", bytes(4 * n)), a, b])
  ran, secs, cpu = _timed(ADD, (-(-n // 256), 1, 1), (256, 1, 1), [out.base, ba.base, bb.base, n],
                          mem, engine)
  if array("f", bytes(out.data)) != array("f", [x + y for x, y in zip(a, b)]):
    raise RuntimeError(f"the add on the {ran} engine is wrong")
  return ran, secs, cpu


def matmul_run(n: int, engine: str) -> tuple:
  """The n x n x n f32 matmul on `engine`: (engine that ran, seconds, CPU seconds), every
  output within 1e-4 (relative and absolute) of the float64 product."""
  a, b = _values(n * n, 2), _values(n * n, 3)
  mem = ptxsim.GlobalMemory()
  out, ba, bb = _buffers(mem, [array("f", bytes(4 * n * n)), a, b])
  ran, secs, cpu = _timed(MATMUL, (n // 16, n // 16, 1), (16, 16, 1),
                          [out.base, ba.base, bb.base, n], mem, engine)
  got = array("f", bytes(out.data))
  for i in range(n):
    row = a[i * n:(i + 1) * n]
    for j in range(n):
      want = sum(x * b[k * n + j] for k, x in enumerate(row))
      if abs(got[i * n + j] - want) > 1e-4 * (1 + abs(want)):
        raise RuntimeError(f"the matmul on the {ran} engine is wrong at ({i}, {j})")
  return ran, secs, cpu


def bench_add(n: int, engine: str) -> tuple:
  ran, secs, cpu = add_run(n, engine)
  warp_instrs = -(-n // 32) * 21
  print(f"  {ran:9s} add, {n} f32 elements: {secs:6.3f} s, {cpu:6.3f} CPU s  "
        f"({n / secs / 1e6:6.2f} M threads/s, {warp_instrs / secs / 1e6:6.2f} M "
        f"warp-instructions/s; per CPU second {n / cpu / 1e6:6.2f} M threads/s)")
  return secs, cpu


def bench_matmul(n: int, engine: str) -> tuple:
  ran, secs, cpu = matmul_run(n, engine)
  warp_instrs = n * n // 32 * (n * 12 + 20)
  print(f"  {ran:9s} matmul {n}x{n}x{n} f32: {secs:6.3f} s, {cpu:6.3f} CPU s  "
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
  import numpy as np
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
  print(f"  fused engine (pure Python, no numpy): speedup {ref / py:.1f}x in wall time, "
        f"{ref_cpu / py_cpu:.1f}x in CPU time")


# ---- the same workloads in the page ----------------------------------------------------------

# In the page: a fresh kernelgen worker without WebGPU runs the program on its PTXSIM device
# and returns its `out`.
PAGE_RUN = """async (code) => {
  const { createKernelgen } = await import('/web/kernelgen.js');
  const kg = await createKernelgen({ base: '/', webgpu: false });
  try {
    const result = await kg.run(code, { device: 'PTXSIM' });
    return { values: Array.from(result.data) };
  } catch (error) {
    return { error: `${error.type}: ${error.message}`.slice(0, 400) };
  } finally {
    kg.terminate();
  }
}"""


def page_figures(n_matmul: int, n_add: int, engines: tuple) -> list:
  """Run in the page: [numpy present (1/0)], then per engine run [fast ran (1/0), matmul s,
  add s] (a program's out is a float32 Tensor, so engines are flags, not names)."""
  import importlib.util
  rows = [1.0 if importlib.util.find_spec("numpy") else 0.0]
  for engine in engines if rows[0] else engines[:1]:     # without numpy "fast" runs fused
    ran, mm, _ = matmul_run(n_matmul, engine)
    _, add, _ = add_run(n_add, engine)
    rows += [1.0 if ran == "fast" else 0.0, mm, add]
  return rows


def page_program(n_matmul: int, n_add: int, engines: tuple) -> str:
  """This module's workloads as a program for the page (out = page_figures' list)."""
  parts = ["import random, time", "from array import array", "from kernelgen import ptxsim",
           "kg.limits.set(page_seconds=3600)", f"HEADER = {HEADER!r}", f"ADD = {ADD!r}",
           f"MATMUL = {MATMUL!r}"]
  parts += [inspect.getsource(f) for f in (_buffers, _values, _timed, add_run, matmul_run,
                                            page_figures)]
  parts.append(f"out = Tensor(page_figures({n_matmul}, {n_add}, {engines!r}))")
  return "\n".join(parts)


def in_page(n_matmul: int, n_add: int, engines: tuple) -> list:
  """page_figures' list from Pyodide in headless Chromium (a worker without WebGPU)."""
  sys.path.insert(0, str(ROOT / "tests" / "helpers"))
  from playwright.sync_api import sync_playwright

  from browser_util import StaticServer, launch_chromium, local_page
  if not (ROOT / "site" / "web" / "kernelgen.js").exists():
    raise SystemExit("no site/: run ./build.sh site first (it builds the wheel the page loads)")
  with StaticServer(ROOT / "site") as server, sync_playwright() as playwright:
    browser = launch_chromium(playwright, webgpu=False)
    try:
      with local_page(browser, service_workers="block") as page:
        page.goto(server.url("web/README.md"))     # any page of the origin hosts the worker
        page.set_default_timeout(PAGE_MS)
        got = page.evaluate(PAGE_RUN, page_program(n_matmul, n_add, engines))
    finally:
      browser.close()
  if "error" in got:
    raise SystemExit(f"the page's run failed: {got['error']}")
  return got["values"]


def bench_page(n_matmul: int, n_add: int) -> None:
  """The page's figures, printed beside this process's (the fast engine, same sizes)."""
  native = {"matmul": matmul_run(n_matmul, "fast"), "add": add_run(n_add, "fast")}
  values = in_page(n_matmul, n_add, ("fast", "fused"))
  print(f"in the page (Pyodide, headless Chromium): numpy {'loaded' if values[0] else 'missing'}")
  flops = 2 * n_matmul ** 3
  for k in range(1, len(values), 3):
    fast, mm, add = values[k:k + 3]
    print(f"  page (ran {'fast' if fast else 'fused'}): matmul {n_matmul}^3 {mm:.3f} s "
          f"= {flops / mm / 1e6:.2f} MFLOP/s; add {n_add} {add:.3f} s = "
          f"{n_add / add / 1e6:.2f} M threads/s")
  (_, mm, mm_cpu), (_, add, add_cpu) = native["matmul"], native["add"]
  print(f"  native, fast engine: matmul {flops / mm / 1e6:.2f} MFLOP/s ({flops / mm_cpu / 1e6:.2f} "
        f"per CPU s); add {n_add / add / 1e6:.2f} M threads/s ({n_add / add_cpu / 1e6:.2f} per "
        f"CPU s)")
  print(json.dumps({"page": values, "native": native}))


if __name__ == "__main__":
  quick = "--quick" in sys.argv
  print(f"load average at the start: {os.getloadavg()[0]:.2f} (this machine has "
        f"{os.cpu_count()} CPUs)")
  sizes = (32, 1 << 16) if quick else (64, 1 << 20)
  if "--page" in sys.argv:
    bench_page(*sizes)
  else:
    bench_parse()
    _both(bench_matmul, sizes[0])
    _both(bench_add, sizes[1])
  if "--bundle" in sys.argv:
    bench_bundle(sys.argv[sys.argv.index("--bundle") + 1])
  print(f"load average at the end: {os.getloadavg()[0]:.2f}")
