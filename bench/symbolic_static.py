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
program (recorded, then its kernels timed by `time_kernels`). A kernel of a few microseconds is
below the timestamps' noise, so each kernel is timed REPEAT times back to back between one pair
of timestamps (one compute pass, the same bindings) and the mean taken; REPEAT is chosen per
cell, the same for both sides, so that each timed span is at least SPAN_MS (from the shorter
kernel of the two programs, timed once). Rounds interleave symbolic and static; each side's
median and min over the rounds are printed, and the ratios of both; a cell meets the goal when
its median ratio does (the count of min ratios that meet it is printed too). The machine is
shared: the load average is printed; tune nothing on figures taken under load. Not a test;
nothing is asserted.

    python bench/symbolic_static.py [lavapipe|swiftshader ...] [--reps N] [--only WORD]
                                    [--span MS] [--option KEY=VALUE ...] [--runs R]

(--runs: R whole measurements, each adapter in a fresh process each time, R tables printed,
then per cell the median over the R runs of its median ratio, with the runs' range: a process's
placement of lavapipe's threads and buffers moves a sub-millisecond cell by 10-20 % from one
process to the next, more than the rounds inside one process show;
--only: the workloads whose name has WORD, e.g. matmul; --span: the least timed span in ms;
--option: a renderer option added to the adapter's for both sides, e.g. static_low_end=true,
the VALUE read as JSON where it parses, else as a string; at idle the whole run takes a few
minutes, most of it SwiftShader's.)
    python bench/symbolic_static.py --worker REPS ONLY SPAN [OPTIONS]   (one adapter, this
                                    process; OPTIONS a JSON object; prints JSON)
"""
from __future__ import annotations

import json
import os
import math
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ICDS = {"lavapipe": "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
        "swiftshader": "/usr/lib/chromium/vk_swiftshader_icd.json"}
GOAL, REPS, SPAN_MS, MAX_REPEAT = 1.15, 7, 2.0, 4096


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


def _seconds(program, x, values: dict, repeat: int) -> list[float]:
  return [s for _, s in program.time_kernels([x.node.buffer], values, repeat=repeat)]


def _repeat(programs, span_ms: float) -> int:
  """Dispatches per timed span: enough that the shortest kernel of `programs` ((program, input,
  values)) spans `span_ms` (its time from the best of 3 single runs, then again from the best of
  3 spans of the repeat that gave: a single run's time includes the timer's overhead)."""
  repeat = 1
  for _ in range(2):
    shortest = min(min(_seconds(p, x, v, repeat)) for _ in range(3) for p, x, v in programs)
    repeat = max(repeat, min(MAX_REPEAT, math.ceil(span_ms * 1e-3 / max(shortest, 1e-9))))
  return repeat


def measure_workload(kg, name, hi, values, fn, make, reps: int, span_ms: float) -> list[dict]:
  """One row per value: symbolic and static GPU ms (median and min over interleaved rounds, each
  kernel's time the mean of `repeat` back-to-back dispatches) and their ratios."""
  dim = kg.Dim("n", 1, hi)
  sym_step = kg.jit(lambda x, n: fn(x))
  out = []
  for v in values:
    xs, xt = make(v, dim), make(v, None)
    static_step = kg.jit(lambda x: fn(x))
    sym_prog = _program(sym_step, xs, {"n": dim.bind(v)})
    static_prog = _program(static_step, xt, {})
    sides = [(sym_prog, xs, {"n": v}), (static_prog, xt, {})]
    repeat = _repeat(sides, span_ms)
    sym, static = [], []
    for _ in range(reps):
      sym.append(sum(_seconds(*sides[0], repeat)))
      static.append(sum(_seconds(*sides[1], repeat)))
    med_s, med_t = statistics.median(sym), statistics.median(static)
    out.append({"workload": name, "value": v, "repeat": repeat,
                "symbolic_ms": 1e3 * med_s, "static_ms": 1e3 * med_t, "ratio": med_s / med_t,
                "symbolic_min_ms": 1e3 * min(sym), "static_min_ms": 1e3 * min(static),
                "min_ratio": min(sym) / min(static),
                "kernels": [len(sym_prog.steps), len(static_prog.steps)]})
    print(f"  {name} {v}: {out[-1]}", file=sys.stderr, flush=True)
  return out


def worker(reps: int, only: str = "", span_ms: float = SPAN_MS,
           options: dict | None = None) -> dict:
  import kernelgen as kg
  kg.Device.DEFAULT = "WEBGPU"
  runtime = kg.Device["WEBGPU"]
  if options:       # (--option) every compile of this process, symbolic and static alike
    adapter_options = runtime.render_options
    runtime.render_options = lambda: {**adapter_options(), **options}
  rows = []
  with kg.no_grad():
    for spec in workloads(kg):
      if only in spec[0]:
        rows += measure_workload(kg, *spec, reps, span_ms)
  return {"adapter": dict(runtime.adapter.info).get("device", "?"), "rows": rows}


def measure(adapter: str, reps: int, only: str = "", span_ms: float = SPAN_MS,
            options: dict | None = None) -> dict:
  """One adapter's rows, measured in a fresh process bound to its Vulkan ICD."""
  env = {**os.environ, "VK_ICD_FILENAMES": ICDS[adapter], "VK_DRIVER_FILES": ICDS[adapter],
         "PYTHONPATH": str(ROOT / "core")}
  proc = subprocess.run([sys.executable, __file__, "--worker", str(reps), only, str(span_ms),
                         json.dumps(options or {})], env=env,
                        capture_output=True, text=True, timeout=3600)
  if proc.returncode:
    return {"error": proc.stderr.strip()[-600:]}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def print_table(results: dict) -> None:
  print(f"symbolic vs static GPU time (median and min of interleaved rounds, each kernel the mean "
        f"of `repeat` back-to-back dispatches); goal ratio <= {GOAL}; load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
  print("adapter | workload | value | repeat | symbolic ms med/min | static ms med/min | "
        "ratio med | ratio min | met (med) | kernels sym/static")
  met = met_min = cells = 0
  for adapter, got in results.items():
    if "error" in got:
      print(f"{adapter} | failed: {got['error'][-200:]}")
      continue
    for r in got["rows"]:
      cells += 1
      met += r["ratio"] <= GOAL
      met_min += r["min_ratio"] <= GOAL
      print(f"{adapter} | {r['workload']} | {r['value']} | {r['repeat']} | "
            f"{r['symbolic_ms']:.4f}/{r['symbolic_min_ms']:.4f} | "
            f"{r['static_ms']:.4f}/{r['static_min_ms']:.4f} | {r['ratio']:.2f}x | "
            f"{r['min_ratio']:.2f}x | {'yes' if r['ratio'] <= GOAL else 'NO'} | "
            f"{r['kernels'][0]}/{r['kernels'][1]}")
  print(f"cells meeting {GOAL}x: {met} of {cells} by the median ratio, {met_min} of {cells} by the "
        f"min ratio")


def print_over_runs(runs: list) -> None:
  """Per cell, the median over `runs` (print_table's results) of its median ratio and the
  runs' range; the count of cells whose median over runs meets the goal."""
  ratios: dict = {}
  for results in runs:
    for adapter, got in results.items():
      for r in got.get("rows", ()):
        ratios.setdefault((adapter, r["workload"], r["value"]), []).append(r["ratio"])
  print(f"over {len(runs)} runs: per cell the median of the runs' median ratios (range)")
  met = 0
  for (adapter, workload, value), got in ratios.items():
    mid = statistics.median(got)
    met += mid <= GOAL
    print(f"{adapter} | {workload} | {value} | {mid:.2f}x ({min(got):.2f}-{max(got):.2f}) | "
          f"{'yes' if mid <= GOAL else 'NO'}")
  print(f"cells meeting {GOAL}x by the median over {len(runs)} runs: {met} of {len(ratios)}")


def _option(text: str) -> tuple:
  """--option's KEY=VALUE as (key, value): VALUE read as JSON where it parses, else a string."""
  key, sep, value = text.partition("=")
  if not sep or not key:
    raise SystemExit(f"--option takes KEY=VALUE (e.g. static_low_end=true), not {text!r}")
  try:
    return key, json.loads(value)
  except ValueError:
    return key, value


def main(argv: list[str]) -> int:
  if argv[:1] == ["--worker"]:
    print(json.dumps(worker(int(argv[1]), argv[2] if len(argv) > 2 else "",
                            float(argv[3]) if len(argv) > 3 else SPAN_MS,
                            json.loads(argv[4]) if len(argv) > 4 else None)))
    return 0
  reps = int(argv[argv.index("--reps") + 1]) if "--reps" in argv else REPS
  only = argv[argv.index("--only") + 1] if "--only" in argv else ""
  span_ms = float(argv[argv.index("--span") + 1]) if "--span" in argv else SPAN_MS
  adapters = [a for a in argv if a in ICDS] or list(ICDS)
  options = dict(_option(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a == "--option")
  if options:
    print(f"options added: {options}")
  runs = []
  for _ in range(int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 1):
    runs.append({a: measure(a, reps, only, span_ms, options) for a in adapters})
    print_table(runs[-1])
  if len(runs) > 1:
    print_over_runs(runs)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
