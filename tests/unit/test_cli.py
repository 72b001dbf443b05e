"""`python -m kernelgen render`: files per kernel plus a manifest."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = """import kernelgen as kg
x = kg.Tensor([[1.0, 2.0], [3.0, 4.0]])
w = kg.Tensor([[1.0], [2.0]])
out = (x @ w).relu()
"""


def run(*args, cwd=None):
  env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "core"), "KERNELGEN_DEVICE": "PYTHON"}
  return subprocess.run([sys.executable, "-m", "kernelgen", *args], capture_output=True,
                        text=True, env=env, cwd=cwd)


def test_help_has_an_example():
  done = run("render", "--help")
  assert done.returncode == 0
  assert "--target" in done.stdout and "example:" in done.stdout and "manifest.json" in done.stdout


def test_the_kernelgen_command_is_installed(tmp_path):
  import tools
  command = os.path.join(os.path.dirname(sys.executable), "kernelgen")
  if not os.path.exists(command):
    tools.missing_tool("the `kernelgen` command", "pip install -e . (pyproject's [project.scripts])")
  prog = tmp_path / "prog.py"
  prog.write_text(PROGRAM)
  env = {**os.environ, "KERNELGEN_DEVICE": "PYTHON"}
  done = subprocess.run([command, "render", str(prog), "--target", "ptx", "--out",
                         str(tmp_path / "o")], capture_output=True, text=True, env=env)
  assert done.returncode == 0, done.stderr
  assert (tmp_path / "o" / "manifest.json").exists()
  bad = subprocess.run([command, "render", str(tmp_path / "missing.py"), "--out", str(tmp_path)],
                       capture_output=True, text=True, env=env)
  assert bad.returncode == 1 and bad.stderr.startswith("error:"), bad.stderr
  usage = subprocess.run([command, "render"], capture_output=True, text=True, env=env)
  assert usage.returncode == 2 and usage.stderr.startswith("usage: kernelgen render")


@pytest.mark.parametrize("target,suffix", [("python", ".uops"), ("wgsl", ".wgsl"),
                                           ("ptx", ".ptx")])
def test_render_writes_files_and_manifest(tmp_path, target, suffix):
  prog = tmp_path / "prog.py"
  prog.write_text(PROGRAM)
  done = run("render", str(prog), "--target", target, "--out", str(tmp_path / "o"))
  assert done.returncode == 0, done.stderr
  manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
  assert len(manifest["kernels"]) == 1
  k = manifest["kernels"][0]
  assert k["file"].endswith(suffix) and (tmp_path / "o" / k["file"]).read_text()
  assert [b["access"] for b in k["buffers"]] == ["write", "read", "read"]


def test_missing_output_name_is_a_clear_error(tmp_path):
  prog = tmp_path / "prog.py"
  prog.write_text("import kernelgen as kg\ny = kg.Tensor([1.0])\n")
  done = run("render", str(prog), "--out", str(tmp_path / "o"))
  assert done.returncode == 1 and "does not define `out`" in done.stderr


ISSUE_17_PROGRAM = """from kernelgen import Tensor
x = Tensor.empty(512, 512)
w = Tensor.empty(512, 512)
out = x @ w
"""


def _targets():
  from kernelgen.render.ptx.target import ISA_VERSION
  return [("wgsl", None), ("python", None)] + [("ptx", f"sm_{sm}") for sm in ISA_VERSION]


@pytest.mark.parametrize("target,arch", _targets(), ids=lambda v: str(v))
def test_empty_matmul_program_renders_with_buffers_named_after_its_variables(tmp_path, target,
                                                                              arch):
  # issue 17: `Tensor.empty(512, 512) @ Tensor.empty(512, 512)` ended in KeyError: View(...) on
  # PTX, and elsewhere its inputs were folded away as zeros
  from tools import ptxas_check, wgsl_validate
  prog = tmp_path / "prog.py"
  prog.write_text(ISSUE_17_PROGRAM)
  args = ["render", str(prog), "--target", target, "--out", str(tmp_path / "build")]
  done = run(*args, *(["--arch", arch] if arch else []))
  assert done.returncode == 0, done.stderr
  manifest = json.loads((tmp_path / "build" / "manifest.json").read_text())
  (k,) = manifest["kernels"]
  assert [(b["name"], b["access"], b["size"]) for b in k["buffers"]] == \
    [("out", "write", 512 * 512), ("x", "read", 512 * 512), ("w", "read", 512 * 512)]
  source = (tmp_path / "build" / k["file"]).read_text()
  if target == "ptx":
    assert "data1_x" in source and "data2_w" in source
    ptxas_check(source, arch, "12" if arch == "sm_101" else None)  # CUDA 13 renamed it sm_110
  elif target == "wgsl":
    assert " b1_x: array<" in source and " b2_w: array<" in source
    wgsl_validate(source)
