"""Cold first result of scaled_dot_product_attention (B=1, H=8, L, d=64) on device WEBGPU natively
(wgpu-py, lavapipe here): a fresh process with Mesa's shader cache off, from building the tensors
to the result read back and checked against numpy (float64). Prints the wall seconds, the CPU
seconds of the process (all threads: on an idle 2-core machine the wall time is about this), and
the kernel's WGSL lines. The second realize of the same graph in that process is the warm one.

    nice python bench/cold_sdpa.py [L] [REPEAT]       (default 512 1)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one(length: int) -> dict:
  import numpy as np

  import kernelgen as kg
  from kernelgen import cache
  rng = np.random.default_rng(0)
  q, k, v = (rng.standard_normal((1, 8, length, 64)).astype(np.float32) for _ in range(3))
  s = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) / 8.0
  p = np.exp(s - s.max(-1, keepdims=True))
  want = (p / p.sum(-1, keepdims=True)) @ v

  def run():
    t = [kg.Tensor(a, device="WEBGPU") for a in (q, k, v)]
    return t[0].scaled_dot_product_attention(t[1], t[2]).numpy()
  wall, cpu = time.perf_counter(), time.process_time()
  got = run()
  first, first_cpu = time.perf_counter() - wall, time.process_time() - cpu
  np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
  wall = time.perf_counter()
  run()
  again = time.perf_counter() - wall
  kernels = [k for k in cache._CACHE.entries.values() if k.name.startswith("attn")]
  return {"first_s": first, "first_cpu_s": first_cpu, "second_s": again,
          "lines": [k.source.count("\n") + 1 for k in kernels],
          "capped": [getattr(k, "capped", False) for k in kernels]}


def main(argv: list[str]) -> None:
  if argv[:1] == ["--one"]:
    print("RESULT " + json.dumps(one(int(argv[1]))), flush=True)
    return
  length = int(argv[0]) if argv else 512
  repeat = int(argv[1]) if len(argv) > 1 else 1
  env = {**os.environ, "MESA_SHADER_CACHE_DISABLE": "true"}
  for _ in range(repeat):
    load = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, __file__, "--one", str(length)], env=env,
                          capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
      print(f"failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}", flush=True)
      continue
    r = json.loads(lines[-1][7:])
    print(f"sdpa L={length} d=64 cold: first result {r['first_s']:.1f} s wall, "
          f"{r['first_cpu_s']:.1f} s CPU; second {r['second_s']:.2f} s; WGSL lines {r['lines']} "
          f"capped {r['capped']}; load {load:.1f} at start; matches numpy", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
