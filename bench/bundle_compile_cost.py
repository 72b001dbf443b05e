"""What each kernel of an exported WebGPU bundle costs to build and to run, natively, per CPU
adapter (issue 37's per-kernel table): the pipelines a page's `load()` creates, one row per
distinct pipeline (kernels whose WGSL differs only in the entry point's name are one: the
bundle writes them as one file, export/manifest.py), with

  copies    the manifest's launches (kernels and variants) that use it
  lines     its WGSL lines; loops: `loop {` / `for (` statements in it
  driver    the process's CPU ms over pipeline creation + the first dispatch, less a later
            dispatch's (the driver's compile, as an idle machine's wall clock would see it)
  wall      the same in wall ms (on a shared machine it also counts other jobs' time)
  gpu       the best of REPS later dispatches, ms (GPU timestamps where the adapter has them)

Each adapter runs in a fresh process bound to its Vulkan ICD (SwiftShader: Chromium's, the one
its WebGPU falls back to) with Mesa's shader cache off. Symbolic sizes take the top of their
range. Totals at the end: the pipelines' driver ms (what a page waits for on one core) and the
launches' GPU ms of one run of the bundle.

    nice python bench/bundle_compile_cost.py BUNDLE_DIR [--adapters swiftshader,lavapipe]
                                             [--reps 3] [--json OUT] [--kernels-only]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from compile_cost import _stats, adapter_rows  # noqa: E402


def _launches(bundle, kernels_only: bool = False) -> list:
  """[(CompiledKernel, its handles)] of every launch (kernels, then each one's variants; only
  the kernels with `kernels_only`: what a page's load() builds before its first run)."""
  _, _, kernels = bundle._prepare("WEBGPU")
  out = []
  for kernel, handles in kernels:
    out.append((kernel, handles))
    if not kernels_only:
      out.extend((variant, handles) for _, _, variant in kernel.variants)
  return out


def child(folder: str, reps: int, kernels_only: bool = False) -> None:
  """Measure every distinct pipeline of the bundle in `folder` (only its kernels' with
  `kernels_only`), one ROW json line each (after a warm-up build of the first, dropped: the
  process's first pipeline pays for its setup)."""
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  from kernelgen.device import Device
  runtime = Device["WEBGPU"]
  bundle = kg.load_bundle(folder)
  values = {d["name"]: d["hi"] for d in bundle.manifest.get("dims", ())}
  distinct: dict = {}
  for kernel, handles in _launches(bundle, kernels_only):
    launch = kernel.launch
    key = (launch.source.replace(launch.entry_point, "main"),
           tuple((b.slot, b.access) for b in launch.bindings), len(launch.uniforms))
    distinct.setdefault(key, [kernel, handles, 0])[2] += 1
  first = next(iter(distinct.values()))
  _measure(runtime, first[0], first[1], values, 1)
  runtime.clear_pipelines()
  for kernel, handles, copies in distinct.values():
    row = {"kernel": kernel.name, "copies": copies, **_stats(kernel.launch.source),
           **_measure(runtime, kernel, handles, values, reps)}
    print("ROW " + json.dumps(row), flush=True)


def _measure(runtime, kernel, handles: list, values: dict, reps: int) -> dict:
  started, cpu = time.perf_counter(), time.process_time()
  runtime.pipeline(kernel.launch)
  runtime.time_run(kernel, handles, values)
  first_cpu, first_wall = time.process_time() - cpu, time.perf_counter() - started
  runs = []
  for _ in range(reps):
    cpu = time.process_time()
    runs.append((runtime.time_run(kernel, handles, values), time.process_time() - cpu))
  gpu, run_cpu = min(runs)
  return {"driver_ms": round(max(first_cpu - run_cpu, 0.0) * 1e3, 1),
          "wall_ms": round(max(first_wall - gpu, 0.0) * 1e3, 1), "gpu_ms": round(gpu * 1e3, 3)}


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("folder")
  parser.add_argument("--adapters", default="swiftshader")
  parser.add_argument("--reps", type=int, default=3)
  parser.add_argument("--json", default="")
  parser.add_argument("--child", action="store_true")
  parser.add_argument("--kernels-only", action="store_true",
                      help="only the kernels, not their variants (what a page's load() builds)")
  args = parser.parse_args(argv)
  if args.child:
    child(args.folder, args.reps, args.kernels_only)
    return
  print(f"# {args.folder}; load {os.getloadavg()[0]:.2f} (1 min); Mesa shader cache off",
        flush=True)
  print(f"{'adapter':11s} {'kernel':34s} {'copies':>6s} {'lines':>6s} {'loops':>5s} "
        f"{'driver':>8s} {'wall':>8s} {'gpu':>9s}", flush=True)
  found = []
  for adapter in args.adapters.split(","):
    command = [sys.executable, __file__, args.folder, "--child", "--reps", str(args.reps)] + \
      ["--kernels-only"] * args.kernels_only
    for row in adapter_rows(adapter, command):
      found.append(row)
      print(f"{adapter:11s} {row['kernel'][:34]:34s} {row['copies']:6d} {row['lines']:6d} "
            f"{row['loops']:5d} {row['driver_ms']:8.0f} {row['wall_ms']:8.0f} "
            f"{row['gpu_ms']:9.3f}", flush=True)
    rows = [r for r in found if r["adapter"] == adapter]
    print(f"# {adapter}: {len(rows)} pipelines for {sum(r['copies'] for r in rows)} launches, "
          f"{sum(r['lines'] for r in rows)} lines; driver {sum(r['driver_ms'] for r in rows):.0f} "
          f"CPU ms, wall {sum(r['wall_ms'] for r in rows):.0f} ms; one run's GPU "
          f"{sum(r['gpu_ms'] * r['copies'] for r in rows):.1f} ms; load "
          f"{os.getloadavg()[0]:.2f}", flush=True)
  if args.json:
    Path(args.json).write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
  main(sys.argv[1:])
