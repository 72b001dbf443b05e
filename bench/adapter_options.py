"""The measurements behind render/wgsl/adapters.py: each kernel of a few workloads timed under
candidate launch options on one adapter, natively (wgpu), best of REPS interleaved rounds.

SwiftShader is reached natively through Chromium's own Vulkan ICD
(/usr/lib/chromium/vk_swiftshader_icd.json, the SwiftShader that Chromium's WebGPU falls back to),
lavapipe through Mesa's. Candidates are the option sets the table chooses between: grouped
reductions of 8..256 lanes per row, each with strided (GPU) or chunked (CPU: group_chunk) lanes,
and one thread per row (group=0); tiles of search.py's SEARCH_TILES for matmul-like kernels.
Each kernel's candidates run in turn, round after round (the machine is shared).

    python bench/adapter_options.py [swiftshader|lavapipe] [REPS]   (driver: both by default)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from icd import ICDS  # noqa: E402  (bench/icd.py)
GROUPS = (0, 16, 32, 64, 128)


def workloads(Tensor):
  x = Tensor.zeros(4096, 1024).contiguous().realize()
  v = Tensor.zeros(1 << 22).contiguous().realize()
  a = Tensor.zeros(512, 512).contiguous().realize()
  b = Tensor.zeros(512, 512).contiguous().realize()
  return {"rows max 4096x1024": x.max(axis=-1), "rows exp-sum 4096x1024":
          (x - x.max(axis=-1, keepdim=True).realize()).exp().sum(axis=-1),
          "rows mean 4096x1024": x.mean(axis=-1), "sum 4M": v.sum(),
          "matmul 512^3": a @ b}


def candidates(item, kind: str) -> list[tuple[str, dict]]:
  if kind == "tile":
    from kernelgen.search import SEARCH_TILES
    return [(f"tile {r}x{c}", {"tile": (r, c), "stage": False}) for r, c in SEARCH_TILES] + \
      [("heuristic", {})]
  out = [("thread per row", {"group": 0, "local": 64})]
  for group in GROUPS[1:]:
    out += [(f"{group} lanes strided", {"group": group}),
            (f"{group} lanes chunked", {"group": group, "group_chunk": True})]
  return out


def worker(reps: int) -> dict:
  sys.path.insert(0, str(ROOT / "core"))
  from kernelgen import Tensor
  from kernelgen.compiler import buffer_limit, compile_item
  from kernelgen.device import Device
  from kernelgen.errors import KernelgenError
  from kernelgen.graph.lazy import Buffer
  from kernelgen.graph.schedule import schedule
  runtime = Device["WEBGPU"]
  base = {k: v for k, v in runtime.render_options().items() if k not in ("group_chunk", "adapter")}
  results = {"adapter": dict(runtime.adapter.info), "kernels": {}}
  for name, tensor in workloads(Tensor).items():
    items = schedule([tensor.node], buffer_limit("wgsl", base))
    item = items[0]   # the first kernel (its inputs are realized)
    for src in item.inputs:
      if not src.realized:
        raise SystemExit(f"{name}: an input is not realized")
    out = Buffer("WEBGPU", item.out.dtype, item.out.size)
    handles = [out.handle] + [src.buffer.handle for src in item.inputs]
    kind = "tile" if name.startswith("matmul") else "rows"
    compiled = {}
    for label, opts in candidates(item, kind):
      try:
        kernel = compile_item(item, "wgsl", {**base, **opts})
        runtime.run(kernel, [handles[b.slot] for b in kernel.buffers], {})   # pipeline, warm-up
        compiled[label] = kernel
      except KernelgenError as error:
        results["kernels"].setdefault(name, {})[label] = f"{type(error).__name__}"
    best = {label: float("inf") for label in compiled}
    for _ in range(reps):
      for label, kernel in compiled.items():
        bound = [handles[b.slot] for b in kernel.buffers]
        best[label] = min(best[label], runtime.time_run(kernel, bound, {}) * 1e3)
    results["kernels"].setdefault(name, {}).update({k: round(v, 3) for k, v in best.items()})
    print(name, sorted(best.items(), key=lambda kv: kv[1])[:4], file=sys.stderr, flush=True)
  return results


def measure(adapter: str, reps: int) -> dict:
  env = {**os.environ, "VK_ICD_FILENAMES": ICDS[adapter], "VK_DRIVER_FILES": ICDS[adapter],
         "PYTHONPATH": str(ROOT / "core")}
  proc = subprocess.run([sys.executable, __file__, "--worker", str(reps)], env=env,
                        capture_output=True, text=True, timeout=3600)
  if proc.returncode:
    return {"error": proc.stderr[-2000:]}
  return json.loads(proc.stdout)


if __name__ == "__main__":
  if sys.argv[1:2] == ["--worker"]:
    print(json.dumps(worker(int(sys.argv[2]))))
  else:
    names = [a for a in sys.argv[1:] if a in ICDS] or list(ICDS)
    count = next((int(a) for a in sys.argv[1:] if a.isdigit()), 5)
    print(json.dumps({name: measure(name, count) for name in names}, indent=1))
