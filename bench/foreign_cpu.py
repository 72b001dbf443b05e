"""CPU time used during a benchmark run by processes outside the benchmark (Linux /proc).

The 1-minute load average cannot tell a benchmark's own work from other work on a 2-core
machine: SwiftShader runs its shaders on both cores, so a B4 run lifts the load average to
1.6-1.8 with nothing else running (bench/peers.py, 2026-12-05: three idle runs, load 0.4-0.7
before each). What spoils a timing is another process taking a core, so this measures that:
the machine's busy CPU seconds (/proc/stat) minus those of this process and every descendant
(the browser, its GPU process, the tinygrad worker; a reaped child's time counts through its
parent's cutime/cstime), over the run's wall time, in cores.

    snap = snapshot(); ...run...; cores = foreign_cores(snap, snapshot())

Where /proc is missing (not Linux), `snapshot` returns None and `foreign_cores` None.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

PROC = Path("/proc")


def _busy_seconds() -> float:
  """Every CPU's busy time since boot, s: /proc/stat's first line less idle and iowait."""
  fields = [int(v) for v in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
  idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
  return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, float] | None:
  """(parent pid, utime + stime + cutime + cstime in s) of a process, None once it is gone."""
  try:
    text = (PROC / pid / "stat").read_text()
  except OSError:
    return None
  rest = text[text.rindex(")") + 2:].split()      # the name may hold spaces and parentheses
  ticks = sum(int(v) for v in rest[11:15])
  return int(rest[1]), ticks / os.sysconf("SC_CLK_TCK")


def _own_seconds(root: int) -> float:
  """CPU seconds of process `root` and all its live descendants (their reaped children too)."""
  stats = {int(p): s for p in os.listdir(PROC) if p.isdigit() and (s := _stat(p)) is not None}
  children: dict[int, list[int]] = {}
  for pid, (parent, _) in stats.items():
    children.setdefault(parent, []).append(pid)
  total, todo = 0.0, [root]
  while todo:
    pid = todo.pop()
    if pid in stats:
      total += stats[pid][1]
      todo += children.get(pid, [])
  return total


def snapshot() -> dict | None:
  """The machine's busy seconds, this process tree's seconds and the wall clock, now."""
  if not (PROC / "stat").exists():
    return None
  return {"busy": _busy_seconds(), "own": _own_seconds(os.getpid()), "wall": time.monotonic()}


def foreign_cores(start: dict | None, end: dict | None) -> float | None:
  """Cores used on average between two snapshots by processes outside this process tree."""
  if start is None or end is None or end["wall"] <= start["wall"]:
    return None
  foreign = (end["busy"] - start["busy"]) - (end["own"] - start["own"])
  return max(foreign, 0.0) / (end["wall"] - start["wall"])
