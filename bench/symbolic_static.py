"""Issue 34's "no speed lost to generality": each workload's kernels compiled once with a symbolic
size (kg.Dim) and run at several bound values, against the same shapes compiled static, GPU time
(the runtime's timestamps) per value, natively on both CPU adapters: lavapipe (Mesa's Vulkan ICD)
and SwiftShader (Chromium's ICD, the one its WebGPU falls back to). Goal: symbolic / static
<= 1.15 at every value.

Workloads: matmul (m, 512) @ (512, 512) with symbolic m in 1..2048 (its kernel carries
variants for small m: lowering/variants.py; values 1, 2, 3, 17, 77, 255, 1000, 2048), with
symbolic n (64, 512) @ (512, n) and symbolic k (64, k) @ (k, 64); softmax over rows of n
(64, n) in 1..4096; fused attention, 8 heads of 64, one query over n keys in 1..2048. Values:
the range ends and sizes that divide no tile (1, 77, 1000, the top). Each side is a kg.jit
program (recorded, then its kernels timed by `time_kernels`); a figure is the best of REPS
interleaved rounds (symbolic, static, symbolic, ...). The machine is shared: the load average
is printed; tune nothing on figures taken under load. Not a test; nothing is asserted.

    python bench/symbolic_static.py [lavapipe|swiftshader ...] [--reps N] [--only WORD]

(--only: the workloads whose name has WORD, e.g. matmul; at idle the whole run takes a few
minutes, most of it SwiftShader's.)
    python bench/symbolic_static.py --worker REPS   (one adapter, this process; JSON on stdout)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ICDS = {"lavapipe": "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
        "swiftshader": "/usr/lib/chromium/vk_swiftshader_icd.json"}
GOAL, REPS = 1.15, 5


def workloads(kg) -> list[tuple]:
  """(name, dim range hi, values, function of the input, input maker(size, dim or None))."""
  rng = np.random.default_rng(0)
  w = kg.Tensor(rng.standard_normal((512, 512)).astype(np.float32)).realize()
  a = kg.Tensor(rng.standard_normal((64, 512)).astype(np.float32)).realize()
  q = kg.Tensor(rng.standard_normal((1, 8, 1, 64)).astype(np.float32)).realize()

  def rows(shape_of):
    def make(v, dim):
      data = kg.Tensor(rng.standard_normal(shape_of(v)).astype(np.float32))
      return (data.symbolic(*shape_of(dim.bind(v))) if dim is not None else data).realize()
    return make

  def attention(kv):
    return kg.scaled_dot_product_attention(q, kv, kv)
  return [("matmul (m,512)@(512,512)", 2048, (1, 2, 3, 17, 77, 255, 1000, 2048), lambda x: x @ w,
           rows(lambda m: (m, 512))),
          ("matmul (64,512)@(512,n)", 2048, (1, 77, 1000, 2048), lambda x: a @ x,
           rows(lambda n: (512, n))),
          ("matmul (64,k)@(k,64)", 2048, (1, 77, 1000, 2048), lambda x: x @ x.T,
           rows(lambda k: (64, k))),
          ("softmax rows (64,n)", 4096, (1, 77, 1000, 4096), lambda x: x.softmax(-1),
           rows(lambda n: (64, n))),
          ("sdpa 8x64, 1 query, n keys", 2048, (1, 77, 1000, 2048), attention,
           rows(lambda n: (1, 8, n, 64)))]


def _program(step, x, values: dict):
  """The replay program of jitted `step` for `x` (recorded by calling it until it replays)."""
  for _ in range(3):
    step(x, *values.values()).realize()
  return step.signatures[step.previous_key].program


def _best(program, x, values: dict, seconds: list) -> None:
  seconds.append(sum(s for _, s in program.time_kernels([x.node.buffer], values)))


def measure_workload(kg, name, hi, values, fn, make, reps: int) -> list[dict]:
  """One row per value: best symbolic and static GPU ms and their ratio."""
  dim = kg.Dim("n", 1, hi)
  sym_step = kg.jit(lambda x, n: fn(x))
  out = []
  for v in values:
    xs, xt = make(v, dim), make(v, None)
    static_step = kg.jit(lambda x: fn(x))
    sym_prog = _program(sym_step, xs, {"n": dim.bind(v)})
    static_prog = _program(static_step, xt, {})
    sym, static = [], []
    for _ in range(reps):
      _best(sym_prog, xs, {"n": v}, sym)
      _best(static_prog, xt, {}, static)
    out.append({"workload": name, "value": v, "symbolic_ms": 1e3 * min(sym),
                "static_ms": 1e3 * min(static), "ratio": min(sym) / min(static),
                "kernels": [len(sym_prog.steps), len(static_prog.steps)]})
    print(f"  {name} {v}: {out[-1]}", file=sys.stderr, flush=True)
  return out


def worker(reps: int, only: str = "") -> dict:
  import kernelgen as kg
  kg.Device.DEFAULT = "WEBGPU"
  runtime = kg.Device["WEBGPU"]
  rows = []
  with kg.no_grad():
    for spec in workloads(kg):
      if only in spec[0]:
        rows += measure_workload(kg, *spec, reps)
  return {"adapter": dict(runtime.adapter.info).get("device", "?"), "rows": rows}


def measure(adapter: str, reps: int, only: str = "") -> dict:
  """One adapter's rows, measured in a fresh process bound to its Vulkan ICD."""
  env = {**os.environ, "VK_ICD_FILENAMES": ICDS[adapter], "VK_DRIVER_FILES": ICDS[adapter],
         "PYTHONPATH": str(ROOT / "core")}
  proc = subprocess.run([sys.executable, __file__, "--worker", str(reps), only], env=env,
                        capture_output=True, text=True, timeout=3600)
  if proc.returncode:
    return {"error": proc.stderr.strip()[-600:]}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def print_table(results: dict) -> None:
  print(f"symbolic vs static GPU time (best of rounds); goal ratio <= {GOAL}; load average "
        f"{os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
  print("adapter | workload | value | symbolic ms | static ms | ratio | met | kernels sym/static")
  for adapter, got in results.items():
    if "error" in got:
      print(f"{adapter} | failed: {got['error'][-200:]}")
      continue
    for r in got["rows"]:
      print(f"{adapter} | {r['workload']} | {r['value']} | {r['symbolic_ms']:.3f} | "
            f"{r['static_ms']:.3f} | {r['ratio']:.2f}x | {'yes' if r['ratio'] <= GOAL else 'NO'}"
            f" | {r['kernels'][0]}/{r['kernels'][1]}")


def main(argv: list[str]) -> int:
  if argv[:1] == ["--worker"]:
    print(json.dumps(worker(int(argv[1]), argv[2] if len(argv) > 2 else "")))
    return 0
  reps = int(argv[argv.index("--reps") + 1]) if "--reps" in argv else REPS
  only = argv[argv.index("--only") + 1] if "--only" in argv else ""
  adapters = [a for a in argv if a in ICDS] or list(ICDS)
  print_table({a: measure(a, reps, only) for a in adapters})
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
