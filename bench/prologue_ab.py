"""GPU time of a decode step's norm and projection with the norm as the matmul's prologue
(graph/prologue.py), recomputed per output or staged once per workgroup (lowering/staged.py),
and as a row kernel of its own, side by side in one process: one row of d, LayerNorm, then a
projection to n outputs (+ bias), for several n: where the sums cross is where PROLOGUE_WORK
(outputs x row length) should sit on this device, and whether staging pays.

    python bench/prologue_ab.py [--d 256] [--n 256,768,1024,2048,4096] [--device WEBGPU]

Per n and way: the kernels' names and the median of 9 timed runs of the jitted step (GPU
timestamps, summed over its kernels), the three ways one after the other per n. Not a test;
nothing is asserted; on a loaded machine the numbers mean little (the load average is printed
with them).
"""
from __future__ import annotations

import argparse
import os
import statistics

import numpy as np

import kernelgen as kg
from kernelgen.graph import prologue


def _step(d: int, n: int, rng):
  """(function, input) of LayerNorm(d) then a Linear(d, n), one row."""
  def t(*shape):
    return kg.Tensor((rng.standard_normal(shape) * shape[-1] ** -0.5).astype(np.float32))
  w, b, weight, bias = t(d), t(d), t(n, d), t(n)
  return (lambda x: x.layernorm(-1, 1e-5, w, b) @ weight.T + bias), t(1, d)


def _time(d: int, n: int, work: int, staged: bool = False) -> tuple[list, list]:
  """(kernel names, GPU seconds of each timed run) with PROLOGUE_WORK = work, prologue.STAGED =
  staged."""
  prologue.PROLOGUE_WORK, prologue.STAGED = work, staged
  kg.clear_cache()          # no plan or kernel of the other way
  fn, x = _step(d, n, np.random.default_rng(n))
  step = kg.jit(fn)
  for _ in range(3):
    step(x).numpy()
  prog = next(s.program for s in step.signatures.values() if s.program is not None)
  runs = [sum(s for _, s in prog.time_kernels([x.node.buffer], {})) for _ in range(9)]
  return [kernel.name for _, kernel, _ in prog.steps], runs


def main() -> None:
  """Time both ways for each n and print them."""
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--d", type=int, default=256)
  ap.add_argument("--n", default="256,768,1024,2048,4096")
  ap.add_argument("--device", default="WEBGPU")
  args = ap.parse_args()
  kg.Device.DEFAULT = args.device
  print(f"norm + projection, one row of d={args.d}, on {args.device}; load average "
        f"{os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs); PROLOGUE_WORK is "
        f"{prologue.PROLOGUE_WORK}")
  print("n | outputs x d | prologue per output ms (kernels) | staged ms (kernels) | "
        "row kernel + matmul ms (kernels)")
  for n in (int(v) for v in args.n.split(",")):
    ways = (_time(args.d, n, 1 << 40), _time(args.d, n, 0, True), _time(args.d, n, 0))
    cells = [f"{1000 * statistics.median(r):.3f} ({len(k)}: {' '.join(k)})" for k, r in ways]
    print(f"{n} | {n * args.d} | " + " | ".join(cells))


if __name__ == "__main__":
  main()
