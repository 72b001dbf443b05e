"""B2, B4, B5 and B7 (page side): kernelgen in headless Chromium, on the site `./build.sh site`
assembled, served from 127.0.0.1 with bench/web/ and TF.js (.venv-bench/npm) mounted next to it.

  B2  compile latency inside Pyodide: a fresh worker per target, warmed up with the same
      unrelated kernel as in CPython; each kernel's first compile in it, timed in Python.
  B4  GPU time of matmul 1024², softmax 4096×1024, conv2d 3×3 64ch 56×56 on the page's WebGPU
      (SwiftShader): kernelgen's WEBGPU device vs TF.js's WebGPU backend in the same page.
  B5  cold start of the app (index.html): navigation -> ready (body[data-ready]), and ready ->
      the first result of its default example (a matmul) through the Run button's code path;
      vs a bare page that boots Pyodide in a worker the same way. A fresh browser per load.
  B7  proportional set size (PSS) of all of the browser's processes after running every example
      of the app, vs a bare page's browser after its Pyodide boot, both measured at one moment.
      (Also, for information, both once the page's main thread has collected its garbage:
      *_pss_after_gc_mb.)

    python bench/browser.py [REPS]        (prints a JSON summary)
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
sys.path.insert(0, str(ROOT / "bench"))

from compile_latency import KERNELS, M, TARGETS, WARMUP  # noqa: E402

BOOT_MS = 180_000
RUN_MS = 600_000
B4_OPS = {  # name -> (kernelgen setup and op, TF.js op name)
  "matmul 1024² f32": ("x = Tensor.randn(1024, 1024, seed=1).realize()\n"
                       "y = Tensor.randn(1024, 1024, seed=2).realize()", "x @ y", "matmul"),
  "softmax 4096×1024": ("x = Tensor.randn(4096, 1024, seed=1).realize()",
                        "x.softmax(axis=-1)", "softmax"),
  "conv2d 3×3 64ch 56×56": ("x = Tensor.randn(1, 64, 56, 56, seed=1).realize()\n"
                            "w = (Tensor.randn(64, 64, 3, 3, seed=2) * 0.1).realize()",
                            "x.conv2d(w, padding=1)", "conv2d"),
}
# Records when the app's body gets data-ready, without polling.
READY_PROBE = """
new MutationObserver((_, observer) => {
  if (document.body && document.body.dataset.ready) {
    window.readyMs = performance.now();
    observer.disconnect();
  }
}).observe(document, { subtree: true, attributes: true, attributeFilter: ['data-ready'] });
"""


def pyodide_snippet(source: str, target: str) -> str:
  """A program for the app's worker that times one first compile and returns [ms] as out."""
  options = {"arch": "sm_80"} if target == "ptx" else {}
  return "\n".join([
    "import time",
    "from kernelgen import compile as _compile",
    "from kernelgen.dtype import dtypes as _dt",
    f"M = {M}",
    "class _T:",
    "  def __call__(self, shape, name):",
    "    return Tensor.empty(*shape, dtype=name, device='PYTHON')",
    "  def dtype(self, name):",
    "    return _dt.from_name(name)",
    "t = _T()",
    f"_compile({WARMUP}, {target!r}, **{options!r})",
    "_start = time.perf_counter()",
    f"_compile({source}, {target!r}, **{options!r})",
    "out = Tensor([(time.perf_counter() - _start) * 1e3])",
  ])


def pss_mb(root_pid: int, with_root: bool = False) -> float:
  """Sum of Pss over the Chromium processes below `root_pid` (and it, `with_root`)."""
  children: dict[int, list[int]] = {}
  for entry in os.listdir("/proc"):
    if entry.isdigit():
      try:
        ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
      except OSError:
        continue
      children.setdefault(ppid, []).append(int(entry))
  total, stack = 0, [root_pid] if with_root else list(children.get(root_pid, []))
  while stack:
    pid = stack.pop()
    stack.extend(children.get(pid, []))
    try:
      if "chrom" not in Path(f"/proc/{pid}/comm").read_text():
        continue
      for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
          total += int(line.split()[1])
    except OSError:
      continue
  return total / 1024


class Browser:
  """A fresh headless Chromium (SwiftShader WebGPU) on the bench server."""

  def __init__(self, playwright, server):
    from browser_util import launch_chromium
    self.browser = launch_chromium(playwright, webgpu=True)
    self.server = server

  def page(self, path: str, probe: bool = False):
    context = self.browser.new_context()
    page = context.new_page()
    if probe:
      page.add_init_script(READY_PROBE)
    page.goto(self.server.url(path))
    page.wait_for_selector("body[data-ready]", state="attached", timeout=BOOT_MS)
    if page.get_attribute("body", "data-ready") != "true":
      raise RuntimeError(f"{path} did not start: {page.inner_text('body')[-300:]}")
    return page

  def pss_mb(self) -> float:
    """The PSS of this browser: its browser process and every process below it."""
    session = self.browser.new_browser_cdp_session()
    processes = session.send("SystemInfo.getProcessInfo")["processInfo"]
    session.detach()
    return pss_mb(next(p["id"] for p in processes if p["type"] == "browser"), with_root=True)

  def close(self):
    self.browser.close()


def cold_start(playwright, server) -> dict:
  """One app load and one bare load, each in a fresh browser (B5), with their PSS (B7)."""
  app = Browser(playwright, server)
  page = app.page("index.html?nosw", probe=True)
  ready = page.evaluate("window.readyMs")
  first = page.evaluate("""async () => {
    const start = performance.now();
    const result = await window.kgApp.run();
    return { ms: performance.now() - start, ok: !(result && result.error) };
  }""")
  examples = page.evaluate("""async () => {
    const names = [...document.querySelectorAll('#example option')].map((o) => o.value)
      .filter(Boolean);
    const failed = [];
    for (const name of names) {
      window.kgApp.loadExample(name);
      const result = await window.kgApp.run();
      if (!result || result.error) failed.push(name);
    }
    if (window.kgApp.idle) await window.kgApp.idle();  // the runs' background work (reference)
    return { names, failed };
  }""")
  # B7: a bare page boots next to the app, and both browsers are measured at one moment. (PSS
  # shares a file's pages among every process on the machine that maps them, other Chromiums
  # included: measured minutes apart, the two figures saw different neighbours.)
  memory = Browser(playwright, server)
  memory_page = memory.page("bench/web/bare.html")
  app_pss, bare_pss = app.pss_mb(), memory.pss_mb()
  for each in (page, memory_page):
    collect_garbage(each)
  app_gc, bare_gc = app.pss_mb(), memory.pss_mb()
  memory.close()
  app.close()
  bare = Browser(playwright, server)  # B5: the bare boot alone, as the app's was
  bare_page = bare.page("bench/web/bare.html")
  bare_ready = bare_page.evaluate("window.readyMs")
  bare.close()
  return {"ready_ms": ready, "first_matmul_ms": first["ms"], "first_ok": first["ok"],
          "bare_ready_ms": bare_ready, "app_pss_mb": app_pss, "bare_pss_mb": bare_pss,
          "app_pss_after_gc_mb": app_gc, "bare_pss_after_gc_mb": bare_gc, "examples": examples}


@contextlib.contextmanager
def profile_page(playwright, profile: Path, lavapipe: bool = False, env: dict | None = None):
  """A page of headless Chromium on the persistent profile folder `profile` (its IndexedDB and
  HTTP and shader caches outlive the browser; a new folder is a fresh profile), on SwiftShader
  or with `lavapipe` Mesa lavapipe through ANGLE; `env`: more environment variables. Closed on
  exit."""
  from browser_util import chromium_args, chromium_env, chromium_path
  context = playwright.chromium.launch_persistent_context(
    str(profile), executable_path=chromium_path(), headless=True,
    args=chromium_args(webgpu=True, lavapipe=lavapipe),
    env={**chromium_env(lavapipe=lavapipe), **(env or {})})
  try:
    page = context.pages[0] if context.pages else context.new_page()
    page.set_default_timeout(RUN_MS)
    yield page
  finally:
    context.close()


def collect_garbage(page) -> None:
  """The page's main thread collects its garbage now (DevTools' collectGarbage). For the
  informational *_pss_after_gc_mb only (what the pages hold, apart from when their collector
  happens to run); B7 is the figure taken before."""
  session = page.context.new_cdp_session(page)
  session.send("HeapProfiler.collectGarbage")
  session.detach()
  page.wait_for_timeout(1000)  # the freed pages go back to the system


def compile_in_pyodide(playwright, server) -> list[dict]:
  """B2: one fresh worker per target; each kernel is compiled once, the first time it is seen
  in that (warmed-up) worker. (A fresh worker per kernel costs a Pyodide boot each.)"""
  browser = Browser(playwright, server)
  page = browser.page("bench/web/bench.html")
  page.set_default_timeout(RUN_MS)
  rows = []
  for target in TARGETS:
    codes = [pyodide_snippet(source, target) for source in KERNELS.values()]
    got = page.evaluate("(codes) => window.bench.compileLatency(codes)", codes)
    for name, result in zip(KERNELS, got):
      rows.append({"kernel": name, "target": target, **result})
      print(f"  B2 {target} {name}: {result}", file=sys.stderr)
  browser.close()
  return rows


def throughput(playwright, server, reps: int) -> dict:
  """B4: ours and TF.js in the same page."""
  browser = Browser(playwright, server)
  page = browser.page("bench/web/bench.html")
  page.set_default_timeout(RUN_MS)
  rows = {}
  for name, (setup, op, tf_name) in B4_OPS.items():
    row = {}
    for tool, call, args in (("kernelgen", "window.bench.ourThroughput(a[0], a[1], a[2])",
                              [setup, op, reps]),
                             ("tfjs", "window.bench.tfjsThroughput(a[0], a[1])", [tf_name, reps])):
      try:
        row[tool] = page.evaluate(f"(a) => {call}", args)
      except Exception as e:  # a tool failing on one op is reported, not fatal
        row[tool] = {"error": f"{type(e).__name__}: {e}"[:300]}
      print(f"  B4 {name} {tool}: {row[tool]}", file=sys.stderr)
    rows[name] = row
  adapter = page.evaluate("""async () => {
    const adapter = await navigator.gpu.requestAdapter();
    return adapter ? `${adapter.info.vendor} ${adapter.info.architecture}` : null; }""")
  browser.close()
  return {"adapter": adapter, "rows": rows}


def measure(reps: int = 3, b4_reps: int = 2) -> dict:
  from playwright.sync_api import sync_playwright

  from browser_util import StaticServer
  mounts = {"/bench/": ROOT / "bench", "/tfjs/": ROOT / ".venv-bench" / "npm" / "node_modules"}
  out: dict = {}
  with StaticServer(ROOT / "site", mounts=mounts) as server, sync_playwright() as playwright:
    starts = []
    for _ in range(reps):
      starts.append(cold_start(playwright, server))
      print(f"  B5/B7 {starts[-1]}", file=sys.stderr)
    out["cold_start"] = {"runs": starts, **{
      key: statistics.median(run[key] for run in starts)
      for key in ("ready_ms", "first_matmul_ms", "bare_ready_ms", "app_pss_mb", "bare_pss_mb")}}
    out["compile"] = compile_in_pyodide(playwright, server)
    if b4_reps:   # the old B4 (ours vs TF.js only); bench/run.py's B3/B4 are bench/peers.py now
      out["throughput"] = throughput(playwright, server, b4_reps)
  return out


if __name__ == "__main__":
  print(json.dumps(measure(*(int(a) for a in sys.argv[1:3])), indent=1))
