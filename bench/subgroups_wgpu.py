"""Grouped reductions with and without subgroup ops on wgpu (Mesa lavapipe here).

Each workload is compiled twice for the WEBGPU device, with option subgroups=False and =True
(the rest of the device's options as they are) and checked against numpy; then the two run
`reps` times each, interleaved (a run's time: the sum of its kernels' GPU timestamps). Reported:
the median and the fastest run of each, and the ratio of the fastest (less noisy on a shared
machine).
The workloads are the grouped-reduction ones: sums over rows, softmax over rows, a 16M sum. The
optimizer uses subgroups only from 64 threads per output (optimize.SUBGROUP_MIN_GROUP), so rows
of 1024 (32 threads) compile the same both ways.

    python bench/subgroups_wgpu.py [REPS]          (prints a JSON summary)
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def workloads(np):
  """name -> (numpy input, expression over a tensor, numpy reference)."""
  rng = np.random.default_rng(0)

  def softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

  return {
    "sum rows 1024×1024": (rng.standard_normal((1024, 1024)).astype(np.float32),
                           lambda x: x.sum(axis=1), lambda x: x.sum(axis=1)),
    "max rows 1024×1024": (rng.standard_normal((1024, 1024)).astype(np.float32),
                           lambda x: x.max(axis=1), lambda x: x.max(axis=1)),
    "sum rows 256×16384": (rng.standard_normal((256, 16384)).astype(np.float32),
                           lambda x: x.sum(axis=1), lambda x: x.sum(axis=1)),
    "softmax 4096×1024": (rng.standard_normal((4096, 1024)).astype(np.float32),
                          lambda x: x.softmax(axis=-1), softmax_ref),
    "sum 16M": (rng.standard_normal(1 << 24).astype(np.float32), lambda x: x.sum(),
                lambda x: x.sum(dtype=np.float64)),
  }


def prepare(kg, rt, x, expr, subgroups: bool):
  """The expression's kernels compiled with `subgroups`, their buffers bound, and the output."""
  from kernelgen.compiler import compile_item
  from kernelgen.graph.lazy import Buffer
  from kernelgen.graph.schedule import schedule
  out = expr(kg.Tensor(x, device="WEBGPU").realize())
  plan, used = [], False
  for item in schedule([out.node]):
    buffer = Buffer("WEBGPU", item.out.dtype, item.out.size)
    compiled = compile_item(item, "wgsl", {**rt.render_options(), "subgroups": subgroups})
    used |= "subgroups" in compiled.launch.features
    plan.append((compiled, [buffer.handle] + [s.buffer.handle for s in item.inputs]))
    item.out.buffer, item.out.src = buffer, ()
  return plan, out, used


def main(reps: int = 5) -> dict:
  import numpy as np
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  from kernelgen.device import Device
  rt = Device["WEBGPU"]
  if not rt.render_options().get("subgroups"):
    return {"adapter": rt.adapter.info["device"], "skipped": "the adapter has no subgroups"}
  results = {}
  for name, (x, expr, ref) in workloads(np).items():
    plans, times, row = {}, {False: [], True: []}, {}
    for subgroups in (False, True):
      plan, out, used = prepare(kg, rt, x, expr, subgroups)
      rt.run(plan[0][0], plan[0][1], {}, timed=True)       # the pipelines built before timing
      want = ref(x.astype(np.float64))
      for compiled, handles in plan:
        rt.run(compiled, handles, {})
      error = float(np.max(np.abs(out.numpy() - want)) / max(1.0, float(np.max(np.abs(want)))))
      assert error < 1e-4, f"{name} subgroups={subgroups}: relative error {error}"
      plans[subgroups] = plan, used
    for _ in range(reps):             # interleaved, so both see the same machine load
      for subgroups, (plan, _) in plans.items():
        times[subgroups].append(sum(rt.run(c, h, {}, timed=True) for c, h in plan))
    for subgroups, (plan, used) in plans.items():
      row["subgroups" if subgroups else "plain"] = {
        "median_ms": round(statistics.median(times[subgroups]) * 1e3, 3),
        "min_ms": round(min(times[subgroups]) * 1e3, 3), "uses_subgroups": used,
        "threads_per_workgroup": [c.local_size[0] for c, _ in plan]}
    row["speedup_min"] = round(min(times[False]) / min(times[True]), 2)
    results[name] = row
  info = rt.adapter.info
  return {"adapter": f"{info['device']} ({info['backend_type']})", "reps": reps,
          "timing": "GPU timestamps" if rt.timestamps else "wall clock", "results": results}


if __name__ == "__main__":
  print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5), indent=2,
                   ensure_ascii=False))
