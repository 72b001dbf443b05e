"""Light ONNX models (the onnx package's light test models) as PTX bundles on PTXSIM, natively.

For each model: `kernelgen export MODEL.onnx --target ptx --arch sm_80` (the CLI, as a user runs
it; an input name like ResNet-50's 'gpu_0/data_0' is kept in the manifest), then
`kg.load_bundle(dir).run({input: x}, device="PTXSIM")` with x = arange / n (the input the light
models' expected outputs were made with), compared with onnxruntime on the same input and with
the model's stored expected output (rtol 1e-3, atol 1e-7, as tests/onnx_import/test_onnx_light.py).
Prints the export and the simulation times (wall and CPU seconds) and the load average.
The light models' weights make their softmax output uniform (every class 0.001), which says
little; --tail K also makes the outputs of the graph's last K nodes before it bundle outputs
(SqueezeNet's last conv: 1000x13x13 values spread over 2e9..1.4e10) and compares each.

    python bench/ptxsim_onnx_bundles.py [--tail K] [MODEL ...]   (default: squeezenet resnet50)
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


def with_tail_outputs(path: Path, tail: int, out_dir: str) -> Path:
  """The model with the outputs of its last `tail` nodes before the final one as graph outputs."""
  import onnx
  from onnx import helper
  model = onnx.load(str(path))
  for node in model.graph.node[-1 - tail:-1]:
    model.graph.output.append(helper.make_tensor_value_info(node.output[0],
                                                            onnx.TensorProto.FLOAT, None))
  tailed = Path(out_dir) / f"{path.stem}_tail.onnx"
  onnx.save(model, str(tailed))
  return tailed


def run_model(name: str, out_dir: str, tail: int = 0) -> dict:
  import onnx_corpus
  import onnxruntime as ort
  from kernelgen.onnx.data import read_tensor_file
  path = onnx_corpus.data_dir() / "light" / f"light_{name}.onnx"
  stored_path, path = path, with_tail_outputs(path, tail, out_dir) if tail else path
  out_dir = os.path.join(out_dir, "bundle")
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
  got = {o["name"]: out[o["name"]].numpy() for o in bundle.outputs}
  secs, cpu = time.perf_counter() - start, time.process_time() - cpu
  session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
  want = dict(zip([o.name for o in session.get_outputs()],
                  session.run(None, {spec["name"]: x})))
  _, _, shape, raw = read_tensor_file(str(stored_path).replace(".onnx", "_output_0.pb"))
  stored = np.frombuffer(raw, np.float32).reshape(shape)
  first = bundle.outputs[0]["name"]
  checks = {k: {"spread": float(want[k].std()),
                "max_rel_vs_onnxruntime": float(np.max(np.abs(got[k] - want[k])) /
                                                max(float(np.max(np.abs(want[k]))), 1e-30)),
                "matches_onnxruntime": bool(np.allclose(got[k], want[k], rtol=1e-3, atol=1e-7))}
            for k in got}
  return {"model": name, "input": spec["name"], "outputs": checks,
          "kernels": len(bundle.manifest["kernels"]), "export_s": round(exported, 1),
          "ptxsim_s": round(secs, 1), "ptxsim_cpu_s": round(cpu, 1),
          "matches_stored": bool(np.allclose(got[first], stored, rtol=1e-3, atol=1e-7))}


def main(argv: list[str]) -> None:
  tail = int(argv[argv.index("--tail") + 1]) if "--tail" in argv else 0
  names = [a for a in argv if not a.startswith("--") and not a.isdigit()]
  names = names or ["squeezenet", "resnet50"]
  print(f"load average at the start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
  for name in names:
    with tempfile.TemporaryDirectory() as tmp:
      print(run_model(name, tmp, tail), flush=True)
  print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main(sys.argv[1:])
