"""The `kernelgen` command as a new user meets it (issue 39): every failure of the user's program
is one line `PROGRAM:LINE: Type: message` with no kernelgen frames, `--version`, a suggestion for
a misspelled option, `--target` for the output language of both commands (export's `--format`
still works); export checks each `--input-shape` name and says which symbolic dimensions it set
(a note; kg.export: a SymbolicDimWarning); exported weights are keyed by the program's variables.
Runs the installed command (.venv/bin/kernelgen) on this checkout's core/."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import kernelgen as kg
from tools import REPO_ROOT

COMMAND = os.path.join(os.path.dirname(sys.executable), "kernelgen")
PROGRAM = """import kernelgen as kg
x = kg.Tensor.empty(1, 4, name="x")
w = kg.Tensor.randn(4, 3, seed=0).realize()
bias = kg.Tensor.randn(3, seed=1).realize()
out = {"y": (x @ w + bias).relu()}
"""


def kernelgen(*args, cwd=None):
  if not os.path.exists(COMMAND):
    import tools
    tools.missing_tool("the `kernelgen` command", "./build.sh install (pip install -e .)")
  env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "core"), "KERNELGEN_DEVICE": "PYTHON"}
  return subprocess.run([COMMAND, *map(str, args)], capture_output=True, text=True, env=env,
                        cwd=cwd)


@pytest.mark.parametrize("source, line, kind, words", [
  ("import kernelgen as kg\nx = kg.Tensor([1.0, 2.0])\nout = x.reshape(5)\n", 3, "ShapeError",
   "cannot reshape"),
  ("x = 1\ny = undefined_name + x\nout = y\n", 2, "NameError", "undefined_name"),
  ("out = (\n", 1, "SyntaxError", "never closed"),
  ("import kernelgen as kg\n\ndef helper(t):\n  return len(t) + \"a\"\n\n"
   "out = helper(kg.Tensor([1.0]))\n", 4, "TypeError", "unsupported operand"),
])
@pytest.mark.parametrize("command", ["render", "export"])
def test_a_failure_in_the_program_is_one_line_with_its_file_and_line(tmp_path, command, source,
                                                                     line, kind, words):
  program = tmp_path / "prog.py"
  program.write_text(source)
  done = kernelgen(command, program, "--out", tmp_path / "o")
  assert done.returncode == 1
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1, done.stderr
  assert lines[0].startswith(f"{program}:{line}: {kind}: ") and words in lines[0], lines[0]
  assert "Traceback" not in done.stderr and "kernelgen/" not in done.stderr


def test_a_program_without_its_output_names_the_file(tmp_path):
  program = tmp_path / "prog.py"
  program.write_text("import kernelgen as kg\ny = kg.Tensor([1.0])\n")
  done = kernelgen("render", program, "--out", tmp_path / "o")
  assert done.returncode == 1
  assert done.stderr.startswith(f"{program}: KernelgenError: the program does not define `out`")


def test_version_and_a_misspelled_option():
  done = kernelgen("--version")
  assert done.returncode == 0 and done.stdout.strip() == f"kernelgen {kg.__version__}"
  done = kernelgen("render", "prog.py", "--out", "o", "--targt", "ptx")
  assert done.returncode == 2 and "--targt: did you mean --target?" in done.stderr, done.stderr
  done = kernelgen("export", "prog.py", "--ot", "o")
  assert done.returncode == 2 and "--ot: did you mean --out?" in done.stderr, done.stderr


@pytest.mark.parametrize("flag, value, bundle", [("--target", "wgsl", "webgpu"),
                                                  ("--target", "ptx", "ptx"),
                                                  ("--format", "webgpu", "webgpu"),
                                                  ("--format", "ptx", "ptx")])
def test_export_takes_target_like_render_and_the_old_format(tmp_path, flag, value, bundle):
  program = tmp_path / "prog.py"
  program.write_text(PROGRAM)
  done = kernelgen("export", program, "--out", tmp_path / "b", flag, value)
  assert done.returncode == 0, done.stderr
  manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
  assert manifest["bundle"] == bundle
  # the weights are keyed by the program's variables
  assert sorted(w["name"] for w in manifest["weights"]) == ["bias", "w"]
  done = kernelgen("render", program.with_name("r.py"), "--out", tmp_path / "r", "--format",
                   "wgsl")
  assert done.returncode == 1 and "--format" not in done.stderr   # accepted; the file is missing


def test_exported_weights_named_by_variables_run_like_numpy(tmp_path):
  program = tmp_path / "prog.py"
  program.write_text(PROGRAM)
  assert kernelgen("export", program, "--out", tmp_path / "b", "--target", "ptx").returncode == 0
  bundle = kg.load_bundle(str(tmp_path / "b"))
  xv = np.arange(4, dtype=np.float32).reshape(1, 4) - 1.5
  got = bundle.run({"x": xv}, device="PTXSIM")["y"].numpy()
  w = kg.Tensor.randn(4, 3, seed=0).numpy()
  b = kg.Tensor.randn(3, seed=1).numpy()
  np.testing.assert_allclose(got, np.maximum(xv @ w + b, 0), rtol=1e-5, atol=1e-6)


# ---- export of an ONNX model: --input-shape names, symbolic dimensions ----

def matmul_model(tmp_path):
  onnx = pytest.importorskip("onnx")
  from onnx import TensorProto, helper, numpy_helper
  w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
  graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
    [numpy_helper.from_array(w, "w")])
  path = tmp_path / "mm.onnx"
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
  return path


def test_export_names_an_unknown_input_shape_and_lists_the_inputs(tmp_path):
  path = matmul_model(tmp_path)
  done = kernelgen("export", path, "--out", tmp_path / "b", "--input-shape", "y=2x4")
  assert done.returncode == 1
  assert "InputError: the model has no input named 'y': its inputs are x" in done.stderr
  done = kernelgen("export", path, "--out", tmp_path / "b", "--input-shape", "x=2x5")
  assert done.returncode == 1 and "axis 1 is fixed at 4" in done.stderr, done.stderr
  done = kernelgen("export", path, "--out", tmp_path / "b", "--input-shape", "x=2x4x1")
  assert done.returncode == 1 and "has 2 dimensions" in done.stderr, done.stderr


def test_export_says_which_symbolic_dims_it_set(tmp_path):
  path = matmul_model(tmp_path)
  done = kernelgen("export", path, "--out", tmp_path / "b")
  assert done.returncode == 0, done.stderr
  assert "note: input 'x': symbolic dimension 'batch' (axis 0) set to 1, so its shape is 1x4; " \
         "choose sizes with --input-shape x=1x4" in done.stderr, done.stderr
  given = kernelgen("export", path, "--out", tmp_path / "c", "--input-shape", "x=5x4")
  assert given.returncode == 0 and "note:" not in given.stderr
  assert kg.load_bundle(str(tmp_path / "c")).inputs[0]["shape"] == [5, 4]


def test_kg_export_of_a_model_warns_of_symbolic_dims_and_checks_names(tmp_path):
  model = kg.onnx.load(str(matmul_model(tmp_path)))
  with pytest.warns(kg.SymbolicDimWarning, match="'batch' \\(axis 0\\) set to 1"):
    bundle = kg.export(model, str(tmp_path / "b"))
  assert bundle.inputs == [{"name": "x", "shape": [1, 4], "dtype": "float32"}]
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert kg.export(model, str(tmp_path / "c"), input_shapes={"x": (3, 4)}).inputs[0][
      "shape"] == [3, 4]
  with pytest.raises(kg.InputError, match="no input named 'X'.*its inputs are x"):
    kg.export(model, str(tmp_path / "d"), input_shapes={"X": (3, 4)})
