"""Tiling through workgroup memory (option stage=) vs register tiles only, on device WEBGPU.

Times matmul 1024² f32 and conv2d 3×3 64ch 56×56 (the B3 workloads of throughput_wgpu.py) as
kernelgen compiles them with each set of forced options, checks each against numpy, and prints
ms and GFLOP/s (best of REPEATS after a warm-up dispatch).

    python bench/wgtile_wgpu.py [REPEATS]      (default 3)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))

import kernelgen as kg  # noqa: E402
from kernelgen.compiler import compile_item  # noqa: E402
from kernelgen.lazy import Buffer  # noqa: E402
from kernelgen.optimize import optimize  # noqa: E402
from kernelgen.schedule import schedule  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput_wgpu import workloads  # noqa: E402

VARIANTS = {
  "default": {},
  "registers 8x8 (stage off)": {"stage": False, "tile": (8, 8)},
  "registers 4x4 (stage off)": {"stage": False, "tile": (4, 4)},
  "stage 16x16 thr, 4x4 regs, k16": {"stage": (16, 16, 16), "tile": (4, 4)},
  "stage 8x8 thr, 8x8 regs, k8": {"stage": (8, 8, 8), "tile": (8, 8)},
  "stage 16x16 thr, 2x2 regs, k16": {"stage": (16, 16, 16), "tile": (2, 2)},
  "stage 8x8 thr, 4x4 regs, k16": {"stage": (8, 8, 16), "tile": (4, 4)},
  "stage 16x16 thr, 8x8 regs, k8": {"stage": (16, 16, 8), "tile": (8, 8)},
  "stage 8x8 thr, 8x8 regs, k16": {"stage": (8, 8, 16), "tile": (8, 8)},
}


def run(rt, inputs, expr, options: dict, repeats: int):
  out = expr(*[kg.Tensor(x, device="WEBGPU").realize() for x in inputs])
  plan, chosen = [], []
  for item in schedule([out.node]):
    buffer = Buffer("WEBGPU", item.out.dtype, item.out.size)
    opts = {**rt.render_options(), **options}
    chosen.append(optimize(item, "wgsl", opts))
    plan.append((compile_item(item, "wgsl", opts),
                 [buffer.handle] + [s.buffer.handle for s in item.inputs]))
    item.out.buffer, item.out.src = buffer, ()
  started = time.perf_counter()
  for compiled, handles in plan:
    rt.run(compiled, handles, {}, timed=True)
  first = time.perf_counter() - started
  best = min(sum(rt.run(c, h, {}, timed=True) for c, h in plan) for _ in range(repeats))
  return best, first, out.numpy(), chosen


def main(argv: list[str]) -> None:
  repeats = int(argv[1]) if len(argv) > 1 else 3
  rt = kg.Device["WEBGPU"]
  print(f"device WEBGPU: {rt.adapter.info['device']} ({rt.adapter.info['backend_type']}); "
        f"timing: {'GPU timestamps' if rt.timestamps else 'wall clock'}")
  for name, (inputs, expr, reference, flops) in workloads(np).items():
    if not name.startswith(("matmul", "conv2d")):
      continue
    want = reference(*inputs)
    for label, options in VARIANTS.items():
      seconds, first, got, chosen = run(rt, inputs, expr, options, repeats)
      ok = np.allclose(got, want, rtol=2e-3, atol=2e-3)
      opts = chosen[-1]
      print(f"{name:24s} {label:32s} {seconds * 1e3:9.1f} ms {flops / seconds / 1e9:7.2f} "
            f"GFLOP/s  first {first * 1e3:6.0f} ms  tile={opts.tile} stage={opts.stage} "
            f"{'matches numpy' if ok else 'WRONG'}", flush=True)


if __name__ == "__main__":
  main(sys.argv)
