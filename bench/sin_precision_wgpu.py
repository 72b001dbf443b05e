"""Speed cost of the precise float32 sin and log2 (rules/transcendental.py) on wgpu (lavapipe
here): OP (sin or log2) over N float32 elements, native builtin (fast_math=True) vs the default
rewrite. The figure is the median of REPS timed runs (Runtime.time_run) of the compiled kernel;
the max ulp error against numpy's float64 result is printed alongside.

    python bench/sin_precision_wgpu.py [N] [REPS] [OP]     (prints a JSON summary)
"""
from __future__ import annotations

import json
import statistics
import sys

import numpy as np

from kernelgen import Device, Tensor
from kernelgen.compiler import compile_item
from kernelgen.graph.schedule import schedule


def measure(n: int, reps: int, op: str = "sin") -> dict:
  runtime = Device["WEBGPU"]
  rng = np.random.default_rng(0)
  x = (rng.uniform(-1e3, 1e3, n) if op == "sin" else rng.uniform(0.5, 2, n)).astype(np.float32)
  src = Tensor(x, device="WEBGPU").realize()
  out = {}
  for name, extra in (("native", {"fast_math": True}), ("precise", {})):
    (item,) = schedule([getattr(src, op)().node])
    compiled = compile_item(item, runtime.target, {**runtime.render_options(), **extra})
    dst = runtime.alloc(4 * n)
    handles = [dst] + [s.buffer.handle for s in item.inputs]
    args = [handles[b.slot] for b in compiled.buffers]
    runtime.time_run(compiled, args, {})                   # warm-up (pipeline build)
    seconds = statistics.median(runtime.time_run(compiled, args, {}) for _ in range(reps))
    got = np.frombuffer(bytes(runtime.copyout(dst))[:4 * n], np.float32).astype(np.float64)
    want = getattr(np, op)(x.astype(np.float64))
    ulp = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    out[name] = {"ms": round(seconds * 1e3, 3), "max_ulp": float(ulp.max()),
                 "max_abs": float(np.abs(got - want).max())}
  out["slowdown"] = round(out["precise"]["ms"] / out["native"]["ms"], 2)
  return {"op": op, "n": n, "adapter": getattr(runtime, "adapter_name", "wgpu"), **out}


if __name__ == "__main__":
  n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 24
  reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
  op = sys.argv[3] if len(sys.argv) > 3 else "sin"
  print(json.dumps(measure(n, reps, op), indent=1))
