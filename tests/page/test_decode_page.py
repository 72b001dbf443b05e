"""bench/decode.py's symbolic decode in the page (bench/decode_page.py's program: the kg.nn decoder
with its KV cache written in place at a kg.Dim position, the step under kg.jit; weights drawn in
the page), on SwiftShader WebGPU in headless Chromium: after the second step nothing compiles
and no pipeline is made, also at the far end of the range; each token is one kernel batch of at
most 4 dispatches per layer plus the head's, and only the sampled token (4 bytes) is read back.
Structure only: nothing here is timed."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from test_demos import run_in_demo, site  # noqa: F401 (site: a fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import decode_page  # noqa: E402

pytestmark = pytest.mark.timeout(900)
LAYERS = 2


def test_a_decode_in_the_page_compiles_nothing_after_its_second_step(site, chromium):  # noqa: F811
  sizes = {"layers": LAYERS, "d": 32, "heads": 2, "steps": 64, "decoded": 6, "jump": 3}
  got = run_in_demo(chromium, site, "digits", decode_page.program(None, {}, sizes))
  row = decode_page.figures(got)
  assert row["steps"] == 9 and len(row["tokens"]) == 9, row
  assert row["compiled_after_2"] == 0 and row["pipelines_after_2"] == 0, row
  assert row["dispatches"] <= 4 * LAYERS + row["after"], row
  assert row["submits"] == 1 and row["submits_all"] == 1, row   # the read back's copy joins it
  assert row["reads"] == 1 and row["read_bytes"] == 4, row
  assert "64" in row["wall_ms"] and "64" in row["gpu"], row      # the end of the range
