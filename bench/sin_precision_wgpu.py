"""Speed cost of the precise float32 sin (rules/transcendental.py sin_f32) on wgpu (lavapipe
here): sin over N float32 elements, native builtin (fast_math=True) vs the default rewrite.
The figure is the median of REPS timed runs (Runtime.time_run) of the compiled kernel; the max
ulp error against numpy's float64 sin is printed alongside.

    python bench/sin_precision_wgpu.py [N] [REPS]     (prints a JSON summary)
"""
from __future__ import annotations

import json
import statistics
import sys

import numpy as np

from kernelgen import Device, Tensor
from kernelgen.compiler import compile_item
from kernelgen.schedule import schedule


def measure(n: int, reps: int) -> dict:
  runtime = Device["WEBGPU"]
  x = np.random.default_rng(0).uniform(-1e3, 1e3, n).astype(np.float32)
  src = Tensor(x, device="WEBGPU").realize()
  out = {}
  for name, extra in (("native", {"fast_math": True}), ("precise", {})):
    (item,) = schedule([src.sin().node])
    compiled = compile_item(item, runtime.target, {**runtime.render_options(), **extra})
    dst = runtime.alloc(4 * n)
    handles = [dst] + [s.buffer.handle for s in item.inputs]
    args = [handles[b.slot] for b in compiled.buffers]
    runtime.time_run(compiled, args, {})                   # warm-up (pipeline build)
    seconds = statistics.median(runtime.time_run(compiled, args, {}) for _ in range(reps))
    got = np.frombuffer(bytes(runtime.copyout(dst))[:4 * n], np.float32).astype(np.float64)
    want = np.sin(x.astype(np.float64))
    ulp = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    out[name] = {"ms": round(seconds * 1e3, 3), "max_ulp": float(ulp.max()),
                 "max_abs": float(np.abs(got - want).max())}
  out["slowdown"] = round(out["precise"]["ms"] / out["native"]["ms"], 2)
  return {"n": n, "adapter": getattr(runtime, "adapter_name", "wgpu"), **out}


if __name__ == "__main__":
  n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 24
  reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
  print(json.dumps(measure(n, reps), indent=1))
