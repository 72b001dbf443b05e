"""Where SwiftShader's time goes in PP-OCRv4 det's top kernel (issue 42): the dense 3x3 conv
96 -> 24 channels at 80x80 (r_1_24_80_80__96_3_3, 8 x 16 register tiles unrolled 4, as
SwiftShader's tile entry compiles it), timed natively (wgpu on Chromium's SwiftShader ICD, or
lavapipe's) as compiled and as hand-edited WGSL, interleaved, best / median of REPS. Besides
the GPU timestamps it reports the process's CPU time per dispatch (SwiftShader's and lavapipe's
workers are threads of this process): on a shared machine the wall time swings 2-3x with the
load, the CPU time by a few percent.

Variants (the edited ones compute wrong values on purpose, but for quad broadcast, which is
checked against numpy):
  as compiled        the kernel kernelgen emits
  weights static     each weight load b2[i] read as b2[0]: a constant index, which SwiftShader
                     loads once for the 4 lanes of its SIMD group instead of lane by lane
  all static         the input loads too
  quad broadcast     each lane of a quad loads a quarter of the step's weight vec4s and
                     quadBroadcast hands them to the others (subgroups; exact)
  quad, no broadcast the same loads without the broadcasts (their cost)

Measured (2 shared CPUs, load 6-12, CPU ms best / median of 5, several runs): as compiled
74.0-74.8 / 74.1-78.5 | weights static 29.4-29.9 / 29.7-32.0 | all static 12.7-13.2 / 13.0-14.1 |
quad broadcast 62.7-62.9 / 63.9-64.2 | quad, no broadcast 52.1 / 52.7 | subgroupShuffle for
quadBroadcast 67.4 / 68.4. So about 60 % of the kernel's CPU time are the weight loads and
another 23 % the input loads (per-lane gathers: SwiftShader's loads of a dynamic index run lane
by lane), 17 % the arithmetic. Not kept: quad broadcasts (16 %), weights staged in workgroup
memory per step (93 ms: 2 barriers per step, and workgroup loads are gathers too: 76.6 without
the barriers), other tiles (CPU ms, one run, load ~6: 8x16 76 | 12x16 70 | 16x16 89 | 8x20 75 |
16x8 115 | 8x8 97 | 4x16 94), the 3 x 3 window unrolled whole (no division in the loop: 71 against
74). Lavapipe runs the same kernel (its own tile choice for it too) in ~18 CPU ms (8-wide FMA where
SwiftShader has 4-wide mul + add), and its loads dominate as well (load ~8, CPU ms best / median
of 7): as compiled 17.9 / 18.3 | weights static 6.8 / 7.2 | all static 2.5 / 2.9 | quad
broadcast 12.9 / 13.2 (-28 %) | quad, no broadcast 12.3 / 12.6. The quad broadcast of the
operand a quad's lanes share (a new cross-lane op in the IR, its renderers and the interpreter)
is the next step for both CPU adapters; not done in issue 42's session.

    python bench/swiftshader_loads.py [swiftshader|lavapipe] [REPS]     (default swiftshader 5)
"""
from __future__ import annotations

import dataclasses
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from icd import bind  # noqa: E402

ADAPTER = sys.argv[1] if len(sys.argv) > 1 else "swiftshader"
bind(ADAPTER)                                        # before wgpu loads

import numpy as np  # noqa: E402

from wgtile_wgpu import kg, prepare  # noqa: E402

WEIGHT = r"b2_in2\[u32\((v\d+)\) >> 2u\]"
INPUT = r"b1_in1\[u32\(select\(0i, v\d+, v\d+\)\) >> 2u\]"


def quad(src: str) -> str:
  """The step's weight vec4s (k-th at base + (k // 3) * 864 + (k % 3) * 4 floats: 8 output
  channels x 3 columns) loaded a quarter per lane of each quad, then quadBroadcast."""
  loads = re.findall(rf"let (v\d+): vec4<f32> = {WEIGHT};", src)
  base = loads[0][1]
  for k, (v, _) in enumerate(loads):
    src = re.sub(rf"let {v}: vec4<f32> = {WEIGHT};",
                 f"let {v}: vec4<f32> = quadBroadcast(kg_wq{k // 4}, {k % 4}u);", src)
  line = re.search(rf"\n    let {base}: i32 = [^\n]*\n", src).group(0)
  own = "".join(f"    let kg_wq{m}: vec4<f32> = b2_in2[u32({base} + kg_o{m}) >> 2u];\n"
                for m in range(len(loads) // 4))
  offsets = "  let kg_q: i32 = kg_lid0 & 3i;\n" + "".join(
    f"  let kg_o{m}: i32 = (({4 * m}i + kg_q) / 3i) * 864i + (({4 * m}i + kg_q) % 3i) * 4i;\n"
    for m in range(len(loads) // 4))
  return src.replace(line, line + own).replace("  for (", offsets + "  for (", 1)


VARIANTS = {
  "as compiled": lambda s: s,
  "weights static": lambda s: re.sub(WEIGHT, "b2_in2[0]", s),
  "all static": lambda s: re.sub(INPUT, "b1_in1[0]", re.sub(WEIGHT, "b2_in2[0]", s)),
  "quad broadcast": quad,
  "quad, no broadcast": lambda s: re.sub(r"quadBroadcast\((kg_wq\d+), \du\)", r"\1", quad(s)),
}
CHECKED = ("as compiled", "quad broadcast")


def main() -> None:
  reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
  rng = np.random.default_rng(0)
  x = rng.standard_normal((1, 96, 80, 80)).astype(np.float32)
  w = (rng.standard_normal((24, 96, 3, 3)) * 0.1).astype(np.float32)
  padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
  want = np.einsum("nchwij,ocij->nohw", windows, w, optimize=True)
  rt = kg.Device["WEBGPU"]
  plan, _, _ = prepare(rt, [x, w], lambda a, b: a.conv2d(b, padding=1),
                       {"adapter": "swiftshader", "tile": (8, 16), "tile_unroll": 4})
  kernel, handles = plan[-1]
  kernels = {}
  for label, edit in VARIANTS.items():
    source = edit(kernel.source)
    kernels[label] = dataclasses.replace(kernel, source=source,
                                         launch=dataclasses.replace(kernel.launch, source=source))
    rt.run(kernels[label], handles, {}, timed=True)
    if label in CHECKED:
      got = np.frombuffer(rt.copyout(handles[0]), np.float32)[:want.size].reshape(want.shape)
      print(f"{label}: matches numpy {np.allclose(got, want, rtol=2e-3, atol=2e-3)}", flush=True)
  times = {label: ([], []) for label in kernels}
  for r in range(reps):
    for label in (list(kernels) if r % 2 == 0 else list(kernels)[::-1]):
      cpu = time.process_time()
      times[label][0].append(rt.run(kernels[label], handles, {}, timed=True) * 1e3)
      times[label][1].append((time.process_time() - cpu) * 1e3)
  print(f"{rt.adapter.info['device']}, load {os.getloadavg()[0]:.1f}: ms best / median")
  for label, (gpu, cpu) in times.items():
    print(f"  {label:20s} GPU {min(gpu):7.1f} / {statistics.median(gpu):7.1f}   "
          f"CPU {min(cpu):7.1f} / {statistics.median(cpu):7.1f}", flush=True)


if __name__ == "__main__":
  main()
