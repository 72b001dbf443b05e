"""The onnx package's backend node test cases on PYTHON (data we did not write).

A deterministic subset runs here (every SUBSET-th case in name order plus each operator's first
case; about a third, ~40 s); `tests/helpers/onnx_conformance.py` runs all of them and prints the pass
rate per operator. Every case listed in onnx_node_known_failures.txt (with its reason) may fail
but never crash with a raw exception; every other case must pass.
"""
from __future__ import annotations

import pytest

from onnx_conformance import known_failures, run_case, subset
from onnx_corpus import node_cases, onnx_or_missing
import tools

SUBSET = 3
KNOWN = tools.TESTS_DIR / "onnx_import" / "onnx_node_known_failures.txt"


def _cases():
  try:
    import onnx  # noqa: F401
  except ImportError:
    return ["onnx-not-installed"]
  return subset(node_cases(), SUBSET)


@pytest.mark.parametrize("case", _cases(), ids=lambda c: getattr(c, "name", str(c)))
def test_node_case(case):
  onnx_or_missing()
  ok, reason = run_case(case, "PYTHON")
  known = known_failures(KNOWN)
  if case.name in known:
    assert not reason.startswith("crash"), f"{case.name}: {reason}"
    return
  assert ok, f"{case.name}: {reason}"
