"""Issue 42: dense convs in register tiles reading their padded input windows as vec4 words
(regtile.py ALIGNED_WINDOWS, the WGSL target's upcast_vec) against the scalar window loads they
had (option upcast_vec=False: the kernel built before ALIGNED_WINDOWS), natively on wgpu, GPU
timestamps where the adapter has them, A/B interleaved in one process (rounds alternate their
order), the conv kernel alone. Prints best and median ms, GFLOP/s and each variant's error
against numpy (float64). A third variant, "clamped ragged (main)", is the kernel main built
before FITTED_BLOCKS (regtile.FIT_RAGGED off: every column of a grid whose last block is ragged
clamped, so no words): ddddocr common_det's 3x3 convs at 52x52 (8-column tiles) differ there;
where the tile's columns divide the row it compiles the same as "vec4 windows" (printed as
such: a measure of the noise).

    python bench/conv_window_ab.py [REPEATS] [--adapter lavapipe|swiftshader] [--runs 1,100]
                                   [--only ddddocr]
"""
from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from icd import bind  # noqa: E402

ADAPTER = sys.argv[sys.argv.index("--adapter") + 1] if "--adapter" in sys.argv else "lavapipe"
bind(ADAPTER)                                        # before wgpu loads

import numpy as np  # noqa: E402

from wgtile_wgpu import kg, prepare  # noqa: E402
from kernelgen.lowering import regtile  # noqa: E402

# name -> (input shape, weight shape, padding, ReLU fused into the reads): PP-OCRv4 det's 3x3
# convs, bench/peers.py's conv, and a ResNet-50 1x1 conv over a fused ReLU (its reads are words too)
SHAPES = {
  "96->24 3x3 80x80": ((1, 96, 80, 80), (24, 96, 3, 3), 1, False),
  "96->24 3x3 40x40": ((1, 96, 40, 40), (24, 96, 3, 3), 1, False),
  "64->64 3x3 56x56": ((1, 64, 56, 56), (64, 64, 3, 3), 1, False),
  "relu 64->256 1x1 56x56": ((1, 64, 56, 56), (256, 64, 1, 1), 0, True),
  "ddddocr 48->48 3x3 52x52": ((1, 48, 52, 52), (48, 48, 3, 3), 1, False),
  "ddddocr 96->96 3x3 52x52": ((1, 96, 52, 52), (96, 96, 3, 3), 1, False),
}
# label -> (options, regtile.FIT_RAGGED while it compiles)
VARIANTS = {"scalar windows": ({"upcast_vec": False}, True),
            "clamped ragged (main)": ({}, False), "vec4 windows": ({}, True)}


def _want(x, w, pad):
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))
  return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))


def main(repeats: int, runs_list: list) -> None:
  rt = kg.Device["WEBGPU"]
  print(f"device: {rt.adapter.info['device']}; timing: "
        f"{'GPU timestamps' if rt.timestamps else 'wall clock'}; loadavg {os.getloadavg()}")
  rng = np.random.default_rng(0)
  only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
  for name, (xs, ws, pad, relu) in SHAPES.items():
    if only not in name:
      continue
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) * 0.1).astype(np.float32)
    want = _want(np.maximum(x, 0) if relu else x, w, pad)
    flops = 2 * want.size * ws[1] * ws[2] * ws[3]
    for runs in runs_list:
      variants = {}
      for label, (extra, fit) in VARIANTS.items():
        regtile.FIT_RAGGED = fit
        try:
          plan, out, chosen = prepare(rt, [x, w], lambda a, b: (a.relu() if relu else a).conv2d(
                                        b, padding=pad),
                                      {"adapter": ADAPTER, "runs": runs, **extra})
        finally:
          regtile.FIT_RAGGED = True
        for compiled, handles in plan:
          rt.run(compiled, handles, {}, timed=True)
        err = np.abs(out.numpy() - want).max() / np.abs(want).max()
        variants[label] = (plan, err, chosen[-1].tile, [])
      for r in range(repeats):
        for label in (list(variants)[::-1] if r % 2 else list(variants)):
          plan, _, _, times = variants[label]
          times.append(sum(rt.run(c, h, {}, timed=True) for c, h in plan) * 1e3)
      sources = {label: tuple(getattr(c, "source", id(c)) for c, _ in v[0])
                 for label, v in variants.items()}
      for label, src in sources.items():
        if label != "vec4 windows" and src == sources["vec4 windows"]:
          print(f"{name}: {label} compiles the same as vec4 windows (a measure of the noise)")
      for label, (plan, err, tile, times) in variants.items():
        best = min(times)
        print(f"{name} runs={runs:3d} {label:22s} tile={tile} best {best:7.2f} ms med "
              f"{statistics.median(times):7.2f} ms {flops / best / 1e6:5.1f} GFLOP/s "
              f"rel.err {err:.1e}", flush=True)
  print(f"loadavg after {os.getloadavg()}")


if __name__ == "__main__":
  args = sys.argv[1:]
  plain = [a for i, a in enumerate(args) if not a.startswith("--") and
           (i == 0 or not args[i - 1].startswith("--"))]
  runs_arg = args[args.index("--runs") + 1] if "--runs" in args else "100"
  main(int(plain[0]) if plain else 8, [int(v) for v in runs_arg.split(",")])
