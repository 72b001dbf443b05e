"""The simulator's share of Verify PTX, natively: each editor example's PTX launches on PTXSIM,
per engine, in one process.

Each example of web/examples.js runs once on the PTXSIM device with every launch recorded
(its entry, grid, block, arguments and a copy of memory before it); then the recorded launches
run again on each engine, the engines interleaved round by round (the reference engine, the
pure-Python fused engine that the page runs without numpy, and the numpy engine where numpy
imports), and the memory each leaves is compared byte for byte with the reference's. Prints
the seconds per example and engine (best of the rounds), the fused engine's speedup, and the
load average (the page's Pyodide runs the fused engine some 2-3x slower than CPython).

    python bench/ptxsim_examples.py [--rounds N] [EXAMPLE ...]
"""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "core"))

from kernelgen import ptxsim  # noqa: E402
from kernelgen.ptxsim import machine  # noqa: E402


def examples() -> dict[str, str]:
  """The editor's example programs by name (web/examples.js)."""
  text = (ROOT / "web" / "examples.js").read_text()
  body = text[text.index("{") + 1:text.index("};")]
  return dict(re.findall(r"(\w+): `(.*?)`", body, re.S))


def record(code: str) -> list[tuple]:
  """The PTXSIM launches of one example program: (program, grid, block, args, memory)."""
  from kernelgen.web_api import program
  seen, launch = [], ptxsim.launch

  def spy(prog, grid, block, args, memory, check_races=True, engine=None, progress=None):
    seen.append((prog, grid, block, args, memory.snapshot(), check_races))
    return launch(prog, grid, block, args, memory, check_races, "reference", progress)
  ptxsim.launch = spy
  try:
    program.execute(code, "PTXSIM").realize()
  finally:
    ptxsim.launch = launch
  return seen


def timed(launches: list[tuple], engine: str) -> tuple[float, list[bytes]]:
  """Seconds for the launches on `engine` (translation outside the timing), final memory."""
  total, out = 0.0, []
  for prog, grid, block, args, memory, races in launches:
    mem = memory.snapshot()
    if engine == "fused":
      prog.fused()
    elif engine == "fast":
      prog.fast()
    start = time.perf_counter()
    ran = machine.launch(prog, grid, block, args, mem, races, engine)
    total += time.perf_counter() - start
    if ran != engine:
      raise SystemExit(f"{prog.entry.name} ran on {ran}, not {engine}")
    out.append(b"".join(bytes(b.data) for b in mem.buffers.values()))
  return total, out


def engines() -> list[str]:
  try:
    import numpy  # noqa: F401
  except ImportError:
    return ["reference", "fused"]
  return ["reference", "fused", "fast"]


def main() -> None:
  args = sys.argv[1:]
  rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 3
  names = [a for a in args if not a.startswith("--") and not a.isdigit()]
  print(f"load average at the start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
  print(f"{'example':12s} {'launches':>8s} " + " ".join(f"{e:>10s}" for e in engines()) +
        "  fused speedup")
  for name, code in examples().items():
    if names and name not in names:
      continue
    launches = record(code)
    best = {e: float("inf") for e in engines()}
    for _ in range(rounds):
      memories = {}
      for engine in engines():
        secs, memories[engine] = timed(launches, engine)
        best[engine] = min(best[engine], secs)
      if any(m != memories["reference"] for m in memories.values()):
        raise SystemExit(f"{name}: the engines leave different memory")
    print(f"{name:12s} {len(launches):8d} " + " ".join(f"{best[e]:9.3f}s" for e in engines())
          + f"  {best['reference'] / best['fused']:6.1f}x")
  print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
