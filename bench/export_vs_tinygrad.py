"""The digits MLP (web/demos/digits_weights.json) as a WebGPU bundle: kg.export vs tinygrad 0.10.1's
export_model, on the same page and adapter (headless Chromium, SwiftShader): bundle bytes,
load -> first result (import + load + first run), and wall time per run (write input, every
kernel, read back) averaged over RUNS runs. A fresh page per load, the tools interleaved.

tinygrad's export_model lives in its repository's extra/export_model.py (the 0.10.1 wheel does not
ship it): pass a copy of v0.10.1's file, and a Python with tinygrad 0.10.1 and wgpu (.venv-bench):

    python bench/export_vs_tinygrad.py --export-model PATH/export_model.py \
        --tinygrad-python .venv-bench/bin/python [--reps 3] [--runs 20]     (prints JSON)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
WEIGHTS = ROOT / "web" / "demos" / "digits_weights.json"

# run in tinygrad's Python: the same MLP through export_model("webgpu"), written to argv[2]
TINYGRAD = """
import base64, json, os, sys
os.environ["WEBGPU"] = "1"
import numpy as np
from tinygrad import Tensor
from tinygrad.nn.state import safe_save
import importlib.util
found = importlib.util.spec_from_file_location("export_model", sys.argv[1])
module = importlib.util.module_from_spec(found)
found.loader.exec_module(module)
export_model = module.export_model
spec = json.load(open(sys.argv[3]))
arr = {k: np.frombuffer(base64.b64decode(spec[k]["data"]), np.float32).reshape(spec[k]["shape"])
       for k in ("w1", "b1", "w2", "b2")}
class MLP:
  def __init__(self):
    for k, v in arr.items():
      setattr(self, k, Tensor(v.copy()).realize())
  def __call__(self, x):
    return (((x / 16) @ self.w1 + self.b1).relu() @ self.w2 + self.b2).softmax(-1)
prg, _, _, state = export_model(MLP(), "webgpu", Tensor.randn(1, 64))
os.makedirs(sys.argv[2], exist_ok=True)
open(os.path.join(sys.argv[2], "net.js"), "w").write(prg)
safe_save(state, os.path.join(sys.argv[2], "net.safetensors"))
"""

# JS: [tool, runs] -> {first_ms, run_ms, probs}; one device made before the clock starts
MEASURE = """async ([tool, runs]) => {
  const device = await (await navigator.gpu.requestAdapter()).requestDevice();
  const x = new Float32Array(64).map((_, i) => (i * 7) % 17);
  const t0 = performance.now();
  let run;
  if (tool === 'kernelgen') {
    const model = await (await import('/kernelgen/model.js')).load({ device });
    run = async () => (await model.run({ pixels: x })).probs;
  } else {
    const net = (await import('/tinygrad/net.js')).default;
    const forward = await net.load(device, '/tinygrad/net.safetensors');
    run = async () => (await forward(x))[0];
  }
  let probs = await run();
  const t1 = performance.now();
  for (let i = 0; i < runs; i++) probs = await run();
  const t2 = performance.now();
  return { first_ms: t1 - t0, run_ms: (t2 - t1) / runs, probs: Array.from(probs) };
}"""


def build(folder: Path, export_model: str, python: str) -> None:
  env = dict(os.environ, PYTHONPATH=str(ROOT / "core"))
  subprocess.run([sys.executable, "-m", "kernelgen", "export", str(ROOT / "web" / "demos" /
                  "digits_model.py"), "--out", str(folder / "kernelgen")], check=True, env=env,
                 stdout=subprocess.DEVNULL)
  script = folder / "make_tinygrad.py"
  script.write_text(TINYGRAD)
  subprocess.run([python, str(script), export_model, str(folder / "tinygrad"), str(WEIGHTS)],
                 check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  (folder / "index.html").write_text("<!doctype html><title>export vs tinygrad</title>")


def size(folder: Path) -> int:
  return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def main() -> None:
  args = argparse.ArgumentParser()
  args.add_argument("--export-model", required=True)
  args.add_argument("--tinygrad-python", default=str(ROOT / ".venv-bench" / "bin" / "python"))
  args.add_argument("--reps", type=int, default=3)
  args.add_argument("--runs", type=int, default=20)
  opts = args.parse_args()
  from playwright.sync_api import sync_playwright
  from browser_util import StaticServer, launch_chromium, local_page
  with tempfile.TemporaryDirectory() as tmp:
    folder = Path(tmp)
    build(folder, opts.export_model, opts.tinygrad_python)
    found = {tool: [] for tool in ("kernelgen", "tinygrad")}
    with StaticServer(folder) as server, sync_playwright() as pw:
      browser = launch_chromium(pw, webgpu=True)
      for _ in range(opts.reps):
        for tool in found:
          with local_page(browser) as page:
            page.goto(server.url("index.html"))
            found[tool].append(page.evaluate(MEASURE, [tool, opts.runs]))
      browser.close()
    loader = (folder / "kernelgen" / "model.js").stat().st_size
    summary = {tool: {"bundle_bytes": size(folder / tool),
                      "first_result_ms": statistics.median(r["first_ms"] for r in rows),
                      "run_ms": statistics.median(r["run_ms"] for r in rows)}
               for tool, rows in found.items()}
    summary["kernelgen"]["loader_bytes"] = loader
    a, b = found["kernelgen"][0]["probs"], found["tinygrad"][0]["probs"]
    summary["max_abs_difference"] = max(abs(x - y) for x, y in zip(a, b))
  print(json.dumps(summary, indent=1))


if __name__ == "__main__":
  main()
