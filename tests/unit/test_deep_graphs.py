"""No recursion on graph depth (issue 41): tests/helpers/deep_graphs.py's cases, each a graph
many times deeper than the recursion limit they run under (400), through compile on every
target, running on PYTHON and PTXSIM, autograd's backward, an ONNX chain and an ONNX Loop; a
walk that recursed once per level anywhere on the way would end in RecursionError. The
100,000-op chain itself is test_hostile.py's test_a_100000_op_chain_compiles_without_recursion."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import deep_graphs
from kernelgen.uop import trampoline


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(deep_graphs.CASES))
def test_deep_graph(name):
  if name.startswith("ONNX"):
    pytest.importorskip("onnx")
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
  run = subprocess.run([sys.executable, deep_graphs.__file__, name], capture_output=True,
                       text=True, timeout=280, env=env)
  assert run.returncode == 0, run.stderr[-3000:]
  got = json.loads(run.stdout.strip().splitlines()[-1])
  assert got["outcome"] == "ok", got


def test_the_trampoline_runs_a_walk_deeper_than_the_recursion_limit():
  def depth(n):
    return 0 if n == 0 else 1 + (yield depth(n - 1))
  assert trampoline.run(depth(sys.getrecursionlimit() * 20)) == sys.getrecursionlimit() * 20


def test_the_trampoline_raises_into_the_caller_as_recursion_would():
  def fails():
    raise ValueError("deep")
    yield
  def catches():
    try:
      yield fails()
    except ValueError as error:
      return f"caught {error}"
  assert trampoline.run(catches()) == "caught deep"
  with pytest.raises(TypeError, match="must yield"):
    trampoline.run((yield_ for yield_ in [1]))
