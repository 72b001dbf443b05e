"""A kg.nn decoder whose KV cache is two buffers per layer (k and v, written in place at a kg.Dim
position under kg.jit), natively on WEBGPU (lavapipe here): dispatches per replayed decode step
and its GPU time (each launch of the recorded step timed alone with GPU timestamps, median of
--reps, summed) and wall time per token (median of --steps). `--split` gives each layer q, k
and v Linear layers (the layout of most exported LMs) instead of one QKV Linear. Run it from two
trees (PYTHONPATH=<tree>/core), interleaved, to compare graph/join.py's write joins (34, 35).
Not a test: nothing is asserted; the load is printed.

    PYTHONPATH=core python bench/decode_joined_writes.py [--d 256] [--heads 4] [--layers 2]
                                                         [--split] [--steps 16] [--reps 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def main() -> None:
  """Run the command line."""
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--d", type=int, default=256)
  ap.add_argument("--heads", type=int, default=4)
  ap.add_argument("--layers", type=int, default=2)
  ap.add_argument("--split", action="store_true", help="q, k and v Linear layers")
  ap.add_argument("--steps", type=int, default=16)
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--source", type=int, action="append", default=[],
                  help="print the WGSL of this launch of the step (an index)")
  args = ap.parse_args()
  import kernelgen as kg
  from kernelgen import nn
  kg.Device.DEFAULT = "WEBGPU"
  d, heads, most = args.d, args.heads, args.steps + 4
  hd = d // heads

  class Block(nn.Module):
    def __init__(self):
      super().__init__()
      self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
      if args.split:
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
      else:
        self.qkv = nn.Linear(d, 3 * d)
      self.out, self.ff1, self.ff2 = nn.Linear(d, d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
      self.k_cache = kg.Tensor.zeros(1, heads, most, hd).realize()
      self.v_cache = kg.Tensor.zeros(1, heads, most, hd).realize()

    def forward(self, x, pos):
      h = self.ln1(x)
      if args.split:
        q, k, v = (f(h).reshape(1, heads, 1, hd) for f in (self.q, self.k, self.v))
      else:
        qkv = self.qkv(h).reshape(3, heads, 1, hd)
        q, k, v = qkv[0:1], qkv[1:2], qkv[2:3]
      self.k_cache[:, :, pos:pos + 1] = k
      self.v_cache[:, :, pos:pos + 1] = v
      att = kg.scaled_dot_product_attention(q, self.k_cache[:, :, :pos + 1],
                                            self.v_cache[:, :, :pos + 1])
      x = x + self.out(att.reshape(1, d))
      return x + self.ff2(self.ff1(self.ln2(x)).relu())

  class Decoder(nn.Module):
    def __init__(self):
      super().__init__()
      self.tok, self.pos = nn.Embedding(256, d), nn.Embedding(most, d)
      self.blocks = nn.ModuleList([Block() for _ in range(args.layers)])
      self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 256)

    def forward(self, token, pos):
      x = self.tok(token) + self.pos.weight[pos:pos + 1]
      for block in self.blocks:
        x = block(x, pos)
      return self.head(self.norm(x)).argmax(-1)

  np.random.seed(0)
  model = Decoder()
  step, dim = kg.jit(model), kg.Dim("pos", 0, most - 1)
  token, walls, tokens = kg.Tensor(np.array([2], np.int32)), [], []
  with kg.no_grad():
    for t in range(args.steps):
      start = time.perf_counter()
      token = step(token, dim.bind(t))
      tokens.append(token.item())
      walls.append(time.perf_counter() - start)
  program = next(s.program for s in step.signatures.values() if s.program is not None)
  timed = [program.time_kernels([token.node.buffer], {"pos": args.steps - 1})
           for _ in range(args.reps)]
  per = [(runs[0][0], statistics.median(s for _, s in runs)) for runs in zip(*timed)]
  gpu = sum(s for _, s in per)
  print(" ".join(f"{name}:{secs * 1e3:.3f}" for name, secs in per))
  from kernelgen.uop.program import variant_for
  for i in args.source:
    print(variant_for(program.steps[i][1], {"pos": args.steps - 1}).source)
  print(f"d={d} heads={heads} layers={args.layers} split={args.split}: "
        f"{len(program.steps)} dispatches a step, GPU {gpu * 1e3:.3f} ms a step (sum of medians), "
        f"wall {statistics.median(walls[2:]) * 1e3:.2f} ms a token (median of {len(walls) - 2}), "
        f"tokens {tokens[:8]}, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
  main()
