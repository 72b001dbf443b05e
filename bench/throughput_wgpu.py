"""B3: kernel throughput on wgpu (Mesa lavapipe here), kernelgen's WEBGPU vs tinygrad's WEBGPU.

Each tool runs in its own process (tinygrad from .venv-bench, with its own wgpu), on the same
wgpu adapter ("high-performance" request). Each workload is compiled once, then its kernels run
`reps` times after WARMUP runs that are not counted (GPU timestamps leave out pipeline builds, but
on lavapipe the first runs of a workload still take up to 2.5x the steady time, for both tools:
the worker threads and the buffers' pages warm up); a run's time is
the sum of its kernels' GPU timestamps (wall clock around a completed read-back when the adapter
has no timestamps). The figure is the median run; each kernel's fastest time is listed too
(kernel_min_ms, to profile per kernel on a shared machine). Results are checked against numpy in
the same process.

    python bench/throughput_wgpu.py [REPS] [--only WORD,...]   (driver; prints a JSON summary)
    python bench/throughput_wgpu.py --worker TOOL REPS [WORD,...]

--only keeps the workloads whose name contains one of the words (e.g. --only softmax,sum).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("kernelgen", "tinygrad")
WARMUP = 3   # uncounted runs of each workload before its `reps` timed runs (both tools alike)


def workloads(np):
  """name -> (numpy inputs, expression over tool tensors, numpy reference, flop count)."""
  rng = np.random.default_rng(0)

  def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)

  def softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

  def conv_ref(x, w):
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True)

  return {
    "matmul 1024² f32": ([randn(1024, 1024), randn(1024, 1024)], lambda a, b: a @ b,
                         lambda a, b: a @ b, 2 * 1024 ** 3),
    "softmax 4096×1024": ([randn(4096, 1024)], lambda x: x.softmax(axis=-1), softmax_ref,
                          5 * 4096 * 1024),
    "conv2d 3×3 64ch 56×56": ([randn(1, 64, 56, 56), randn(64, 64, 3, 3) * 0.1],
                              lambda x, w: x.conv2d(w, padding=1), conv_ref,
                              2 * 64 * 64 * 9 * 56 * 56),
    "sum 16M": ([randn(1 << 24)], lambda x: x.sum(), lambda x: x.sum(dtype=np.float64),
                1 << 24),
  }


class Kernelgen:
  def __init__(self):
    sys.path.insert(0, str(ROOT / "core"))
    import kernelgen as kg
    from kernelgen.device import Device
    self.kg, self.rt = kg, Device["WEBGPU"]
    info = self.rt.adapter.info
    self.adapter = f"{info['device']} ({info['backend_type']})"
    self.timestamps = self.rt.timestamps

  def prepare(self, inputs, expr):
    """Compile the expression's kernels and bind their buffers, as realize() would."""
    from kernelgen.compiler import compile_item
    from kernelgen.graph.lazy import Buffer
    from kernelgen.graph.schedule import schedule
    out = expr(*[self.kg.Tensor(x, device="WEBGPU").realize() for x in inputs])
    plan = []
    for item in schedule([out.node]):
      buffer = Buffer("WEBGPU", item.out.dtype, item.out.size)
      compiled = compile_item(item, "wgsl", self.rt.render_options())
      plan.append((compiled, [buffer.handle] + [s.buffer.handle for s in item.inputs]))
      item.out.buffer, item.out.src = buffer, ()
    return plan, out

  def run(self, plan) -> list[float]:
    return [self.rt.run(compiled, handles, {}, timed=True) for compiled, handles in plan]

  def result(self, out, np):
    return out.numpy()


class Tinygrad:
  def __init__(self):
    from tinygrad import Device, Tensor
    from tinygrad.engine.realize import lower_schedule_item
    self.Tensor, self.lower = Tensor, lower_schedule_item
    self.dev = Device["WEBGPU"]
    self.timestamps = None   # known after a run: None from a program means no timestamps
    self.adapter = "wgpu high-performance adapter (see kernelgen's line)"

  def prepare(self, inputs, expr):
    out = expr(*[self.Tensor(x, device="WEBGPU").realize() for x in inputs])
    return [self.lower(si) for si in out.schedule()], out

  def run(self, plan) -> list[float]:
    times = []
    for item in plan:
      start = time.perf_counter()
      seconds = item.run(wait=True)
      if seconds is None:   # no timestamps: wall clock up to a completed read-back
        self.dev.synchronize()
        seconds = time.perf_counter() - start
      self.timestamps = self.timestamps is not False and seconds is not None
      times.append(seconds)
    return times

  def result(self, out, np):
    return out.numpy()


def worker(tool: str, reps: int, only: str = "") -> dict:
  import numpy as np
  bench = Kernelgen() if tool == "kernelgen" else Tinygrad()
  rows = {}
  for name, (inputs, expr, reference, flops) in workloads(np).items():
    if only and not any(word in name for word in only.split(",")):
      continue
    try:
      plan, out = bench.prepare(inputs, expr)
      for _ in range(WARMUP):
        bench.run(plan)
      runs = [bench.run(plan) for _ in range(reps)]
      times = [sum(run) for run in runs]
      got = bench.result(out, np)
      ok = bool(np.allclose(got, reference(*inputs), rtol=2e-3, atol=2e-3))
      best = statistics.median(times)
      rows[name] = {"ms": best * 1e3, "gflops": flops / best / 1e9, "kernels": len(plan),
                    "matches_numpy": ok, "samples_ms": [t * 1e3 for t in times],
                    "kernel_min_ms": [min(run[k] for run in runs) * 1e3 for k in range(len(plan))]}
    except Exception as e:  # a workload the tool cannot run is reported, not fatal
      rows[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
    print(f"  B3 {tool} {name}: {rows[name].get('ms', rows[name].get('error'))}",
          file=sys.stderr)
  return {"adapter": bench.adapter, "timestamps": bool(bench.timestamps), "rows": rows}


def measure(reps: int = 5, only: str = "") -> dict:
  ours = ROOT / ".venv" / "bin" / "python"
  py = {"kernelgen": str(ours if ours.exists() else sys.executable),
        "tinygrad": str(ROOT / ".venv-bench" / "bin" / "python")}
  out = {}
  for tool in TOOLS:
    proc = subprocess.run([py[tool], __file__, "--worker", tool, str(reps), only], text=True,
                          capture_output=True, timeout=900, env=dict(os.environ))
    sys.stderr.write(proc.stderr[-3000:] if proc.returncode else "")
    lines = proc.stdout.strip().splitlines()
    out[tool] = json.loads(lines[-1]) if proc.returncode == 0 and lines else \
      {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:200], "rows": {}}
  return out


if __name__ == "__main__":
  if sys.argv[1:2] == ["--worker"]:
    print(json.dumps(worker(sys.argv[2], int(sys.argv[3]), "".join(sys.argv[4:5]))))
  else:
    args = sys.argv[1:]
    only = args[args.index("--only") + 1] if "--only" in args else ""
    reps = [a for a in args if a.isdigit()]
    print(json.dumps(measure(int(reps[0]) if reps else 5, only), indent=1))
