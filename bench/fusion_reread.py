"""A ddddocr-like conv stack (3x3 conv -> sigmoid, repeated) on WEBGPU natively, with the
scheduler's transcendental re-read rule (reread.REREAD_TRANSCENDENTALS) on and off, interleaved
in one run: steady ms per forward pass (median of --runs). Prints the load; not a test.

With --conv: the conv re-read rule (reread.REREAD_CONV_LOADS) instead, on PP-OCRv4
detection's head conv (3x3, 96->24 at 80x80) over elementwise inputs of 1 to 6 loads per element
(a relu, a bias, x + x * s, batchnorm's x * a + b, concats of 2, 3 and 4 maps, the model's concat
of 4 with one x + x * s): fused into the conv (the rule off) against a kernel of their own.

  python bench/fusion_reread.py [--size 64] [--channels 16] [--layers 4] [--runs 5] [--conv]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import kernelgen as kg
from kernelgen import cache
from kernelgen.graph import reread
from kernelgen.graph import schedule as sched   # (its REREAD_CONV_LOADS is the one _walk reads)

_graph_key = cache.graph_key      # realize keeps one plan per graph: one per setting of the rule
cache.graph_key = lambda roots, context: _graph_key(
  roots, (context, reread.REREAD_TRANSCENDENTALS, sched.REREAD_CONV_LOADS))


def forward(x, weights, act):
  for w in weights:
    x = act(x.conv2d(w, padding=1))
  return x


def timed(x, weights, act, fused: bool) -> float:
  saved = reread.REREAD_TRANSCENDENTALS
  reread.REREAD_TRANSCENDENTALS = 1 << 30 if fused else saved     # "fused": the rule off
  try:
    start = time.perf_counter()
    out = forward(x, weights, act)
    out.numpy()
    return (time.perf_counter() - start) * 1e3
  finally:
    reread.REREAD_TRANSCENDENTALS = saved


def kernel_count(x, weights, act, fused: bool) -> int:
  saved = reread.REREAD_TRANSCENDENTALS
  reread.REREAD_TRANSCENDENTALS = 1 << 30 if fused else saved
  try:
    return len(sched.schedule([forward(x, weights, act).node]))
  finally:
    reread.REREAD_TRANSCENDENTALS = saved


def conv_inputs(rng, k: int, se: bool, size: int = 80) -> list:
  """[(maps, per-channel scale)] for a concat of k maps of 96 / k channels at `size`."""
  def t(*shape):
    return kg.Tensor(rng.standard_normal(shape).astype(np.float32), device="WEBGPU")
  return [t(1, 96 // k, size, size) for _ in range(k)], t(1, 96 // k, 1, 1) if se else None


CONV_CASES = {   # name -> (maps, x + x * s on the first, a function of the maps)
  "relu": (1, False, lambda xs, s: xs[0].relu()),
  "bias": (1, True, lambda xs, s: xs[0] + s),
  "x + x * s": (1, True, lambda xs, s: xs[0] + xs[0] * s),
  "x * a + b": (1, True, lambda xs, s: xs[0] * s + s * 0.5),
  "concat of 2": (2, False, lambda xs, s: kg.cat(xs, axis=1)),
  "concat of 3": (3, False, lambda xs, s: kg.cat(xs, axis=1)),
  "concat of 4": (4, False, lambda xs, s: kg.cat(xs, axis=1)),
  "concat of 4, x + x * s": (4, True, lambda xs, s: kg.cat([xs[0] + xs[0] * s] + xs[1:], axis=1)),
}


def conv_rule(runs: int) -> None:
  """The --conv table: each case fused (rule off) and on its own (rule on), interleaved."""
  rng = np.random.default_rng(0)
  w = kg.Tensor((rng.standard_normal((24, 96, 3, 3)) / 30).astype(np.float32), device="WEBGPU")
  saved = sched.REREAD_CONV_LOADS
  for name, (k, se, make) in CONV_CASES.items():
    xs, s = conv_inputs(rng, k, se)
    times = {True: [], False: []}
    for _ in range(runs + 1):                          # the first: compile, warm
      for fused in (True, False):
        sched.REREAD_CONV_LOADS = 1 << 30 if fused else saved
        try:
          start = time.perf_counter()
          make(xs, s).conv2d(w, padding=1).numpy()
          times[fused].append((time.perf_counter() - start) * 1e3)
        finally:
          sched.REREAD_CONV_LOADS = saved
    print(f"{name:24s} fused {statistics.median(times[True][1:]):7.1f} ms, own kernel "
          f"{statistics.median(times[False][1:]):7.1f} ms (medians of {runs})", flush=True)


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--size", type=int, default=64)
  ap.add_argument("--channels", type=int, default=16)
  ap.add_argument("--layers", type=int, default=4)
  ap.add_argument("--runs", type=int, default=5)
  ap.add_argument("--conv", action="store_true", help="the conv re-read rule's table instead")
  args = ap.parse_args()
  if args.conv:
    print(f"load: {os.getloadavg()}")
    conv_rule(args.runs)
    print(f"load: {os.getloadavg()}")
    return
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
