"""Where a 1-row reduction stops gaining from a grouped reduction on a CPU adapter (the option
group_outputs of render/wgsl/adapters.py): y = x @ w.T with x (1, K) and w (N, K) (the layout the
CPU adapters hold a constant weight in: option weights_t), on wgpu natively, each layout of the
kernel timed interleaved with a copy of w, fastest of REPS rounds (GPU timestamps where the
adapter has them, else wall) and the median CPU seconds of a run (this process's user + system:
the driver's threads run the kernels; less swayed by other processes than wall time).

Layouts: `grouped` (the heuristic's lanes per output: group_outputs lifted, reduce_inner off),
`thread` (group=0, a thread per output: its row read as vec4 loads, Opts.seq_vec), `upcast4` (4
outputs per thread), `rows8` (the reduction split (K/32, 32), so the packed-weight matvec's layout applies:
reduce_inner, ROWS outputs per thread sharing the loop), `default` (x @ w.T as the adapter's
table lays it out, nothing forced: since issue 35 rows8's kernel, lowering/lowerer.py
split_shape; before, grouped below group_outputs outputs, thread from it). Each line: K, N, ms
per layout and the copy's, `copy/t` the copy's time over each, and `g/t` grouped over thread
(> 1: a thread per output wins). Values are checked against numpy (max abs error printed).

Built in issue 35 (`default`): `rows8` ran at 0.5-0.9x of `thread`'s time on SwiftShader at every
size (copy/t 1.2-1.8 against thread's 0.4-1.0) and mostly below it on lavapipe (K=576 N=49152: 61
/ 70 and 111 / 134 ms).

    python bench/group_outputs.py [REPS] [--adapter lavapipe|swiftshader] [--k 256,576,...]
                                  [--n 512,2048,...] [--layouts grouped,thread,...]
"""
from __future__ import annotations

import os
import resource
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from icd import ICDS  # noqa: E402  (bench/icd.py)
KS, NS = (256, 576, 1024, 4096), (512, 1024, 2048, 4096, 8192, 16384, 49152)
LAYOUTS = {"grouped": {"group_outputs": 1 << 30, "reduce_inner": 0}, "thread": {"group": 0},
           "upcast4": {"upcast": 4}, "rows8": {}, "default": {}}
MAX_ELEMENTS = 1 << 25          # weights of at most 128 MB


def _plan(out, options):
  from kernelgen.compiler import compile_item
  from kernelgen.graph.lazy import Buffer
  from kernelgen.graph.schedule import row_limit, schedule
  steps = []
  for item in schedule([out.node], None, row_limit(options)):
    compiled = compile_item(item, "wgsl", options)
    item.out.buffer, item.out.src = Buffer("WEBGPU", item.out.dtype, item.out.size), ()
    steps.append((compiled, [item.out.buffer.handle] + [s.buffer.handle for s in item.inputs],
                  item.out.buffer))
  return steps


def _run(rt, steps) -> float:
  return sum(rt.run(c, [h.handle if hasattr(h, "handle") else h for h in hs], {}, timed=True)
             for c, hs, _ in steps)


def _cpu(rt, steps) -> float:
  before = resource.getrusage(resource.RUSAGE_SELF)
  _run(rt, steps)
  after = resource.getrusage(resource.RUSAGE_SELF)
  return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def _expr(x, w, layout: str, k: int, n: int):
  if layout == "rows8":
    return (x.reshape(1, 1, k // 32, 32) * w.reshape(1, n, k // 32, 32)).sum((2, 3))
  return x @ w.permute(1, 0)


def main(reps: int, ks, ns, layouts) -> None:
  sys.path.insert(0, str(ROOT / "core"))
  import numpy as np
  import kernelgen as kg
  from kernelgen.device import Device
  rt = Device["WEBGPU"]
  options = {**rt.render_options(), "runs": 100}
  print(f"adapter: {rt.adapter.info.get('device')}; timestamps {bool(rt.timestamps)}; load "
        f"{' '.join(f'{v:.1f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs", flush=True)
  for k in ks:
    for n in ns:
      if n * k > MAX_ELEMENTS:
        continue
      rng = np.random.default_rng(k + n)
      xn, wn = rng.standard_normal((1, k), np.float32), rng.standard_normal((n, k), np.float32)
      x, w = kg.Tensor(xn, device="WEBGPU").realize(), kg.Tensor(wn, device="WEBGPU").realize()
      plans = {"copy": _plan(w + 1, options)}
      for name in layouts:
        plans[name] = _plan(_expr(x, w, name, k, n), {**options, **LAYOUTS[name]})
      want, err = xn.astype(np.float64) @ wn.T.astype(np.float64), {}
      for name, steps in plans.items():
        _run(rt, steps)
      times, cpu = {v: [] for v in plans}, {v: [] for v in plans}
      for _ in range(1 + reps):
        for v, steps in plans.items():
          times[v].append(_run(rt, steps))
          cpu[v].append(_cpu(rt, steps))
      best = {v: min(t[1:]) * 1e3 for v, t in times.items()}
      med = {v: statistics.median(t[1:]) * 1e3 for v, t in cpu.items()}
      for name in layouts:
        got = _expr(x, w, name, k, n).numpy()
        err[name] = float(np.abs(got - want).max())
      cols = " | ".join(f"{v} {best[v]:.3f} (cpu {med[v]:.1f}, copy/t {best['copy'] / best[v]:.2f}"
                        + (f", err {err[v]:.0e})" if v in err else ")") for v in plans)
      ratio = (f"; g/t {best['grouped'] / best['thread']:.2f} (cpu "
               f"{med['grouped'] / max(med['thread'], 1e-9):.2f})"
               if "grouped" in best and "thread" in best else "")
      print(f"K={k:5d} N={n:6d} ms: {cols}{ratio}; load {os.getloadavg()[0]:.1f}", flush=True)


def _list(args, flag, default):
  return tuple(args[args.index(flag) + 1].split(",")) if flag in args else default


if __name__ == "__main__":
  args = sys.argv[1:]
  if "--adapter" in args:
    icd = ICDS[args[args.index("--adapter") + 1]]
    os.environ["VK_ICD_FILENAMES"] = os.environ["VK_DRIVER_FILES"] = icd
  plain = [a for i, a in enumerate(args) if not a.startswith("--") and
           (i == 0 or not args[i - 1].startswith("--"))]
  main(int(plain[0]) if plain else 5, [int(v) for v in _list(args, "--k", KS)],
       [int(v) for v in _list(args, "--n", NS)], _list(args, "--layouts", tuple(LAYOUTS)))
