"""The PTX simulator's fast engine against its reference engine, launch by launch.

    python tests/helpers/ptxsim_differential.py [COUNT] [--start S]
    KERNELGEN_PTXSIM_COMPARE=fused python tests/helpers/ptxsim_differential.py ...   (the
    pure-Python fused engine, fused.py, against the reference instead of the numpy engine)

Every launch runs in ptxsim's "compare" mode: the reference engine on a copy of memory, the fast
engine on the real one, and every buffer compared byte for byte afterwards (so NaN payloads and
signed zeros count), or both engines failing with an ExecutionError. The launches are the bench
kernels (bench/ptxsim_speed.py, with NaN, inf, -0.0 and subnormal inputs) and the PTX of the
seeded fuzz corpus (tests/helpers/fuzz_runner.py's programs; each seed's arch as the corpus
picks it, PTX_ARCHS[seed % 11], so every arch is used) run through the PTXSIM device. Prints
the totals.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "core"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import kernelgen as kg  # noqa: E402
from kernelgen import ptxsim  # noqa: E402
from kernelgen.errors import KernelgenError  # noqa: E402
from kernelgen.ptxsim import machine  # noqa: E402

SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-45, 3.4e38],
                    np.float32)


def with_specials(values: np.ndarray, seed: int) -> np.ndarray:
  """`values` with NaN, inf, -0.0 and subnormals at random places (and an sNaN's bits)."""
  out = values.copy().ravel()
  rng = np.random.default_rng(seed)
  at = rng.choice(out.size, size=min(out.size, 4 * len(SPECIALS)), replace=False)
  out[at] = np.resize(SPECIALS, len(at))
  out.view(np.uint32)[at[0]] = 0x7F800123      # a signalling NaN
  return out.reshape(values.shape)


def bench_launches() -> list:
  """(name, source, grid, block, arrays, scalars) of the bench kernels, ordinary and special."""
  import ptxsim_speed as b
  rng = np.random.default_rng(0)
  out = []
  for special in (False, True):
    n = 4096
    a, c = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    if special:
      a, c = with_specials(a, 1), with_specials(c, 2)
    out.append(("add", b.ADD, (n // 256, 1, 1), (256, 1, 1), [np.zeros(n, np.float32), a, c],
                [n - 5]))
    m = 32
    x, y = rng.standard_normal((m, m), np.float32), rng.standard_normal((m, m), np.float32)
    if special:
      x, y = with_specials(x, 3), with_specials(y, 4)
    out.append(("matmul", b.MATMUL, (2, 2, 1), (16, 16, 1),
                [np.zeros((m, m), np.float32), x, y], [m]))
  return out


def run_launch(source, grid, block, arrays, scalars) -> None:
  mem = ptxsim.GlobalMemory()
  bufs = []
  for arr in arrays:
    buf = mem.alloc(arr.nbytes)
    buf.data[:] = np.ascontiguousarray(arr).tobytes()
    bufs.append(buf)
  ptxsim.run(source, grid, block, [b.base for b in bufs] + list(scalars), mem)


def fuzz_programs(count: int, start: int, out=sys.stdout) -> dict:
  """Run seeds start.. on PTXSIM in compare mode; {"programs", "ran", "errors", "archs"}."""
  import fuzz_runner as fr
  from fuzz_programs import RandomChooser
  from kernelgen.runtime.ptxsim import PTXSimRuntime
  totals = {"programs": 0, "ran": 0, "errors": 0, "archs": set()}
  original = kg.Device["PTXSIM"]     # each seed's arch runs on a runtime of its own; put it back
  try:
    _run_seeds(fr, RandomChooser, PTXSimRuntime, range(start, start + count), totals, out)
  finally:
    kg.Device.register("PTXSIM", original)
  return totals


def _run_seeds(fr, RandomChooser, PTXSimRuntime, seeds, totals: dict, out) -> None:
  for seed in seeds:
    program = fr.program_for(seed, RandomChooser(seed))
    totals["programs"] += 1
    if fr.work(program) > fr.RUN_LIMIT["PTXSIM"]:
      continue
    arch = fr.PTX_ARCHS[seed % len(fr.PTX_ARCHS)]
    kg.Device.register("PTXSIM", PTXSimRuntime(arch=arch))
    try:
      fr.build(program, "PTXSIM").numpy()
      totals["ran"] += 1
      totals["archs"].add(arch)
    except KernelgenError as error:
      if "engines disagree" in str(error):
        _save_disagreement(seed, error, fr.build(program, "PYTHON"), arch)
        raise
      totals["errors"] += 1
      print(f"  seed {seed}: {type(error).__name__}: {str(error)[:200]}", file=out)


def _save_disagreement(seed: int, error, tensor, arch: str) -> None:
  """The error and the program's PTX sources, for a look at what differs."""
  sources = [k.source for k in kg.compile(tensor, target="ptx", arch=arch)]
  path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ptxsim_disagree_{seed}.txt")
  with open(path, "w") as f:
    f.write(f"{error}\n{sources!r}")
  print(f"  seed {seed}: the engines disagree; details in {path}")


def main(argv) -> int:
  count = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 200
  start = int(argv[argv.index("--start") + 1]) if "--start" in argv else 0
  machine.ENGINE["name"] = "compare"
  began = time.time()
  for name, *launch in bench_launches():
    run_launch(*launch)
  totals = fuzz_programs(count, start)
  c = machine.COMPARED
  print(f"{totals['programs']} fuzz programs (seeds {start}..{start + count - 1}), "
        f"{totals['ran']} run on PTXSIM, {totals['errors']} raising a typed error; archs "
        f"{', '.join(sorted(totals['archs']))}")
  print(f"launches compared: {c['launches']}, bit-identical: {c['identical']}, both failed "
        f"alike: {c['both_failed']}, reference engine only (fallback): {c['reference_only']}; "
        f"fallback entries: {sorted(machine_fallbacks())}; {time.time() - began:.0f} s")
  return 0


def machine_fallbacks() -> dict:
  from kernelgen.ptxsim import fast_machine
  return fast_machine.FALLBACKS


if __name__ == "__main__":
  sys.exit(main(sys.argv))
