"""Every GPU check of the PTX path in one command (about 2-5 minutes on an NVIDIA GPU).

    python tests/gpu/run_all.py              # on a machine with an NVIDIA driver
    python tests/gpu/run_all.py --dry-run    # anywhere: render, ptxas, the PTX simulator

1. the PTX renderer's numeric tests (tests/devices/test_render_ptx.py -k sim) with every kernel run on
   device CUDA (KERNELGEN_PTX_DEVICE=CUDA) instead of the PTX simulator, compared with numpy;
2. front-end programs on device CUDA compared with numpy;
3. an f16 4096x4096x4096 matmul (random inputs; tensor cores where the arch has them) timed on
   CUDA (CUDA events), sampled rows checked with numpy, and torch/cuBLAS if present.

With --dry-run nothing needs a GPU: step 1 runs on the PTX simulator (plus every ptxas test),
step 2 renders each program for --arch and assembles it with ptxas, step 3 renders and assembles
the matmul. A summary is printed and, with --out DIR, written to DIR/gpu_results.json.
Exit status 0 when every check passed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "core"), str(REPO / "tests" / "helpers")]

import numpy as np  # noqa: E402

import kernelgen as kg  # noqa: E402
from kernelgen import dtypes  # noqa: E402


# ---- 1. the renderer's numeric tests ---------------------------------------------------------

def renderer_tests(dry_run: bool, timeout: int) -> dict:
  env = dict(os.environ)
  if not dry_run:
    env["KERNELGEN_PTX_DEVICE"] = "CUDA"
  selection = [] if dry_run else ["-k", "sim"]
  cmd = [sys.executable, "-m", "pytest", str(REPO / "tests" / "devices" / "test_render_ptx.py"), "-q",
         "-p", "no:cacheprovider", *selection]
  start = time.perf_counter()
  result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
  tail = (result.stdout + result.stderr).strip().splitlines()[-25:]
  return {"ok": result.returncode == 0, "seconds": round(time.perf_counter() - start, 1),
          "tail": tail}


# ---- 2. front-end programs -------------------------------------------------------------------

def _programs(rng):
  """name -> (inputs as numpy arrays, kernelgen function, numpy function, tolerance)."""
  a = rng.standard_normal((96, 130)).astype(np.float32)
  b = rng.standard_normal((130, 70)).astype(np.float32)
  h = rng.standard_normal((128, 64)).astype(np.float16)
  g = rng.standard_normal((64, 96)).astype(np.float16)
  i = rng.integers(-100, 100, (33, 17)).astype(np.int32)
  return {
    "elementwise": ((a,), lambda x: (x * 2 + 1).relu(), lambda x: np.maximum(x * 2 + 1, 0), 1e-6),
    "matmul_f32": ((a, b), lambda x, y: x @ y, lambda x, y: x @ y, 1e-4),
    "matmul_f16": ((h, g), lambda x, y: x @ y,
                   lambda x, y: (x.astype(np.float32) @ y.astype(np.float32)), 2e-2),
    "matmul_f16_odd": ((h[:100, :56], g[:56, :52]), lambda x, y: x @ y,
                       lambda x, y: (x.astype(np.float32) @ y.astype(np.float32)), 2e-2),
    "reduce_sum": ((a,), lambda x: x.sum(axis=1), lambda x: x.sum(axis=1), 1e-4),
    "int_floor_ops": ((i,), lambda x: x // 7 + x % 5 - (x > 3).cast(dtypes.int32),
                      lambda x: x // 7 + x % 5 - (x > 3).astype(np.int32), 0),
  }


def frontend_programs(dry_run: bool, arch: str) -> dict:
  from tools import ptxas_check
  progs = _programs(np.random.default_rng(0))
  results = {}
  for name, (inputs, kg_fn, np_fn, tol) in progs.items():
    try:
      device = "PYTHON" if dry_run else "CUDA"
      tensors = [kg.Tensor(x, device=device) for x in inputs]
      out = kg_fn(*tensors)
      if dry_run:
        kernels = kg.compile(out, target="ptx", arch=arch)
        for k in kernels:
          ptxas_check(k.source, arch)
        results[name] = {"ok": True, "kernels": len(kernels)}
        continue
      got, want = out.numpy(), np_fn(*inputs)
      close = np.allclose(got.astype(np.float64), want, rtol=tol, atol=tol)
      results[name] = {"ok": bool(close), "max_err": float(np.max(np.abs(got - want)))}
    except Exception as error:   # report and go on: one failure must not hide the others
      results[name] = {"ok": False, "error": f"{type(error).__name__}: {str(error)[:2000]}"}
  return results


# ---- 3. the f16 matmul benchmark -------------------------------------------------------------

def matmul_bench(dry_run: bool, arch: str, size: int, iterations: int) -> dict:
  """The f16 matmul on real random inputs (zeros would be constant-folded away), timed on CUDA;
  reports whether the kernel uses tensor cores and checks sampled rows against numpy."""
  from tools import ptxas_check
  rng = np.random.default_rng(0)
  host = [rng.standard_normal((size, size)).astype(np.float16) for _ in range(2)]
  a, b = (kg.Tensor(x, device="PYTHON") for x in host)
  start = time.perf_counter()
  kernels = kg.compile(a @ b, target="ptx", arch=arch)
  info = {"size": size, "kernels": len(kernels), "compile_s": round(time.perf_counter() - start, 3),
          "tensor_cores": any("mma.sync" in k.source for k in kernels),
          "launch": [f"{k.global_size} blocks of {k.local_size}" for k in kernels]}
  if dry_run:
    for k in kernels:
      ptxas_check(k.source, arch)
    return {"ok": True, **info}
  from kernelgen.device import Device
  runtime = Device["CUDA"]
  seconds, out = _time_kernels(runtime, kernels, host, iterations)
  info["max_err_rows"], info["ok"] = _check_rows(out, host, size)
  flops = 2 * size ** 3
  info.update(ms=round(seconds * 1e3, 3), tflops=round(flops / seconds / 1e12, 2))
  info["torch"] = _torch_bench(size, iterations)
  return info


def _check_rows(out: np.ndarray | None, host: list, size: int) -> tuple[float, bool]:
  """Max error of 16 sampled output rows vs numpy (float64), and whether each element is within
  2 float16 ulps plus float32 accumulation error."""
  if out is None:
    return float("nan"), False
  rows = np.random.default_rng(1).choice(size, 16, replace=False)
  a, b = host[0][rows].astype(np.float64), host[1].astype(np.float64)
  want = a @ b
  got = out.reshape(size, size)[rows].astype(np.float64)
  err = np.abs(got - want)
  bound = 2 * np.spacing(np.abs(want).astype(np.float16)).astype(np.float64) + \
    (np.abs(a) @ np.abs(b)) * 2.0 ** -18
  return float(err.max()), bool(np.all(err <= bound))


def _time_kernels(runtime, kernels, host: list, iterations: int):
  """(median seconds of running every kernel once, the last kernel's output as float16): slots
  1 and 2 of the first kernel get the host inputs, other buffers random f16 data."""
  rng = np.random.default_rng(0)
  handles = {}
  for n, k in enumerate(kernels):
    for binding in k.launch.bindings:
      if (k.name, binding.slot) not in handles:
        handle = runtime.alloc(binding.nbytes)
        if n == 0 and 0 < binding.slot <= len(host):
          data = host[binding.slot - 1].tobytes()
        else:
          data = rng.standard_normal(binding.nbytes // 2).astype(np.float16).tobytes()
        runtime.copyin(handle, data[:binding.nbytes])
        handles[(k.name, binding.slot)] = handle
  times = []
  for _ in range(iterations + 1):
    total = 0.0
    for k in kernels:
      hs = [handles[(k.name, b.slot)] for b in k.launch.bindings]
      total += runtime.run(k, hs, {}, timed=True)
    times.append(total)
  last = kernels[-1]
  out = handles.get((last.name, 0))
  result = None if out is None else np.frombuffer(bytes(runtime.copyout(out)), np.float16)
  return sorted(times[1:])[len(times[1:]) // 2], result


def _torch_bench(size: int, iterations: int) -> dict | str:
  try:
    import torch
  except ImportError:
    return "torch not installed"
  if not torch.cuda.is_available():
    return "torch has no CUDA"
  x = torch.randn(size, size, dtype=torch.float16, device="cuda")
  y = torch.randn(size, size, dtype=torch.float16, device="cuda")
  torch.matmul(x, y)
  begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
  times = []
  for _ in range(iterations):
    begin.record()
    torch.matmul(x, y)
    end.record()
    torch.cuda.synchronize()
    times.append(begin.elapsed_time(end) * 1e-3)
  seconds = sorted(times)[len(times) // 2]
  return {"ms": round(seconds * 1e3, 3), "tflops": round(2 * size ** 3 / seconds / 1e12, 2)}


# ---- main ------------------------------------------------------------------------------------

def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dry-run", action="store_true", help="no GPU: ptxas and the simulator")
  parser.add_argument("--arch", default=None, help="arch for the dry run (default: the device's, "
                      "or sm_90)")
  parser.add_argument("--size", type=int, default=4096, help="matmul size (default 4096)")
  parser.add_argument("--iterations", type=int, default=5)
  parser.add_argument("--skip", default="", help="comma list of steps to skip: tests,programs,bench")
  parser.add_argument("--out", default=None, help="folder for gpu_results.json")
  args = parser.parse_args(argv)
  arch = args.arch or ("sm_90" if args.dry_run else _device_arch())
  skip = set(filter(None, args.skip.split(",")))
  summary = {"dry_run": args.dry_run, "arch": arch}
  steps = [("tests", lambda: renderer_tests(args.dry_run, 400)),
           ("programs", lambda: frontend_programs(args.dry_run, arch)),
           ("bench", lambda: matmul_bench(args.dry_run, arch, args.size, args.iterations))]
  for name, step in steps:
    if name in skip:
      continue
    start = time.perf_counter()
    try:
      summary[name] = step()
    except Exception as error:
      summary[name] = {"ok": False, "error": f"{type(error).__name__}: {str(error)[:2000]}"}
    print(f"== {name} ({time.perf_counter() - start:.1f} s)\n{json.dumps(summary[name], indent=1)}",
          flush=True)
  if args.out:
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_results.json").write_text(json.dumps(summary, indent=1))
  return 0 if _all_ok(summary) else 1


def _device_arch() -> str:
  from kernelgen.device import Device
  return Device["CUDA"].arch


def _all_ok(summary: dict) -> bool:
  checks = [summary.get("tests", {}), summary.get("bench", {})]
  checks += list(summary.get("programs", {}).values())
  return all(c.get("ok", False) for c in checks if c)


if __name__ == "__main__":
  sys.exit(main())
