"""Row kernels, per kernel: softmax and layernorm over rows of 4096x1024 f32 and causal attention
(B=1, H=8, L=512, d=64) on wgpu (lavapipe), the split kernels (option row_kernels=False: the
schedule main makes) against the fused row kernels (graph/schedule.py, lowering/rows.py) in each
layout (row_lanes=1: a thread per row; G: G lanes per row), timed interleaved: each variant's
kernels run in turn, REPS rounds, each kernel's fastest time kept (the machine is shared with
other work: compare variants within one run only).

Each line: workload, variant, kernel count, each kernel's fastest ms, their sum, and the max
abs error against numpy float64.

    python bench/row_kernels.py [REPS]
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS, COLS = 4096, 1024
B, H, L, D = 1, 8, 512, 64
LANES = (1, 16, 32, 64, 128)


def references(np):
  rng = np.random.default_rng(0)
  x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
  x64 = x.astype(np.float64)
  e = np.exp(x64 - x64.max(-1, keepdims=True))
  c = x64 - x64.mean(-1, keepdims=True)
  q, k, v = (rng.standard_normal((B, H, L, D)).astype(np.float32) for _ in range(3))
  s = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) / np.sqrt(D)
  s = np.where(np.tril(np.ones((L, L), bool)), s, -np.inf)
  p = np.exp(s - s.max(-1, keepdims=True))
  return {
    "softmax": ((x,), lambda t: t.softmax(-1), e / e.sum(-1, keepdims=True)),
    "layernorm": ((x,), lambda t: t.layernorm(), c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)),
    "sdpa": ((q, k, v), lambda a, b, c: a.scaled_dot_product_attention(b, c, is_causal=True),
             (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)),
  }


def main(reps: int = 20):
  sys.path.insert(0, str(ROOT / "core"))
  import numpy as np
  import kernelgen as kg
  from kernelgen.compiler import compile_item
  from kernelgen.device import Device
  from kernelgen.graph.lazy import Buffer
  from kernelgen.graph.schedule import row_limit, schedule
  rt = Device["WEBGPU"]
  base = rt.render_options()
  print(f"adapter: {rt.adapter.info.get('device')} ({rt.adapter.info.get('adapter_type')}); "
        f"a shared machine: compare within this run")

  def plan(args, expr, options):
    ins = [kg.Tensor(a, device="WEBGPU").realize() for a in args]
    out = expr(*ins)
    steps = []
    for item in schedule([out.node], None, row_limit(options)):
      compiled = compile_item(item, "wgsl", options)
      item.out.buffer, item.out.src = Buffer("WEBGPU", item.out.dtype, item.out.size), ()
      steps.append((compiled, [item.out.buffer.handle] + [s.buffer.handle for s in item.inputs]))
    return steps, out

  for name, (args, expr, ref) in references(np).items():
    variants = {"split": plan(args, expr, {**base, "row_kernels": False}),
                "default": plan(args, expr, base)}
    for lanes in LANES if name != "sdpa" else ():    # (sdpa has no row kernel: see the note)
      variants[f"row_lanes={lanes}"] = plan(args, expr, {**base, "row_lanes": lanes})
    times = {v: [] for v in variants}
    for _ in range(2 + reps):
      for v, (steps, _) in variants.items():
        times[v].append([rt.run(c, [h.handle if hasattr(h, "handle") else h for h in hs], {},
                                timed=True) * 1e3 for c, hs in steps])
    for v, (steps, out) in variants.items():
      runs = times[v][2:]
      best = [min(run[k] for run in runs) for k in range(len(steps))]
      err = float(np.max(np.abs(out.numpy() - ref)))
      print(f"{name:9s} {v:14s} kernels={len(steps)} ms={[round(b, 2) for b in best]} "
            f"sum={sum(best):.2f} max_abs_err={err:.1e}", flush=True)


if __name__ == "__main__":
  main(int(sys.argv[1]) if sys.argv[1:] else 20)
