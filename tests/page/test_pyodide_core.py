"""Core unit tests that need nothing but the standard library: they run under pytest in CPython
and, sent as text, inside Pyodide in the page (test_browser.py::test_core_unit_tests_in_pyodide,
through web_api.self_test). Expected values are written out, not computed by the code under test.
"""
from __future__ import annotations

import struct

import pytest

import kernelgen as kg
from kernelgen import web_api
from kernelgen.dtype import dtypes


def result(dtype: str, fmt: str, values: list, shape=None) -> dict:
  return {"shape": shape or [len(values)], "dtype": dtype,
          "data": struct.pack(f"<{len(values)}{fmt}", *values)}


@pytest.mark.parametrize("dtype, fmt, got, want, match", [
  ("float32", "f", [1.0, 2.0, 3.0], [1.0, 2.0, 3.00001], True),
  ("float32", "f", [1.0, 2.0, 3.0], [1.0, 2.0, 3.1], False),
  ("float32", "f", [float("nan"), float("inf")], [float("nan"), float("inf")], True),
  ("float32", "f", [float("nan")], [0.0], False),
  ("int8", "b", [-128, 127], [-128, 127], True),
  ("int8", "b", [-128, 127], [-128, 126], False),
  ("float16", "e", [1.0, 0.5], [1.0009765625, 0.5], True),
])
def test_compare_uses_the_dtype_tolerance(dtype, fmt, got, want, match):
  assert web_api.compare(result(dtype, fmt, got), result(dtype, fmt, want))["match"] is match


def test_compare_counts_mismatches_and_max_error():
  report = web_api.compare(result("int32", "i", [1, 5, 9]), result("int32", "i", [1, 2, 3]))
  assert (report["mismatches"], report["max_abs_error"], report["first_mismatch"]) == (2, 6.0, 1)


def test_compare_reports_shape_differences():
  report = web_api.compare(result("int32", "i", [1, 2]), result("int32", "i", [1, 2], [2, 1]))
  assert not report["match"] and "shape/dtype differ" in report["reason"]


def test_syntax_error_names_the_program_line():
  response = web_api.run_program("x = 1\ny = (\n", "PYTHON", False)
  assert response["ok"] is False
  assert response["error"]["type"] == "SyntaxError"
  assert response["error"]["line"] in (2, 3)  # CPython versions point at the '(' or the EOF


def test_runtime_error_names_the_program_line_and_keeps_only_program_frames():
  response = web_api.run_program("a = 1\nb = [a][3]\n", "PYTHON", False)
  error = response["error"]
  assert (error["type"], error["line"]) == ("IndexError", 2)
  assert 'File "<program>", line 2' in error["traceback"] and "web_api" not in error["traceback"]


def test_program_without_out_says_what_to_do():
  error = web_api.run_program("x = 1\n", "PYTHON", False)["error"]
  assert error["type"] == "ProgramError" and "assign its result to `out`" in error["message"]


def test_out_must_be_a_tensor():
  error = web_api.run_program("out = [1, 2]\n", "PYTHON", False)["error"]
  assert "`out` must be a Tensor, not list" in error["message"]


def test_typed_errors_keep_their_type_and_the_program_line():
  code = "x = 1\nraise kg.LimitError('too big: use smaller tensors')\n"
  error = web_api.run_program(code, "PYTHON", False)["error"]
  assert error == {"type": "LimitError", "message": "too big: use smaller tensors", "line": 2}


def test_run_on_python_returns_numpy_layout_bytes():
  response = web_api.run_program("out = Tensor([[1, 2], [3, 4]]) * 3 + 1\n", "PYTHON", False)
  assert response["ok"], response.get("error")
  out = response["out"]
  assert (out["shape"], out["dtype"]) == ([2, 2], "int32")
  assert web_api.values(out) == [4, 7, 10, 13]


def test_compile_program_gives_both_targets():
  response = web_api.compile_program("out = Tensor([1.0, 2.0]).exp()\n", "sm_80")
  assert response["ok"], response.get("error")
  for target in ("wgsl", "ptx"):
    assert response[target]["ok"], response[target].get("error")
    kernel = response[target]["kernels"][0]
    assert kernel["target"] == target and kernel["launch"]["source"] == kernel["source"]
  assert ".target sm_80" in response["ptx"]["kernels"][0]["source"]


def test_float64_on_wgsl_fails_alone_and_names_the_dtype():
  code = "out = Tensor([1.0, 2.0], dtype=dtypes.float64) * 2\n"
  response = web_api.compile_program(code, "sm_80")
  assert response["ok"] and not response["wgsl"]["ok"] and response["ptx"]["ok"]
  assert "float64" in response["wgsl"]["error"]["message"]


def test_self_test_runner_reports_passes_failures_and_skips():
  source = ("import pytest\n"
            "@pytest.mark.parametrize('a, b', [(1, 2), (2, 4)])\n"
            "def test_double(a, b):\n  assert a * 2 == b\n"
            "def test_broken():\n  assert 1 == 2, 'one is not two'\n"
            "def test_fixture(tmp_path):\n  pass\n"
            "def test_monkeypatch(monkeypatch):\n  monkeypatch.setenv('KG_X', '1')\n")
  report = web_api.self_test({"test_sample.py": source})
  assert report["passed"] == 3
  assert report["failed"] == ["test_sample.py::test_broken: AssertionError: one is not two"]
  assert report["skipped"] == ["test_sample.py::test_fixture: needs fixture tmp_path"]


def test_dtype_names_round_trip():
  for name in ("bool", "int8", "uint16", "int32", "float16", "float32"):
    assert dtypes.from_name(name).name == name


def test_errors_are_kernelgen_errors():
  for error in (kg.LimitError, kg.CompileError, kg.UnsupportedError, kg.DeviceError):
    assert issubclass(error, kg.KernelgenError)
