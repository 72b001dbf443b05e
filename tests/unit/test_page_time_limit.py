"""The web page's own time limit (issue 41; limits.page_seconds, web_api/timelimit.py): a
command of the page that runs past it ends as a LimitError naming the limit and how to raise
it, whether the time goes in the program's own Python (a loop, a recursion of calls), in the
PYTHON interpreter's kernels or in PTXSIM's; the program keeps its lines in errors, its
docstrings, and runs as before under the limit."""
from __future__ import annotations

import pytest

import kernelgen as kg
from kernelgen import limits
from kernelgen.web_api import program as web
from kernelgen.web_api import timelimit


@pytest.fixture
def one_second():
  with limits.raised(page_seconds=1):
    yield


def _limit_error(result: dict) -> dict:
  assert not result["ok"], result
  error = result["error"]
  assert error["type"] == "LimitError", error
  assert "page_seconds" in error["message"]
  assert "kg.limits.set(page_seconds=" in error["message"]
  return error


@pytest.mark.timeout(60)
@pytest.mark.parametrize("code, line", [
  ("x = 0\nwhile True:\n  x += 1\nout = x\n", 3),
  ("for i in iter(int, 1):\n  pass\n", 2),
  ("def spin(n):\n  '''forever'''\n  while n:\n    n += 1\nspin(1)\n", 4),
  ("def down(n):\n  return 0 if n == 0 else sum(down(n - 1) for _ in range(8))\ndown(30)\n", 2),
])
def test_a_program_that_runs_too_long_ends_with_a_limit_error(one_second, code, line):
  assert _limit_error(web.run_program(code, "PYTHON"))["line"] == line


@pytest.mark.timeout(120)
@pytest.mark.parametrize("device", ["PYTHON", "PTXSIM"])
def test_long_kernels_end_with_a_limit_error(one_second, device):
  """The time goes in the kernels (each interpreter workgroup and PTXSIM block ticks)."""
  code = ("x = Tensor.arange(1 << 20)\nfor _ in range(1000):\n  x = (x * 1.0001 + 1).contiguous()\n"
          "out = x\n")
  _limit_error(web.run_program(code, device, reference=False))


def test_the_program_raises_the_limit_for_its_own_command(one_second):
  result = web.run_program("kg.limits.set(page_seconds=60)\nimport time\nt = time.monotonic()\n"
                           "while time.monotonic() < t + 1.5:\n  pass\nout = Tensor([1.0])\n",
                           "PYTHON")
  assert result["ok"], result


def test_under_the_limit_nothing_changes():
  code = "def f():\n  '''doc'''\n  return 2.0\nout = Tensor([f(), float(f.__doc__ == 'doc')])\n"
  result = web.run_program(code, "PYTHON")
  assert result["ok"] and result["out"]["data"] == bytes(memoryview(
    kg.Tensor([2.0, 1.0]).numpy()).cast("B"))
  bad = web.run_program("x = (\n", "PYTHON")
  assert bad["error"]["type"] == "SyntaxError" and bad["error"]["line"] == 1


def test_only_commands_are_timed():
  """Outside a command (kg used as a library) tick() never raises, whatever the limit."""
  with limits.raised(page_seconds=0):
    limits.tick()
    with limits.timed():
      with pytest.raises(kg.LimitError):
        import time
        time.sleep(0.01)
        limits.tick()
    limits.tick()


def test_ticks_go_first_in_loops_and_calls():
  code = compile("x = 0", "<p>", "exec")
  assert timelimit.TICK not in code.co_names
  ticked = timelimit.compile_ticked("while x:\n  pass\ndef f():\n  pass\n", "<p>")
  names = [n for c in [ticked, *[k for k in ticked.co_consts if hasattr(k, "co_names")]]
           for n in c.co_names]
  assert names.count(timelimit.TICK) == 2
