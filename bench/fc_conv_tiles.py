"""Issue 42's two biggest kernels of ddddocr `common` and PP-OCRv4 det, each under forced launch
options, natively on wgpu: the FC layer x (20, 1024) @ w (8210, 1024).T and the dense 3x3 conv
96 -> 24 channels at 80x80 (pad 1), and the FC with w held (K, N) (fckn). Each layout is timed
interleaved, best of REPS rounds (GPU timestamps where the adapter has them); prints ms, GFLOP/s
and the median CPU seconds of a run (this process: the driver's threads run the kernels). A tile
"RxCu" adds the adapter's tile_unroll 4 (a forced tile alone drops it). Values are not checked
here (the tiled matmul and conv tests check them). Measured in issue 42 (lavapipe, 7 rounds, load
~4-6): the conv's default 8x16 unrolled CPU s 0.023 (12x16u 0.021, 24x8 0.028); the FC's default
20x10 0.067 (20x5u 0.071, 10x10u 0.082): the tiles were not the FC's cause (regtile.py
CLAMPED_READS).

    python bench/fc_conv_tiles.py [REPS] [--adapter lavapipe|swiftshader] [--only fc,fckn,conv]
                                  [--tiles 20x10,4x10,...]
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from group_outputs import ICDS, _cpu, _plan, _run  # noqa: E402

TILES = {"fckn": ("default", "20x10", "4x10", "20x5", "4x16", "8x16"),
         "fc": ("default", "20x10", "4x10", "10x10", "20x5", "4x5", "5x10", "2x10"),
         "conv": ("default", "8x16", "8x8", "4x16", "16x8", "4x8")}


def _case(kg, np, name):
  rng = np.random.default_rng(42)
  if name == "fc":
    xn = rng.standard_normal((20, 1024), np.float32)
    wn = rng.standard_normal((8210, 1024), np.float32)
    x, w = (kg.Tensor(v, device="WEBGPU").realize() for v in (xn, wn))
    return (lambda: x @ w.permute(1, 0)), 2 * 20 * 8210 * 1024
  if name == "fckn":        # the same product with w held (K, N)
    xn = rng.standard_normal((20, 1024), np.float32)
    wn = rng.standard_normal((1024, 8210), np.float32)
    x, w = (kg.Tensor(v, device="WEBGPU").realize() for v in (xn, wn))
    return (lambda: x @ w), 2 * 20 * 8210 * 1024
  xn = rng.standard_normal((1, 96, 80, 80), np.float32)
  wn = rng.standard_normal((24, 96, 3, 3), np.float32) * 0.1
  x, w = (kg.Tensor(v, device="WEBGPU").realize() for v in (xn, wn))
  return (lambda: x.conv2d(w, padding=1)), 2 * 24 * 6400 * 96 * 9


def main(reps, only, tiles) -> None:
  sys.path.insert(0, str(ROOT / "core"))
  import numpy as np
  import kernelgen as kg
  from kernelgen.device import Device
  rt = Device["WEBGPU"]
  options = {**rt.render_options(), "runs": 100}
  print(f"adapter: {rt.adapter.info.get('device')}; timestamps {bool(rt.timestamps)}; load "
        f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}", flush=True)
  for name in only:
    make, flops = _case(kg, np, name)
    plans = {}
    for t in tiles or TILES[name]:
      opts = dict(options) if t == "default" else \
        {**options, "tile": tuple(map(int, t.rstrip("u").split("x")))}
      if t.endswith("u"):       # with the adapter's reduction unrolling (tile_unroll 4)
        opts["tile_unroll"] = 4
      plans[t] = _plan(make(), opts)
    for t, steps in plans.items():
      _run(rt, steps)
    times, cpu = {t: [] for t in plans}, {t: [] for t in plans}
    for _ in range(reps):
      for t, steps in plans.items():
        times[t].append(_run(rt, steps))
        cpu[t].append(_cpu(rt, steps))
    for t in plans:
      best = min(times[t]) * 1e3
      print(f"{name} {t:8s} {best:8.2f} ms  {flops / best / 1e6:6.2f} GFLOP/s  CPU s median "
            f"{sorted(cpu[t])[len(cpu[t]) // 2]:.3f}  kernels "
            f"{len(plans[t])} {[s[0].name for s in plans[t]]}", flush=True)
  print(f"load after {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
  args = sys.argv[1:]
  if "--adapter" in args:
    os.environ["VK_ICD_FILENAMES"] = os.environ["VK_DRIVER_FILES"] = \
      ICDS[args[args.index("--adapter") + 1]]
  only = args[args.index("--only") + 1].split(",") if "--only" in args else ("fc", "fckn", "conv")
  tiles = args[args.index("--tiles") + 1].split(",") if "--tiles" in args else None
  reps = int(args[0]) if args and args[0].isdigit() else 3
  main(reps, only, tiles)
