"""Greedy decoding with a KV cache (issue 34): a decoder-only transformer written with kg.nn,
one token per step, natively on WEBGPU (lavapipe) or any device, two ways side by side:

  symbolic  the cache preallocated and written in place at a symbolic position (kg.Dim), the
            step under kg.jit: recorded once, replayed for every position;
  static    today's way without symbolic sizes: the cache grown with kg.cat, attention over it,
            so every step has new shapes (new kernels, new pipelines).

Prints, per way: kernels compiled and pipelines created after the second step, dispatches per
token (replayed kernel launches), and wall time per token (submit, run, read back the sampled
token) near the first and the last position. Timings on a loaded machine mean little: the
script prints the load average next to them. Not a test; nothing is asserted.

    python bench/decode.py [--layers 4] [--d 256] [--heads 8] [--steps 1024] [--device WEBGPU]
                           [--static-steps 32]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import kernelgen as kg
from kernelgen import nn


class Block(nn.Module):
  def __init__(self, d: int, heads: int, max_len: int):
    super().__init__()
    self.heads, self.hd, self.d = heads, d // heads, d
    self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
    self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
    self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    self.k_cache = kg.Tensor.zeros(1, heads, max_len, self.hd).realize()
    self.v_cache = kg.Tensor.zeros(1, heads, max_len, self.hd).realize()
    self.k_grown = self.v_grown = None

  def _split(self, x):
    qkv = self.qkv(self.ln1(x)).reshape(3, self.heads, 1, self.hd)
    return qkv[0:1], qkv[1:2], qkv[2:3]

  def _rest(self, x, att):
    x = x + self.out(att.reshape(1, self.d))
    return x + self.ff2(self.ff1(self.ln2(x)).gelu())

  def forward(self, x, pos):
    """The symbolic step: write this position's key and value in place, attend to 0..pos."""
    q, k, v = self._split(x)
    self.k_cache[:, :, pos:pos + 1] = k
    self.v_cache[:, :, pos:pos + 1] = v
    att = kg.scaled_dot_product_attention(q, self.k_cache[:, :, :pos + 1],
                                          self.v_cache[:, :, :pos + 1])
    return self._rest(x, att)

  def grown(self, x):
    """The static step: the cache grown by one with kg.cat (a new shape every step)."""
    q, k, v = self._split(x)
    self.k_grown = k if self.k_grown is None else kg.cat([self.k_grown, k], 2).realize()
    self.v_grown = v if self.v_grown is None else kg.cat([self.v_grown, v], 2).realize()
    return self._rest(x, kg.scaled_dot_product_attention(q, self.k_grown, self.v_grown))


class Decoder(nn.Module):
  def __init__(self, vocab: int, d: int, heads: int, layers: int, max_len: int):
    super().__init__()
    self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
    self.blocks = nn.ModuleList([Block(d, heads, max_len) for _ in range(layers)])
    self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

  def forward(self, token, pos):
    x = self.tok(token) + self.pos.weight[pos:pos + 1]
    for block in self.blocks:
      x = block(x, pos)
    return self.head(self.norm(x)).argmax(-1)

  def static_step(self, token, t: int):
    x = self.tok(token) + self.pos.weight[t:t + 1]
    for block in self.blocks:
      x = block.grown(x)
    return self.head(self.norm(x)).argmax(-1)


def _pipelines(device: str) -> int:
  runtime = kg.Device[device]
  return len(getattr(runtime, "pipelines", ()))


def _run(name: str, steps: int, device: str, step_fn) -> dict:
  token = kg.Tensor(np.array([1], np.int32))
  times, after2 = [], None
  for t in range(steps):
    start = time.perf_counter()
    token = step_fn(token, t)
    token.item()
    times.append(time.perf_counter() - start)
    if t == 1:
      after2 = (kg.cache_info()["misses"], _pipelines(device))
  end = (kg.cache_info()["misses"], _pipelines(device))
  window = max(1, min(16, steps // 8))
  return {"way": name, "steps": steps,
          "compiled_after_2": end[0] - after2[0] if after2 else None,
          "pipelines_after_2": end[1] - after2[1] if after2 else None,
          "first_ms": 1000 * float(np.median(times[2:2 + window] or times)),
          "last_ms": 1000 * float(np.median(times[-window:])),
          "slowest_ms": 1000 * max(times)}


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--layers", type=int, default=4)
  ap.add_argument("--d", type=int, default=256)
  ap.add_argument("--heads", type=int, default=8)
  ap.add_argument("--steps", type=int, default=1024)
  ap.add_argument("--static-steps", type=int, default=32)
  ap.add_argument("--device", default="WEBGPU")
  args = ap.parse_args()
  kg.Device.DEFAULT = args.device
  model = Decoder(256, args.d, args.heads, args.layers, args.steps)
  pos = kg.Dim("pos", 0, args.steps - 1)
  jitted = kg.jit(model)
  kg.clear_cache()
  with kg.no_grad():      # inference: sdpa is the fused kernel
    rows = [_run("symbolic", args.steps, args.device, lambda tok, t: jitted(tok, pos.bind(t)))]
    program = next(s.program for s in jitted.signatures.values() if s.program is not None)
    rows[0]["dispatches"] = len(program.steps)
    kg.clear_cache()
    rows.append(_run("static", args.static_steps, args.device, model.static_step))
  print(f"decode: {args.layers} layers, d={args.d}, {args.heads} heads, on {args.device}; "
        f"load average {os.getloadavg()[0]:.1f}")
  print(f"{'way':9} {'steps':>5} {'compiled>2':>10} {'pipelines>2':>11} {'dispatches':>10} "
        f"{'ms/token first':>14} {'ms/token last':>13} {'slowest ms':>10}")
  for r in rows:
    print(f"{r['way']:9} {r['steps']:5} {r['compiled_after_2']:10} {r['pipelines_after_2']:11} "
          f"{r.get('dispatches', '-'):>10} {r['first_ms']:14.1f} {r['last_ms']:13.1f} "
          f"{r['slowest_ms']:10.1f}")


if __name__ == "__main__":
  main()
