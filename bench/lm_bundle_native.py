"""Prefill and decode of the page's one-bundle causal LM (export/onnx_lm.py causal_program: the
new tokens a symbolic `seq` 1..step), run natively on WEBGPU (wgpu-py; Mesa lavapipe here): the
bundle exported for the adapter, then a prefill of the whole prompt (one run at seq = prompt)
and single-token decode runs, each timed as the process's CPU seconds (lavapipe's threads are
this process's: less swayed by other processes' load than wall time) and wall seconds, with the
device's compute dispatches per run. Not a test: nothing is asserted; the load is printed. Run
it from two trees (PYTHONPATH=<tree>/core) one after another, interleaved, to compare them.

    python bench/lm_bundle_native.py [--config smollm2-135m] [--dtype q4] [--layers 2]
                                     [--prompt 128] [--step 0] [--tokens 8] [--rounds 3] [--all-logits]
                                     [--buffers 8] [--kernels]

--kernels lists the bundle's kernels in launch order (name, workgroups at the largest bound
sizes, and each binding's buffer id and access, `w`rite or `r`ead: a buffer one kernel writes
and a later one reads is their hand-off), then runs as without it.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
if not os.environ.get("PYTHONPATH"):
  sys.path.insert(0, str(ROOT / "core"))

import lm_models  # noqa: E402


def timed(runtime, fn) -> tuple:
  """(CPU seconds, wall seconds, dispatches) of fn() up to the device's idle."""
  d0, c0, w0 = runtime.dispatches, time.process_time(), time.perf_counter()
  fn()
  runtime.synchronize()
  return time.process_time() - c0, time.perf_counter() - w0, runtime.dispatches - d0


def list_kernels(manifest: dict) -> None:
  """Print each kernel of a bundle's manifest in launch order: its name, its workgroups at the
  largest bound sizes and its bindings (buffer id, `w` written or `r` read)."""
  for i, k in enumerate(manifest["kernels"]):
    binds = " ".join(f"{b['buffer']}{b['access'][0]}" for b in k["bindings"])
    print(f"  {i:3d} {k['name']:32s} {str(tuple(k['dispatch'])):16s} {binds}")


def main() -> None:
  """Run the command line."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", choices=sorted(lm_models.CONFIGS), default="smollm2-135m")
  parser.add_argument("--dtype", choices=("fp32", "fp16", "q4"), default="q4")
  parser.add_argument("--layers", type=int, default=2)
  parser.add_argument("--prompt", type=int, default=128)
  parser.add_argument("--tokens", type=int, default=8, help="decode runs per round")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--context", type=int, default=256)
  parser.add_argument("--step", type=int, default=0,
                      help="the bundle's most new tokens a run (default: the prompt; 1: the "
                           "one-token bundle, whose prefill runs a token at a time)")
  parser.add_argument("--all-logits", action="store_true", help="LM head on every position")
  parser.add_argument("--buffers", type=int, default=8,
                      help="storage buffers a kernel may bind (kg.export max_storage_buffers; "
                           "8, WebGPU's default, as the page's bundles; kg.generate natively "
                           "binds up to the adapter's limit, 32 on lavapipe)")
  parser.add_argument("--kernels", action="store_true",
                      help="list the bundle's kernels and the buffers each binds")
  args = parser.parse_args()
  import kernelgen as kg
  from kernelgen.device import Device
  from kernelgen.export.causal import _feeds, names
  from kernelgen.export.onnx_lm import causal_program
  cfg = dataclasses.replace(lm_models.CONFIGS[args.config], layers=args.layers)
  model = lm_models.build(cfg, args.dtype, last_logits=not args.all_logits)
  runtime = Device["WEBGPU"]
  with tempfile.TemporaryDirectory() as folder:
    start = time.perf_counter()
    step = args.step or args.prompt
    adapter = runtime.render_options().get("adapter")
    outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), step, args.context,
                                    adapter=adapter)
    more = {"max_storage_buffers": args.buffers} if args.buffers != 8 else {}
    bundle = kg.export(outputs, folder, format="webgpu", state=state, adapter=adapter, **more)
    export_s = time.perf_counter() - start
    if args.kernels:
      list_kernels(bundle.manifest)
    lm = names(bundle.manifest)
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab, args.prompt)]
    prefill, decode = [], []
    for r in range(args.rounds + 1):          # round 0 builds the pipelines: not counted
      bundle.reset()
      got = {}

      def run():
        for at in range(0, len(prompt), step):
          got.update(bundle.run(_feeds(lm, prompt[at:at + step], at, 0.0, 0), device="WEBGPU",
                                outputs=["token"]))
      p = timed(runtime, run)
      done, token = len(prompt), got["token"].tolist()[0]
      steps = []
      for _ in range(args.tokens):
        feeds = _feeds(lm, [token], done, 0.0, 0)
        steps.append(timed(runtime, lambda: got.update(bundle.run(feeds, device="WEBGPU",
                                                                  outputs=["token"]))))
        done, token = done + 1, got["token"].tolist()[0]
      if r:
        prefill.append(p)
        decode.extend(steps)
      else:
        first = p
  best = min(prefill)
  cpu = statistics.median(s[0] for s in decode)
  wall = statistics.median(s[1] for s in decode)
  print(f"{args.config} {args.layers} layers {args.dtype} prompt {args.prompt} step {step}, "
        f"{args.buffers} buffers (export "
        f"{export_s:.1f} s, {len(bundle.manifest['kernels'])} kernels)")
  print(f"  prefill: best CPU {best[0]:.3f} s ({args.prompt / best[0]:.1f} tok/CPU-s), wall "
        f"{min(p[1] for p in prefill):.3f} s ({args.prompt / min(p[1] for p in prefill):.1f} "
        f"tok/s), {best[2]} dispatches; CPU s per round {[round(p[0], 3) for p in prefill]}")
  print(f"  first prefill (pipelines built, on lavapipe compiled at first dispatch): CPU "
        f"{first[0]:.1f} s, wall {first[1]:.1f} s")
  print(f"  decode: median CPU {cpu * 1e3:.1f} ms, wall {wall * 1e3:.1f} ms per token "
        f"({1 / wall:.1f} tok/s), {decode[-1][2]} dispatches")
  print(f"  load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
