"""Option quad_weights (lowering/quad_share.py) on and off, natively (wgpu on Chromium's
SwiftShader ICD or lavapipe's), kernel by kernel: PP-OCRv4 det's top kernel (the dense 3x3 conv
96 -> 24 at 80x80, bench/swiftshader_loads.py) and a matmul, each compiled as the adapter's table
has it (subgroups on) with quad_weights False and True, checked against numpy, then run REPS
times interleaved. Reported: GPU timestamps and the process's CPU time per dispatch (the CPU
adapters' workers are threads of this process), best / median, with the load. With `det`,
PP-OCRv4 det's warm call (bench/pypi_kernels.py) is captured with quad_weights False and True and
every kernel that differs is timed the same way, each pair interleaved, then the whole call's
launches one after the other (CPU ms: under load the GPU timestamps swing 2x, the CPU time less).

    python bench/quad_weights.py [swiftshader|lavapipe] [REPS] [det]  (default lavapipe 7)
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from icd import bind  # noqa: E402

ADAPTER = sys.argv[1] if len(sys.argv) > 1 else "lavapipe"
bind(ADAPTER)                                        # before wgpu loads

import numpy as np  # noqa: E402

from wgtile_wgpu import kg, prepare  # noqa: E402


def workloads(rng) -> dict:
  """name -> (inputs, expression, numpy reference)."""
  x = rng.standard_normal((1, 96, 80, 80)).astype(np.float32)
  w = (rng.standard_normal((24, 96, 3, 3)) * 0.1).astype(np.float32)

  def conv_ref(x, w):
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True)
  a = rng.standard_normal((512, 384)).astype(np.float32)
  b = rng.standard_normal((384, 512)).astype(np.float32)
  return {"det conv 96->24 80x80": ([x, w], lambda p, q: p.conv2d(q, padding=1), conv_ref),
          "matmul 512x384x512": ([a, b], lambda p, q: p @ q, lambda p, q: p @ q)}


def timed(rt, pairs: dict, reps: int) -> dict:
  """{key: ([GPU ms], [CPU ms])} of each launch list in `pairs`, runs interleaved."""
  times = {key: ([], []) for key in pairs}
  for r in range(reps):
    for key in (list(pairs) if r % 2 == 0 else list(pairs)[::-1]):
      started = time.process_time()
      times[key][0].append(sum(rt.run(k, h, {}, timed=True) for k, h in pairs[key]) * 1e3)
      times[key][1].append((time.process_time() - started) * 1e3)
  return times


def det(rt, reps: int) -> None:
  """PP-OCRv4 det's warm-call kernels with quad_weights off and on (the module docstring)."""
  import onnxruntime as ort
  import pypi_kernels
  import pypi_models
  label, raw = next(m for m in pypi_models.models(["rapidocr"]) if "det_infer" in m[0])
  feeds = pypi_models.feeds_for(label, ort.InferenceSession(raw))
  base, calls = rt.render_options, {}
  for quad in (False, True):
    rt.render_options = lambda quad=quad: {**base(), "quad_weights": quad}
    model = kg.onnx.load(raw, float64="float32")
    calls[quad] = (model, pypi_kernels.captured_launches(kg, model, feeds))
  rt.render_options = base
  pairs = [(a, b) for a, b in zip(calls[False][1], calls[True][1])
           if a[0].source != b[0].source]
  print(f"{label}: {len(pairs)} of {len(calls[True][1])} kernels differ; "
        f"CPU ms best / median of {reps}, off -> on")
  for a, b in pairs:
    t = timed(rt, {False: [a], True: [b]}, reps)
    print(f"  {a[0].name[:44]:44s} {min(t[False][1]):7.2f} / {statistics.median(t[False][1]):7.2f}"
          f" -> {min(t[True][1]):7.2f} / {statistics.median(t[True][1]):7.2f}", flush=True)
  t = timed(rt, {quad: launches for quad, (_, launches) in calls.items()}, reps)
  print(f"  whole call, load {os.getloadavg()[0]:.1f}: GPU {min(t[False][0]):.1f} / "
        f"{statistics.median(t[False][0]):.1f} -> {min(t[True][0]):.1f} / "
        f"{statistics.median(t[True][0]):.1f}   CPU {min(t[False][1]):.1f} / "
        f"{statistics.median(t[False][1]):.1f} -> {min(t[True][1]):.1f} / "
        f"{statistics.median(t[True][1]):.1f}")


def main() -> None:
  reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
  rt = kg.Device["WEBGPU"]
  print(f"{rt.adapter.info['device']}: subgroups {rt.render_options().get('subgroups')}")
  if sys.argv[3:] == ["det"]:
    return det(rt, reps)
  for name, (inputs, expr, ref) in workloads(np.random.default_rng(0)).items():
    want, runs = ref(*inputs), {}
    for quad in (False, True):
      plan, out, _ = prepare(rt, inputs, expr, {"quad_weights": quad})
      for kernel, handles in plan:
        rt.run(kernel, handles, {}, timed=True)
      shared = sum(k.source.count("quadBroadcast") for k, _ in plan)
      ok = np.allclose(out.numpy(), want, rtol=2e-3, atol=2e-3)
      print(f"  {name}, quad_weights={quad}: {shared} quadBroadcast, matches numpy {ok}")
      runs[quad] = (plan, [], [])
    for r in range(reps):
      for quad in ((False, True) if r % 2 == 0 else (True, False)):
        plan, gpu, cpu = runs[quad]
        started = time.process_time()
        gpu.append(sum(rt.run(k, h, {}, timed=True) for k, h in plan) * 1e3)
        cpu.append((time.process_time() - started) * 1e3)
    print(f"  {name}, load {os.getloadavg()[0]:.1f}, ms best / median of {reps}:")
    for quad, (_, gpu, cpu) in runs.items():
      print(f"    quad_weights={quad!s:5}  GPU {min(gpu):7.2f} / {statistics.median(gpu):7.2f}"
            f"   CPU {min(cpu):7.2f} / {statistics.median(cpu):7.2f}", flush=True)


if __name__ == "__main__":
  main()
