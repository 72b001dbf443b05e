"""Issue 37's warm reload: kernelgen's first result when the page is loaded on a fresh browser
profile (cold) and when it is reloaded on that profile (warm: the WGSL, PTX and launch data the
first load compiled come back from the browser's store, IndexedDB, core/kernelgen/stored.py), and
a steady call, beside onnxruntime-web (wasm, one thread) in the same page. Cases: the light
SqueezeNet and ResNet-50 (bench/onnx_models.py's) through the Models view's calls (kg.loadModel,
kg.runModel) and one editor program (kg.run); each on SwiftShader and on Mesa lavapipe (ANGLE,
compatibility mode). Each case gets its own profile folder; Mesa's shader cache lives in it too
(MESA_SHADER_CACHE_DIR), so cold starts empty and the reload keeps what the first load left, as a
user's browser would.

kernelgen's first result is timed in the page from createKernelgen (the worker: Pyodide, the
wheel, the store read) to the output on the page: boot + load (the model's kernels, compiled or
stored) + run; the row also shows the run alone and its Python compile count. ORT's is timed
from InferenceSession.create (its wasm fetched and compiled, the graph prepared) to its output.
Steady: the best of STEADY more calls. Every output is checked against onnxruntime (CPython, CPU)
on the same input (rtol 1e-3, atol 1e-5); the program's against numpy. One run per cell, at
whatever load there is: the load average is printed beside each case (not an idle figure).

    python bench/warm_reload.py [--adapters swiftshader,lavapipe]
        [--cases squeezenet,resnet50,program] [--prebuild-ab] [--sites LABEL=SITE,...]
        [--repeat N] [--restart] [--json OUT]      (needs site/: ./build.sh site)

A warm boot builds the pipelines the last page load's first run launched, in its launch order,
while Python boots (web/worker.js prebuildStored; on by default, createKernelgen's `prebuild`);
--prebuild-ab runs each case with it (' +pre') and without (' -pre'). --sites alternates other
builds of the site (e.g. main's: `main=/tmp/start/site`) per case, --repeat takes more samples
per cell, and --restart loads the warm page in a browser started again on the profile rather
than reloading it in the same browser (whose GPU process may still be busy with the cold page's
background pipeline builds). Each row also prints the boot's steps (ms from the boot command to
each step's end: the GPU's first call and device, the store read, Pyodide, the wheel, the
store's records given to Python) and the prebuild's pipelines.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from browser import profile_page  # noqa: E402

ADAPTERS = ("swiftshader", "lavapipe")
CASES = ("squeezenet", "resnet50", "program")
STEADY = 3
BOOT_STEPS = ("worker", "gpu_call", "store_read", "gpu", "pyodide", "install", "python", "setup",
              "load_stored")
SETTLE_MS = 1000        # a pause between kernelgen and ORT (the worker's leftover work)
RTOL, ATOL = 1e-3, 1e-5
PROGRAM = """x = (Tensor.arange(128 * 256).cast(dtypes.float32) * 0.0001).reshape(128, 256)
w = ((Tensor.arange(256 * 256) % 97).cast(dtypes.float32) * 0.002 - 0.09).reshape(256, 256)
h = (x @ w).relu()
out = (h @ w.T).softmax(axis=1).sum(axis=0) + h.max(axis=1).sum()
"""


def program_reference():
  import numpy as np
  x = (np.arange(128 * 256, dtype=np.float32) * np.float32(0.0001)).reshape(128, 256)
  w = ((np.arange(256 * 256) % 97).astype(np.float32) * np.float32(0.002)
       - np.float32(0.09)).reshape(256, 256)
  h = np.maximum(x @ w, 0)
  s = h @ w.T
  e = np.exp(s - s.max(1, keepdims=True))
  return ((e / e.sum(1, keepdims=True)).sum(0) + h.max(1).sum()).astype(np.float32)


def model_spec(folder: Path, server, name: str) -> dict:
  """The page's spec of a light model (its bytes and input in `folder`) and onnxruntime's
  output on that input."""
  import numpy as np
  import onnxruntime as ort

  import kernelgen as kg
  from onnx_models import model_case
  data, x, _ = model_case(name)
  model = kg.onnx.load(data)
  given = model.input_names[0]
  shape = [d if isinstance(d, int) and d > 0 else 1 for d in model.input_shapes[given]]
  x = np.asarray(x, np.float32).reshape(shape)
  (folder / f"{name}.onnx").write_bytes(data)
  (folder / f"{name}-in0.bin").write_bytes(x.tobytes())
  session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
  want = session.run(None, {given: x})[0].ravel()
  return {"model": server.url(f"data/{name}.onnx"), "input": server.url(f"data/{name}-in0.bin"),
          "name": given, "shape": shape, "want": want}


def check(got: dict, want) -> dict:
  """`got` (a page result with data) checked against `want`: ok and max |error| added."""
  import numpy as np
  if not got.get("ok"):
    return got
  data = np.asarray(got.pop("data"), np.float32)
  if data.size != want.size:
    return {**got, "ok": False, "error": f"{data.size} values, not {want.size}"}
  good = bool(np.allclose(data, want, rtol=RTOL, atol=ATOL))
  return {**got, "ok": good, "max_abs_error": float(np.max(np.abs(data - want)))}


def one_load(page, spec: dict, want, lavapipe: bool) -> dict:
  """kernelgen's and ORT's first results and steady calls in the page as it is now loaded."""
  kg_spec = {k: spec[k] for k in ("model", "input")} if "model" in spec else {"code": PROGRAM}
  kg_spec["prebuild"] = spec.get("prebuild")     # None: the page's default
  out = {"load": os.getloadavg()[0]}
  out["kernelgen"] = check(page.evaluate("([s, c]) => window.warm.kgFirst(s, c)",
                                         [kg_spec, lavapipe]), want)
  out["kernelgen_steady"] = check(page.evaluate("() => window.warm.steady('kernelgen', "
                                                f"{STEADY})"), want)
  if "model" in spec:
    page.wait_for_timeout(SETTLE_MS)
    ort_spec = {k: spec[k] for k in ("model", "input", "name", "shape")}
    out["ort"] = check(page.evaluate("(s) => window.warm.ortFirst(s)", ort_spec), want)
    out["ort_steady"] = check(page.evaluate(f"() => window.warm.steady('ort', {STEADY})"), want)
  out["load_after"] = os.getloadavg()[0]
  return out


def one_case(playwright, server, adapter: str, spec: dict, want, profile: Path,
             restart: bool = False) -> dict:
  """Cold (fresh profile) then warm (the page reloaded on it; with `restart`, loaded in a
  browser started again on the profile) loads of one case."""
  lavapipe = adapter == "lavapipe"
  url = server.url("bench/web/warm_reload.html")
  env = {"MESA_SHADER_CACHE_DIR": str(profile / "mesa")}
  out = {}
  with contextlib.ExitStack() as stack:
    page = stack.enter_context(profile_page(playwright, profile / "chromium", lavapipe=lavapipe,
                                            env=env))
    for when in ("cold", "warm"):
      if when == "cold":
        page.goto(url)
      elif restart:
        stack.close()
        page = stack.enter_context(profile_page(playwright, profile / "chromium",
                                                lavapipe=lavapipe, env=env))
        page.goto(url)
      else:
        page.reload()
      page.wait_for_selector("body[data-ready]", state="attached", timeout=180_000)
      out[when] = one_load(page, spec, want, lavapipe)
      print(f"    {when} {summary(out[when])}", file=sys.stderr, flush=True)
  return out


def summary(load: dict) -> str:
  kg = load["kernelgen"]
  if not kg.get("ok"):
    return f"kernelgen failed: {kg.get('error') or kg.get('max_abs_error')}"
  return (f"kernelgen {kg['ms']:.0f} ms (boot {kg['boot_ms']:.0f}, load {kg['load_ms']:.0f}, "
          f"run {kg['run_ms']:.0f}: Python {kg['worker_ms']:.0f}, its compiles "
          f"{kg['compile_ms']:.0f}, pipelines {kg['pipeline_ms']:.0f}; compiled {kg['compiled']}, "
          f"stored {kg['stored']}, model from store {kg['load_stored']}), "
          f"ort {ms(load.get('ort'))}, load {load['load']:.1f}-{load['load_after']:.1f}"
          f"{phases(kg)}")


def phases(kg: dict) -> str:
  """The boot's steps (web/worker.js boot: ms from its start to each step's end) and the
  prebuild's counts, where the page reports them."""
  steps = kg.get("phases") or {}
  text = ", ".join(f"{k} {v:.0f}" for k, v in steps.items() if k in BOOT_STEPS)
  if "store_bytes" in steps:
    text += f"; store {steps['store_records']} records, {steps['store_bytes'] / 1e6:.1f} MB"
  pre = kg.get("prebuilt")
  if pre:
    text += (f"; prebuild started {pre['started']}, builds {pre['builds']}, "
             f"pipelines {pre['pipelines']}")
  return f"\n      boot steps: {text}" if text else ""


def ms(entry: dict | None, key: str = "ms") -> str:
  if entry is None:
    return "n/a"
  if not entry.get("ok"):
    return "WRONG" if "max_abs_error" in entry else "failed"
  value = min(entry["times"]) if key == "best" else entry.get(key)
  if value is None:
    return "-"
  return f"{value:.0f}" if value < 10_000 else f"{value / 1000:.1f}k"


def measure(adapters, cases, prebuild=(None,), sites=(("", "site"),), repeat=1,
            restart=False) -> dict:
  """Each case on each adapter, with each `prebuild` setting (None: the page's default) and on
  each of `sites` ((label, folder): another build's site/, e.g. main's), `repeat` times; the
  settings and sites alternated per case (A/B under the same load)."""
  from playwright.sync_api import sync_playwright

  from browser_util import StaticServer
  out = {"uptime_start": uptime(), "cpus": os.cpu_count(), "rows": []}
  with tempfile.TemporaryDirectory(prefix="kg-warm-") as tmp, contextlib.ExitStack() as stack:
    folder = Path(tmp)
    mounts = {"/bench/": ROOT / "bench", "/data/": folder,
              "/tfjs/": ROOT / ".venv-bench" / "npm" / "node_modules"}
    servers = {label: stack.enter_context(StaticServer(ROOT / path, mounts=mounts))
               for label, path in sites}
    pw = stack.enter_context(sync_playwright())
    server = next(iter(servers.values()))
    specs = {name: model_spec(folder, server, name) for name in cases if name != "program"}
    if "program" in cases:
      specs["program"] = {"want": program_reference()}
    for name, spec in specs.items():
      want = spec.pop("want")
      for adapter, rep, early, site in itertools.product(adapters, range(repeat), prebuild,
                                                         servers):
        label = " ".join(filter(None, [name, site, {True: "+pre", False: "-pre"}.get(early)]))
        print(f"{adapter} {label} (load {os.getloadavg()[0]:.1f})", file=sys.stderr,
              flush=True)
        profile = folder / f"profile-{adapter}-{name}-{early}-{site}-{rep}"
        urls = {k: servers[site].url(v.split("/", 3)[3]) if k in ("model", "input") else v
                for k, v in spec.items()}
        row = one_case(pw, servers[site], adapter, {**urls, "prebuild": early}, want, profile,
                       restart)
        out["rows"].append({"case": label, "adapter": adapter, **row})
  out["uptime_end"] = uptime()
  return out


def uptime() -> str:
  with open("/proc/loadavg") as f:
    return f.read().strip()


def print_table(result: dict) -> None:
  """cold / warm reload / steady, ms, per case and adapter, kernelgen beside ORT-web (wasm)."""
  print("first result, ms (kernelgen: boot + model load + run; its run alone; Python compiles)"
        "; ORT-web wasm: session + run; steady: best of "
        f"{STEADY}\n{'case':16s}{'adapter':12s}{'kg cold':>9s}{'kg warm':>9s}{'kg steady':>10s}"
        f"{'run cold':>9s}{'run warm':>9s}{'compiles':>10s}{'ort cold':>9s}{'ort warm':>9s}"
        f"{'ort steady':>11s}  load (cold; warm)")
  for row in result["rows"]:
    cold, warm = row["cold"], row["warm"]
    kc, kw = cold["kernelgen"], warm["kernelgen"]
    compiles = f"{kc.get('compiled', '?')}->{kw.get('compiled', '?')}"
    print(f"{row['case']:16s}{row['adapter']:12s}{ms(kc):>9s}{ms(kw):>9s}"
          f"{ms(warm['kernelgen_steady'], 'best'):>10s}{ms(kc, 'run_ms'):>9s}"
          f"{ms(kw, 'run_ms'):>9s}{compiles:>10s}{ms(cold.get('ort')):>9s}"
          f"{ms(warm.get('ort')):>9s}{ms(warm.get('ort_steady'), 'best'):>11s}"
          f"  {cold['load']:.1f}-{cold['load_after']:.1f}; {warm['load']:.1f}-"
          f"{warm['load_after']:.1f}")
  print("\nkernelgen's first run, ms (cold -> warm): in the worker's Python (graph, schedule, "
        "compiles, launches), of it the Python compiles, and the time pipelines were building")
  for row in result["rows"]:
    kc, kw = row["cold"]["kernelgen"], row["warm"]["kernelgen"]
    parts = "".join(f"{ms(kc, k):>8s} ->{ms(kw, k):>7s}" for k in ("worker_ms", "compile_ms",
                                                                  "pipeline_ms"))
    print(f"{row['case']:16s}{row['adapter']:12s}{parts}   boot {ms(kc, 'boot_ms')} -> "
          f"{ms(kw, 'boot_ms')}, model load {ms(kc, 'load_ms')} -> {ms(kw, 'load_ms')}")
  for row in result["rows"]:
    for when in ("cold", "warm"):
      for system, entry in row[when].items():
        if isinstance(entry, dict) and not entry.get("ok"):
          print(f"  ! {row['case']} {row['adapter']} {when} {system}: "
                f"{entry.get('error') or entry.get('max_abs_error')}")
  print(f"/proc/loadavg at start: {result['uptime_start']}\n"
        f"/proc/loadavg at end:   {result['uptime_end']}\n{result['cpus']} CPUs")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description="warm-reload first results (issue 37)")
  parser.add_argument("--adapters", default=",".join(ADAPTERS))
  parser.add_argument("--cases", default=",".join(CASES))
  parser.add_argument("--json", default=None, help="write the results here too")
  parser.add_argument("--prebuild-ab", action="store_true",
                      help="each case with the boot's pipeline prebuild (' +pre') and without")
  parser.add_argument("--table", default=None, help="print the table of a results file")
  parser.add_argument("--sites", default="",
                      help="label=folder,... : site/ folders to alternate (e.g. main's)")
  parser.add_argument("--repeat", type=int, default=1, help="samples per cell")
  parser.add_argument("--restart", action="store_true",
                      help="the warm load in a browser started again on the profile (not a reload)")
  args = parser.parse_args(argv)
  if args.table:
    print_table(json.loads(Path(args.table).read_text()))
    return 0
  started = time.time()
  sites = [tuple(part.split("=", 1)) for part in args.sites.split(",") if part] or [("", "site")]
  result = measure(args.adapters.split(","), args.cases.split(","),
                   (True, False) if args.prebuild_ab else (None,), sites, args.repeat,
                   args.restart)
  result["seconds"] = round(time.time() - started)
  if args.json:
    Path(args.json).write_text(json.dumps(result, indent=1))
  print_table(result)
  return 0


if __name__ == "__main__":
  sys.exit(main())
