"""Tiling through workgroup memory (option stage=) vs register tiles only, on device WEBGPU.

Times matmul 1024² f32 and conv2d 3×3 64ch 56×56 (the B3 workloads of throughput_wgpu.py) as
kernelgen compiles them with each set of forced options, checks each against numpy, and prints
ms and GFLOP/s (min and median of REPEATS rounds, the variants interleaved, after a warm-up
dispatch). LABELS (separated by ";") picks variants.

    python bench/wgtile_wgpu.py [REPEATS [LABELS]]      (default 3, all)
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))

import kernelgen as kg  # noqa: E402
from kernelgen.compiler import compile_item  # noqa: E402
from kernelgen.graph.lazy import Buffer  # noqa: E402
from kernelgen.lowering.optimize import optimize  # noqa: E402
from kernelgen.graph.schedule import schedule  # noqa: E402
from kernelgen.render.targets import WGSL  # noqa: E402

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


def prepare(rt, inputs, expr, options: dict):
  """(plan, output tensor, chosen Opts): the compiled kernels with their buffers."""
  out = expr(*[kg.Tensor(x, device="WEBGPU").realize() for x in inputs])
  plan, chosen = [], []
  for item in schedule([out.node]):
    buffer = Buffer("WEBGPU", item.out.dtype, item.out.size)
    opts = {**rt.render_options(), **options}
    chosen.append(optimize(item, WGSL, opts))
    plan.append((compile_item(item, "wgsl", opts),
                 [buffer.handle] + [s.buffer.handle for s in item.inputs]))
    item.out.buffer, item.out.src = buffer, ()
  return plan, out, chosen


def main(argv: list[str]) -> None:
  """Variants run round-robin, REPEATS rounds (the machine's load drifts: interleaving keeps
  the comparison fair); min and median per variant."""
  repeats = int(argv[1]) if len(argv) > 1 else 3
  only = argv[2].split(";") if len(argv) > 2 else None
  rt = kg.Device["WEBGPU"]
  print(f"device WEBGPU: {rt.adapter.info['device']} ({rt.adapter.info['backend_type']}); "
        f"timing: {'GPU timestamps' if rt.timestamps else 'wall clock'}")
  for name, (inputs, expr, reference, flops) in workloads(np).items():
    if not name.startswith(("matmul", "conv2d")):
      continue
    want = reference(*inputs)
    runs = {}
    for label, options in VARIANTS.items():
      if only and label not in only:
        continue
      plan, out, chosen = prepare(rt, inputs, expr, options)
      started = time.perf_counter()
      for compiled, handles in plan:
        rt.run(compiled, handles, {}, timed=True)
      first = time.perf_counter() - started
      ok = np.allclose(out.numpy(), want, rtol=2e-3, atol=2e-3)
      runs[label] = (plan, first, ok, chosen[-1], [])
    for _ in range(repeats):
      for plan, _, _, _, times in runs.values():
        times.append(sum(rt.run(c, h, {}, timed=True) for c, h in plan))
    for label, (plan, first, ok, opts, times) in runs.items():
      best, median = min(times), statistics.median(times)
      print(f"{name:24s} {label:32s} min {best * 1e3:8.1f} ms ({flops / best / 1e9:6.2f} "
            f"GFLOP/s) median {median * 1e3:8.1f} ms  first {first * 1e3:6.0f} ms  "
            f"tile={opts.tile} stage={opts.stage} {'matches numpy' if ok else 'WRONG'}",
            flush=True)


if __name__ == "__main__":
  main(sys.argv)
