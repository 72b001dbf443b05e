"""No internal exception escapes untyped (issue 17): anything but a KernelgenError raised inside
compile or realize becomes a CompileError (ExecutionError while running) that names the pass and
the kernel, says it is a bug in kernelgen and how to report it, and chains the original."""
from __future__ import annotations

import pytest

import kernelgen as kg
from kernelgen import Tensor


def boom(*args, **kwargs):
  raise RuntimeError("boom")


def program() -> Tensor:
  return (Tensor.empty(8, 4, name="x") @ Tensor.empty(4, 2, name="w")).relu()


def check_bug_report(error, pass_name: str, kernel: str | None):
  text = str(error)
  assert f"internal error in kernelgen's {pass_name!r} pass" in text
  assert "RuntimeError: boom" in text
  assert "bug in kernelgen" in text and "report it" in text and "program" in text
  assert isinstance(error.__cause__, RuntimeError) and error.pass_name == pass_name
  if kernel:
    assert f"on kernel {kernel!r}" in text and error.kernel == kernel


@pytest.mark.parametrize("module,name,pass_name", [
  ("kernelgen.graph.schedule", "schedule", "schedule"),
  ("kernelgen.lowering.optimize", "optimize", "optimize"),
  ("kernelgen.lowering.lower", "lower", "lower"),
  ("kernelgen.lowering.tensorcore", "lower_tensor_cores", "tensor_cores"),
  ("kernelgen.rules.symbolic", "simplify", "simplify"),
  ("kernelgen.uop.linearize", "linearize", "linearize"),
  ("kernelgen.render.wgsl", "render", "render"),
])
def test_a_pass_that_crashes_is_a_compile_error_naming_pass_and_kernel(monkeypatch, module, name,
                                                                        pass_name):
  import importlib
  monkeypatch.setattr(importlib.import_module(module), name, boom)
  with pytest.raises(kg.CompileError) as info:
    kg.compile(program(), target="wgsl")
  check_bug_report(info.value, pass_name, None if pass_name == "schedule" else "r_8_2__4")


def test_a_crash_in_the_ptx_renderer_is_a_compile_error(monkeypatch):
  import kernelgen.render.ptx as ptx
  monkeypatch.setattr(ptx, "render", boom)
  with pytest.raises(kg.CompileError) as info:
    kg.compile(program(), target="ptx", arch="sm_80")
  check_bug_report(info.value, "render", "r_8_2__4")


def test_a_crash_while_running_is_an_execution_error(monkeypatch):
  from kernelgen.runtime.python import PythonRuntime
  monkeypatch.setattr(PythonRuntime, "run", boom)
  with pytest.raises(kg.ExecutionError) as info:
    (Tensor([1.0, 2.0], device="PYTHON") * 2).tolist()
  check_bug_report(info.value, "run on PYTHON", "E_2")


def test_a_crash_while_realizing_in_a_compile_pass_is_a_compile_error(monkeypatch):
  import kernelgen.lowering.optimize as optimize
  monkeypatch.setattr(optimize, "optimize", boom)
  with pytest.raises(kg.CompileError) as info:
    (Tensor([1.0, 2.0], device="PTXSIM") + 1).tolist()
  check_bug_report(info.value, "optimize", "E_2")


def test_typed_errors_from_a_pass_pass_through_unchanged(monkeypatch):
  import kernelgen.lowering.optimize as optimize

  def limited(*args, **kwargs):
    raise kg.LimitError("too many threads: use fewer")
  monkeypatch.setattr(optimize, "optimize", limited)
  with pytest.raises(kg.LimitError, match="too many threads") as info:
    kg.compile(program(), target="wgsl")
  assert info.value.__cause__ is None


def test_keyboard_interrupt_is_not_wrapped(monkeypatch):
  import kernelgen.lowering.optimize as optimize

  def interrupted(*args, **kwargs):
    raise KeyboardInterrupt
  monkeypatch.setattr(optimize, "optimize", interrupted)
  with pytest.raises(KeyboardInterrupt):
    kg.compile(program(), target="wgsl")


def test_the_page_gets_the_bug_report_and_the_original_traceback(monkeypatch):
  from kernelgen import web_api
  import kernelgen.lowering.lower as lower
  monkeypatch.setattr(lower, "lower", boom)
  result = web_api.compile_program("out = Tensor.empty(4) + 1", "sm_80", "wgsl")
  error = result["wgsl"]["error"]
  assert error["type"] == "CompileError" and "bug in kernelgen" in error["message"]
  assert "RuntimeError: boom" in error["traceback"] and "in boom" in error["traceback"]
