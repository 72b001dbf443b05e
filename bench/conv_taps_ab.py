"""Issue 42: dense 3x3 convs reading their weights held as [C][kh][kw][O] (as an ONNX Conv's
initializer is held on CPU adapters: onnx/operators/weights.py held_taps_last; a tap's weights of
4 output channels are one vector load, lowering/regtile.py) against the OIHW weights read as
they are, natively on lavapipe, GPU timestamps, interleaved in one process (A/B rounds alternate
their order), the conv kernel alone (the held copy is made once per model). Checked against
numpy.

    python bench/conv_taps_ab.py [REPEATS]        (default 8)
"""
from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from icd import bind  # noqa: E402

bind("lavapipe")                                     # before wgpu loads

import numpy as np  # noqa: E402

from wgtile_wgpu import kg, prepare  # noqa: E402

# name -> (input shape, weight shape, padding): the cold row's conv and PP-OCRv4 det's 3x3 convs
SHAPES = {
  "64->64 3x3 56x56": ((1, 64, 56, 56), (64, 64, 3, 3), 1),
  "96->24 3x3 80x80": ((1, 96, 80, 80), (24, 96, 3, 3), 1),
}


def _want(x, w, pad):
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))
  return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))


def _prepared(rt, x, w, pad, runs: int, taps: bool):
  """prepare()'s plan of the conv, its weights given OIHW or held taps-last (a permuted view)."""
  if not taps:
    return prepare(rt, [x, w], lambda a, b: a.conv2d(b, padding=pad),
                   {"adapter": "lavapipe", "runs": runs})
  held = np.ascontiguousarray(w.transpose(1, 2, 3, 0))
  return prepare(rt, [x, held], lambda a, b: a.conv2d(b.permute(3, 0, 1, 2), padding=pad),
                 {"adapter": "lavapipe", "runs": runs})


def main(argv: list[str]) -> None:
  repeats = int(argv[1]) if len(argv) > 1 else 8
  rt = kg.Device["WEBGPU"]
  print(f"device: {rt.adapter.info['device']}; timing: "
        f"{'GPU timestamps' if rt.timestamps else 'wall clock'}; loadavg {os.getloadavg()}")
  rng = np.random.default_rng(0)
  for name, (xs, ws, pad) in SHAPES.items():
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) * 0.1).astype(np.float32)
    want = _want(x, w, pad)
    flops = 2 * want.size * ws[1] * ws[2] * ws[3]
    for runs in (1, 100):
      variants = {}
      for label, taps in (("OIHW (main)", False), ("taps last", True)):
        plan, out, chosen = _prepared(rt, x, w, pad, runs, taps)
        for compiled, handles in plan:
          rt.run(compiled, handles, {}, timed=True)
        err = np.abs(out.numpy() - want).max() / np.abs(want).max()
        variants[label] = (plan, err, chosen[-1].tile, [])
      for r in range(repeats):
        for label in (list(variants)[::-1] if r % 2 else list(variants)):
          plan, _, _, times = variants[label]
          times.append(sum(rt.run(c, h, {}, timed=True) for c, h in plan) * 1e3)
      for label, (plan, err, tile, times) in variants.items():
        best = min(times)
        print(f"{name} runs={runs:3d} {label:12s} kernels {len(plan)} tile={tile} best "
              f"{best:6.2f} ms med {statistics.median(times):6.2f} ms "
              f"{flops / best / 1e6:5.1f} GFLOP/s rel.err {err:.1e}", flush=True)
  print(f"loadavg after {os.getloadavg()}")


if __name__ == "__main__":
  main(sys.argv)
