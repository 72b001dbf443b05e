"""Row kernels with few rows (issue 42; lowering/rows.py, option min_groups): PP-OCRv4 rec's
last softmax (40 rows x 6625 classes) ran as one workgroup of 64 rows on SwiftShader, which runs
a workgroup on one core. Each shape under each candidate layout, interleaved in one process,
natively on one CPU adapter bound to its Vulkan ICD: a thread per row in workgroups of L rows
(`local L`), G lanes per row (`lanes G`: a workgroup per row), and the adapter's default before
(min_groups=0) and now. Per candidate: GPU-timestamp ms (the dispatch's wall time: what an idle
core costs) and CPU ms (process time), best and median of REPS rounds, the workgroups launched,
and the max abs error against numpy (float64).

Not a test (no timing is asserted); the machine's load is printed with the table.

    nice python bench/row_spread_ab.py [swiftshader|lavapipe] [REPS] [SHAPES] [LABELS]
    (SHAPES: e.g. softmax:40x6625,layernorm:40x120; LABELS: candidates, ";"-separated)
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from icd import bind  # noqa: E402

ADAPTER = sys.argv[1] if len(sys.argv) > 1 else "swiftshader"
bind(ADAPTER)                                        # before wgpu loads

import numpy as np  # noqa: E402

from wgtile_wgpu import kg, prepare  # noqa: E402

SHAPES = "softmax:40x6625,softmax:3x6625,softmax:1x6625,softmax:256x1024,layernorm:40x120"
CANDIDATES = {"before": {"min_groups": 0}, "now": {}, "local 32": {"local": 32},
              "local 16": {"local": 16},
              "local 8": {"local": 8}, "local 4": {"local": 4}, "local 2": {"local": 2},
              "lanes 4": {"row_lanes": 4}, "lanes 8": {"row_lanes": 8},
              "lanes 16": {"row_lanes": 16}, "lanes 32": {"row_lanes": 32}}


def reference(op: str, x: np.ndarray) -> np.ndarray:
  x = x.astype(np.float64)
  if op == "softmax":
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
  c = x - x.mean(-1, keepdims=True)
  return c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)


def expr(op: str):
  return (lambda t: t.softmax(-1)) if op == "softmax" else (lambda t: t.layernorm())


def main() -> None:
  reps = int(sys.argv[2]) if len(sys.argv) > 2 else 15
  shapes = (sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else SHAPES).split(",")
  labels = sys.argv[4].split(";") if len(sys.argv) > 4 else list(CANDIDATES)
  rt, rows = kg.Device["WEBGPU"], []
  for spec in shapes:
    op, dims = spec.split(":")
    r, n = (int(d) for d in dims.split("x"))
    x = np.random.default_rng(0).standard_normal((r, n)).astype(np.float32) * 4
    want = reference(op, x)
    for label, extra in ((k, CANDIDATES[k]) for k in labels):
      plan, out, chosen = prepare(rt, [x], expr(op), {"adapter": ADAPTER, "runs": 100, **extra})
      for c, handles in plan:
        rt.run(c, handles, {}, timed=True)
      err = float(np.abs(out.numpy() - want).max())
      rows.append((f"{spec} {label}", plan, err, [], []))
  for i in range(reps):
    for _, plan, _, cpu, gpu in (rows[::-1] if i % 2 else rows):
      started = time.process_time()
      gpu.append(sum(rt.run(c, handles, {}, timed=True) for c, handles in plan) * 1e3)
      cpu.append((time.process_time() - started) * 1e3)
  print(f"{ADAPTER}: best / median of {reps} interleaved, load {os.getloadavg()}")
  for label, plan, err, cpu, gpu in rows:
    k = plan[-1][0]
    print(f"  {label:28s} GPU ms {min(gpu):7.3f} / {statistics.median(gpu):7.3f}  CPU ms "
          f"{min(cpu):7.2f} / {statistics.median(cpu):7.2f}  g{k.global_size[0]:<4d} "
          f"l{k.local_size[0]:<3d} err {err:.1e}")


if __name__ == "__main__":
  main()
