"""Real models from PyPI packages in the page (issue 42's Measure): kernelgen against
onnxruntime-web, its WebGPU and its wasm backends, in the same page, on the same inputs,
interleaved, on both CPU adapters (SwiftShader; Mesa lavapipe through ANGLE, compatibility mode).

Our side is the model exported as a WebGPU bundle (`kg.export`: model.js, the WGSL kernels,
weights.safetensors), what a page that ships a fixed model uses: one compute pass per call, no
Python in the page. It is compiled here in CPython for the adapter's class (option `adapter`) and
loaded by model.js on a device of the page's adapter. An input the model only reads as a setting
(Silero VAD's sample rate `sr`, BAKED) is a constant of the bundle: its value is the input's. The
peers: onnxruntime-web 1.31 (.venv-bench/npm) with `executionProviders: ['webgpu']` (its C++
WebGPU EP) and `['wasm']` (the wasm-only build; threads where the page is cross-origin isolated,
which this server makes it), each its own session of the model's file. Nothing is fetched from any
host but this machine (browser_util.local_page).

A streaming model (Silero VAD: its `state` input and `stateN` output, STATE) is exported with that
pair as bundle state (export/state.py): the state stays on the GPU between calls, starting from
zeros, and a timed call writes the chunk and reads back only `output` (as a page calling it every
32 ms does); its inputs here are the model's first chunk (state zeros) for every system, and our
first call reads every output (checked, the state's too). onnxruntime-web is fed the zero state
and reads both outputs each call. `--compare-state` also times the bundle exported without state
("kernelgen stateless": the state written and read back each call), interleaved. The bundle is
compiled for the adapter's storage buffers per kernel (`--buffers adapter`, the page's
maxStorageBuffersPerShaderStage: fewer, wider kernels; manifest.limits) or for a number
(`--buffers 8`: WebGPU's default). Per warm call our row also gives what model.calls counted
(dispatches / submits / writes / reads).

The models and their inputs are bench/pypi_models.py's (its wheels, SHAPES, feeds_for). Per model
and adapter: each system is loaded and run once (its outputs checked against onnxruntime on the
CPU: rtol 1e-3 / atol 1e-4, pypi_models.matches; checked again after the rounds), then `--rounds`
interleaved rounds (bench/peers.round_order), each system called once per round after a short
pause; a call is wall time from typed arrays on the CPU to every output back on the CPU. A row:
the median per system, `best ort` the faster correct peer, `ratio` = best ort / ours (> 1: we
are faster; the issue's goal is 1.5, and for Silero VAD at most 3 ms per 32 ms chunk). A wrong
output is marked and its time not counted. Not a test (nothing is asserted); the load is printed
with the table.

    python bench/pypi_page.py [--models silero_vad.onnx,...] [--adapters swiftshader,lavapipe]
                              [--rounds 5] [--keep DIR] [--json OUT] [--profile RUNS]
                              [--buffers adapter|N] [--compare-state] [--subgroups | --plain]

`--keep DIR` keeps the exported bundles and the inputs there, and reuses a bundle found there
(export takes minutes per model on this machine). `--profile RUNS` also loads our bundle again
with per-kernel GPU timestamps (SwiftShader has them; lavapipe through ANGLE does not) and prints
the kernels that take most of the best of RUNS runs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
import pypi_models  # noqa: E402  (the wheels, the inputs, the check)
from peers import ADAPTERS, round_order  # noqa: E402

# the five models (file names inside the wheels)
MODELS = ("silero_vad.onnx", "ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx",
          "common.onnx", "common_det.onnx")
BAKED = ("sr",)          # inputs read only as settings: constants of the bundle
STATE = {"state": "stateN"}   # a streaming model's state (input -> output), kept on the GPU
SYSTEMS = ("kernelgen", "ort webgpu", "ort wasm")
EXTRA = "kernelgen stateless"   # --compare-state: the bundle without state, timed beside
SETTLE_MS = 100
PAGE_MS = 1_800_000      # one call may take long: a model's pipelines on lavapipe, ORT's sessions
# The default export carries each kernel's subgroups form where it differs (export/alternates.py:
# SUBGROUP_REDUCE folds, quad_weights' QUAD_BROADCAST where the adapter's table sets it), which
# model.js runs where the device has subgroups and passes its quad probe (SwiftShader; lavapipe
# through ANGLE has no subgroups: the plain forms). --subgroups: bundles compiled with
# subgroups=True (refused where the device lacks them); --plain: subgroups=False.
EXPORT_OPTIONS: dict = {}
ISOLATED = {"Cross-Origin-Opener-Policy": "same-origin",
            "Cross-Origin-Embedder-Policy": "require-corp"}


def export_bundle(kg, raw: bytes, feeds: dict, folder: Path, adapter: str, buffers: int = 8,
                  state: dict | None = None) -> dict:
  """The model as a WebGPU bundle for `adapter` and `buffers` storage buffers per kernel in
  `folder` (reused when already there), with `state` ({input: output}) kept on the GPU:
  {inputs: [{name, dtype}], kernels, export_s, read: the outputs a call reads back}. BAKED inputs
  become constants."""
  manifest = folder / "manifest.json"
  start = time.perf_counter()
  if not manifest.exists():
    from kernelgen.export.inputs import model_feeds
    from kernelgen.export.plan import ModelOutputs
    model = kg.onnx.load(raw, float64="float32")
    shapes = {n: a.shape for n, a in feeds.items() if n not in BAKED}
    tensors, _ = model_feeds(model, shapes)
    for name in BAKED:
      if name in feeds:
        tensors[name] = kg.Tensor(feeds[name], device="PYTHON")
    outs = ModelOutputs(model.run(tensors, device="PYTHON", replay=False))
    kg.export(outs, str(folder), format="webgpu", adapter=adapter, state=state or None,
              max_storage_buffers=buffers, **EXPORT_OPTIONS)
  spec = json.loads(manifest.read_text())
  kept = {s["name"] for s in spec.get("state", [])}
  return {"inputs": [{"name": i["name"], "dtype": i["dtype"]} for i in spec["inputs"]
                     if i["name"] not in kept],
          "read": [o["name"] for o in spec["outputs"]
                   if o["name"] not in {s["output"] for s in spec.get("state", [])}],
          "kernels": len(spec["kernels"]), "limits": spec.get("limits", {}),
          "export_s": time.perf_counter() - start}


def write_inputs(folder: Path, tag: str, feeds: dict, bundle_inputs: list) -> dict:
  """The inputs' files: ORT-web's in the model's dtypes, the bundle's in its manifest's."""
  ort, ours = [], []
  for name, value in feeds.items():
    path = folder / f"{tag}-{name}.bin"
    path.write_bytes(np.ascontiguousarray(value).tobytes())
    ort.append({"name": name, "file": path.name, "dtype": str(value.dtype),
                "shape": list(value.shape)})
  for entry in bundle_inputs:
    path = folder / f"{tag}-{entry['name']}.kg.bin"
    path.write_bytes(np.ascontiguousarray(feeds[entry["name"]], entry["dtype"]).tobytes())
    ours.append({"name": entry["name"], "file": path.name, "dtype": entry["dtype"]})
  return {"ort": ort, "ours": ours}


def prepare_model(kg, ort, label: str, raw: bytes, folder: Path, adapters: dict,
                  stateless: bool = False) -> dict:
  """One model's files for the page: its .onnx, inputs, onnxruntime's outputs, a bundle per
  adapter ({adapter: storage buffers per kernel}; or the export's error), and with `stateless`
  one without state too."""
  session = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
  feeds = pypi_models.feeds_for(label, session)
  state = {i: o for i, o in STATE.items() if i in feeds and
           o in [x.name for x in session.get_outputs()]}
  for name in state:             # a stream's first chunk: its state starts as zeros
    feeds[name] = np.zeros_like(feeds[name])
  want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
  tag = Path(label).stem
  (folder / f"{tag}.onnx").write_bytes(raw)
  spec = {"label": label, "tag": tag, "want": want, "feeds": feeds, "bundles": {},
          "stateless": {}}
  for adapter, buffers in adapters.items():
    kinds = [("bundles", state, "")] + ([("stateless", {}, "-nostate")] if stateless and state
                                         else [])
    for key, kept, suffix in kinds:
      where = folder / f"{tag}-{adapter}-b{buffers}{suffix}"
      try:
        bundle = export_bundle(kg, raw, feeds, where, adapter, buffers, kept)
        spec[key][adapter] = {**bundle, "base": where.name,
                              "files": write_inputs(folder, tag, feeds, bundle["inputs"])}
      except Exception as error:     # noqa: BLE001 (a row says why)
        spec[key][adapter] = {"error": f"{type(error).__name__}: {error}"[:300]}
      print(f"  export {label}{suffix} for {adapter} ({buffers} buffers): " + (
        spec[key][adapter].get("error") or f"{spec[key][adapter]['kernels']} kernels, "
        f"limits {spec[key][adapter]['limits']}, {spec[key][adapter]['export_s']:.0f} s"),
        file=sys.stderr, flush=True)
  spec["ort_inputs"] = write_inputs(folder, tag, feeds, [])["ort"]
  return spec


def page_specs(server, spec: dict, adapter: str) -> dict:
  """{system: what window.pypi.prepare takes} for one model on one adapter."""
  url = lambda name: server.url(f"data/{name}")  # noqa: E731
  inputs = [{**i, "file": url(i["file"])} for i in spec["ort_inputs"]]
  out = {f"ort {ep}": {"kind": "ort", "ep": ep, "model": url(f"{spec['tag']}.onnx"),
                       "inputs": inputs} for ep in ("webgpu", "wasm")}
  for key, system in (("bundles", "kernelgen"), ("stateless", EXTRA)):
    bundle = spec[key].get(adapter)
    if bundle is None:
      continue
    out[system] = {"error": bundle["error"]} if "error" in bundle else {
      "kind": "bundle", "base": url(f"{bundle['base']}/"), "read": bundle["read"],
      "inputs": [{**i, "file": url(i["file"])} for i in bundle["files"]["ours"]]}
  return out


def check(outputs: dict, want: dict) -> dict:
  """outputs (name -> flat numbers) against onnxruntime's: {ok, max_err}."""
  errs, ok = [], True
  for name, w in want.items():
    got = outputs.get(name)
    if got is None or len(got) != w.size:
      return {"ok": False, "max_err": None,
              "why": f"{name}: {None if got is None else len(got)} values, want {w.size}"}
    g = np.asarray(got, np.float64).reshape(w.shape)
    ok = ok and pypi_models.matches(g, w)
    errs.append(float(np.abs(g - np.asarray(w, np.float64)).max()) if w.size else 0.0)
  return {"ok": ok, "max_err": max(errs, default=0.0)}


def run_model(page, server, spec: dict, adapter: str, rounds: int, profile: int = 0) -> dict:
  """One model's systems on the page's adapter: prepared and checked, timed in rounds; with
  `profile`, our bundle's kernels by GPU time (best of that many runs, timestamps)."""
  row, specs = {}, page_specs(server, spec, adapter)
  for system, s in specs.items():
    got = {"error": s["error"]} if "error" in s else \
      page.evaluate("([k, s]) => window.pypi.prepare(k, s)", [system, s])
    if "outputs" in got:
      got.update(check(got.pop("outputs"), spec["want"]))
    row[system] = {**got, "samples_ms": []}
    print(f"  {adapter} {spec['label']} {system}: "
          f"{ {k: v for k, v in row[system].items() if k != 'samples_ms'} }",
          file=sys.stderr, flush=True)
  ready = [s for s in row if "error" not in row[s]]
  for r in range(rounds):
    for system in round_order(ready, r):
      row[system]["samples_ms"].append(
        page.evaluate("([k, p]) => window.pypi.time(k, p)", [system, SETTLE_MS]))
  for system in ready:
    again = check(page.evaluate("(k) => window.pypi.outputs(k)", system), spec["want"])
    row[system]["ok"] = row[system]["ok"] and again["ok"]
    row[system]["ms"] = statistics.median(row[system]["samples_ms"])
    page.evaluate("(k) => window.pypi.release(k)", system)
  if profile and "kernelgen" in ready:
    row["profile"] = top_kernels(page.evaluate("([s, r]) => window.pypi.profile(s, r)",
                                               [specs["kernelgen"], profile]))
  return row


def top_kernels(best: dict | None, n: int = 8) -> dict | None:
  """The GPU time of one profiled run: its total and the n kernels that took most of it."""
  if not best:
    return None
  kernels = sorted(best["kernels"], key=lambda k: -k["ms"])
  return {"total_ms": best["total"], "kernels": len(kernels),
          "top": [{"name": k["name"], "ms": round(k["ms"], 3)} for k in kernels[:n]]}


def open_page(pw, server, adapter: str, stack):
  """A fresh browser on `adapter` with the bench page loaded (closed with `stack`)."""
  from browser_util import launch_chromium, local_page
  browser = launch_chromium(pw, lavapipe=adapter == "lavapipe")
  stack.callback(browser.close)
  page = stack.enter_context(local_page(browser))
  page.set_default_timeout(PAGE_MS)
  page.goto(server.url("bench/web/pypi_page.html" + ("?compat" if adapter == "lavapipe" else "")))
  page.wait_for_selector("body[data-ready]", state="attached", timeout=120_000)
  return page


def measure(labels, adapters=ADAPTERS, rounds: int = 5, keep: Path | None = None,
            cache: Path = pypi_models.CACHE, json_out: Path | None = None,
            profile: int = 0, buffers: str = "adapter", stateless: bool = False) -> dict:
  """Every chosen model on every adapter, model after model (exported, then timed in each
  adapter's page; a browser per adapter, open throughout): {rows, load, info}. With json_out,
  the figures so far are written there after every row."""
  import contextlib
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  import onnxruntime as ort
  from playwright.sync_api import sync_playwright

  from browser_util import StaticServer
  out = {"rows": [], "load": {"start": os.getloadavg()}, "info": {}}
  with tempfile.TemporaryDirectory(prefix="kg-pypi-page-") as tmp, \
       contextlib.ExitStack() as stack:
    folder = keep or Path(tmp)
    folder.mkdir(parents=True, exist_ok=True)
    mounts = {"/bench/": ROOT / "bench", "/data/": folder,
              "/npm/": ROOT / ".venv-bench" / "npm" / "node_modules"}
    server = stack.enter_context(StaticServer(ROOT / "bench", mounts=mounts, headers=ISOLATED))
    pw = stack.enter_context(sync_playwright())
    pages = {a: open_page(pw, server, a, stack) for a in adapters}
    counts = {a: page.evaluate("window.pypi.storageBuffers()") if buffers == "adapter"
              else int(buffers) for a, page in pages.items()}
    for label, raw in pypi_models.models(list(pypi_models.PACKAGES), cache):
      if label.split("/")[-1] not in labels:
        continue
      spec = prepare_model(kg, ort, label, raw, folder, counts, stateless)
      for adapter in adapters:
        row = run_model(pages[adapter], server, spec, adapter, rounds, profile)
        out["rows"].append({"model": label, "adapter": adapter, **row,
                            "load": os.getloadavg()[0],
                            "export_s": spec["bundles"][adapter].get("export_s")})
        print_row(out["rows"][-1], file=sys.stderr)
        if json_out:
          json_out.write_text(json.dumps(out, indent=1, default=str))
    out["info"] = {a: page.evaluate("window.pypi.info()") for a, page in pages.items()}
  out["load"]["end"] = os.getloadavg()
  return out


def best_peer(row: dict) -> tuple:
  """(system, ms) of the fastest correct onnxruntime-web backend, or (None, None)."""
  ok = [(row[s]["ms"], s) for s in SYSTEMS[1:] if row[s].get("ok") and "ms" in row[s]]
  return (min(ok)[1], min(ok)[0]) if ok else (None, None)


def cell(entry: dict) -> str:
  if "error" in entry:
    return "error"
  return f"{entry['ms']:.1f}{'' if entry.get('ok') else ' WRONG'}"


def print_row(row: dict, file=sys.stdout) -> None:
  peer, ms = best_peer(row)
  ours = row["kernelgen"]
  ratio = f"{ms / ours['ms']:.2f}x" if peer and ours.get("ok") and "ms" in ours else "-"
  calls = ours.get("calls") or {}
  counted = "/".join(str(calls.get(k, "-")) for k in ("dispatches", "submits", "writes", "reads"))
  print(f"{row['model'].split('/')[-1]:28} {row['adapter']:11} {cell(ours):>10} "
        f"{cell(row['ort webgpu']):>11} {cell(row['ort wasm']):>10} {ratio:>7} "
        f"{counted:>11} {row['load']:5.1f}", file=file, flush=True)
  for system in (*SYSTEMS, EXTRA):
    if "error" in row.get(system, {}):
      print(f"    {system}: {row[system]['error']}", file=file)
  if "ms" in row.get(EXTRA, {}):
    calls = row[EXTRA].get("calls") or {}
    print(f"    {EXTRA}: {cell(row[EXTRA])} ms, " + "/".join(
      str(calls.get(k, "-")) for k in ("dispatches", "submits", "writes", "reads")), file=file)
  if row.get("profile"):
    p = row["profile"]
    print(f"    our kernels by GPU time: {p['total_ms']:.1f} ms in {p['kernels']}; " + ", ".join(
      f"{k['name']} {k['ms']:.2f}" for k in p["top"]), file=file)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--models", default=",".join(MODELS), help="model file names")
  parser.add_argument("--adapters", default=",".join(ADAPTERS))
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--cache", type=Path, default=pypi_models.CACHE,
                      help="where the wheels are kept")
  parser.add_argument("--keep", type=Path, help="keep (and reuse) the bundles and inputs here")
  parser.add_argument("--json", type=Path, help="write every figure here")
  parser.add_argument("--profile", type=int, default=0, metavar="RUNS",
                      help="also time our kernels with GPU timestamps, best of RUNS runs "
                           "(adapters with timestamp queries: SwiftShader)")
  parser.add_argument("--buffers", default="adapter",
                      help="storage buffers per kernel to compile for: 'adapter' (the page's "
                           "maxStorageBuffersPerShaderStage) or a number (8: WebGPU's default)")
  parser.add_argument("--compare-state", action="store_true",
                      help="also time a streaming model's bundle without state, interleaved")
  parser.add_argument("--subgroups", action="store_true",
                      help="export with subgroups=True (EXPORT_OPTIONS)")
  parser.add_argument("--plain", action="store_true",
                      help="export with subgroups=False: no kernel's subgroups form")
  args = parser.parse_args(argv)
  EXPORT_OPTIONS.update({"subgroups": True} if args.subgroups else {})
  EXPORT_OPTIONS.update({"subgroups": False} if args.plain else {})
  started = time.time()
  result = measure(args.models.split(","), args.adapters.split(","), args.rounds, args.keep,
                   args.cache, args.json, args.profile, args.buffers, args.compare_state)
  print(f"{'model':28} {'adapter':11} {'ours ms':>10} {'ort gpu ms':>11} {'wasm ms':>10} "
        f"{'ratio':>7} {'d/s/w/r':>11} {'load':>5}")
  for row in result["rows"]:
    print_row(row)
  for adapter, info in result["info"].items():
    print(f"  {adapter}: ours on {info.get('adapter')}; onnxruntime-web: {info.get('peers')}; "
          f"cross-origin isolated {info.get('isolated')}, {info.get('cores')} cores")
  print(f"\n{time.time() - started:.0f} s; median of {args.rounds} interleaved calls per "
        f"system (inputs on the CPU to outputs on the CPU); ratio = best correct "
        f"onnxruntime-web backend / ours; d/s/w/r: our dispatches / submits / buffer writes / "
        f"outputs read back per warm call (model.calls); load averages {result['load']}")
  if args.json:
    args.json.write_text(json.dumps(result, indent=1, default=str))
  return 0


if __name__ == "__main__":
  sys.exit(main())
