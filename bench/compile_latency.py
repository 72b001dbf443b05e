"""B1 and B7 (compile side): tensor expression -> source, kernelgen vs tinygrad 0.10.1.

Each measurement is a fresh subprocess: import the tool, warm the process up with an unrelated
kernel for the same target, then time the first compile of the measured kernel (build the
expression, schedule, optimize, lower, rewrite, linearize, render). The driver runs every
(kernel, target, tool) `reps` times, interleaving the tools, and keeps the median.

tinygrad renders with the renderer its device would use (WGSLRenderer for WEBGPU,
PTXRenderer("sm_80") for CUDA) on its own schedule: Tensor.schedule() then
get_kernel(renderer, ast).to_program().src, with its tensors on device PYTHON so no GPU or
wgpu device is opened (the kernel ASTs do not depend on the device the buffers live on).

    python bench/compile_latency.py [REPS]          (driver; prints a JSON summary)
    python bench/compile_latency.py --time TOOL TARGET KERNEL
    python bench/compile_latency.py --memory TOOL
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
M = 1 << 20

# name -> expression (Python source) over `t(shape, dtype_name)`, which makes an input tensor
# backed by a real buffer (kernelgen: Tensor.empty), and `t.dtype(name)`; the same text runs in
# CPython and in Pyodide
KERNELS = {
  "add f32 1M": "t((M,), 'float32') + t((M,), 'float32')",
  "sum rows 1024²": "t((1024, 1024), 'float32').sum(axis=1)",
  "matmul 512³ f32": "t((512, 512), 'float32') @ t((512, 512), 'float32')",
  "softmax rows 1024²": "t((1024, 1024), 'float32').softmax(axis=-1)",
  "uint8 add 1M": "t((M,), 'uint8') + t((M,), 'uint8')",
  "int8 mul-add 1M": "t((M,), 'int8') * t((M,), 'int8') + t((M,), 'int8')",
  "int8->f32 1M": "t((M,), 'int8').cast(t.dtype('float32'))",
  "f16 fma 1M": "t((M,), 'float16') * t((M,), 'float16') + t((M,), 'float16')",
  "f16 matmul 512³": "t((512, 512), 'float16') @ t((512, 512), 'float16')",
}
# the warm-up kernel: unrelated to every measured one (shape, ops)
WARMUP = "(t((33, 65), 'float32') * 3 - 1).relu().max(axis=0)"
TARGETS = ("wgsl", "ptx")
TOOLS = ("kernelgen", "tinygrad")


class _Maker:
  """t(shape, dtype_name) -> an input tensor backed by a real (unfilled) buffer."""

  def __init__(self, empty, dtype):
    self.empty, self.dtype = empty, dtype

  def __call__(self, shape, name):
    return self.empty(shape, name)

  def build(self, source: str):
    return eval(source, {"t": self, "M": M})  # noqa: S307 - our own kernel table


def kernelgen_compiler(target: str):
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  from kernelgen.dtype import dtypes

  def empty(shape, name):
    return kg.Tensor.empty(*shape, dtype=name, device="PYTHON")

  options = {"arch": "sm_80"} if target == "ptx" else {}

  def compile_sources(source: str) -> list[str]:
    expr = _Maker(empty, dtypes.from_name).build(source)
    return [k.source for k in kg.compile(expr, target, **options)]
  return compile_sources


def tinygrad_compiler(target: str):
  os.environ.setdefault("PYTHON", "1")      # default device PYTHON: probe no GPU, open no wgpu
  os.environ.setdefault("CACHELEVEL", "0")
  from tinygrad import Tensor, dtypes
  from tinygrad.engine.realize import get_kernel
  from tinygrad.ops import Ops
  if target == "wgsl":
    from tinygrad.renderer.wgsl import WGSLRenderer
    renderer = WGSLRenderer()
  else:
    from tinygrad.renderer.ptx import PTXRenderer
    renderer = PTXRenderer("sm_80")

  def empty(shape, name):
    return Tensor.empty(*shape, dtype=getattr(dtypes, name), device="PYTHON")

  def compile_sources(source: str) -> list[str]:
    schedule = _Maker(empty, lambda name: getattr(dtypes, name)).build(source).schedule()
    return [get_kernel(renderer, si.ast).to_program().src for si in schedule
            if si.ast.op is Ops.SINK]
  return compile_sources


def compiler(tool: str, target: str):
  return (kernelgen_compiler if tool == "kernelgen" else tinygrad_compiler)(target)


def time_one(tool: str, target: str, kernel: str) -> dict:
  """In this (fresh) process: warm up, then time the first compile of `kernel`."""
  compile_sources = compiler(tool, target)
  compile_sources(WARMUP)
  start = time.perf_counter()
  try:
    sources = compile_sources(KERNELS[kernel])
  except Exception as e:  # the peer may not support a dtype on a target
    return {"error": f"{type(e).__name__}: {e}"[:200]}
  ms = (time.perf_counter() - start) * 1e3
  return {"ms": ms, "kernels": len(sources), "chars": sum(map(len, sources))}


def memory_all(tool: str, kernels: dict[str, list[str]]) -> dict:
  """Peak RSS of one process that compiles every kernel in `kernels` (target -> names)."""
  base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  compilers = {target: compiler(tool, target) for target in kernels}
  imported = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  count = 0
  for target, names in kernels.items():
    for name in names:
      count += len(compilers[target](KERNELS[name]))
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return {"peak_mb": peak / 1024, "after_import_mb": imported / 1024, "start_mb": base / 1024,
          "kernels": count}


# ---- driver ---------------------------------------------------------------------------------

def pythons() -> dict[str, str]:
  ours = ROOT / ".venv" / "bin" / "python"
  return {"kernelgen": str(ours if ours.exists() else sys.executable),
          "tinygrad": str(ROOT / ".venv-bench" / "bin" / "python")}


def _run(python: str, *args: str) -> dict:
  env = dict(os.environ, PYTHONHASHSEED="0")
  proc = subprocess.run([python, __file__, *args], capture_output=True, text=True, env=env,
                        timeout=300)
  lines = proc.stdout.strip().splitlines()
  if proc.returncode or not lines:
    return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]}
  return json.loads(lines[-1])


def measure_latency(reps: int = 5) -> list[dict]:
  """Median over `reps` fresh processes per (kernel, target, tool)."""
  py, rows = pythons(), []
  for target in TARGETS:
    for kernel in KERNELS:
      samples: dict[str, list] = {tool: [] for tool in TOOLS}
      for _ in range(reps):
        for tool in TOOLS:
          samples[tool].append(_run(py[tool], "--time", tool, target, kernel))
      rows.append({"kernel": kernel, "target": target,
                   **{tool: _summary(samples[tool]) for tool in TOOLS}})
      print(f"  B1 {target} {kernel}: " + ", ".join(
        f"{tool} {rows[-1][tool].get('ms', rows[-1][tool].get('error'))}" for tool in TOOLS),
        file=sys.stderr)
  return rows


def _summary(samples: list[dict]) -> dict:
  good = [s for s in samples if "ms" in s]
  if not good:
    return {"error": samples[0].get("error", "failed")}
  return {"ms": statistics.median(s["ms"] for s in good), "samples_ms": [s["ms"] for s in good],
          "kernels": good[0]["kernels"], "chars": good[0]["chars"]}


def measure_memory(latency_rows: list[dict]) -> dict:
  """Peak RSS per tool over the kernels both tools compiled in B1 (per target)."""
  both: dict[str, list[str]] = {t: [] for t in TARGETS}
  for row in latency_rows:
    if all("ms" in row[tool] for tool in TOOLS):
      both[row["target"]].append(row["kernel"])
  py = pythons()
  spec = json.dumps(both)
  return {"kernels": both, **{tool: _run(py[tool], "--memory", tool, spec) for tool in TOOLS}}


def main(argv: list[str]) -> None:
  if argv[:1] == ["--time"]:
    print(json.dumps(time_one(*argv[1:4])))
  elif argv[:1] == ["--memory"]:
    print(json.dumps(memory_all(argv[1], json.loads(argv[2]))))
  else:
    rows = measure_latency(int(argv[0]) if argv else 5)
    print(json.dumps({"latency": rows, "memory": measure_memory(rows)}, indent=1))


if __name__ == "__main__":
  main(sys.argv[1:])
