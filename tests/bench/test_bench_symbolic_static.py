"""bench/symbolic_static.py --option KEY=VALUE adds a renderer option to the adapter's for both
sides (an A/B of an option such as static_low_end through the bench itself): VALUE read as
JSON where it parses, else as a string; a malformed one says what it takes; the options reach
the worker process's command line. Pure Python, no GPU."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import symbolic_static  # noqa: E402


@pytest.mark.parametrize("text, expected", [("static_low_end=true", ("static_low_end", True)),
                                            ("row_short=96", ("row_short", 96)),
                                            ("adapter=lavapipe", ("adapter", "lavapipe"))])
def test_option_reads_its_value_as_json_else_a_string(text, expected):
  assert symbolic_static._option(text) == expected


@pytest.mark.parametrize("text", ["static_low_end", "=true"])
def test_malformed_option_says_what_it_takes(text):
  with pytest.raises(SystemExit, match="KEY=VALUE"):
    symbolic_static._option(text)


def test_options_reach_the_worker(monkeypatch):
  calls = []

  def run(command, **kwargs):
    calls.append(command)
    return SimpleNamespace(returncode=0, stdout=json.dumps({"adapter": "x", "rows": []}))
  monkeypatch.setattr(subprocess, "run", run)
  assert symbolic_static.measure("lavapipe", 1, "matmul", 2.0, {"static_low_end": True}) == \
      {"adapter": "x", "rows": []}
  assert calls[0][2:] == ["--worker", "1", "matmul", "2.0", '{"static_low_end": true}']
