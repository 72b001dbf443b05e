"""The cold first-result bench (bench/peers_cold.py, bench/web/peers_cold.*) cannot rot
silently: on tiny rows, in a fresh headless Chromium on SwiftShader, kernelgen (its Pyodide
worker: the row's formula compiled in the page), tinygrad 0.10.1, TF.js and onnxruntime-web each
give numpy's output as their first result, and each first result was timed (its Python for
kernelgen and tinygrad included; kernelgen's Python compile and pipeline builds split out).
Rows: attention (matmul + mask + softmax), the filter demo's chain (constants, edge padding,
conv2d) and the digits demo's MLP. Runs on the session's Playwright; needs site/ (./build.sh
site, which the test runs, or KERNELGEN_TEST_SITE)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from browser_util import assembled_site
from test_bench_peers import bench_env

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(900), pytest.mark.tools]


def test_every_system_s_cold_first_result_matches_numpy_on_tiny_rows(playwright):
  bench_env()
  sys.path.insert(0, str(ROOT / "bench"))
  import peers_cold
  rows = ["attention", "filter chain", "digits"]
  result = peers_cold.measure(rows, models=[], adapters=["swiftshader"], tiny=True,
                              playwright=playwright, site=assembled_site())
  table = result["adapters"]["swiftshader"]
  assert len(table) == len(rows)
  for name, row in table.items():
    for system in peers_cold.SYSTEMS:
      entry = row[system]
      assert entry.get("ok") and entry["ms"] > 0, (name, system, entry)
    assert row["kernelgen"]["kernels"] >= 1 and row["tinygrad"]["python_ms"] > 0, row
    ours = row["kernelgen"]     # its Python compile and its pipeline builds, split out
    assert 0 < ours["python_ms"] < ours["ms"]
    assert 0 < ours["pipeline_ms"] <= ours["pipeline_sum_ms"] + 1e-6
  peers_cold.print_table(result)
