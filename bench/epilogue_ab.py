"""GPU time per kernel of the programs whose kernels graph/epilogue.py changes (a reduction's
elementwise tail computed in its kernel, not per read by its readers), for an A/B between two
checkouts: run it with each one's core first on the path, interleaved, at idle.

    PYTHONPATH=/path/to/A/core python bench/epilogue_ab.py [mlp|prefill|cnn] [--device WEBGPU]
    PYTHONPATH=/path/to/B/core python bench/epilogue_ab.py ...

  mlp      784 -> 128 (bias, relu) -> 10 (bias) -> softmax, batch 256 (the digits demo's shape)
  prefill  x + x @ w + b, layernorm, GELU MLP with the residual: 128 rows of 256
  cnn      3x3 conv -> relu -> 3x3 conv, 16 channels at 32x32, batch 2

Prints each kernel's name and median GPU ms over 9 timed runs of the jitted program (GPU
timestamps), and their sum. Not a test; nothing is asserted; on a loaded machine the numbers
mean little (the load average is printed with them).
"""
from __future__ import annotations

import argparse
import os
import statistics

import numpy as np

import kernelgen as kg


def program(case: str, rng):
  """(function, input) of one case."""
  def t(*shape):
    return kg.Tensor((rng.standard_normal(shape) * shape[-1] ** -0.5).astype(np.float32))
  if case == "mlp":
    w1, b1, w2, b2 = t(784, 128), t(128), t(128, 10), t(10)
    return lambda x: ((x @ w1 + b1).relu() @ w2 + b2).softmax(-1), t(256, 784)
  if case == "prefill":
    w, b, w1, b1, w2 = t(256, 256), t(256), t(256, 1024), t(1024), t(1024, 256)
    def block(x):
      y = x + x @ w + b
      return y + (y.layernorm() @ w1 + b1).gelu() @ w2
    return block, t(128, 256)
  w1, w2 = t(16, 16, 3, 3), t(16, 16, 3, 3)
  return lambda x: x.conv2d(w1, padding=1).relu().conv2d(w2, padding=1), t(2, 16, 32, 32)


def main() -> None:
  """Time the case's kernels and print them."""
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("case", choices=("mlp", "prefill", "cnn"))
  ap.add_argument("--device", default="WEBGPU")
  args = ap.parse_args()
  kg.Device.DEFAULT = args.device
  fn, x = program(args.case, np.random.default_rng(0))
  step = kg.jit(fn)
  for _ in range(3):
    step(x).numpy()
  prog = next(s.program for s in step.signatures.values() if s.program is not None)
  per: dict = {}
  for _ in range(9):
    for name, seconds in prog.time_kernels([x.node.buffer], {}):
      per.setdefault(name, []).append(seconds)
  medians = {name: 1000 * statistics.median(v) for name, v in per.items()}
  print(f"{args.case} on {args.device}, load average {os.getloadavg()[0]:.1f}: " +
        ", ".join(f"{n} {ms:.2f}" for n, ms in medians.items()) +
        f"; sum {sum(medians.values()):.2f} ms")


if __name__ == "__main__":
  main()
