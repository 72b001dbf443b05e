"""Seconds per training step of examples/train_lm.py's model on each device: the same jitted
step (forward, cross-entropy, backward, AdamW) on random token windows, the first step (its
recording and compiles) and the ones after timed apart. Picks the device to train on.

Each step's wall seconds ("seconds"), and beside them what a shared machine's load moves less:
"cpu", the process's CPU seconds (every thread: kernelgen's compiles and the driver's shader
builds, lavapipe's on the runtime's builder thread and at first dispatch), "kernels", the compile
cache's misses (kernels compiled), and "compile", the wall seconds those compiles took
(cache_info's compile_s). For a first step's cost under load compare "cpu" (issue 37: on 2 CPUs
at load 6-15 the same first step took 48-223 s wall and 23-33 CPU s). Mesa keeps the shaders
lavapipe built in ~/.cache/mesa_shader_cache across processes (shared by everyone on the machine):
a first step whose kernels an earlier run built skips their LLVM builds, the bulk of its cost (in
queue.submit: lavapipe builds a pipeline at its first dispatch), so an A/B of the first step
after a kernel change sets MESA_SHADER_CACHE_DISABLE=true (with the cache, 347b9ed's first step
took 43.3 s and a370c5c's 14.8 s, each run once at load 4).

    python bench/lm_train_step.py --devices WEBGPU PTXSIM PYTHON --layers 10 --steps 3
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import kernelgen as kg  # noqa: E402
import train_lm  # noqa: E402
from tiny_gpt import TinyGPT  # noqa: E402


def step_times(device: str, args) -> list:
  """Seconds of each of args.steps training steps of the model on `device`."""
  kg.nn.manual_seed(0)
  model = TinyGPT(train_lm.VOCAB, args.dim, args.layers, args.heads, args.context).to(device)
  opt = kg.optim.AdamW(list(model.parameters()), lr=1e-3, weight_decay=0.01)
  step = train_lm.make_step(model, opt, args.batch, args.context)
  rng, times, cpus, kernels, compiles = np.random.default_rng(0), [], [], [], []
  for _ in range(args.steps):
    w = rng.integers(0, train_lm.VOCAB, (args.batch, args.context + 1)).astype(np.int32)
    info, t0, c0 = kg.cache_info(), time.perf_counter(), time.process_time()
    step(kg.Tensor(w[:, :-1], device=device), kg.Tensor(w[:, 1:], device=device),
         kg.Tensor([1e-3], device=device)).item()
    times.append(round(time.perf_counter() - t0, 2))
    cpus.append(round(time.process_time() - c0, 2))
    after = kg.cache_info()
    kernels.append(after["misses"] - info["misses"])
    compiles.append(round(after["compile_s"] - info["compile_s"], 2))
    print(json.dumps({"device": device, "seconds": times, "cpu": cpus, "kernels": kernels,
                      "compile": compiles, "load_1min": os.getloadavg()[0]}), flush=True)
  return times


def main() -> None:
  """Run the command line."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--devices", nargs="+", default=["WEBGPU", "PTXSIM", "PYTHON"])
  parser.add_argument("--dim", type=int, default=train_lm.DIM)
  parser.add_argument("--layers", type=int, default=train_lm.LAYERS)
  parser.add_argument("--heads", type=int, default=train_lm.HEADS)
  parser.add_argument("--context", type=int, default=train_lm.CONTEXT)
  parser.add_argument("--batch", type=int, default=train_lm.BATCH)
  parser.add_argument("--steps", type=int, default=3)
  args = parser.parse_args()
  for device in args.devices:
    if kg.Device.available(device):
      step_times(device, args)
    else:
      print(json.dumps({"device": device, "available": False}), flush=True)


if __name__ == "__main__":
  main()
