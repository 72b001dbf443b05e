"""Language models in the page (issue 35's Measure: Fast): greedy generation from one ONNX file
(bench/lm_models.py's SmolLM2-135M / Qwen2.5-0.5B layouts, random weights) by kernelgen against
onnxruntime-web's WebGPU and wasm backends, in one page per adapter (SwiftShader; Mesa lavapipe
through ANGLE, compatibility mode), interleaved, everything served from this machine
(cross-origin isolated: ORT's wasm threads).

Our side is one WebGPU bundle exported here in CPython from that ONNX file for the adapter
(export/onnx_lm.py): its step (the new tokens of a run) symbolic up to the prompt's length, the KV
cache its state, the weights on the GPU once; model.js's `generate` runs the prompt in one run,
then one run per token, reading back only token ids (bench/web/lm_page.js). The peers run the
ONNX file itself: onnxruntime-web 1.31 (.venv-bench/npm), a prefill call then one call per token,
the present caches fed back as past (on the GPU for its WebGPU backend), logits read back.

Per model, dtype and adapter: each system is loaded and runs the prefill once (`ttft`: fetching
its files to the first token, cold: pipelines and shaders are made then; the page's device is
made before), with where that time went (`phases`, bench/web/lm_trace.js: the fetches, the
weights' upload, each pipeline's build with its WGSL lines, load() done, the first token, the
first decode steps, printed under the system's line), then `--rounds`
interleaved rounds (bench/peers.round_order), each a greedy generation of `--tokens` tokens after
a `--prompt`-token prompt: `prefill` tokens/s = prompt / (prompt to first token), `decode`
tokens/s = (tokens - 1) / the decode steps' time; medians. Every system's tokens are checked
against onnxruntime's (CPU) greedy tokens (`agree`: positions equal of `tokens`, the worst
round), and once, untimed, fed onnxruntime's tokens (forced decoding: `top1`, positions whose
next token equals onnxruntime's; issue 35 asks >= 99.5 % for q4). `disp/L`: compute
dispatches per decode step (counted by wrapping WebGPU's dispatch calls) per layer; `peak MB`:
the peak of live GPU buffer bytes on the system's device (created minus destroyed). Not a test:
nothing is asserted; the load is printed.

    python bench/lm_page.py [--configs smollm2-135m] [--dtypes q4,fp32] [--layers L]
                            [--prompt 128] [--tokens 128] [--adapters swiftshader,lavapipe]
                            [--rounds 3] [--systems kernelgen,ort wasm] [--last-logits]
                            [--keep DIR] [--json OUT] [--runs N]

`--layers L` keeps the real widths and cuts the depth (full depth is slow on software adapters);
`--last-logits` writes the models with the LM head on the last position only (as exports with
logits_to_keep do; without it every system's prefill computes the head for all the prompt);
`--keep DIR` keeps the ONNX files and bundles there and reuses them; `--systems` picks the
systems (onnxruntime-web's WebGPU backend on SwiftShader is by far the slowest at full depth);
`--runs N` compiles the bundle's kernels for N runs (lowering/compile_cost.py: larger register
tiles, a longer build; 1, the default, as any one-off export; the folder name does not say it:
use a fresh --keep folder).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
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
import lm_models  # noqa: E402
from peers import ADAPTERS, round_order  # noqa: E402

SYSTEMS = ("kernelgen", "ort webgpu", "ort wasm")
SETTLE_MS = 200
ONE_FILE = 2**31 - 2**26          # protobuf's limit on one message, less a margin
PAGE_MS = 3_600_000
ISOLATED = {"Cross-Origin-Opener-Policy": "same-origin",
            "Cross-Origin-Embedder-Policy": "require-corp"}


def write_model(cfg, dtype: str, path: Path, last_logits: bool) -> None:
  """The random-weight model of `cfg` in `dtype` as one .onnx file (ORT-web reads one buffer),
  or, past protobuf's 2 GB (Qwen2.5-0.5B in fp32), the graph with its weights in `path`.data
  next to it (external data: ORT-web is given that file too, see page_specs)."""
  if path.exists():
    return
  model = lm_models.build(cfg, dtype, last_logits=last_logits)
  if model.ByteSize() < ONE_FILE:
    path.write_bytes(model.SerializeToString())
    return
  import onnx
  onnx.save_model(model, str(path), save_as_external_data=True, location=external(path).name)


def external(path: Path) -> Path:
  """Where write_model puts the weights of a model past protobuf's 2 GB."""
  return path.with_name(path.name + ".data")


def export_bundle(kg, path: Path, folder: Path, adapter: str, prompt: int,
                  context: int, runs: int = 1) -> dict:
  """The bundle of the ONNX file `path` for `adapter` in `folder` (reused when there), its step
  symbolic up to `prompt` tokens, its kernels compiled for `runs` runs: {bundle: folder,
  export_s}."""
  from kernelgen.export.onnx_lm import causal_program
  start = time.perf_counter()
  if not (folder / "manifest.json").exists():
    outputs, state = causal_program(kg.onnx.load(str(path)), prompt, context, adapter=adapter)
    more = {"runs": runs} if runs > 1 else {}
    kg.export(outputs, str(folder), format="webgpu", state=state, adapter=adapter, **more)
  return {"bundle": folder, "export_s": time.perf_counter() - start}


def page_specs(server, data: Path, onnx: Path, bundles: dict, cfg, dtype: str, prompt: list,
               systems=SYSTEMS) -> dict:
  """{system: what window.lm.prepare takes} for one model on one adapter, for `systems`."""
  url = lambda p: server.url("data/" + str(Path(p).relative_to(data)).replace(os.sep, "/"))  # noqa: E731
  past = [{"name": f"past_key_values.{i}.{w}", "heads": cfg.kv_heads, "dim": cfg.head_dim,
           "dtype": "float16" if dtype == "fp16" else "float32"}
          for i in range(cfg.layers) for w in ("key", "value")]
  data_file = external(onnx)
  weights = [{"path": data_file.name, "data": url(data_file)}] if data_file.exists() else None
  out = {f"ort {ep}": {"kind": "ort", "ep": ep, "model": url(onnx), "past": past,
                       "vocab": cfg.vocab, "prompt": prompt, "externalData": weights}
         for ep in ("webgpu", "wasm")}
  out["kernelgen"] = {"error": bundles["error"]} if "error" in bundles else {
    "kind": "bundle", "bundle": url(bundles["bundle"]) + "/", "prompt": prompt}
  return {system: out[system] for system in systems}


def run_row(page, specs: dict, prompt: list, want: list, rounds: int) -> dict:
  """One model on the page's adapter: every system of `specs` prepared (ttft), fed `want` once
  (forced decoding: `top1`), then `rounds` interleaved generations each."""
  row = {}
  for system, spec in specs.items():
    got = {"error": spec["error"]} if "error" in spec else \
      page.evaluate("([k, s]) => window.lm.prepare(k, s)", [system, spec])
    row[system] = {**got, "runs": []}
    print(f"    {system}: { {k: v for k, v in got.items() if k not in ('runs', 'trace')} }",
          file=sys.stderr, flush=True)
    if got.get("trace"):
      row[system]["phases"] = phases(got["trace"])
      print_phases(row[system]["phases"], file=sys.stderr)
  ready = [s for s in specs if "error" not in row[s]]
  for system in list(ready):
    with failing(row, ready, system):
      row[system]["top1"] = page.evaluate("([k, p, w]) => window.lm.forced(k, p, w)",
                                          [system, prompt, want])
  for r in range(rounds):
    for system in round_order(list(ready), r):
      with failing(row, ready, system):
        run = page.evaluate("([k, p, t, s]) => window.lm.generate(k, p, t, s)",
                            [system, prompt, len(want), SETTLE_MS])
      if system not in ready:
        continue
      run["agree"] = sum(a == b for a, b in zip(run.pop("tokens"), want))
      row[system]["runs"].append(run)
      print(f"    round {r} {system}: prefill {run['prefillMs']:.0f} ms, decode "
            f"{run['decodeMs']:.0f} ms, agree {run['agree']}/{len(want)}, load "
            f"{os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
  for system in ready:
    summarize(row[system], len(prompt), len(want))
    page.evaluate("(k) => window.lm.release(k)", system)
  return row


@contextlib.contextmanager
def failing(row: dict, ready: list, system: str):
  """A system whose page call fails (onnxruntime-web's WebGPU backend losing its device at full
  depth, say) leaves the row with its error and stops running; the other systems go on."""
  try:
    yield
  except Exception as error:    # noqa: BLE001 (the row says why)
    row[system]["error"] = f"{type(error).__name__}: {error}"[:300]
    ready.remove(system)
    print(f"    {system}: {row[system]['error']}", file=sys.stderr, flush=True)


def phases(trace: dict) -> dict:
  """Where the time to first token went (bench/web/lm_trace.js's events, ms from the start of
  load): the fetches (manifest, kernels' WGSL, weights: first start to last body read), the
  queue writes before the model was loaded (the weights' upload: their own ms, and the span),
  the pipelines (first start to last made; each one's own wall ms while all are in flight, with
  its WGSL lines), load() done, the first token, the two warm-up decode steps."""
  marks = trace["marks"]
  loaded = marks.get("loaded", 0.0)

  def span(events, what):
    done = [e for e in events if e.get("end") is not None]
    return {what: len(done), "from": min((e["start"] for e in done), default=0.0),
            "to": max((e["end"] for e in done), default=0.0),
            "bytes": sum(e.get("bytes") or 0 for e in done)}
  kinds = {"manifest": lambda u: u.endswith("manifest.json"), "wgsl": lambda u: u.endswith(".wgsl"),
           "weights": lambda u: u.endswith(".safetensors") or u.endswith(".onnx")}
  out = {name: span([f for f in trace["fetches"] if test(f["url"])], "files")
         for name, test in kinds.items()}
  writes = [w for w in trace["writes"] if w["start"] <= loaded]
  out["upload"] = {**span(writes, "writes"), "own": sum(w["end"] - w["start"] for w in writes)}
  built = [p for p in trace["pipelines"] if p.get("end") is not None]
  out["pipelines"] = {**span(built, "made"), "own": sum(p["end"] - p["start"] for p in built),
                      "each": sorted(({"label": p.get("label"), "lines": p.get("lines"),
                                       "ms": p["end"] - p["start"], "start": p["start"]}
                                      for p in built), key=lambda p: -p["ms"])}
  out["marks"] = marks
  return out


def print_phases(got: dict, file=sys.stdout, top: int = 6) -> None:
  """phases() as three lines: files, upload and pipelines; load, first token, steps; the
  slowest pipelines."""
  f = lambda p: f"{p['from'] / 1000:.2f}-{p['to'] / 1000:.2f}"   # noqa: E731
  m, pipes = got["marks"], got["pipelines"]
  print(f"      fetch manifest {f(got['manifest'])}, wgsl x{got['wgsl']['files']} {f(got['wgsl'])},"
        f" weights {got['weights']['bytes'] / 2**20:.0f} MB {f(got['weights'])}; upload "
        f"x{got['upload']['writes']} {f(got['upload'])} (own {got['upload']['own'] / 1000:.2f});"
        f" pipelines x{pipes['made']} {f(pipes)} s", file=file)
  steps = ", ".join(f"{k} {v / 1000:.2f}" for k, v in m.items())
  first = (m.get("first", 0) - m.get("loaded", 0)) / 1000
  print(f"      marks (s from start): {steps}; first run {first:.2f} s", file=file)
  slow = "; ".join(f"{p['label'][:28]} {p['lines']}L {p['ms'] / 1000:.2f}"
                   for p in pipes["each"][:top])
  print(f"      slowest pipelines (s, in flight together): {slow}", file=file, flush=True)


def summarize(entry: dict, prompt: int, tokens: int) -> None:
  """Medians of an entry's runs: prefill and decode tokens/s, dispatches per step, the worst
  agreement, the peak live bytes."""
  runs = entry["runs"]
  if not runs:
    return
  entry["prefill_tps"] = statistics.median(prompt / (r["prefillMs"] / 1000) for r in runs)
  entry["decode_tps"] = statistics.median((tokens - 1) / (r["decodeMs"] / 1000) for r in runs)
  entry["dispatches"] = statistics.median(r["dispatchesPerStep"] for r in runs)
  entry["agree"] = min(r["agree"] for r in runs)
  peaks = [r["memory"]["peak"] for r in runs if r.get("memory")]
  entry["peak_bytes"] = max(peaks) if peaks else None


def open_page(pw, server, adapter: str, stack):
  """A fresh browser on `adapter` with the bench page loaded (closed with `stack`)."""
  from browser_util import launch_chromium
  browser = launch_chromium(pw, lavapipe=adapter == "lavapipe")
  stack.callback(browser.close)
  return load_page(browser, server, adapter, stack)


def load_page(browser, server, adapter: str, stack):
  """The bench page loaded in a new local-only page of `browser` (closed with `stack`)."""
  from browser_util import local_page
  page = stack.enter_context(local_page(browser))
  page.set_default_timeout(PAGE_MS)
  page.goto(server.url("bench/web/lm_page.html" + ("?compat" if adapter == "lavapipe" else "")))
  page.wait_for_selector("body[data-ready]", state="attached", timeout=120_000)
  return page


def serve(stack, data: Path):
  """The static server of the bench page, `data` (models, bundles) and onnxruntime-web
  (cross-origin isolated), stopped with `stack`."""
  from browser_util import StaticServer
  mounts = {"/bench/": ROOT / "bench", "/data/": data,
            "/npm/": ROOT / ".venv-bench" / "npm" / "node_modules"}
  return stack.enter_context(StaticServer(ROOT / "bench", mounts=mounts, headers=ISOLATED))


def measure(args) -> dict:
  """Every chosen model and dtype on every adapter: {rows, load, info}; with args.json the
  figures so far are written there after every row."""
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  from playwright.sync_api import sync_playwright

  out = {"rows": [], "load": {"start": os.getloadavg()}, "info": {}, "args": vars(args)}
  with tempfile.TemporaryDirectory(prefix="kg-lm-page-") as tmp, contextlib.ExitStack() as stack:
    data = (args.keep or Path(tmp)).resolve()
    data.mkdir(parents=True, exist_ok=True)
    server = serve(stack, data)
    pw = stack.enter_context(sync_playwright())
    pages = {a: open_page(pw, server, a, stack) for a in args.adapters}
    for name in args.configs:
      cfg = lm_models.CONFIGS[name]
      cfg = dataclasses.replace(cfg, layers=args.layers or cfg.layers)
      prompt = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab, args.prompt)]
      for dtype in args.dtypes:
        for row in one_model(kg, server, pages, data, name, cfg, dtype, prompt, args):
          out["rows"].append(row)
          if args.json:
            args.json.write_text(json.dumps(out, indent=1, default=str))
    out["info"] = {a: page.evaluate("window.lm.info()") for a, page in pages.items()}
  out["load"]["end"] = os.getloadavg()
  return out


def one_model(kg, server, pages, data: Path, name: str, cfg, dtype: str, prompt: list,
              args):
  """The rows of one model in one dtype (a generator: each as it is timed): written, its
  reference tokens, exported, timed."""
  tag = f"{name}-L{cfg.layers}-{dtype}{'-last' if args.last_logits else ''}"
  onnx = data / f"{tag}.onnx"
  write_model(cfg, dtype, onnx, args.last_logits)
  start = time.perf_counter()
  want = lm_models.ort_greedy(str(onnx), prompt, args.tokens)
  print(f"{tag}: onnxruntime CPU greedy {time.perf_counter() - start:.1f} s", file=sys.stderr,
        flush=True)
  for adapter, page in pages.items():
    try:
      bundles = export_bundle(kg, onnx, data / f"{tag}-{adapter}", adapter, len(prompt),
                              len(prompt) + args.tokens, args.runs)
    except Exception as error:    # noqa: BLE001 (the row says why)
      bundles = {"error": f"{type(error).__name__}: {error}"[:300]}
    done = bundles.get("error") or f"{bundles['export_s']:.0f} s"
    print(f"  {adapter}: export {done}", file=sys.stderr, flush=True)
    specs = page_specs(server, data, onnx, bundles, cfg, dtype, prompt, args.systems)
    row = run_row(page, specs, prompt, want, args.rounds)
    row = {"model": name, "layers": cfg.layers, "dtype": dtype, "adapter": adapter, **row,
           "load": os.getloadavg()[0], "export_s": bundles.get("export_s")}
    print_row(row, args.tokens, file=sys.stderr)
    yield row


def cell(entry: dict, key: str, fmt: str) -> str:
  value = entry.get(key)
  return "err" if "error" in entry else "-" if value is None else format(value, fmt)


def print_row(row: dict, tokens: int, file=sys.stdout) -> None:
  """One line per system of `row` (see HEADER), then the systems' errors."""
  head = f"{row['model']:13} {row['layers']:>2} {row['dtype']:5} {row['adapter']:11}"
  systems = [s for s in SYSTEMS if s in row]
  for system in systems:
    e = row[system]
    agree = f"{e['agree']}/{tokens}" if "agree" in e else "-"
    top1 = f"{e['top1']}/{tokens}" if "top1" in e else "-"
    disp = e.get("dispatches")
    per_layer = "-" if not disp else f"{disp:.0f} ({disp / row['layers']:.1f})"
    peak = e.get("peak_bytes")
    ttft = e.get("ttftMs")
    print(f"{head} {system:10} {cell(e, 'prefill_tps', '8.1f')} {cell(e, 'decode_tps', '7.2f')} "
          f"{'-' if ttft is None else f'{ttft / 1000:6.1f}':>6} {per_layer:>12} "
          f"{'-' if not peak else f'{peak / 2**20:7.1f}':>7} "
          f"{agree:>7} {top1:>7} {row['load']:5.1f}",
          file=file, flush=True)
  for system in systems:
    if "error" in row[system]:
      print(f"    {system}: {row[system]['error']}", file=file)


def forced_summary(rows: list, tokens: int, goal: float = 0.995) -> None:
  """kernelgen's forced-decoding top-1 agreement per q4 row against issue 35's goal."""
  for row in rows:
    top1 = row["kernelgen"].get("top1")
    if row["dtype"] == "q4" and top1 is not None:
      print(f"  forced top-1 {row['model']} L{row['layers']} q4 {row['adapter']}: {top1}/{tokens} "
            f"({100 * top1 / tokens:.1f} %; goal >= {100 * goal:.1f} %: "
            f"{'met' if top1 >= goal * tokens else 'NOT met'})")


HEADER = (f"{'model':13} {'L':>2} {'dtype':5} {'adapter':11} {'system':10} {'prefill':>8} "
          f"{'decode':>7} {'ttft s':>6} {'disp (/L)':>12} {'peak MB':>7} {'agree':>7} "
          f"{'top1':>7} {'load':>5}")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--configs", default="smollm2-135m")
  parser.add_argument("--dtypes", default="q4,fp32")
  parser.add_argument("--layers", type=int, default=0, help="cut the depth (0: the config's)")
  parser.add_argument("--prompt", type=int, default=128)
  parser.add_argument("--tokens", type=int, default=128)
  parser.add_argument("--adapters", default=",".join(ADAPTERS))
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--systems", default=",".join(SYSTEMS),
                      help="which of kernelgen, ort webgpu, ort wasm to run")
  parser.add_argument("--last-logits", action="store_true",
                      help="the models' LM head on the last position only (logits_to_keep 1)")
  parser.add_argument("--runs", type=int, default=1,
                      help="compile the bundle's kernels for this many runs (1: a one-off "
                           "run's kernels, capped by the compile budget)")
  parser.add_argument("--keep", type=Path, help="keep (and reuse) the models and bundles here")
  parser.add_argument("--json", type=Path, help="write every figure here")
  args = parser.parse_args(argv)
  args.configs, args.dtypes = args.configs.split(","), args.dtypes.split(",")
  args.adapters = args.adapters.split(",")
  args.systems = [s for s in SYSTEMS if s in args.systems.split(",")]
  started = time.time()
  result = measure(args)
  print(HEADER)
  for row in result["rows"]:
    print_row(row, args.tokens)
  forced_summary(result["rows"], args.tokens)
  for adapter, info in result["info"].items():
    print(f"  {adapter}: ours on {info.get('adapter')}; onnxruntime-web: {info.get('peers')}; "
          f"cross-origin isolated {info.get('isolated')}, {info.get('cores')} cores")
  print(f"\n{time.time() - started:.0f} s; prompt {args.prompt}, {args.tokens} new tokens, "
        f"median of {args.rounds} interleaved generations per system; prefill / decode in "
        f"tokens/s; load averages {result['load']}")
  if args.json:
    args.json.write_text(json.dumps(result, indent=1, default=str))
  return 0


if __name__ == "__main__":
  sys.exit(main())
