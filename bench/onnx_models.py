"""ONNX light-model inference in headless Chromium: kernelgen vs onnxruntime-web (WebGPU EP).

The models are the onnx package's "light" SqueezeNet and ResNet-50 (tests/helpers/onnx_corpus.py), on
the onnx backend runner's input (arange / n) with its expected output. One page
(bench/web/onnx_models.html, served with the site ./build.sh site assembled and
.venv-bench/npm mounted at /npm/) holds both: kernelgen through its embedding API (Pyodide
worker + the worker's WebGPU device) and onnxruntime-web on the main thread, on the same adapter,
in a fresh browser per (adapter, model). For each:

  first result   file bytes -> first output on the CPU: kernelgen's load_model (parse, build,
                 compile WGSL and PTX) + first run (pipelines, upload, kernels, read back);
                 onnxruntime-web's InferenceSession.create + first run.
  inference      then `rounds` more inferences each, interleaved (ours, peer, ours, ...):
                 wall time per inference (input on the CPU -> output on the CPU; for kernelgen
                 that includes Pyodide building the lazy graph and finding its cached kernels)
                 is the figure both have, and the one the 1.5x target is checked on. GPU time
                 (the sum of the kernels' GPU timestamps in one inference, per kernel too) is
                 kernelgen's only: onnxruntime-web 1.31's WebGPU bundle is its C++ WebGPU EP
                 (the asyncify build), which reports no per-kernel GPU times to the page.
                 lavapipe has no timestamp queries at all. Medians.

Every output is checked against the expected output (rtol 1e-3, atol 1e-7, the onnx data's);
a wrong one is marked. Adapters: SwiftShader (core) and Mesa lavapipe through ANGLE
(compatibility mode, no timestamp queries, so wall time only).

    python bench/onnx_models.py [--rounds N] [--models squeezenet,resnet50]
                                [--adapters swiftshader,lavapipe]     (prints a table + JSON)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

BOOT_MS = 180_000
RUN_MS = 1_800_000
RTOL, ATOL = 1e-3, 1e-7
ADAPTERS = ("swiftshader", "lavapipe")
MODELS = ("squeezenet", "resnet50")


def model_case(name: str):
  """(model bytes, input values, expected output as numpy) of the light model `name`."""
  import numpy as np

  import onnx_corpus
  from kernelgen.onnx.data import read_tensor_file
  import kernelgen as kg
  path = onnx_corpus.data_dir() / "light" / f"light_{name}.onnx"
  model = kg.onnx.load(str(path))
  shape = tuple(d if isinstance(d, int) and d > 0 else 1
                for d in model.input_shapes[model.input_names[0]])
  n = int(np.prod(shape))
  x = (np.arange(n) / n).astype(np.float32)
  _, _, want_shape, raw = read_tensor_file(str(path).replace(".onnx", "_output_0.pb"))
  return path.read_bytes(), x.tolist(), np.frombuffer(raw, np.float32).reshape(want_shape)


def check(output, want) -> dict:
  """Whether `output` (flat values) matches the expected output; its max |error|."""
  import numpy as np
  got = np.asarray(output, np.float32)
  if got.size != want.size:
    return {"matches": False, "max_abs_error": None, "why": f"{got.size} values, not {want.size}"}
  got = got.reshape(want.shape)
  ok = bool(np.allclose(got, want, rtol=RTOL, atol=ATOL))
  return {"matches": ok, "max_abs_error": float(np.max(np.abs(got - want)))}


def top_kernels(kernels: list, n: int = 6) -> list:
  """The n kernels with the most GPU time in one inference (same names summed)."""
  totals: dict = {}
  for k in kernels:
    totals[k["name"]] = totals.get(k["name"], 0.0) + k["ms"]
  return [{"name": name, "ms": round(ms, 3)}
          for name, ms in sorted(totals.items(), key=lambda kv: -kv[1])[:n]]


def side(first: dict, runs: list, want) -> dict:
  """A tool's figures from its first result and its steady-state runs."""
  gpu = [r["gpuMs"] for r in runs if r.get("gpuMs") is not None]
  checks = [check(first["output"], want)] + [check(r["output"], want) for r in runs]
  return {"first_ms": first["firstMs"], "load_ms": first["loadMs"],
          "first_run_ms": first["runMs"],
          "wall_ms": statistics.median(r["wallMs"] for r in runs) if runs else None,
          "gpu_ms": statistics.median(gpu) if gpu else None,
          "wall_samples_ms": [round(r["wallMs"], 1) for r in runs],
          "matches": all(c["matches"] for c in checks),
          "max_abs_error": max((c["max_abs_error"] or 0.0) for c in checks),
          "top_kernels": top_kernels(runs[-1]["kernels"]) if runs else [],
          "kernels": len(runs[-1]["kernels"]) if runs else None,
          "adapter": first.get("adapter")}


def guarded(page, call: str, *args) -> dict:
  try:
    return page.evaluate(call, list(args))
  except Exception as error:   # a failure is a row's figure, not the end of the bench
    return {"error": str(error).splitlines()[0][:200]}


def measure_one(playwright, server, adapter: str, name: str, rounds: int) -> dict:
  from browser_util import launch_chromium, local_page
  data, x, want = model_case(name)
  lavapipe = adapter == "lavapipe"
  browser = launch_chromium(playwright, lavapipe=lavapipe)
  out: dict = {"adapter": adapter, "model": name}
  try:
    with local_page(browser) as page:
      page.goto(server.url("bench/web/onnx_models.html"))
      page.wait_for_selector("body[data-ready]", state="attached", timeout=BOOT_MS)
      page.set_default_timeout(RUN_MS)
      firsts = {"kernelgen": guarded(page, "([b, x, c]) => bench.kgFirst(b, x, c)",
                                     list(data), x, lavapipe),
                "ort": guarded(page, "([b, x, c]) => bench.ortFirst(b, x, c)",
                               list(data), x, lavapipe)}
      runs: dict = {"kernelgen": [], "ort": []}
      calls = {"kernelgen": "() => bench.kgRun()", "ort": "() => bench.ortRun()"}
      for _ in range(rounds):
        for tool in ("kernelgen", "ort"):
          if "error" not in firsts[tool]:
            result = guarded(page, calls[tool])
            if "error" in result:
              firsts[tool] = result
            else:
              runs[tool].append(result)
      for tool, first in firsts.items():
        out[tool] = first if "error" in first else side(first, runs[tool], want)
      print(f"  {adapter} {name}: " + json.dumps({t: out[t] for t in ("kernelgen", "ort")}),
            file=sys.stderr, flush=True)
  finally:
    browser.close()
  return out


def measure(rounds: int = 3, models=MODELS, adapters=ADAPTERS) -> list[dict]:
  from playwright.sync_api import sync_playwright

  from browser_util import StaticServer
  mounts = {"/bench/": ROOT / "bench", "/npm/": ROOT / ".venv-bench" / "npm" / "node_modules"}
  results = []
  with StaticServer(ROOT / "site", mounts=mounts) as server, sync_playwright() as playwright:
    for adapter in adapters:
      for name in models:
        results.append(measure_one(playwright, server, adapter, name, rounds))
  return results


def rows(results: list[dict]) -> list[dict]:
  """Table rows: (what, ours, peer, unit, note) per figure; ratio = peer / ours (speed-up)."""
  out = []
  for r in results:
    ours, peer = r.get("kernelgen", {}), r.get("ort", {})
    where = f"{r['model']} {r['adapter']}"
    wrong = [t for t, s in (("ours", ours), ("peer", peer)) if s.get("matches") is False]
    note = ("WRONG output: " + ", ".join(wrong)) if wrong else ""
    for key, what in (("gpu_ms", "GPU time / inference"), ("wall_ms", "wall / inference"),
                      ("first_ms", "file -> first result")):
      a, b = ours.get(key, ours.get("error")), peer.get(key, peer.get("error"))
      if a is None and b is None:
        continue
      out.append({"what": f"{where}: {what}", "ours": a, "peer": b, "note": note})
  return out


def run_rows(results: list[dict]) -> list[dict]:
  """The rows of bench/run.py's table (its --only key ONNX): ratio = peer / ours, target 1.5x
  on the time per inference (the figure both tools have), none on the others."""
  out = []
  for r in rows(results):
    ours, peer = r["ours"], r["peer"]
    ok = isinstance(ours, (int, float)) and isinstance(peer, (int, float)) and ours > 0
    gpu = "wall / inference" in r["what"]
    ratio = peer / ours if ok else None
    met = (ratio >= 1.5 and not r["note"]) if gpu and ratio is not None else None
    out.append({"row": "ONNX", "what": r["what"], "ours": ours if ok else ours,
                "peer": peer, "unit": "ms", "ratio": ratio, "target": "≥ 1.5×" if gpu else "-",
                "met": met, "note": r["note"] or "peer: onnxruntime-web WebGPU"})
  return out


def fmt(value) -> str:
  if isinstance(value, (int, float)):
    return f"{value:.1f} ms" if value < 1000 else f"{value / 1000:.2f} s"
  return "n/a" if value is None else str(value)[:40]


def print_table(table: list[dict]) -> None:
  head = ["what", "kernelgen", "onnxruntime-web", "peer/ours", "note"]
  cells = []
  for r in table:
    ok = isinstance(r["ours"], (int, float)) and isinstance(r["peer"], (int, float)) and r["ours"]
    cells.append([r["what"], fmt(r["ours"]), fmt(r["peer"]),
                  f"{r['peer'] / r['ours']:.2f}×" if ok else "", r["note"]])
  widths = [max(len(c[i]) for c in cells + [head]) for i in range(len(head))]
  for line in [head, ["-" * w for w in widths]] + cells:
    print(" | ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--models", default=",".join(MODELS))
  parser.add_argument("--adapters", default=",".join(ADAPTERS))
  args = parser.parse_args(argv)
  started = time.time()
  results = measure(args.rounds, args.models.split(","), args.adapters.split(","))
  print_table(rows(results))
  print(f"\n{time.time() - started:.0f} s on a shared machine (other jobs running); "
        "GPU time: kernelgen's timestamp queries (SwiftShader only; the peer reports none)")
  print(json.dumps(results, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
