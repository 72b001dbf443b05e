"""Option quad_weights (lowering/quad_share.py) on and off, natively (wgpu on Chromium's
SwiftShader ICD or lavapipe's), kernel by kernel: PP-OCRv4 det's top kernel (the dense 3x3 conv
96 -> 24 at 80x80, bench/swiftshader_loads.py) and a matmul, each compiled as the adapter's table
has it (subgroups on) with quad_weights False and True, checked against numpy, then run REPS
times interleaved. Reported: GPU timestamps and the process's CPU time per dispatch (the CPU
adapters' workers are threads of this process), best / median, with the load.

    python bench/quad_weights.py [swiftshader|lavapipe] [REPS]     (default lavapipe 7)
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ICDS = {"swiftshader": "/usr/lib/chromium/vk_swiftshader_icd.json",
        "lavapipe": "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"}
ADAPTER = sys.argv[1] if len(sys.argv) > 1 else "lavapipe"
if os.environ.get("VK_ICD_FILENAMES") != ICDS[ADAPTER]:     # the ICD before wgpu loads
  os.environ.update(VK_ICD_FILENAMES=ICDS[ADAPTER], VK_DRIVER_FILES=ICDS[ADAPTER])
  os.execv(sys.executable, [sys.executable] + sys.argv)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
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


def main() -> None:
  reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
  rt = kg.Device["WEBGPU"]
  print(f"{rt.adapter.info['device']}: subgroups {rt.render_options().get('subgroups')}")
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
