"""The q4 decode matrix-vector product (com.microsoft MatMulNBits, 4-bit blocks of 32 with packed
zero points, as the importer computes it: quant_nbits.matmul_words over the weight's 32-bit words)
on wgpu, against kernels that only move the same bytes: a copy of the packed weight
(reads and writes them) and a sum of its 32-bit words (reads them), timed interleaved, each
kernel's fastest time of REPS rounds kept (the machine is shared: compare within one run).

Each line: the shape, the matvec's kernels and fastest ms, the packed bytes it reads (weights,
scales, zero points) per second, and the ratio of its time to the copy's and the sum's.

    python bench/q4_matvec.py [REPS] [WORD]     # WORD: only the shapes whose label has it
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {"smollm2 mlp up (1536x576)": (1536, 576), "smollm2 down (576x1536)": (576, 1536),
          "qwen2.5 mlp up (4864x896)": (4864, 896), "smollm2 lm_head (49152x576)": (49152, 576)}


def _plan(rt, out, options):
  from kernelgen.compiler import compile_item
  from kernelgen.graph.lazy import Buffer
  from kernelgen.graph.schedule import row_limit, schedule
  steps = []
  for item in schedule([out.node], None, row_limit(options)):
    compiled = compile_item(item, "wgsl", options)
    item.out.buffer, item.out.src = Buffer("WEBGPU", item.out.dtype, item.out.size), ()
    steps.append((compiled, [item.out.buffer.handle] + [s.buffer.handle for s in item.inputs]))
  return steps


def _best(rt, steps, times: list) -> None:
  times.append(sum(rt.run(c, [h.handle if hasattr(h, "handle") else h for h in hs], {},
                          timed=True) for c, hs in steps))


def main(reps: int = 20, word: str = "") -> None:
  sys.path.insert(0, str(ROOT / "core"))
  sys.path.insert(0, str(ROOT / "bench"))
  import numpy as np
  import kernelgen as kg
  from kernelgen.device import Device
  from kernelgen.onnx.operators.quant_nbits import matmul_words, nibbles
  from lm_models import quantize_q4
  rt = Device["WEBGPU"]
  options = rt.render_options()
  print(f"adapter: {rt.adapter.info.get('device')}; load {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs (a shared machine: compare within this run)")
  for label, (n, k) in SHAPES.items():
    if word not in label:
      continue
    w = np.random.default_rng(0).standard_normal((n, k)).astype(np.float32) * 0.05
    packed, scales, zps = quantize_q4(w)
    blocks = scales.size // n
    dev = {name: kg.Tensor(a, device="WEBGPU").realize() for name, a in
           (("p", packed.reshape(n, -1)), ("s", scales.reshape(n, blocks)),
            ("z", zps.reshape(n, -1)),
            ("x", np.random.default_rng(1).standard_normal((1, k)).astype(np.float32)))}
    words = kg.Tensor(np.frombuffer(packed.tobytes(), np.uint32).copy(), device="WEBGPU").realize()
    zp = nibbles(dev["z"])[:, :blocks].cast(kg.dtypes.float32)
    y = matmul_words(dev["x"], words.reshape(n, -1), dev["s"], zp, 4, 32)
    wf = kg.Tensor(w, device="WEBGPU").realize()
    plans = {"matvec": _plan(rt, y, options),
             "f32": _plan(rt, dev["x"] @ wf.permute(1, 0), options),
             "copy": _plan(rt, words + 1, options),
             "sum": _plan(rt, words.sum(), options)}
    times = {v: [] for v in plans}
    for _ in range(2 + reps):
      for v, steps in plans.items():
        _best(rt, steps, times[v])
    best = {v: min(t[2:]) for v, t in times.items()}
    nbytes = packed.nbytes + scales.nbytes + zps.nbytes
    codes_np = np.stack([packed & 15, packed >> 4], -1).reshape(n, -1).astype(np.float32)
    z_np = np.stack([zps.reshape(n, -1) & 15, zps.reshape(n, -1) >> 4], -1).reshape(n, -1)
    deq = (codes_np - np.repeat(z_np[:, :blocks], 32, 1)) * np.repeat(scales.reshape(n, -1), 32, 1)
    err = float(np.abs(y.numpy() - dev["x"].numpy() @ deq[:, :k].T).max())
    print(f"{label:30s} matvec kernels={len(plans['matvec'])} {best['matvec'] * 1e3:.3f} ms "
          f"{nbytes / best['matvec'] / 1e9:.2f} GB/s packed; copy {best['copy'] * 1e3:.3f} ms "
          f"(ratio {best['copy'] / best['matvec']:.2f}), sum {best['sum'] * 1e3:.3f} ms "
          f"(ratio {best['sum'] / best['matvec']:.2f}); f32 matvec {best['f32'] * 1e3:.3f} ms; "
          f"max abs err {err:.1e}", flush=True)


if __name__ == "__main__":
  main(int(sys.argv[1]) if sys.argv[1:] else 20, sys.argv[2] if sys.argv[2:] else "")
