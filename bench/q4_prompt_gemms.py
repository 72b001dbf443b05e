"""SmolLM2-135M's q4 prompt GEMMs at 128 rows (quant_tiled.matmul_dequant, block 32, zero point 8)
natively on one CPU adapter against an f32 matmul of each shape, and under any forced options
(--form NAME=JSON, e.g. 'tile8x16={"tile": [8, 16]}'): per kernel the best GPU ms of --reps runs
(timestamps where the adapter has them), GFLOP/s, the driver's compile (CPU ms of pipeline +
first dispatch less a later run's, Mesa's shader cache off: bench/compile_cost.py measure) and
the lowered UOps. Whether the q4 GEMM is below the f32 one per FLOP (its dequantization costs)
or not (its tile does): quant_tiled.py's note. The forms alternate within one process, their
order reversed every round. Not a test: nothing is asserted; the load is printed on every row.

    nice python bench/q4_prompt_gemms.py ADAPTER [--rounds 2] [--reps 5] [--runs 1]
                                             [--form NAME=JSON]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "core"))
sys.path.insert(0, str(ROOT / "bench"))

from icd import ICDS, bind  # noqa: E402

# SmolLM2-135M: q, k, v together (576 -> 576 + 2 * 192), gate / up (576 -> 1536), down
SHAPES = ((576, 960), (576, 1536), (1536, 576))
FORMS = (("q4", {}), ("f32", {}))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("adapter", choices=sorted(ICDS))
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--reps", type=int, default=5)
  parser.add_argument("--runs", type=int, default=1, help="compile option runs (1: one-off)")
  parser.add_argument("--form", action="append", default=[],
                      help="NAME=JSON: the q4 GEMMs also under these options")
  args = parser.parse_args()
  forms = FORMS + tuple((name, json.loads(text)) for name, text in
                        (f.split("=", 1) for f in args.form))
  os.environ["MESA_SHADER_CACHE_DISABLE"] = "true"
  bind(args.adapter)
  import kernelgen as kg
  from kernelgen.device import Device
  from kernelgen.graph.schedule import schedule
  from compile_cost import _inputs, measure
  base = {**Device["WEBGPU"].render_options(), "runs": args.runs}
  made = _inputs(kg)
  measure("warm-up", schedule([(kg.Tensor.empty(64, device="WEBGPU") * 2).node])[0], base, 1)
  for round_ in range(args.rounds):
    for k, n in SHAPES:
      for form, extra in (forms if round_ % 2 == 0 else forms[::-1]):
        out = made["E"](128, k) @ made["E"](k, n) if form == "f32" else made["Q4"](128, k, n)
        for item in schedule([out.node]):
          forced = {key: tuple(v) if isinstance(v, list) else v for key, v in extra.items()}
          r = measure(f"{form} {k}->{n}", item, {**base, **forced}, args.reps)
          rate = 2 * 128 * k * n / r["gpu_ms"] / 1e6
          print(f"{args.adapter:11s} {r['kernel']:18s} {r['gpu_ms']:8.2f} ms {rate:6.1f} GFLOP/s "
                f"driver {r['driver_ms']:6.0f} ms uops {r['uops']:5d} {r['opts']:28s} "
                f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
  main()
