"""Issue 37's cold first result, against every peer: for the kernel rows of bench/peers.py (its
row definitions, programs and page drivers) and the light SqueezeNet and ResNet-50, each
system's first result in a fresh headless Chromium, once per adapter (SwiftShader; Mesa lavapipe
through ANGLE, compatibility mode), every output checked against numpy (the models: against the
onnx package's expected output).

A fresh browser per (adapter, row): Playwright launches each with a new temporary profile, so
the browser's shader caches are empty, and Mesa's on-disk shader cache is off
(MESA_SHADER_CACHE_DISABLE). No two systems share a shader, so the row's systems share that
browser, one after another (a pause between them). Before any is timed, each is readied
without the row's kernels (bench/web/peers_cold.js warm(): its runtime booted, its device made,
one unrelated op run, the row's inputs uploaded to its device); then each system's first result
is timed from the start of its work to the result on the host (peers_cold.js first()):

  kernelgen  kg.run in its Pyodide worker (web/kernelgen.js): Python builds and compiles the
             graph (in Pyodide), the pipelines, the dispatches, the readback, the posted result;
             the table splits out its Python compile (kg py: the kernels' compiles, cache_info's
             compile_s) and its pipeline builds (kg pipe: the time any pipeline was being built,
             web/gpu.js; they overlap the Python, so the two may add up to more than the whole;
             lavapipe compiles part of a kernel at its first dispatch, which neither counts)
  tinygrad   tinygrad's own Python (graph, schedule, WGSL generation: natively in CPython, which
             is faster than Pyodide; bench/peers.py tinygrad_codegen_s) + in the page its
             pipelines (all at once), dispatches and readback
  tfjs       the row's TF.js formula and data() (no ONNX import: no model rows)
  ort        onnxruntime-web: InferenceSession.create from the model's bytes, run, the output
tinygrad 0.10.1 has no ONNX import either. One run per adapter, at whatever load there is: the
load average before and after each row is printed (not an idle-machine figure unless it says so).

    python bench/peers_cold.py [--adapters swiftshader,lavapipe] [--rows matmul,...]
        [--models squeezenet,resnet50] [--tiny] [--json OUT]   (rows on each adapter in turn)
    python bench/peers_cold.py --table OUT     (the table of a results file, a partial one too)
    (or python bench/peers.py --cold ...; needs site/ from ./build.sh site)
"""
from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
import peers  # noqa: E402  (bench/peers.py: the rows, the tinygrad worker, the ONNX graphs)
from onnx_models import guarded  # noqa: E402  (a failed call is a result, not the end)
from peers_probe import spec_urls  # noqa: E402

SYSTEMS = peers.SYSTEMS
MODELS = ("squeezenet", "resnet50")
PAGE_MS = 1_800_000          # one system's warm-up or first result at most
SETTLE_MS = 1000             # a pause between systems (the previous one's leftover work)
MODEL_TOL = {"rtol": 1e-3, "atol": 1e-7}   # bench/onnx_models.py's (the onnx data's)
COLD_ENV = {"MESA_SHADER_CACHE_DISABLE": "true"}

# the page's untimed setup program for kernelgen (kg.run): the row's inputs fetched and uploaded
# to the WEBGPU device (kept in a module for the timed program), the model's bytes fetched, and
# one unrelated kernel compiled and run (imports, device, first compile)
SETUP = '''
import sys, types, js
from pyodide.ffi import run_sync
from kernelgen.graph.lazy import Buffer, LazyOp
S = sys.modules["kg_cold"] = types.ModuleType("kg_cold")

def fetched(url):
  return run_sync(run_sync(js.fetch(url)).arrayBuffer()).to_bytes()

def uploaded(url, shape):
  raw = fetched(url)
  buffer = Buffer("WEBGPU", dtypes.float32, len(raw) // 4, raw)
  buffer.handle
  return Tensor(LazyOp.from_buffer(buffer, tuple(shape)))

S.inputs = [uploaded(url, shape) for url, shape in __INPUTS__]
S.model = fetched(__MODEL__) if __MODEL__ else None
run_sync(kg.Device["WEBGPU"].gpu.device.queue.onSubmittedWorkDone())
out = (Tensor.arange(33 * 65).reshape(33, 65).cast(dtypes.float32) * 3 - 1).relu().max(axis=0)
'''

# the timed program of a row: bench/peers.py's formula (its `lib` lambda and the helpers it
# calls, their source), on the uploaded inputs; constants on the page's device
ROW = '''kg.limits.set(page_seconds=3600)    # (the page's default 300 s is not the bench's limit)
__HELPERS__
class PageLib(KernelgenLib):
  def const(self, values):
    return kg.Tensor(values, dtype="float32", device="WEBGPU")

import sys
S = sys.modules["kg_cold"]
lib = (__LIB__)
out = lib(PageLib(), *S.inputs)
'''

MODEL = '''kg.limits.set(page_seconds=3600)
import sys
S = sys.modules["kg_cold"]
model = kg.onnx.load(S.model)
out = model.run({__NAME__: S.inputs[0]}, device="WEBGPU")[__OUTPUT__]
'''


def lib_source(fn) -> str:
  """The source text of a row's `lib` lambda, as bench/peers.py writes it."""
  code = fn.__code__
  text = Path(code.co_filename).read_text()
  args = code.co_varnames[:code.co_argcount]
  for node in ast.walk(ast.parse(text)):
    if isinstance(node, ast.Lambda) and node.lineno == code.co_firstlineno and \
        tuple(a.arg for a in node.args.args) == args:
      return ast.get_source_segment(text, node)
  raise ValueError(f"no lambda of {args} at line {code.co_firstlineno}")


def helpers_source() -> str:
  """bench/peers.py's constants and helpers the row formulas call, as source."""
  constants = "".join(f"{name} = {getattr(peers, name)!r}\n"
                      for name in ("GAUSS", "SEPIA", "LUMA", "COLOUR"))
  return constants + "\n".join(inspect.getsource(f) for f in (peers.chain, peers.edge_padder,
                                                               peers.KernelgenLib))


def fill(template: str, **values) -> str:
  """`template` with each __KEY__ replaced by values[KEY]."""
  for key, value in values.items():
    template = template.replace(f"__{key}__", value)
  return template


def kernelgen_spec(server, inputs: list, run: str, ref: str, tol: dict,
                   model: str | None = None) -> dict:
  """kernelgen's setup and timed programs; inputs: [(file, shape)] in the data folder."""
  urls = [(server.url(f"data/{f}"), list(shape)) for f, shape in inputs]
  setup = fill(SETUP, INPUTS=repr(urls), MODEL=repr(server.url(f"data/{model}") if model else None))
  return {"setup": setup, "run": run, "ref": ref, **tol}


def row_specs(folder: Path, server, names: list, tiny: bool) -> dict:
  """{row: {system: spec}} of bench/peers.py's rows (its prepare: inputs, references, tinygrad's
  programs, TF.js's and ORT-web's specs), with kernelgen's programs and tinygrad's Python time."""
  import numpy as np
  table = peers.rows(np, tiny)
  specs = peers.prepare(folder, names, tiny, adapters=[])
  helpers = helpers_source()
  out = {}
  for index, name in enumerate(names):
    row, spec, tag = table[name], specs[name], f"r{index}"
    tol = {"rtol": row.get("rtol", 1e-3), "atol": 1e-3}
    files = [(f"{tag}-in{i}.bin", a.shape) for i, a in enumerate(row["inputs"])]
    run = fill(ROW, HELPERS=helpers, LIB=lib_source(row["lib"]))
    spec["kernelgen"] = kernelgen_spec(server, files, run, f"{tag}-ref.bin", tol)
    if "error" not in spec["tinygrad"]:
      program = json.loads((folder / spec["tinygrad"]["program"]).read_text())
      spec["tinygrad"]["python_ms"] = program["python_s"] * 1e3
    if "error" not in spec["ort"]:
      spec["ort"]["warm_model"] = "warm.onnx"
    out[name] = spec
  return out


def model_specs(folder: Path, server, models: list) -> dict:
  """{model: {system: spec}} of the light ONNX models (bench/onnx_models.py's cases)."""
  import numpy as np

  import kernelgen as kg
  from onnx_models import model_case
  out = {}
  for name in models:
    data, x, want = model_case(name)
    model = kg.onnx.load(data)
    given = model.input_names[0]
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in model.input_shapes[given]]
    (folder / f"{name}.onnx").write_bytes(data)
    (folder / f"{name}-in0.bin").write_bytes(np.asarray(x, np.float32).tobytes())
    (folder / f"{name}-ref.bin").write_bytes(np.ascontiguousarray(want, np.float32).tobytes())
    run = fill(MODEL, NAME=repr(given), OUTPUT=repr(model.output_names[0]))
    no_onnx = {"error": "no ONNX import"}
    out[f"light {name} (ONNX)"] = {
      "kernelgen": kernelgen_spec(server, [(f"{name}-in0.bin", shape)], run, f"{name}-ref.bin",
                                  MODEL_TOL, model=f"{name}.onnx"),
      "tinygrad": no_onnx, "tfjs": no_onnx,
      "ort": {"kind": "ort", "model": f"{name}.onnx", "ref": f"{name}-ref.bin",
              "warm_model": "warm.onnx", **MODEL_TOL,
              "inputs": [{"name": given, "file": f"{name}-in0.bin", "shape": shape}]}}
  return out


def cold_row(pw, server, adapter: str, spec: dict) -> dict:
  """Every system's cold first result of one row, in a fresh browser on `adapter`."""
  lavapipe = adapter == "lavapipe"
  browser = peers.launch(pw, adapter, env=COLD_ENV)
  result = {"load_before": os.getloadavg()[0]}
  try:
    page = browser.new_context().new_page()
    page.set_default_timeout(PAGE_MS)
    page.goto(server.url("bench/web/peers_cold.html" + ("?compat" if lavapipe else "")))
    page.wait_for_selector("body[data-cold]", state="attached", timeout=180_000)
    ready = []
    for system in SYSTEMS:
      s = spec[system]
      if "error" in s:
        result[system] = {"error": s["error"]}
        continue
      s = spec_urls(server, s)
      if "warm_model" in s:
        s["warm_model"] = server.url(f"data/{s['warm_model']}")
      got = guarded(page, "([k, s, c]) => window.cold.warm(k, s, c)", system, s, lavapipe)
      if got.get("ok"):
        ready.append((system, s))
        result.setdefault("adapters_used", {})[system] = got.get("adapter")
      else:
        result[system] = {"error": "warm-up: " + got.get("error", "?")}
    for system, s in ready:
      page.wait_for_timeout(SETTLE_MS)
      got = guarded(page, "([k, s]) => window.cold.first(k, s)", system, s)
      if system == "tinygrad" and "ms" in got:
        got["page_ms"], got["ms"] = got["ms"], got["ms"] + s["python_ms"]
        got["python_ms"] = s["python_ms"]
      result[system] = got
      print(f"  {adapter}: {system} {got}", file=sys.stderr, flush=True)
    result["peers_adapters"] = guarded(page, "() => window.peers.info()")
  finally:
    browser.close()
  result["load_after"] = os.getloadavg()[0]
  return result


def uptime() -> str:
  """The `uptime` line: the load averages the table is reported with."""
  return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def measure(names=None, models=MODELS, adapters=peers.ADAPTERS, tiny: bool = False,
            playwright=None, partial: str | None = None, site: Path = ROOT / "site") -> dict:
  """The cold table: {adapter: {row: cold_row's result}}, with the machine's load. `names`:
  words of bench/peers.py's row names (None: every row); `playwright`: a started sync
  Playwright to use (the tests' session one), by default one of its own; `partial`: a file
  the results so far are written to after every row; `site`: the assembled site (./build.sh
  site) to serve."""
  import contextlib

  import numpy as np
  from playwright.sync_api import sync_playwright

  from browser_util import StaticServer
  table = peers.rows(np, tiny)
  names = [n for n in table if names is None or any(w in n for w in names)]
  out = {"uptime_start": uptime(), "cpus": os.cpu_count(), "adapters": {}}
  started = time.time()
  with tempfile.TemporaryDirectory(prefix="kg-cold-") as tmp:
    folder = Path(tmp)
    (folder / "warm.onnx").write_bytes(peers.onnx_model({"onnx": [("Floor", ["in0"], {})]},
                                                        [(1,)], (1,)))
    mounts = {"/bench/": ROOT / "bench", "/data/": folder,
              "/tfjs/": ROOT / ".venv-bench" / "npm" / "node_modules"}
    own = sync_playwright() if playwright is None else contextlib.nullcontext(playwright)
    with StaticServer(site, mounts=mounts) as server, own as pw:
      specs = {**(row_specs(folder, server, names, tiny) if names else {}),
               **model_specs(folder, server, list(models))}
      out["adapters"] = {adapter: {} for adapter in adapters}
      for name, spec in specs.items():     # a row on every adapter before the next row
        for adapter in adapters:
          print(f"{adapter} {name} (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
          out["adapters"][adapter][name] = cold_row(pw, server, adapter, spec)
          out["uptime_end"], out["seconds"] = uptime(), round(time.time() - started)
          if partial is not None:          # what is done so far, should the run be cut short
            Path(partial).write_text(json.dumps(out, indent=1, default=str))
  return out


def fmt(entry: dict) -> str:
  """A system's cell: its first result's time, WRONG, failed, or n/a (no ONNX import)."""
  if "error" in entry:
    return "failed" if not entry["error"].startswith("no ONNX") else "n/a"
  ms = entry["ms"]
  text = f"{ms:.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"
  return text if entry.get("ok") else text + " WRONG"


def split(entry: dict) -> tuple:
  """kernelgen's cell's parts: (its Python compile, its pipeline builds), as table text."""
  if "python_ms" not in entry or "error" in entry:
    return "-", "-"
  return tuple(f"{entry[key]:.0f} ms" if entry[key] < 10_000 else f"{entry[key] / 1000:.1f} s"
               for key in ("python_ms", "pipeline_ms"))


def ratio(row: dict) -> str:
  """Best correct peer's cold first result / ours (> 1: ours came first)."""
  ours = row.get("kernelgen", {})
  good = [row[s]["ms"] for s in peers.PEERS if row.get(s, {}).get("ok")]
  if not ours.get("ok") or not good:
    return "-"
  return f"{min(good) / ours['ms']:.2f}×"


def print_table(result: dict) -> None:
  """The table per adapter, what failed and why, and the load."""
  for adapter, rows in result["adapters"].items():
    print(f"\n{adapter}: cold first result (fresh browser profile per row), ms")
    print(f"  {'row':44s}" + "".join(f"{s:>14s}" for s in SYSTEMS) +
          f"{'kg py':>10s}{'kg pipe':>10s}  best peer/ours  load")
    for name, row in rows.items():
      print(f"  {name[:44]:44s}" + "".join(f"{fmt(row.get(s, {'error': '?'})):>14s}"
                                           for s in SYSTEMS)
            + "".join(f"{part:>10s}" for part in split(row.get("kernelgen", {})))
            + f"  {ratio(row):>14s}  {row['load_before']:.1f}-{row['load_after']:.1f}")
    for name, row in rows.items():
      for s in SYSTEMS:
        entry = row.get(s, {})
        if "error" in entry and not entry["error"].startswith("no ONNX"):
          print(f"  ! {name} {s}: {entry['error'][:160]}")
  print(f"\nuptime at start: {result['uptime_start']}\n"
        f"uptime at end:   {result.get('uptime_end')}\n{result.get('seconds')} s, "
        f"{result['cpus']} CPUs; tinygrad's figure includes its Python (CPython, natively); "
        "ours our Python in Pyodide (kg py: its kernels' compiles; kg pipe: the time its "
        "pipelines were being built)")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description="cold first results: kernelgen vs every peer")
  parser.add_argument("--adapters", default=",".join(peers.ADAPTERS))
  parser.add_argument("--rows", default=None,
                      help="comma-separated words of row names ('' for none); default all")
  parser.add_argument("--models", default=",".join(MODELS), help="light ONNX models ('' none)")
  parser.add_argument("--tiny", action="store_true", help="tiny rows (a check, not a bench)")
  parser.add_argument("--json", help="also write the results here (after every row)")
  parser.add_argument("--table", help="only print the table of a results file (--json's)")
  args = parser.parse_args(argv)
  if args.table:
    print_table(json.loads(Path(args.table).read_text()))
    return 0
  words = None if args.rows is None else [w for w in args.rows.split(",") if w]
  result = measure(words, [m for m in args.models.split(",") if m],
                   args.adapters.split(","), args.tiny, partial=args.json)
  print_table(result)
  return 0


if __name__ == "__main__":
  sys.exit(main())
