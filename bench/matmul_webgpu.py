"""GFLOP/s of an f32 matmul on device WEBGPU (wgpu-py; Mesa lavapipe on a machine with no GPU).

Two kernels in one run, both checked against numpy:
  naive    one thread per output, a loop over K
  blocked  each thread computes a 4x4 block of C from vec4 loads of A and B (register blocking)
  8x8      the same with an 8x8 block per thread and 8x8 threads per workgroup
  subgroup hand-written WGSL (not kernelgen output) sharing A through subgroupBroadcast: the
           kernel shape lavapipe wants (see subgroup_wgsl), where the adapter has subgroups
and, when the Tensor front end runs end to end, `a @ b` as kernelgen's optimizer compiles it.

    python bench/matmul_webgpu.py [N] [REPEATS]      (default 1024 3)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))

from kernelgen.dtype import dtypes  # noqa: E402
from kernelgen.uop.ops import Ops, UOp, toposort  # noqa: E402
from kernelgen.uop.program import (Binding, BufferSpec, CompiledKernel, Kernel, Launch,  # noqa: E402
                               buffer_access, launch_sizes)
from kernelgen.render import wgsl  # noqa: E402
from kernelgen.runtime.webgpu_native import WebGPURuntime  # noqa: E402

F32, I32 = dtypes.float32, dtypes.int32
V4 = F32.vec(4)


def compile_wgsl(sink: UOp, name: str, options: dict):
  """The kernel passes when the project's linearizer exists, else a topological order (these
  kernels hoist everything loop-independent before their loop)."""
  try:
    from kernelgen.compiler import compile_kernel
    return compile_kernel(sink, name, "wgsl", options, {0: "c", 1: "a", 2: "b"})
  except ImportError:
    uops = toposort([wgsl.legalize(sink, **options)])
    params = sorted((u for u in uops if u.op is Ops.PARAM), key=lambda u: u.arg)
    buffers = tuple(BufferSpec(p.arg, "cab"[p.arg], F32, p.dtype.size, buffer_access(uops, p.arg))
                    for p in params)
    return wgsl.render(Kernel(name, tuple(uops), buffers, *launch_sizes(uops)), **options)


def buffers(n: int):
  return [UOp(Ops.PARAM, F32.ptr(n * n), (), slot) for slot in range(3)]


def loop(end: int, ident: int) -> UOp:
  return UOp(Ops.RANGE, I32, (UOp.const(I32, end),), ident)


def naive(n: int, local: int = 16) -> UOp:
  c, a, b = buffers(n)
  row = UOp(Ops.SPECIAL, I32, (), ("gid", 1, n // local)) * local + \
      UOp(Ops.SPECIAL, I32, (), ("lid", 1, local))
  col = UOp(Ops.SPECIAL, I32, (), ("gid", 0, n // local)) * local + \
      UOp(Ops.SPECIAL, I32, (), ("lid", 0, local))
  acc = UOp(Ops.DEFINE_ACC, F32, (UOp.const(F32, 0.0),), 0)
  k = loop(n, 0)
  update = UOp(Ops.ASSIGN, F32, (acc, UOp(Ops.MULACC, F32, (a.load(row * n + k),
                                                           b.load(k * n + col), acc))))
  total = UOp(Ops.AFTER, F32, (acc, UOp(Ops.ENDRANGE, None, (k, update))))
  return UOp(Ops.SINK, None, (c.store(row * n + col, total),))


def blocked(n: int, local: int = 16, rows: int = 4, groups: int = 1) -> UOp:
  """C[rows*r : rows*r+rows, 4g*c : 4g*c+4g] per thread (register blocking); per step of K by 4:
  `rows` vec4 loads of A, 4*groups of B, 4*rows*groups vec4 fma."""
  c, a, b = buffers(n)
  rows_at = (UOp(Ops.SPECIAL, I32, (), ("gid", 1, n // (rows * local))) * local +
             UOp(Ops.SPECIAL, I32, (), ("lid", 1, local))) * rows
  cols = (UOp(Ops.SPECIAL, I32, (), ("gid", 0, n // (4 * groups * local))) * local +
          UOp(Ops.SPECIAL, I32, (), ("lid", 0, local))) * (4 * groups)
  zero = UOp.const(V4, 0.0)
  accs = [[UOp(Ops.DEFINE_ACC, V4, (zero,), i * groups + g) for g in range(groups)]
          for i in range(rows)]
  k = loop(n // 4, 0) * 4
  a_rows = [a.load((rows_at + i) * n + k, dtype=V4) for i in range(rows)]
  b_rows = [[b.load((k + j) * n + cols + 4 * g, dtype=V4) for j in range(4)] for g in range(groups)]
  updates = []
  for i in range(rows):
    for g in range(groups):
      value = accs[i][g]
      for j in range(4):
        lane = UOp(Ops.VECTORIZE, V4, (a_rows[i].gep(j),) * 4)
        value = UOp(Ops.MULACC, V4, (lane, b_rows[g][j], value))
      updates.append(UOp(Ops.ASSIGN, V4, (accs[i][g], value)))
  end = UOp(Ops.ENDRANGE, None, (k.src[0], *updates))
  stores = [c.store((rows_at + i) * n + cols + 4 * g, UOp(Ops.AFTER, V4, (accs[i][g], end)))
            for i in range(rows) for g in range(groups)]
  return UOp(Ops.SINK, None, tuple(stores))


def subgroup_wgsl(n: int, rows: int = 16) -> str:
  """Hand-written reference (not kernelgen output): `rows` x 4 outputs per thread; the 8 lanes of
  a subgroup share their rows of A, so each lane loads one A element per row and K step and
  gets the other seven by subgroupBroadcast. On lavapipe a memory load costs about as much as a
  hundred fma per element and lane, a broadcast almost nothing: this is the kernel shape that
  target wants. naga takes subgroup builtins without `enable subgroups;` (Tint requires it)."""
  loads = "\n".join(f"    let a{i} = a[(r + {i}) * {n} + k + i32(lane)];" for i in range(rows))
  steps = []
  for j in range(8):
    steps.append(f"    let b{j} = b[((k + {j}) * {n} + col) / 4];")
    steps += [f"    acc{i} = fma(vec4<f32>(subgroupBroadcast(a{i}, {j}u)), b{j}, acc{i});"
              for i in range(rows)]
  accs = "\n".join(f"  var acc{i}: vec4<f32> = vec4<f32>();" for i in range(rows))
  stores = "\n".join(f"  c[((r + {i}) * {n} + col) / 4] = acc{i};" for i in range(rows))
  return f"""@group(0) @binding(0) var<storage, read_write> c: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;
@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) w: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_invocation_id) lane: u32) {{
  let r = i32(w.y * 8u + li / 8u) * {rows};
  let col = i32(w.x * 8u + (li & 7u)) * 4;
{accs}
  for (var k: i32 = 0; k < {n}; k += 8) {{
{loads}
{chr(10).join(steps)}
  }}
{stores}
}}
"""


def subgroup_kernel(rt, n: int, rows: int = 16):
  """The hand-written subgroup kernel as a CompiledKernel; None where it cannot run as written
  (no subgroups, or subgroups narrower than 8 lanes)."""
  if "subgroup" not in rt.features and "subgroups" not in rt.features:
    return None
  if n % (8 * rows) or n % 32 or int(rt.limits.get("min-subgroup-size", 8) or 8) < 8:
    return None
  binds = tuple(Binding(slot, "cab"[slot], "float32", n * n, "readwrite" if slot == 0 else "read",
                        n * n * 4) for slot in range(3))
  launch = Launch("wgsl", subgroup_wgsl(n, rows), "main", binds, (64, 1, 1),
                  (n // 32, n // (8 * rows), 1))
  return CompiledKernel("subgroup", "wgsl", launch.source, launch.dispatch, (64, 1, 1), (),
                        launch)


def measure(rt, compiled, handles, repeats: int) -> tuple[float, float]:
  """(seconds of the fastest run, wall seconds of the first run: pipeline build + the driver's
  JIT, which lavapipe does at the first dispatch and which grows with the unrolled kernel)."""
  started = time.perf_counter()
  rt.run(compiled, handles, {}, timed=True)
  first = time.perf_counter() - started
  return min(rt.run(compiled, handles, {}, timed=True) for _ in range(repeats)), first


def bench_kernel(rt, name: str, sink, a, b, repeats: int) -> None:
  n = a.shape[0]
  started = time.perf_counter()
  compiled = compile_wgsl(sink, name, rt.render_options()) if isinstance(sink, UOp) else sink
  compile_ms = (time.perf_counter() - started) * 1e3
  handles = [rt.alloc(n * n * 4) for _ in range(3)]
  rt.copyin(handles[1], a.tobytes())
  rt.copyin(handles[2], b.tobytes())
  seconds, first = measure(rt, compiled, handles, repeats)
  got = np.frombuffer(rt.copyout(handles[0]), np.float32).reshape(n, n)
  np.testing.assert_allclose(got, a @ b, rtol=1e-3, atol=1e-3)
  print(f"{name:8s} {n}^3 f32: {2 * n ** 3 / seconds / 1e9:8.2f} GFLOP/s  "
        f"({seconds * 1e3:8.1f} ms, compile {compile_ms:.1f} ms, first dispatch "
        f"{first * 1e3:.0f} ms, matches numpy)")


def bench_tensor(n: int, a, b, repeats: int) -> None:
  try:
    import kernelgen as kg
    kg.Device.DEFAULT = "WEBGPU"
    x, y = kg.Tensor(a), kg.Tensor(b)
    (x @ y).numpy()
    started = time.perf_counter()
    for _ in range(repeats):
      got = (x @ y).numpy()
    seconds = (time.perf_counter() - started) / repeats
  except Exception as error:  # noqa: BLE001 - the front end may not run end to end yet
    print(f"tensor   a @ b on WEBGPU: skipped ({type(error).__name__}: {error})")
    return
  np.testing.assert_allclose(got, a @ b, rtol=1e-3, atol=1e-3)
  print(f"tensor   {n}^3 f32: {2 * n ** 3 / seconds / 1e9:8.2f} GFLOP/s  "
        f"({seconds * 1e3:8.1f} ms incl. schedule, compile, copies; matches numpy)")


def main(argv: list[str]) -> None:
  n = int(argv[1]) if len(argv) > 1 else 1024
  repeats = int(argv[2]) if len(argv) > 2 else 3
  rt = WebGPURuntime()
  print(f"device WEBGPU: {rt.adapter.info['device']} ({rt.adapter.info['backend_type']}); "
        f"timing: {'GPU timestamps' if rt.timestamps else 'wall clock'}")
  rng = np.random.default_rng(0)
  a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
  bench_kernel(rt, "naive", naive(n), a, b, repeats)
  bench_kernel(rt, "blocked", blocked(n), a, b, repeats)
  if n % 128 == 0:
    bench_kernel(rt, "8x8", blocked(n, 8, rows=8, groups=2), a, b, repeats)
  reference = subgroup_kernel(rt, n)
  if reference is not None:
    bench_kernel(rt, "subgroup", reference, a, b, repeats)
  bench_tensor(n, a, b, repeats)


if __name__ == "__main__":
  main(sys.argv)
