"""The side-by-side bench (bench/peers.py, bench/web/peers.*) cannot rot silently: on tiny sizes,
in headless Chromium on SwiftShader, kernelgen, tinygrad 0.10.1, TF.js and onnxruntime-web
produce numpy's output (what the bench checks before it times anything) on rows that use every
runner's every path: row reductions (layernorm), matmul + softmax with a mask (attention), the
filter demo's chain (elementwise, edge padding, conv2d, constants) and the digits demo's MLP;
and each is timed both ways, wall and GPU timestamps (SwiftShader has 'timestamp-query').
(The bench itself checks every row at full size before timing it.) It runs on the session's
Playwright, so it passes in any order with the other browser tests."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tools import chromium_path, missing_tool

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(600), pytest.mark.tools]


def bench_env() -> None:
  """Skip (or fail under KERNELGEN_REQUIRE_ALL) without Chromium or .venv-bench's peers."""
  chromium_path()
  npm = ROOT / ".venv-bench" / "npm" / "node_modules"
  if not (ROOT / ".venv-bench" / "bin" / "python").exists() or \
      not (npm / "onnxruntime-web").is_dir() or not (npm / "@tensorflow" / "tfjs").is_dir():
    missing_tool(".venv-bench (tinygrad 0.10.1, TF.js, onnxruntime-web)",
                 "./build.sh bench's setup_bench_env makes it")


def test_every_peer_matches_numpy_on_tiny_rows(playwright):
  bench_env()
  sys.path.insert(0, str(ROOT / "bench"))
  import peers
  rows = ["layernorm", "attention", "filter chain", "digits"]
  result = peers.measure(rows, adapters=["swiftshader"], reps=1, tiny=True, copy=False,
                          playwright=playwright, settle_s=0)   # nothing here is timed for a report
  summary = result["summary"]
  assert len(summary) == len(rows)
  failed = [f"{e['row']} {system}: {status}" for e in summary
            for system, status in e["status"].items() if status != "ok"]
  assert not failed, failed
  for e in summary:       # each system ran its kernels and was timed, by wall and GPU timestamps
    assert all(ms and ms > 0 for ms in e["ms"].values()), e
    assert all(ms and ms > 0 for ms in e["gpu_ms"].values()), e
    assert all(e["kernels"][s] >= 1 for s in peers.SYSTEMS), e
    floor = e["floor"]      # the submit floor: as many trivial dispatches as our kernels
    assert floor["dispatches"] == e["kernels"]["kernelgen"] and floor["median_ms"] > 0, e
