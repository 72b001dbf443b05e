"""GPU time on device WEBGPU (wgpu-py; Mesa lavapipe on a machine with no GPU) of the scan and
sort operations next to a matmul over the same number of elements, checked against numpy.

For each program: its kernel count, the wall time of the first realize (schedule, compile,
pipeline builds, run), then the GPU time of the whole kernel sequence run again (the sum of
Runtime.time_run per kernel: GPU timestamps where the adapter has them, else wall clock per
kernel up to completion), the fastest of REPEATS.

    nice python bench/ops_times.py [LOG2_N] [REPEATS]      (default 20 2: 2^20 elements)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))

import kernelgen as kg  # noqa: E402
from kernelgen.compiler import buffer_limit, compile_item  # noqa: E402
from kernelgen.device import Device  # noqa: E402
from kernelgen.graph.lazy import Buffer  # noqa: E402
from kernelgen.graph.schedule import schedule  # noqa: E402


def realize_recording(tensor) -> list:
  """Realize `tensor` as realize.py does, keeping (compiled kernel, handles) per kernel."""
  runtime = Device["WEBGPU"]
  options = runtime.render_options()
  runs = []
  for item in schedule([tensor.node], buffer_limit("wgsl", options)):
    out = item.out
    buffer = Buffer(out.device, out.dtype, out.size)
    handles = [buffer.handle] + [src.buffer.handle for src in item.inputs]
    compiled = compile_item(item, "wgsl", options)
    bound = [handles[b.slot] for b in compiled.buffers]
    runtime.run(compiled, bound, {})
    runs.append((compiled, bound))
    out.buffer, out.src = buffer, ()
  return runs


def prepare(name: str, make, check) -> tuple:
  """(name, the recorded kernel runs, seconds of the first realize) of make(), checked."""
  started = time.perf_counter()
  out = make()
  runs = realize_recording(out)
  got = out.numpy()
  first = time.perf_counter() - started
  check(got)
  return name, runs, first


def bench(name: str, make, check, repeats: int) -> None:
  name, runs, first = prepare(name, make, check)
  runtime = Device["WEBGPU"]
  gpu = min(sum(runtime.time_run(c, h, {}) for c, h in runs) for _ in range(repeats))
  print(f"{name:34s} {len(runs):4d} kernels  GPU {gpu * 1e3:9.1f} ms  "
        f"(first realize incl. compile {first:6.1f} s; matches numpy)", flush=True)


def main(argv: list[str]) -> None:
  log2n = int(argv[1]) if len(argv) > 1 else 20
  repeats = int(argv[2]) if len(argv) > 2 else 2
  kg.Device.DEFAULT = "WEBGPU"
  runtime = Device["WEBGPU"]
  print(f"device WEBGPU: {runtime.adapter.info['device']} "
        f"({runtime.adapter.info['backend_type']}); timing: "
        f"{'GPU timestamps' if runtime.timestamps else 'wall clock per kernel'}", flush=True)
  n = 1 << log2n
  side = 1 << (log2n // 2)
  rng = np.random.default_rng(0)
  x = rng.standard_normal(n).astype(np.float32)
  a, b = (rng.standard_normal((side, n // side)).astype(np.float32) for _ in range(2))
  b = b.reshape(n // side, side)
  bench(f"matmul {side}x{n // side} @ {n // side}x{side}", lambda: kg.Tensor(a) @ kg.Tensor(b),
        lambda got: np.testing.assert_allclose(got, a @ b, rtol=1e-3, atol=1e-3), repeats)
  bench(f"sort of 2^{log2n} float32", lambda: kg.Tensor(x).sort(),
        lambda got: np.testing.assert_array_equal(got, np.sort(x)), repeats)
  bench(f"argsort of 2^{log2n} float32", lambda: kg.Tensor(x).argsort(),
        lambda got: np.testing.assert_array_equal(got, np.argsort(x, kind="stable")), repeats)
  want = np.cumsum(x.astype(np.float64))
  scale = np.cumsum(np.abs(x.astype(np.float64)))
  bench(f"cumsum of 2^{log2n} float32", lambda: kg.Tensor(x).cumsum(),
        lambda got: np.testing.assert_array_less(np.abs(got - want) / scale, 1e-6), repeats)


if __name__ == "__main__":
  main(sys.argv)


def time_interleaved(runtime, jobs: list, repeats: int, width: int = 36) -> None:
  """Time prepared `jobs` ((name, runs, first-realize seconds), from prepare) in `repeats`
  interleaved rounds (each program once per round) and print each one's best GPU time."""
  best = {name: float("inf") for name, _, _ in jobs}
  for _ in range(repeats):
    for name, runs, _ in jobs:
      best[name] = min(best[name], sum(runtime.time_run(k, h, {}) for k, h in runs))
  for name, runs, first in jobs:
    print(f"{name:{width}s} {len(runs):4d} kernels  GPU {best[name] * 1e3:9.1f} ms  "
          f"(first realize incl. compile {first:6.1f} s; matches numpy)", flush=True)
