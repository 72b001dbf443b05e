"""A ddddocr-like conv stack (3x3 conv -> sigmoid, repeated) on WEBGPU natively, with the
scheduler's transcendental re-read rule (schedule.REREAD_TRANSCENDENTALS) on and off, interleaved
in one run: steady ms per forward pass (median of --runs). Prints the load; not a test.

  python bench/fusion_reread.py [--size 64] [--channels 16] [--layers 4] [--runs 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import kernelgen as kg
from kernelgen import cache
from kernelgen.graph import schedule as sched

_graph_key = cache.graph_key      # realize keeps one plan per graph: one per setting of the rule
cache.graph_key = lambda roots, context: _graph_key(roots, (context, sched.REREAD_TRANSCENDENTALS))


def forward(x, weights, act):
  for w in weights:
    x = act(x.conv2d(w, padding=1))
  return x


def timed(x, weights, act, fused: bool) -> float:
  saved = sched.REREAD_TRANSCENDENTALS
  sched.REREAD_TRANSCENDENTALS = 1 << 30 if fused else saved     # "fused": the rule off
  try:
    start = time.perf_counter()
    out = forward(x, weights, act)
    out.numpy()
    return (time.perf_counter() - start) * 1e3
  finally:
    sched.REREAD_TRANSCENDENTALS = saved


def kernel_count(x, weights, act, fused: bool) -> int:
  saved = sched.REREAD_TRANSCENDENTALS
  sched.REREAD_TRANSCENDENTALS = 1 << 30 if fused else saved
  try:
    return len(sched.schedule([forward(x, weights, act).node]))
  finally:
    sched.REREAD_TRANSCENDENTALS = saved


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--size", type=int, default=64)
  ap.add_argument("--channels", type=int, default=16)
  ap.add_argument("--layers", type=int, default=4)
  ap.add_argument("--runs", type=int, default=5)
  args = ap.parse_args()
  rng = np.random.default_rng(0)
  c, n = args.channels, args.size
  x = kg.Tensor(rng.standard_normal((1, c, n, n)).astype(np.float32), device="WEBGPU")
  weights = [kg.Tensor((rng.standard_normal((c, c, 3, 3)) / (3 * c)).astype(np.float32),
                       device="WEBGPU") for _ in range(args.layers)]
  print(f"load: {os.getloadavg()}")
  for name, act in (("sigmoid", lambda t: t.sigmoid()), ("silu", lambda t: t * t.sigmoid())):
    times = {True: [], False: []}
    for fused in (True, False):
      timed(x, weights, act, fused)                      # compile, warm
    for _ in range(args.runs):
      for fused in (True, False):
        times[fused].append(timed(x, weights, act, fused))
    counts = {f: kernel_count(x, weights, act, f) for f in (True, False)}
    print(f"{name}: {args.layers} x conv3x3 {c}->{c} at {n}x{n}: recomputed per read "
          f"{statistics.median(times[True]):.1f} ms ({counts[True]} kernels), once per element "
          f"{statistics.median(times[False]):.1f} ms ({counts[False]} kernels), "
          f"medians of {args.runs}")


if __name__ == "__main__":
  main()
