"""bench/peers_report.py's verdicts (issue 43), on made-up runs: a row holds >= 1.5x only when its
worst counted run does; runs whose load average went above the limit are not counted unless
allowed (and the row then has no verdict); wrong outputs and missing GPU times are not ratios."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import peers_report  # noqa: E402


def system(ms, gpu=None, ok=True):
  out = {"ok": ok, "ms": ms, "samples_ms": [ms], "kernels": 1}
  if gpu is not None:
    out["gpu_ms"] = gpu
  return out


def run(ours, tinygrad, ort, load=(0.5, 0.8, 0.7), ours_ok=True, foreign=None):
  rows = {"matmul": {"kernelgen": system(*ours, ok=ours_ok), "tinygrad": system(*tinygrad),
                     "tfjs": system(1000.0), "ort": system(*ort)}}
  out = {"result": {"rows": rows}, "load": list(load)}
  if foreign is not None:
    out["foreign"] = foreign
  return out


def test_a_row_holds_only_when_its_worst_run_does():
  runs = [run((100, 90), (200, 190), (300, 280)), run((100, 95), (140, 150), (300, 300)),
          run((100, 80), (180, 200), (250, 260))]
  (e,) = peers_report.aggregate("swiftshader", runs, allow_load=False, max_load=1.5)
  assert e["run_ratios"] == [2.0, 1.4, 1.8] and e["ratio"] == 1.8 and e["ratio_worst"] == 1.4
  assert e["holds"] is False and e["counted"] == 3 and e["best_peer"] == "tinygrad"
  assert e["gpu_ratio_worst"] == 150 / 95 and e["gpu_best_peer"] == "tinygrad"
  assert e["ms"]["kernelgen"] == 100 and e["ms"]["tinygrad"] == 180
  runs[1] = run((100, 95), (160, 150), (300, 300))
  (e,) = peers_report.aggregate("swiftshader", runs, allow_load=False, max_load=1.5)
  assert e["ratio_worst"] == 1.6 and e["holds"] is True


def test_loaded_runs_are_not_counted_unless_allowed():
  runs = [run((100, 90), (200, 190), (300, 280)),
          run((100, 95), (120, 150), (300, 300), load=(0.9, 3.2, 1.0))]
  (e,) = peers_report.aggregate("lavapipe", runs, allow_load=False, max_load=1.5)
  assert e["counted"] == 1 and e["ratio_worst"] == 2.0 and e["holds"] is True
  (e,) = peers_report.aggregate("lavapipe", runs, allow_load=True, max_load=1.5)
  assert e["counted"] == 2 and e["ratio_worst"] == 1.2 and e["holds"] is False
  (e,) = peers_report.aggregate("lavapipe", runs[1:], allow_load=False, max_load=1.5)
  assert e["counted"] == 0 and e["ratio"] is None and e["holds"] is None


def test_a_wrong_output_is_no_ratio():
  runs = [run((100, 90), (200, 190), (300, 280)), run((100, 90), (200, 190), (300, 280),
                                                      ours_ok=False)]
  (e,) = peers_report.aggregate("swiftshader", runs, allow_load=False, max_load=1.5)
  assert e["status"]["kernelgen"].startswith("WRONG") and e["ratio"] is None
  assert e["holds"] is None


def test_runs_count_by_other_processes_cores_where_known():
  """SwiftShader's own threads lift the load average to ~1.8 on 2 cores: a run measured with
  foreign_cpu counts by the load before it and the cores others took, not its own load."""
  own_load = run((100, 90), (200, 190), (300, 280), load=(0.5, 1.8, 1.3), foreign=0.05)
  shared = run((100, 95), (120, 150), (300, 300), load=(0.5, 1.8, 1.3), foreign=0.9)
  busy_before = run((100, 95), (120, 150), (300, 300), load=(2.0, 2.0, 1.3), foreign=0.0)
  (e,) = peers_report.aggregate("swiftshader", [own_load, shared, busy_before],
                                allow_load=False, max_load=1.5, max_foreign=0.25)
  assert e["counted"] == 1 and e["ratio_worst"] == 2.0 and e["foreign"] == [0.05, 0.9, 0.0]
  (e,) = peers_report.aggregate("swiftshader", [shared], allow_load=True, max_load=1.5)
  assert e["counted"] == 1 and e["ratio_worst"] == 1.2


def test_a_childs_cpu_is_our_own_not_foreign():
  """A child's CPU time counts as the run's own (through our cutime once it is reaped), as the
  kernel's own rusage of our children says, so only other processes' time is foreign."""
  import resource
  import subprocess

  import foreign_cpu
  if foreign_cpu.snapshot() is None:
    import pytest
    pytest.skip("no /proc on this system")
  def children_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
  start, before = foreign_cpu.snapshot(), children_s()
  subprocess.run([sys.executable, "-c", "sum(range(20_000_000))"], check=True)
  end, spent = foreign_cpu.snapshot(), children_s() - before
  assert spent > 0.2
  assert abs((end["own"] - start["own"]) - spent) < 0.1 + 0.05 * spent
  cores = foreign_cpu.foreign_cores(start, end)
  assert cores is not None and cores * (end["wall"] - start["wall"]) <= \
    end["busy"] - start["busy"] - spent + 0.1
