"""Light ONNX models (the onnx package's light test models) as PTX bundles on PTXSIM, natively.

For each model: `kernelgen export MODEL.onnx --target ptx --arch sm_80` (the CLI, as a user runs
it; an input name like ResNet-50's 'gpu_0/data_0' is kept in the manifest), then
`kg.load_bundle(dir).run({input: x}, device="PTXSIM")` with x = arange / n (the input the light
models' expected outputs were made with), compared with onnxruntime on the same input and with
the model's stored expected output (rtol 1e-3, atol 1e-7, as tests/onnx_import/test_onnx_light.py).
Prints the export and the simulation times (wall and CPU seconds) and the load average.

    python bench/ptxsim_onnx_bundles.py [MODEL ...]      (default: squeezenet resnet50)
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "core"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

import kernelgen as kg  # noqa: E402


def run_model(name: str, out_dir: str) -> dict:
  import onnx_corpus
  import onnxruntime as ort
  from kernelgen.onnx.data import read_tensor_file
  path = onnx_corpus.data_dir() / "light" / f"light_{name}.onnx"
  start = time.perf_counter()
  subprocess.run([sys.executable, "-m", "kernelgen", "export", str(path), "--target", "ptx",
                  "--arch", "sm_80", "--out", out_dir], check=True, stdout=subprocess.DEVNULL,
                 env=dict(os.environ, PYTHONPATH=str(ROOT / "core")))
  exported = time.perf_counter() - start
  bundle = kg.load_bundle(out_dir)
  spec = bundle.inputs[0]
  n = int(np.prod(spec["shape"]))
  x = (np.arange(n).reshape(spec["shape"]) / n).astype(np.float32)
  start, cpu = time.perf_counter(), time.process_time()
  out = bundle.run({spec["name"]: x}, device="PTXSIM")
  got = out[bundle.outputs[0]["name"]].numpy()
  secs, cpu = time.perf_counter() - start, time.process_time() - cpu
  session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
  want = session.run(None, {spec["name"]: x})[0]
  _, _, shape, raw = read_tensor_file(str(path).replace(".onnx", "_output_0.pb"))
  stored = np.frombuffer(raw, np.float32).reshape(shape)
  return {"model": name, "input": spec["name"], "output": bundle.outputs[0]["name"],
          "kernels": len(bundle.manifest["kernels"]), "export_s": round(exported, 1),
          "ptxsim_s": round(secs, 1), "ptxsim_cpu_s": round(cpu, 1),
          "max_abs_vs_onnxruntime": float(np.max(np.abs(got - want))),
          "matches_onnxruntime": bool(np.allclose(got, want, rtol=1e-3, atol=1e-7)),
          "matches_stored": bool(np.allclose(got, stored, rtol=1e-3, atol=1e-7))}


def main(argv: list[str]) -> None:
  names = argv or ["squeezenet", "resnet50"]
  print(f"load average at the start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
  for name in names:
    with tempfile.TemporaryDirectory() as tmp:
      print(run_model(name, tmp), flush=True)
  print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main(sys.argv[1:])
