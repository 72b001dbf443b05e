"""B6 (needs an NVIDIA GPU): kernelgen's PTX on CUDA vs the vendor's figures.

  f16 matmul 4096³    our PTX (CUDA events)  vs torch.matmul (cuBLAS)          target >= 0.8x
  f32 add 256M        our PTX, bytes moved / time  vs torch copy_ (device copy) target >= 0.8x

Kernels are timed with tests/gpu/run_all.py's _time_kernels and cuBLAS with its _torch_bench
(reused, not copied). Inputs are Tensor.empty buffers (unfilled, so the compiler folds
nothing: the kernels load and use mma as they would on data). With --dry-run nothing needs a
GPU: both kernels are rendered for --arch and assembled with ptxas, and the add runs at a small
size on the PTX simulator (PTXSIM) against numpy.

    python bench/gpu_b6.py [--dry-run] [--arch sm_90] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "core"), str(ROOT / "tests" / "helpers"), str(ROOT / "tests" / "gpu")]

import numpy as np  # noqa: E402

import kernelgen as kg  # noqa: E402
from kernelgen import dtypes  # noqa: E402

ADD_N = 256 * (1 << 20)


def data(shape: tuple, dtype) -> kg.Tensor:
  """An input backed by an unfilled buffer (Tensor.empty): nothing is computed or folded."""
  return kg.Tensor.empty(*shape, dtype=dtype, device="PYTHON")


def add_kernels(n: int, arch: str):
  return kg.compile(data((n,), dtypes.float32) + data((n,), dtypes.float32), target="ptx",
                    arch=arch)


def add_dry_run(arch: str) -> dict:
  """Render and assemble the 256M add; run a 4096-element add on PTXSIM against numpy."""
  from tools import ptxas_check
  for k in add_kernels(ADD_N, arch):
    ptxas_check(k.source, arch)
  rng = np.random.default_rng(0)
  x, y = (rng.standard_normal(4096).astype(np.float32) for _ in range(2))
  got = (kg.Tensor(x, device="PTXSIM") + kg.Tensor(y, device="PTXSIM")).numpy()
  return {"ok": bool(np.array_equal(got, x + y)), "n": ADD_N, "simulated_n": 4096}


def add_on_gpu(arch: str, iterations: int) -> dict:
  from run_all import _time_kernels
  from kernelgen.device import Device
  kernels = add_kernels(ADD_N, arch)
  seconds = _time_kernels(Device["CUDA"], kernels, iterations)
  ours = 3 * ADD_N * 4 / seconds / 1e9
  info = {"ok": True, "ms": round(seconds * 1e3, 3), "gbps": round(ours, 1)}
  info["copy"] = _copy_bandwidth(iterations)
  if isinstance(info["copy"], dict):
    info["ratio"] = round(ours / info["copy"]["gbps"], 3)
  return info


def _copy_bandwidth(iterations: int) -> dict | str:
  """Device-to-device copy of 256M f32 through torch (read + write bytes / time)."""
  try:
    import torch
  except ImportError:
    return "torch not installed"
  if not torch.cuda.is_available():
    return "torch has no CUDA"
  x = torch.empty(ADD_N, dtype=torch.float32, device="cuda")
  y = torch.empty_like(x)
  y.copy_(x)
  begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
  times = []
  for _ in range(iterations):
    begin.record()
    y.copy_(x)
    end.record()
    torch.cuda.synchronize()
    times.append(begin.elapsed_time(end) * 1e-3)
  seconds = sorted(times)[len(times) // 2]
  return {"ms": round(seconds * 1e3, 3), "gbps": round(2 * ADD_N * 4 / seconds / 1e9, 1)}


def matmul(dry_run: bool, arch: str, iterations: int, size: int = 4096) -> dict:
  from run_all import _time_kernels, _torch_bench
  from tools import ptxas_check
  a, b = data((size, size), dtypes.float16), data((size, size), dtypes.float16)
  start = time.perf_counter()
  kernels = kg.compile(a @ b, target="ptx", arch=arch)
  info = {"size": size, "kernels": len(kernels), "compile_s": round(time.perf_counter() - start, 3),
          "tensor_cores": any("mma.sync" in k.source for k in kernels),
          "loads": sum(k.source.count("ld.global") for k in kernels)}
  if dry_run:
    for k in kernels:
      ptxas_check(k.source, arch)
    return {"ok": info["loads"] > 0, **info}
  from kernelgen.device import Device
  seconds = _time_kernels(Device["CUDA"], kernels, iterations)
  info.update(ok=True, ms=round(seconds * 1e3, 3), tflops=round(2 * size ** 3 / seconds / 1e12, 2))
  info["torch"] = _torch_bench(size, iterations)
  if isinstance(info["torch"], dict):
    info["ratio"] = round(info["tflops"] / info["torch"]["tflops"], 3)
  return info


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dry-run", action="store_true", help="no GPU: ptxas and the simulator")
  parser.add_argument("--arch", default=None, help="default: sm_90 dry, else the device's")
  parser.add_argument("--iterations", type=int, default=10)
  parser.add_argument("--out", default=None, help="also write the summary to this JSON file")
  args = parser.parse_args(argv)
  if args.arch:
    arch = args.arch
  elif args.dry_run:
    arch = "sm_90"
  else:
    from run_all import _device_arch
    arch = _device_arch()
  started = time.perf_counter()
  summary = {"dry_run": args.dry_run, "arch": arch,
             "matmul_f16_4096": matmul(args.dry_run, arch, args.iterations),
             "add_f32_256M": add_dry_run(arch) if args.dry_run else add_on_gpu(arch,
                                                                              args.iterations)}
  summary["seconds"] = round(time.perf_counter() - started, 1)
  text = json.dumps(summary, indent=1)
  print(text)
  if args.out:
    Path(args.out).write_text(text)
  return 0 if all(v.get("ok") for v in summary.values() if isinstance(v, dict)) else 1


if __name__ == "__main__":
  sys.exit(main())
