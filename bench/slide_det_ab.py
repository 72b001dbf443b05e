"""PP-OCRv4 det's slid depthwise kernels (issue 42), each as kernelgen compiles it now and as it
did before issue 42's epilogue and column changes (lowering/slide.py: hoist_row_free_loads off,
so the batch norm's tensors are read every trip; whole_blocks off, so 10 and 20 columns take
C = 8 in a ragged last block), interleaved in one process per adapter: WGSL bytes, the driver's
compile (CPU ms, Mesa's shader cache off; bench/compile_cost.py's measure()), the best of --reps
dispatches (GPU timestamps where the adapter has them) over --rounds rounds, and GFLOP/s.

Not a test (no timing is asserted); the machine is shared: the load is printed with the table.

    nice python bench/slide_det_ab.py [--adapters lavapipe,swiftshader] [--rounds 3] [--reps 5]
                                      [--light shufflenet]
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
import compile_cost  # noqa: E402  (measure() and adapter_rows())
import pypi_models  # noqa: E402  (the wheels, the input shapes)

MODEL = "ch_PP-OCRv4_det_infer.onnx"


@contextlib.contextmanager
def _before(on: bool):
  """With `on`: slide.py as before issue 42's epilogue and column changes, inside."""
  from kernelgen.lowering import slide
  from kernelgen.lowering.lower import forget_last
  kept = slide.hoist_row_free_loads, slide.whole_blocks
  forget_last()                 # (measure() lowers once more: that lowering is kept otherwise)
  if on:
    slide.hoist_row_free_loads = lambda value, rng, gate: value
    slide.whole_blocks = lambda fits, nc, work: fits
  try:
    yield
  finally:
    slide.hoist_row_free_loads, slide.whole_blocks = kept


def _slid_items(kg, base: dict, light: str = "") -> list:
  """(item, FLOPs) of det's kernels that slide at its bench input size (or light model `light`'s:
  tests/helpers/onnx_corpus.py)."""
  from kernelgen.graph.schedule import schedule
  from kernelgen.lowering.optimize import optimize
  from kernelgen.lowering.slide import slide_axes, slide_plan
  from kernelgen.render.targets import get_target
  if light:
    items = [item for _, item in compile_cost._light_items(kg, light)]
  else:
    raw = next(raw for label, raw in pypi_models.models(["rapidocr"]) if label.endswith(MODEL))
    model = kg.onnx.load(raw, float64="float32")
    feeds = {n: kg.Tensor.empty(*s, device="WEBGPU")
             for n, s in pypi_models.SHAPES[MODEL].items()}
    outs = model.run(feeds, device="WEBGPU")
    items = schedule([outs[n].node for n in model.output_names])
  found = []
  for item in items:
    if optimize(item, get_target("wgsl"), dict(base)).slide:
      p = slide_plan(item, slide_axes(item))
      kh, kw = p.window_shape
      found.append((item, 2 * item.out.size * kh * kw * p.channels))
  return found


def child(rounds: int, reps: int, light: str) -> None:
  """Measure every slid kernel of det, now and before, interleaved: a ROW line each."""
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  from kernelgen.device import Device
  base = Device["WEBGPU"].render_options()
  best: dict = {}
  for _ in range(rounds):
    for item, flops in _slid_items(kg, base, light):
      for variant in ("now", "before"):
        with _before(variant == "before"):
          row = compile_cost.measure(item.name, item, base, reps)
        key = (item.name, variant)
        if key not in best or row["gpu_ms"] < best[key]["gpu_ms"]:
          best[key] = {**row, "variant": variant, "flops": flops,
                       "driver_ms": min(row["driver_ms"], best.get(key, row)["driver_ms"])}
  for row in best.values():
    row["gflops"] = round(row["flops"] / (row["gpu_ms"] * 1e6), 2)
    print("ROW " + json.dumps(row), flush=True)


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--adapters", default="lavapipe,swiftshader")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--reps", type=int, default=5)
  parser.add_argument("--light", default="", help="a light model's kernels instead (shufflenet)")
  parser.add_argument("--child", action="store_true")
  args = parser.parse_args(argv)
  if args.child:
    child(args.rounds, args.reps, args.light)
    return
  print(f"# load: {' '.join(f'{v:.2f}' for v in os.getloadavg())} (1/5/15 min)", flush=True)
  print(f"{'adapter':11s} {'kernel':28s} {'variant':7s} {'bytes':>7s} {'driver':>7s} "
        f"{'gpu ms':>8s} {'GFLOP/s':>8s}  opts", flush=True)
  totals: dict = {}
  for adapter in args.adapters.split(","):
    command = [sys.executable, __file__, "--child", "--rounds", str(args.rounds),
               "--reps", str(args.reps), "--light", args.light]
    for r in compile_cost.adapter_rows(adapter, command):
      key = (adapter, r["variant"])
      totals[key] = [a + b for a, b in zip(totals.get(key, (0, 0)), (r["gpu_ms"], r["driver_ms"]))]
      print(f"{adapter:11s} {r['kernel'][:28]:28s} {r['variant']:7s} {r['bytes']:7d} "
            f"{r['driver_ms']:7.0f} {r['gpu_ms']:8.3f} {r['gflops']:8.2f}  {r['opts']}", flush=True)
  for (adapter, variant), (gpu, driver) in totals.items():
    print(f"# {adapter} {variant}: {gpu:.2f} ms of kernel time, {driver:.0f} ms driver compile")
  print(f"# load after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
