"""Python compile time per kernel of a light ONNX model (issue 37's measure), natively and in the
page: the model's kernels scheduled for WGSL as a WEBGPU device with adapter class ADAPTER would,
then each compiled in launch order as realize compiles them (MODE cached: cache.cached_compile
from an empty cache, so a kernel of the same structure as an earlier one is rendered from it) or
every pass for each (MODE item: compiler.compile_item). Milliseconds per kernel, after one
unrelated warm-up kernel; prints one JSON line with the median, p90 and total.

Natively the figures are CPU time (time.process_time: the machine is shared), and under "wall"
the same compiles in wall time (time.perf_counter). With --page the same
function (`per_kernel_ms`, its source sent as the page's program) runs again in Pyodide, in a
fresh worker of kernelgen's embedding API in headless Chromium (bench/web/bench.html on the site
`./build.sh site` assembled, served from 127.0.0.1), timed there by time.perf_counter (the
worker's one thread: wall time, which also counts whatever else the machine runs: compare it
with the native "wall" of the same run); all go in the one JSON line (state the load).

    nice python bench/compile_per_kernel.py [MODEL] [ADAPTER] [MODE] [--profile OUT] [--page]
    (defaults: resnet50 swiftshader cached; OUT: a cProfile dump of the native timed compiles)
"""
from __future__ import annotations

import base64
import inspect
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "core"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
sys.path.insert(0, str(ROOT / "bench"))

PAGE_MS = 1_800_000     # the page's whole measurement, model load and compiles (ms)


def per_kernel_ms(kg, data: bytes, adapter: str, mode: str, clocks: tuple,
                  profiler=None) -> list:
  """Per kernel compile of the ONNX model `data` (bytes), in launch order, the ms each of
  `clocks` counted. Needs kernelgen alone (its source runs as a program in the page)."""
  from kernelgen.cache import cached_compile, clear_cache
  from kernelgen.compiler import compile_item
  from kernelgen.graph.schedule import row_limit, schedule
  from kernelgen.render.targets import get_target
  options, target = {"adapter": adapter}, get_target("wgsl")
  model = kg.onnx.load(data)
  shape = tuple(d if isinstance(d, int) and d > 0 else 1
                for d in model.input_shapes[model.input_names[0]])
  x = kg.Tensor.empty(*shape, device="PYTHON")
  out = model.run({model.input_names[0]: x}, device="PYTHON")[model.output_names[0]]
  items = schedule([out.node], target.buffer_limit(options), row_limit(options))
  items = [i for i in items if i.out.size]
  warm = (kg.Tensor.empty(33, 65, device="PYTHON") * 3 - 1).relu().max(axis=0)
  compile_item(schedule([warm.node])[0], target, options)
  clear_cache()
  run = cached_compile if mode == "cached" else compile_item
  if profiler is not None:
    profiler.enable()
  ms = []
  for item in items:
    start = [clock() for clock in clocks]
    run(item, target, options)
    ms.append([(clock() - s) * 1e3 for clock, s in zip(clocks, start)])
  if profiler is not None:
    profiler.disable()
  return ms


def model_bytes(name: str) -> bytes:
  """The light ONNX model `name`'s file (the onnx package's test data)."""
  import onnx_corpus
  return (onnx_corpus.data_dir() / "light" / f"light_{name}.onnx").read_bytes()


def summary(ms: list) -> dict:
  """Median, p90 and total of per-kernel times (ms)."""
  ms = sorted(ms)
  return {"median_ms": round(statistics.median(ms), 2), "p90_ms": round(ms[int(0.9 * len(ms))], 2),
          "total_ms": round(sum(ms))}


def page_program(data: bytes, adapter: str, mode: str) -> str:
  """The page's program: per_kernel_ms's source and its call on `data`, out = the times."""
  return "\n".join([
    "import base64, time",
    "kg.limits.set(page_seconds=3600)",
    inspect.getsource(per_kernel_ms),
    f"_data = base64.b64decode({base64.b64encode(data).decode()!r})",
    f"_ms = per_kernel_ms(kg, _data, {adapter!r}, {mode!r}, (time.perf_counter,))",
    "out = Tensor([row[0] for row in _ms])",
  ])


def in_page(data: bytes, adapter: str, mode: str) -> list:
  """per_kernel_ms in Pyodide: a fresh kernelgen worker (PYTHON device) in headless Chromium."""
  from playwright.sync_api import sync_playwright

  from browser import Browser
  from browser_util import StaticServer
  if not (ROOT / "site" / "web" / "kernelgen.js").exists():
    raise SystemExit("no site/: run ./build.sh site first (it builds the wheel the page loads)")
  mounts = {"/bench/": ROOT / "bench", "/tfjs/": ROOT / ".venv-bench" / "npm" / "node_modules"}
  with StaticServer(ROOT / "site", mounts=mounts) as server, sync_playwright() as playwright:
    browser = Browser(playwright, server)
    try:
      page = browser.page("bench/web/bench.html")
      page.set_default_timeout(PAGE_MS)
      got = page.evaluate("(codes) => window.bench.compileLatency(codes)",
                          [page_program(data, adapter, mode)])[0]
    finally:
      browser.close()
  if "error" in got:
    raise SystemExit(f"the page's compile failed: {got['error']}")
  return got["values"]


def main(argv: list[str]) -> None:
  profile = argv[argv.index("--profile") + 1] if "--profile" in argv else ""
  page = "--page" in argv
  args = [a for a in argv if a not in ("--profile", profile, "--page")]
  name, adapter, mode = (args + ["resnet50", "swiftshader", "cached"][len(args):])[:3]
  import kernelgen as kg
  data = model_bytes(name)
  profiler = None
  if profile:
    import cProfile
    profiler = cProfile.Profile(time.process_time)
  ms = per_kernel_ms(kg, data, adapter, mode, (time.process_time, time.perf_counter), profiler)
  if profiler is not None:
    profiler.dump_stats(profile)
  out = {"model": name, "adapter": adapter, "mode": mode, "kernels": len(ms),
         **summary([cpu for cpu, _ in ms]), "wall": summary([wall for _, wall in ms])}
  if page:
    out["pyodide"] = summary(in_page(data, adapter, mode))
  print(json.dumps(out))


if __name__ == "__main__":
  main(sys.argv[1:])
