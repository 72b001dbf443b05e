"""bench/call_phases.py times an exported bundle's warm call in the page phase by phase: the
phases of each call add up to its wall time, the bundle's counts are model.calls' (one dispatch
per kernel, one submit, one write per input, one read), and the floors it sets beside the bundle
(no dispatch; one; as many as the bundle's kernels) are timed in the same rounds. A rename in
model.js that the bench page reads (Model.readback, steps, calls) fails here, not in a long
bench run. SwiftShader (the session's Chromium); no timing is asserted."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import kernelgen as kg
from browser_util import local_page

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import call_phases  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def test_a_bundles_phases_add_up_beside_its_floors(chromium, serve, tmp_path):
  import numpy as np
  x = kg.Tensor.empty(2, 4, name="x")
  w = kg.Tensor([[1.0, 2.0, 3.0, 4.0]] * 2)
  kg.export({"out": (x * w).relu().sum(axis=1)}, str(tmp_path / "tiny-swiftshader"),
            format="webgpu")
  (tmp_path / "tiny-x.kg.bin").write_bytes(np.arange(8, dtype=np.float32).tobytes())
  server = serve(call_phases.ROOT / "bench", mounts=call_phases.mounts(tmp_path))
  with local_page(chromium) as page:
    page.goto(server.url("bench/web/call_phases.html"))
    page.wait_for_selector("body[data-ready]", state="attached")
    got = call_phases.measure(page, server, tmp_path, ["tiny-swiftshader"], rounds=3)
    assert page.console_errors == [], page.console_errors
  kernels = len(json.loads((tmp_path / "tiny-swiftshader" / "manifest.json").read_text())[
    "kernels"])
  assert list(got["samples"]) == ["tiny-swiftshader"] + [
    f"{k} dispatches" for k in sorted({0, 1, kernels})]
  assert all(len(v) == 3 for v in got["samples"].values())
  for call in got["samples"]["tiny-swiftshader"]:
    parts = call["before"] + call["submit"] + call["wait"] + call["after"]
    assert parts == pytest.approx(call["ms"], abs=1e-6)
    assert min(call["before"], call["submit"], call["wait"], call["after"]) >= 0
    assert call["calls"] == {"submits": 1, "dispatches": kernels, "writes": 1, "copies": 0,
                             "reads": 1, "maps": 1}
  assert got["gpu"] == {"tiny-swiftshader": None}      # gpu_runs=0: not timed
