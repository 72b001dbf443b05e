"""Where a warm streaming call's time goes on the page's Pyodide path (issue 42): Silero VAD
16k_op15 through the embedding API (web/kernelgen.js: the worker's Python and WebGPU device),
chunk after chunk, its state fed back (kept as a WEBGPU Tensor in the worker), so each warm call
is a replay (onnx/replay.py: no node visited, one submit). Per warm call (medians):

  page wall      kg.run(code) in the page: the worker round trip, the program runner, a new
                 512-sample chunk made in Python, Model.run, reading back the output
  Model.run      inside the worker: Model.run (the replay) and reading `output` back, Python's
                 clock (includes waiting for the GPU)
  GPU            the kernels' GPU timestamps (SwiftShader has them; lavapipe through ANGLE not)
  empty run      kg.run of a program that makes a 2-element Tensor: the runner's floor

The page's loadModel compiles the model on its declared inputs with symbolic sizes at 1, which
fails for Silero (a 1-sample chunk is shorter than its STFT window): the model stays loaded and
the calls give their own shapes. Compare with bench/pypi_page.py's bundle path (model.js, no
Python), the path a page calling a model every 32 ms should use. Not a test; load printed.
Needs the site (./build.sh site).

    python bench/pypi_worker.py [--adapters swiftshader,lavapipe] [--calls 15]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
import pypi_models  # noqa: E402

MODEL = "silero_vad_16k_op15.onnx"
WARMUP = 4
# one call, in the worker: a new chunk, the state the last call returned, the output read back;
# `out` = [ms of Model.run + readback, the output]
CALL = """
import random, time, kernelgen as kg
from kernelgen.web_api import models
chunk = kg.Tensor([[random.gauss(0, 0.1) for _ in range(512)]], device="WEBGPU")
state = models._MODEL.get("bench_state")
if state is None:
  state = kg.Tensor.zeros(2, 1, 128, device="WEBGPU").realize()
start = time.perf_counter()
o = models._MODEL["model"].run({"input": chunk, "state": state,
                                "sr": kg.Tensor(16000, dtype="int64", device="PYTHON")},
                               device="WEBGPU")
value = o["output"].tolist()[0][0]
models._MODEL["bench_state"] = o["stateN"].realize()
out = kg.Tensor([(time.perf_counter() - start) * 1e3, value])
"""
EMPTY = "import kernelgen as kg\nout = kg.Tensor([0.0, 0.0])"
JS = """async ([bytes, call, empty, calls, compat, warmup]) => {
  const { createKernelgen } = await import('/web/kernelgen.js');
  const kg = await createKernelgen({ base: '/', webgpu: true, compatibility: compat });
  try {
    await kg.loadModel(new Uint8Array(bytes), { arch: 'sm_80' });
  } catch (error) { /* its run at symbolic sizes 1 fails; the model stays loaded */ }
  const pause = () => new Promise((resolve) => setTimeout(resolve, 50));
  const rows = [];
  for (let i = 0; i < calls + warmup; i++) {
    await pause();
    const start = performance.now();
    const run = await kg.run(call, { timings: true });
    const wall = performance.now() - start;
    const gpu = run.timings.length ? run.timings.reduce((s, t) => s + t.ms, 0) : null;
    if (i >= warmup) rows.push({ wall, model: run.data[0], gpu, out: run.data[1] });
  }
  const floor = [];
  for (let i = 0; i < calls; i++) {
    await pause();
    const start = performance.now();
    await kg.run(empty, { timings: true });
    floor.push(performance.now() - start);
  }
  return { rows, floor };
}"""


def measure(adapter: str, calls: int, raw: bytes) -> dict:
  """The medians of `calls` warm calls on `adapter` (see the module docstring)."""
  from playwright.sync_api import sync_playwright

  from browser_util import StaticServer, launch_chromium, local_page
  with contextlib.ExitStack() as stack:
    server = stack.enter_context(StaticServer(ROOT / "site"))
    pw = stack.enter_context(sync_playwright())
    browser = launch_chromium(pw, lavapipe=adapter == "lavapipe")
    stack.callback(browser.close)
    page = stack.enter_context(local_page(browser))
    page.set_default_timeout(900_000)
    page.goto(server.url("index.html"))
    got = page.evaluate(JS, [list(raw), CALL, EMPTY, calls, adapter == "lavapipe", WARMUP])
  rows = got["rows"]
  gpu = [r["gpu"] for r in rows if r["gpu"] is not None]
  return {"wall": statistics.median(r["wall"] for r in rows),
          "model": statistics.median(r["model"] for r in rows),
          "gpu": statistics.median(gpu) if gpu else None,
          "empty": statistics.median(got["floor"]), "load": os.getloadavg()[0]}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--adapters", default="swiftshader,lavapipe")
  parser.add_argument("--calls", type=int, default=15)
  parser.add_argument("--cache", type=Path, default=pypi_models.CACHE)
  args = parser.parse_args()
  raw = next(r for label, r in pypi_models.models(["silero"], args.cache)
             if label.endswith(MODEL))
  print(f"{'adapter':12} {'page wall':>10} {'Model.run':>10} {'GPU':>7} {'empty run':>10} "
        f"{'load':>5}  (ms, medians of {args.calls} warm calls of {MODEL})")
  for adapter in args.adapters.split(","):
    m = measure(adapter, args.calls, raw)
    gpu = f"{m['gpu']:.2f}" if m["gpu"] is not None else "-"
    print(f"{adapter:12} {m['wall']:10.1f} {m['model']:10.1f} {gpu:>7} {m['empty']:10.1f} "
          f"{m['load']:5.1f}", flush=True)


if __name__ == "__main__":
  main()
