"""Where one decode step of an ONNX causal LM (bench/lm_models.py) spends its GPU time, natively
on device WEBGPU (wgpu-py; Mesa lavapipe here): kg.generate runs a few tokens so the decode step
is recorded (onnx/replay.py), then each recorded launch runs alone with GPU timestamps (median
of --reps), next to a copy kernel of the launch's bytes read and written in the same run. Prints
one line per launch (name, workgroups, bytes it binds, ms, GB/s, a copy's GB/s over as many
bytes), the launches per step and per layer with the buffers each binds, and the machine's load.
A launch binding a large table it reads one row of (an embedding gather fused into a projection)
shows a meaningless GB/s.

    python bench/lm_decode_kernels.py --config smollm2-135m --dtype fp32 --layers 2 [--top 20]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "core"))

import lm_models  # noqa: E402


def decode_program(loaded):
  """The recorded decode-step Program of a model kg.generate ran (its cache-dims copy's)."""
  for copy in loaded.__dict__.get("_with_dims", {}).values():
    programs = [p for p in copy.replayer.programs.values() if p is not None]
    if programs:
      return programs[-1]
  raise SystemExit("no recorded decode program: generate more tokens")


def bound_bytes(kernel) -> int:
  """Bytes of the buffers a launch binds (an upper bound on what it reads and writes)."""
  return sum(b.size * b.dtype.itemsize for b in kernel.buffers)


def copy_seconds(nbytes: int, reps: int) -> float:
  """GPU seconds (median of `reps`) of an elementwise kernel reading and writing `nbytes` in all
  (float32, half read, half written) in this run."""
  import kernelgen as kg
  import kernelgen.realize as realizing
  out = kg.Tensor(np.ones(max(nbytes // 8, 1), np.float32), device="WEBGPU") + 1.0
  launches = realizing.recording = []
  try:
    realizing.realize([out.node])
  finally:
    realizing.recording = None
  runtime, kernel, _, bound = launches[-1]
  handles = [b.handle for b in bound]
  return statistics.median(runtime.time_run(kernel, handles, {}) for _ in range(reps))


def main() -> None:
  """Run the command line."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", choices=sorted(lm_models.CONFIGS), default="smollm2-135m")
  parser.add_argument("--dtype", choices=("fp32", "fp16", "q4"), default="fp32")
  parser.add_argument("--layers", type=int, default=2)
  parser.add_argument("--reps", type=int, default=5)
  parser.add_argument("--top", type=int, default=25)
  parser.add_argument("--source", type=int, action="append", default=[],
                      help="print the WGSL of this launch (an index as printed)")
  args = parser.parse_args()
  import kernelgen as kg
  from kernelgen.uop.program import variant_for
  cfg = dataclasses.replace(lm_models.CONFIGS[args.config], layers=args.layers)
  loaded = kg.onnx.load(lm_models.build(cfg, args.dtype).SerializeToString())
  from kernelgen.onnx import replay
  seen, replayed = {}, replay.Program.replay

  def keep(self, args, values):
    seen.update(args=[a.node.buffer for a in args], values=dict(values))
    return replayed(self, args, values)
  replay.Program.replay = keep
  kg.generate(loaded, [1, 2, 3, 4], max_new_tokens=6, device="WEBGPU")
  replay.Program.replay = replayed
  program, values = decode_program(loaded), seen["values"]
  rows, total = [], 0.0
  for i, (runtime, kernel, slots) in enumerate(program.steps):
    handles = [(program.buffers[x] if kind == "out" else seen["args"][x] if kind == "arg"
                else x).handle for kind, x in slots]
    k = variant_for(kernel, values)
    secs = statistics.median(runtime.time_run(kernel, handles, values) for _ in range(args.reps))
    total += secs
    rows.append((i, kernel.name, k.launch.dispatch, bound_bytes(kernel), secs))
  print(f"{args.config} {args.dtype}, {cfg.layers} layers: {len(program.steps)} launches per "
        f"decode step ({len(program.steps) / cfg.layers:.1f} per layer), load "
        f"{os.getloadavg()[0]:.1f}, timed total {total * 1e3:.1f} ms")
  timed = sorted((r for r in rows if r[4]), key=lambda r: -r[4])[:args.top]
  for i, name, grid, nbytes, secs in timed:
    cp = copy_seconds(nbytes, args.reps) if nbytes > 1 << 20 else None
    extra = f" copy {nbytes / cp / 1e9:6.2f} GB/s" if cp else ""
    print(f"{i:4d} {name[:48]:48s} {str(grid):16s} {nbytes / 1e6:8.2f} MB {secs * 1e3:8.3f} ms "
          f"{nbytes / secs / 1e9:6.2f} GB/s{extra}")
  for i in args.source:
    print(variant_for(program.steps[i][1], values).source)
  print("launches (name/buffers bound):", " ".join(
    f"{r[1]}/{len(program.steps[r[0]][1].buffers)}" for r in rows))


if __name__ == "__main__":
  main()
