"""Issue 43: lavapipe's register tiles for matmul 1024^3 and conv2d 1x64x56x56 3x3 under forced
tile / workgroup-size options, natively (wgpu on Mesa's lavapipe ICD), checked against numpy.
Variants run interleaved, REPEATS rounds; prints best / median / worst ms and worst / best (how
much a variant's time spreads under the shared machine's interference) with the workgroup count.

    python bench/lavapipe_tiles.py [REPEATS [LABEL;LABEL...]]     (default 8, all)
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from icd import bind  # noqa: E402

bind("lavapipe")                                     # before wgpu loads

import numpy as np  # noqa: E402

from wgtile_wgpu import kg, prepare  # noqa: E402
from throughput_wgpu import workloads  # noqa: E402

# label -> forced options over the adapter's (lavapipe) defaults
VARIANTS = {
  "default": {},
  "8x16 local 256": {"tile": (8, 16), "local": 256},
  "8x16 local 64": {"tile": (8, 16), "local": 64},
  "8x16 local 32": {"tile": (8, 16), "local": 32},
  "8x8 local 64": {"tile": (8, 8), "local": 64},
  "8x8 local 256": {"tile": (8, 8), "local": 256},
  "4x16 local 64": {"tile": (4, 16), "local": 64},
  "16x8 local 64": {"tile": (16, 8), "local": 64},
  "8x16 unroll 4 local 64": {"tile": (8, 16), "local": 64, "tile_unroll": 4},
  "16x16 unroll 4 local 64": {"tile": (16, 16), "local": 64, "tile_unroll": 4},
  "8x8 unroll 4 local 64": {"tile": (8, 8), "local": 64, "tile_unroll": 4},
  "one-off": {"runs": 1},
  "many runs": {"runs": 100},
  "8x16 unroll 4": {"tile": (8, 16)},
  "8x8 unroll 4": {"tile": (8, 8)},
  "4x4 unroll 4": {"tile": (4, 4)},
  "16x8 unroll 4": {"tile": (16, 8)},
  "8x16 rolled": {"tile": (8, 16), "tile_unroll": 0},
  "8x8 rolled": {"tile": (8, 8), "tile_unroll": 0},
}


def main(argv: list[str]) -> None:
  """Variants round-robin (reversed every other round), REPEATS rounds."""
  repeats = int(argv[1]) if len(argv) > 1 else 8
  only = argv[2].split(";") if len(argv) > 2 else None
  rows = [w for w in argv[3].split(",")] if len(argv) > 3 else ["matmul", "conv2d"]
  rt = kg.Device["WEBGPU"]
  print(f"device: {rt.adapter.info['device']}; load {os.getloadavg()[0]:.2f}", flush=True)
  for name, (inputs, expr, reference, flops) in workloads(np).items():
    if not name.startswith(tuple(rows)):
      continue
    want = reference(*inputs)
    runs = {}
    for label, options in VARIANTS.items():
      if only and label not in only:
        continue
      try:
        plan, out, chosen = prepare(rt, inputs, expr, {"adapter": "lavapipe", **options})
      except Exception as error:   # a tile that does not divide the shape: skipped
        print(f"{name} {label}: {type(error).__name__} {error}", flush=True)
        continue
      for compiled, handles in plan:
        rt.run(compiled, handles, {}, timed=True)
      ok = np.allclose(out.numpy(), want, rtol=2e-3, atol=2e-3)
      runs[label] = (plan, ok, chosen[-1], plan[-1][0].global_size, [])
    labels = list(runs)
    for r in range(repeats):
      for label in (labels[::-1] if r % 2 else labels):
        plan, _, _, _, times = runs[label]
        times.append(sum(rt.run(c, h, {}, timed=True) for c, h in plan) * 1e3)
    for label, (plan, ok, opts, grid, times) in runs.items():
      best, med, worst = min(times), statistics.median(times), max(times)
      print(f"{name[:12]:12s} {label:26s} best {best:7.1f} med {med:7.1f} worst {worst:7.1f} "
            f"({worst / best:4.2f}x) {flops / best / 1e6:5.1f} GFLOP/s tile={opts.tile} "
            f"local={opts.local} groups={grid[0]} {'ok' if ok else 'WRONG'}", flush=True)
  print(f"load after {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
  main(sys.argv)
