"""The nine light ONNX models on device WEBGPU (wgpu-py; Mesa lavapipe here) the way a user runs
them (model.run, then .numpy()), each in a fresh process with an empty Mesa shader cache (a warm
cache hides the driver's shader compiles), timed by phase and checked against the expected
output (rtol 1e-3, atol 1e-7, as tests/onnx_import/test_onnx_light.py):

  build     kg.onnx.load + model.run (parse, fold, the lazy graph)
  compile   kernelgen's compiles (schedule, optimize, lower, render WGSL), summed
  pipeline  wgpu shader modules + compute pipelines (naga, lavapipe's NIR), summed
  driver    the rest until the output is read back: the driver's compiles (lavapipe compiles a
            kernel with LLVM at its first dispatch) and the kernels' runs
  all       wall time of the whole
  cpu       CPU seconds of the model's process, all threads (user + system): what the run needs
            of the machine whatever else runs on it (on an idle 2-core machine its wall time is
            about this or less, as the driver runs kernels on both cores)

    nice python bench/onnx_light_native.py [MODEL ...]      (default: all nine, short names)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("squeezenet", "resnet50", "bvlc_alexnet", "zfnet512", "shufflenet", "inception_v1",
          "inception_v2", "densenet121", "vgg19")


def one(name: str) -> dict:
  """Run model `name` here (called in a fresh process) and return its phases and error."""
  sys.path.insert(0, str(ROOT / "core"))
  sys.path.insert(0, str(ROOT / "tests" / "helpers"))
  import numpy as np

  import kernelgen as kg
  import onnx_corpus
  from kernelgen.device import Device
  from kernelgen.onnx.data import read_tensor_file
  spent = {"compile": 0.0, "pipeline": 0.0, "kernels": 0}
  import kernelgen.cache as cache

  def timed(fn, key):
    def wrapper(*a, **k):
      t = time.perf_counter()
      try:
        return fn(*a, **k)
      finally:
        spent[key] += time.perf_counter() - t
        spent["kernels"] += key == "compile"
    return wrapper
  cache.cached_compile = timed(cache.cached_compile, "compile")
  runtime = Device["WEBGPU"]
  runtime._build = timed(runtime._build, "pipeline")
  path = onnx_corpus.data_dir() / "light" / f"light_{name}.onnx"
  start = time.perf_counter()
  model = kg.onnx.load(str(path))
  shape = tuple(d if isinstance(d, int) and d > 0 else 1
                for d in model.input_shapes[model.input_names[0]])
  n = int(np.prod(shape))
  x = (np.arange(n).reshape(shape) / n).astype(np.float32)
  out = model.run({model.input_names[0]: x}, device="WEBGPU")[model.output_names[0]]
  built = time.perf_counter()
  out.realize()
  queued = time.perf_counter()
  got = out.numpy()
  done = time.perf_counter()
  _, _, want_shape, raw = read_tensor_file(str(path).replace(".onnx", "_output_0.pb"))
  want = np.frombuffer(raw, np.float32).reshape(want_shape)
  return {"model": name, "kernels": spent["kernels"], "build": built - start,
          "compile": spent["compile"], "pipeline": spent["pipeline"],
          "queue": queued - built, "wait": done - queued, "all": done - start,
          "max_abs_error": float(np.max(np.abs(got - want))),
          "matches": bool(np.allclose(got, want, rtol=1e-3, atol=1e-7))}


def main(argv: list[str]) -> None:
  if argv[:1] == ["--one"]:
    print("RESULT " + json.dumps(one(argv[1])), flush=True)
    return
  print("# light models on WEBGPU (wgpu-py, lavapipe), fresh process and empty Mesa shader cache "
        "each; a shared 2-core machine (other jobs running), wall seconds", flush=True)
  print(f"{'model':14s} {'kernels':>7s} {'build':>7s} {'compile':>8s} {'pipeline':>8s} "
        f"{'driver':>8s} {'all':>8s} {'cpu':>8s}  max|error|  matches", flush=True)
  for name in argv or MODELS:
    with tempfile.TemporaryDirectory() as cache_dir:
      env = {**os.environ, "MESA_SHADER_CACHE_DIR": cache_dir}
      used = _children_cpu()
      proc = subprocess.run([sys.executable, __file__, "--one", name], env=env,
                            capture_output=True, text=True)
      cpu = _children_cpu() - used
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
      print(f"{name:14s} failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}", flush=True)
      continue
    r = json.loads(lines[-1][7:])
    print(f"{name:14s} {r['kernels']:7d} {r['build']:7.1f} {r['compile']:8.1f} "
          f"{r['pipeline']:8.1f} {r['wait'] + r['queue'] - r['compile'] - r['pipeline']:8.1f} "
          f"{r['all']:8.1f} {cpu:8.1f}  {r['max_abs_error']:.3g}  {r['matches']}", flush=True)


def _children_cpu() -> float:
  import resource
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
  main(sys.argv[1:])
