"""Depthwise convs against dense convs of about the same FLOPs, per FLOP, natively on both CPU
adapters (issue 42), with what each kernel costs to build (issue 37).

Workloads: PP-OCRv4 detection's depthwise convs (1 x C x H x W, 3x3 and 5x5, stride 1 and 2, with
bias and hard-swish as the model has them), dense 3x3 and 1x1 convs of about the same FLOPs, and
grouped convs with cg > 1 input channels per group (rows "grp": ResNeXt-like 3x3, ShuffleNet-like
1x1; none of the issue's five models has one).
Each depthwise conv runs as kernelgen compiles it for the adapter (the sliding window,
lowering/slide.py, where it applies), and as before it (slide=False) for a one-off run and for
many runs (runs=100: the unrolled windows). Each grouped conv runs as compiled now, as before
(slide=False: register tiles) and slid with slide.py's limits on grouped convs lifted. Per
kernel, from bench/compile_cost.py's measure(): WGSL lines and bytes, UOps, kernelgen's compile
ms, the driver's compile ms (CPU time of pipeline creation + first dispatch, less a later
dispatch's; Mesa's shader cache off), the best of --reps dispatches (GPU timestamps where the
adapter has them), and GFLOP/s = 2 * outputs * window / that time.

Each adapter runs in a fresh process bound to its Vulkan ICD (lavapipe: Mesa's; SwiftShader:
Chromium's). The machine is shared: the load is printed with the table.

    nice python bench/depthwise.py [--adapters lavapipe,swiftshader] [--only NAME,...]
                                   [--reps N] [--json OUT]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import compile_cost  # noqa: E402  (bench/compile_cost.py: measure() and the ICDs)

# name -> (x shape, weight shape, stride, groups): depthwise rows first, then dense rows of about
# the FLOPs of the first depthwise ones (2 * 96 * 80 * 80 * 25 = 30.7 MFLOP for the 5x5)
CONVS = {
  "dw 3x3 s1 96x80x80": ((1, 96, 80, 80), (96, 1, 3, 3), 1, 96),
  "dw 5x5 s1 96x80x80": ((1, 96, 80, 80), (96, 1, 5, 5), 1, 96),
  "dw 3x3 s2 96x160x160": ((1, 96, 160, 160), (96, 1, 3, 3), 2, 96),
  "dw 5x5 s2 192x80x80": ((1, 192, 80, 80), (192, 1, 5, 5), 2, 192),
  "dw 5x5 s1 192x40x40": ((1, 192, 40, 40), (192, 1, 5, 5), 1, 192),
  "dense 3x3 16ch 80x80": ((1, 16, 80, 80), (16, 16, 3, 3), 1, 1),
  "dense 1x1 96ch 40x40": ((1, 96, 40, 40), (96, 96, 1, 1), 1, 1),
  "dense 3x3 64ch 56x56": ((1, 64, 56, 56), (64, 64, 3, 3), 1, 1),
  # grouped convs with more than one input channel per group (ResNeXt's 3x3, ShuffleNet's 1x1):
  # cg input channels and og output channels per group, about the dense rows' FLOPs
  "grp3 cg2 og2 192x40": ((1, 192, 40, 40), (192, 2, 3, 3), 1, 96),
  "grp3 cg4 og4 128x40": ((1, 128, 40, 40), (128, 4, 3, 3), 1, 32),
  "grp3 cg8 og8 128x40": ((1, 128, 40, 40), (128, 8, 3, 3), 1, 16),
  "grp3 cg16 og16 128x40": ((1, 128, 40, 40), (128, 16, 3, 3), 1, 8),
  "grp3 cg4 og1 128x40": ((1, 128, 40, 40), (32, 4, 3, 3), 1, 32),
  "grp1 cg8 og8 128x40": ((1, 128, 40, 40), (128, 8, 1, 1), 1, 16),
}
# variant -> forced options; ROW_VARIANTS: the variants of the rows whose names start with a key
# (dense rows: "now" only). "slide scalar": the sliding window without its vec4 loads and stores
# (upcast_vec=False: the kernel before issue 42). NO_LIMITS: a grouped conv slid whatever its
# channels per group (slide.SLIDE_MAX_CHANNELS and SLIDE_MAX_SHARED lifted: what set them)
NO_LIMITS = "slide, no limits"
VARIANTS = {"now": {}, "before one-off": {"slide": False},
            "before many runs": {"slide": False, "runs": 100}, NO_LIMITS: {},
            "slide scalar": {"upcast_vec": False}}
ROW_VARIANTS = {"dw": ("now", "slide scalar", "before one-off", "before many runs"),
                "grp": ("now", "before one-off", NO_LIMITS)}


def flops(x, w, stride) -> int:
  """2 * outputs * products per output of the conv (padding k // 2)."""
  n, _, h, wd = x
  o, cg, kh, kw = w
  oh, ow = (h + 2 * (kh // 2) - kh) // stride + 1, (wd + 2 * (kw // 2) - kw) // stride + 1
  return 2 * n * o * oh * ow * cg * kh * kw


@contextlib.contextmanager
def _grouped_limits(lifted: bool):
  """With `lifted`: slide.py's limits on grouped convs lifted (its plans forgotten) inside."""
  from kernelgen.lowering import slide
  kept = slide.SLIDE_MAX_CHANNELS, slide.SLIDE_MAX_SHARED
  if lifted:
    slide.SLIDE_MAX_CHANNELS = slide.SLIDE_MAX_SHARED = 1 << 30
    slide._PLANS.clear()
  try:
    yield
  finally:
    if lifted:
      slide.SLIDE_MAX_CHANNELS, slide.SLIDE_MAX_SHARED = kept
      slide._PLANS.clear()


def child(only: list, reps: int) -> None:
  """Measure every conv and variant here (one adapter: the process's ICD), a ROW line each."""
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  from kernelgen.device import Device
  from kernelgen.graph.schedule import schedule
  runtime = Device["WEBGPU"]
  base = runtime.render_options()
  compile_cost.measure("warm-up", schedule([(kg.Tensor.empty(64, device="WEBGPU") * 2).node])[0],
                       base, 1)
  for name, (xs, ws, stride, groups) in CONVS.items():
    if only and name not in only:
      continue
    E = lambda *shape: kg.Tensor.empty(*shape, device="WEBGPU")   # noqa: E731
    y = E(*xs).conv2d(E(*ws), E(ws[0]), stride=stride, padding=ws[2] // 2, groups=groups)
    y = y * (y + 3).clip(0, 6) / 6
    (item,) = schedule([y.node])
    for variant in next((v for k, v in ROW_VARIANTS.items() if name.startswith(k)), ("now",)):
      try:
        with _grouped_limits(lifted=variant == NO_LIMITS):
          row = compile_cost.measure(name, item, {**base, **VARIANTS[variant]}, reps)
        row["gflops"] = round(flops(xs, ws, stride) / (row["gpu_ms"] * 1e6), 2)
      except Exception as error:   # noqa: BLE001 - reported in the table, the run goes on
        row = {"kernel": name, "error": f"{type(error).__name__}: {str(error)[:200]}"}
      print("ROW " + json.dumps({"adapter": base["adapter"], "variant": variant, **row}),
            flush=True)


def main(argv: list[str]) -> None:
  """Run each adapter's child process and print the table (see the module docstring)."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  for flag, default in (("--adapters", "lavapipe,swiftshader"), ("--only", ""), ("--json", "")):
    parser.add_argument(flag, default=default)
  parser.add_argument("--reps", type=int, default=5)
  parser.add_argument("--child", action="store_true")
  args = parser.parse_args(argv)
  if args.child:
    child([n for n in args.only.split(",") if n], args.reps)
    return
  print(f"# load: {' '.join(f'{v:.2f}' for v in os.getloadavg())} (1/5/15 min), 2 CPUs shared; "
        f"Mesa shader cache off", flush=True)
  print(f"{'adapter':11s} {'conv':22s} {'variant':16s} {'lines':>6s} {'bytes':>7s} {'uops':>6s} "
        f"{'python':>7s} {'driver':>7s} {'gpu ms':>8s} {'GFLOP/s':>8s}  opts", flush=True)
  found = []
  for adapter in args.adapters.split(","):
    command = [sys.executable, __file__, "--child", "--reps", str(args.reps), "--only", args.only]
    for row in compile_cost.adapter_rows(adapter, command):
      found.append(row)
      _print_row(row)
  print(f"# load after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
  if args.json:
    Path(args.json).write_text(json.dumps(found, indent=1) + "\n")


def _print_row(r: dict) -> None:
  if "error" in r:
    print(f"{r['adapter']:11s} {r['kernel'][:22]:22s} {r['variant']:16s} {r['error']}", flush=True)
    return
  print(f"{r['adapter']:11s} {r['kernel'][:22]:22s} {r['variant']:16s} {r['lines']:6d} "
        f"{r['bytes']:7d} {r['uops']:6d} {r['python_ms']:7.0f} {r['driver_ms']:7.0f} "
        f"{r['gpu_ms']:8.2f} {r['gflops']:8.2f}  {r['opts']}", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
