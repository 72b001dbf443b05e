"""Option min_groups (issue 42; lowering/threads.py): the real models' convs whose workgroups it
spreads, interleaved in one process against the same kernel with min_groups=0 (before), natively
on one CPU adapter bound to its Vulkan ICD. Per kernel: CPU ms of the dispatch (process time:
every driver thread's CPU, which the shared machine's load inflates least) and GPU-timestamp ms
(the wall time of the dispatch: what an idle core left to the other costs), best and median of
REPS rounds, with the workgroups each launches. Outputs checked against numpy.

Not a test (no timing is asserted); the machine's load is printed with the table.

    nice python bench/min_groups_ab.py [lavapipe|swiftshader] [REPS]
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from icd import bind  # noqa: E402

ADAPTER = sys.argv[1] if len(sys.argv) > 1 else "lavapipe"
bind(ADAPTER)                                        # before wgpu loads

import numpy as np  # noqa: E402

from wgtile_wgpu import kg, prepare  # noqa: E402

# (input channels, output channels, height, width, kernel, groups): ddddocr common.onnx's 3x3
# convs at 8x20, PP-OCRv4 detection's 5x5 depthwise convs at 10x10
CONVS = [(64, 256, 8, 20, 3, 1), (48, 192, 8, 20, 3, 1), (384, 384, 10, 10, 5, 384),
         (192, 192, 10, 10, 5, 192)]
# and a kernel it spreads that already had several workgroups: matmul 512^3 (16x16 tiles, 4
# workgroups of 256 -> 8 of 128)
MATMUL = 512


def conv(x, w, k: int, groups: int):
  return x.conv2d(w, padding=k // 2, groups=groups)


def want(x, w, groups: int):
  """numpy's grouped conv (float64), padding k // 2."""
  p = w.shape[-1] // 2
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
  win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))
  c, o = x.shape[1] // groups, w.shape[0] // groups
  return np.concatenate([np.einsum("nchwij,ocij->nohw", win[:, i * c:(i + 1) * c],
                                   w[i * o:(i + 1) * o]) for i in range(groups)], axis=1)


def main() -> None:
  reps = int(sys.argv[2]) if len(sys.argv) > 2 else 15
  rt, rows = kg.Device["WEBGPU"], []
  for ci, co, h, w, k, g in CONVS:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, ci, h, w)).astype(np.float32)
    wt = rng.standard_normal((co, ci // g, k, k)).astype(np.float32) * 0.2
    for label, extra in (("before", {"min_groups": 0}), ("after", {})):
      plan, out, chosen = prepare(rt, [x, wt], lambda a, b: conv(a, b, k, g),
                                  {"adapter": ADAPTER, "runs": 100, **extra})
      for c, handles in plan:
        rt.run(c, handles, {}, timed=True)
      ok = np.allclose(out.numpy(), want(x, wt, g), rtol=1e-4, atol=1e-4)
      rows.append((f"{ci}->{co} {k}x{k} g{g} {h}x{w} {label}", plan, chosen[-1], ok, [], []))
  rng = np.random.default_rng(1)
  a, b = (rng.standard_normal((MATMUL, MATMUL)).astype(np.float32) for _ in range(2))
  for label, extra in (("before", {"min_groups": 0}), ("after", {})):
    plan, out, chosen = prepare(rt, [a, b], lambda x, y: x @ y,
                                {"adapter": ADAPTER, "runs": 100, **extra})
    for c, handles in plan:
      rt.run(c, handles, {}, timed=True)
    ok = np.allclose(out.numpy(), a.astype(np.float64) @ b, rtol=1e-3, atol=1e-3)
    rows.append((f"matmul {MATMUL}^3 {label}", plan, chosen[-1], ok, [], []))
  for r in range(reps):
    for _, plan, _, _, cpu, gpu in (rows[::-1] if r % 2 else rows):
      started = time.process_time()
      gpu.append(sum(rt.run(c, handles, {}, timed=True) for c, handles in plan) * 1e3)
      cpu.append((time.process_time() - started) * 1e3)
  print(f"{ADAPTER}: best / median of {reps} interleaved, load {os.getloadavg()[0]:.1f}")
  for label, plan, opts, ok, cpu, gpu in rows:
    print(f"  {label:32s} CPU ms {min(cpu):6.2f} / {statistics.median(cpu):6.2f}  GPU ms "
          f"{min(gpu):6.2f} / {statistics.median(gpu):6.2f}  workgroups {plan[-1][0].global_size[0]:3d}"
          f" x {opts.local:3d}  {'ok' if ok else 'WRONG'}")


if __name__ == "__main__":
  main()
