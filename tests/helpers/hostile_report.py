"""Run the hostile-input cases (hostile_cases.py) and print the totals per category.

    python tests/helpers/hostile_report.py          # the table
    python tests/helpers/hostile_report.py --json   # one JSON object per case, then the totals
    python tests/helpers/hostile_report.py --list   # the failures only, one per line

Each case runs with a time limit (SIGALRM, CASE_SECONDS) in a process whose address space is
capped (MEMORY_BYTES, RLIMIT_AS). Outcomes:
  handled  the expected typed error, or success where success is right ("either": success or any
           KernelgenError)
  raw      an exception that is not a KernelgenError (or a KernelgenError wrapping an internal
           error), or a typed error of another class than the case expects
  hang     it ran past the time limit
  escape   a file outside the case's folder was read: its contents show up in the error message
           or the result, or a case naming such a file succeeded
  wrong    it returned where it must raise
"""
from __future__ import annotations

import collections
import json
import os
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CASE_SECONDS = 60
MEMORY_BYTES = 16 << 30
OUTCOMES = ("handled", "raw", "hang", "escape", "wrong")


class Hang(BaseException):
  """Raised by the alarm: a BaseException, so no `except Exception` in kernelgen swallows it."""


def _alarm(signum, frame):
  raise Hang()


def classify(case, secret: str) -> tuple[str, str]:
  """(outcome, detail) of running one case."""
  import kernelgen as kg
  signal.signal(signal.SIGALRM, _alarm)
  signal.alarm(CASE_SECONDS)
  try:
    result = case.run()
  except Hang:
    return "hang", f"over {CASE_SECONDS} s"
  except BaseException as error:   # noqa: B036 (RecursionError, MemoryError, ... are outcomes)
    signal.alarm(0)
    text = f"{type(error).__name__}: {error}"
    if secret in text:
      return "escape", text[:300]
    if not isinstance(error, kg.KernelgenError) or "internal error" in str(error):
      return "raw", text[:300]
    if case.expect == "ok":
      return "raw", "expected success, got " + text[:300]
    if case.expect != "either" and not isinstance(error, case.expect):
      return "raw", f"expected {case.expect.__name__}, got {text[:300]}"
    return "handled", text[:300]
  finally:
    signal.alarm(0)
  if secret in repr(result) or secret.encode() in _bytes_of(result):
    return "escape", "the result holds the outside file's bytes"
  if case.outside:
    return "escape", "a file outside the folder was accepted"
  if case.expect not in ("ok", "either"):
    return "wrong", f"returned {repr(result)[:200]} instead of {case.expect.__name__}"
  return "handled", "ok"


def _bytes_of(result) -> bytes:
  try:
    import numpy as np
    if isinstance(result, np.ndarray):
      return result.tobytes()
  except ImportError:
    pass
  return b""


def run_all(workdir: str | None = None) -> list[dict]:
  """[{category, name, outcome, detail}] for every case."""
  import hostile_cases
  with tempfile.TemporaryDirectory() as tmp:
    cases = hostile_cases.cases(workdir or tmp)
    return [{"category": c.category, "name": c.name,
             **dict(zip(("outcome", "detail"), classify(c, hostile_cases.SECRET)))}
            for c in cases]


def totals(rows: list[dict]) -> dict:
  """{category: {cases, handled, raw, hang, escape, wrong}}."""
  out: dict = collections.defaultdict(lambda: dict.fromkeys(("cases",) + OUTCOMES, 0))
  for row in rows:
    out[row["category"]]["cases"] += 1
    out[row["category"]][row["outcome"]] += 1
  return dict(out)


def table(counts: dict) -> str:
  head = ("category",) + ("cases",) + OUTCOMES
  lines = [" ".join(f"{h:>11}" for h in head)]
  all_rows = list(counts.items()) + [("total", {k: sum(c[k] for c in counts.values())
                                                for k in head[1:]})]
  for name, c in all_rows:
    lines.append(" ".join([f"{name:>11}"] + [f"{c[k]:>11}" for k in head[1:]]))
  return "\n".join(lines)


def _limit_memory() -> None:
  try:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
  except (ImportError, ValueError, OSError):
    pass


def main(argv: list[str]) -> int:
  _limit_memory()
  sys.setrecursionlimit(1000)     # the default: a deep graph must not need more
  rows = run_all()
  if "--json" in argv:
    for row in rows:
      print(json.dumps(row))
  bad = [r for r in rows if r["outcome"] != "handled"]
  if "--list" in argv or bad:
    for r in bad:
      print(f"{r['outcome']:>7}  {r['category']}: {r['name']}: {r['detail']}")
  print(table(totals(rows)))
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
