"""The README's install lines on a fresh copy of the repository (issue 39): its *Install* block
runs as written in a copy holding only the files git tracks (no .venv, dist/ or site/), with
the repository's copy as `../` of another project: `./build.sh install` leaves
.venv/bin/kernelgen and `import kernelgen` of the copy's core/, `./build.sh wheel` a wheel that
installs into another project's fresh venv, where the command renders and exports the README's
example program and `import kernelgen` is the installed wheel, not the copy."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tools import REPO_ROOT

pytestmark = pytest.mark.timeout(600)

EXAMPLE = """import kernelgen as kg
x = kg.Tensor.empty(1, 64, name="x")
w = kg.Tensor.randn(64, 10, seed=0).realize()
out = {"y": (x @ w).softmax(axis=-1)}
"""


def readme_install_lines() -> list[str]:
  """The command lines of the README's *Install* block (its first ```sh block)."""
  text = (REPO_ROOT / "README.md").read_text()
  section = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
  block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
  return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def fresh_copy(where) -> str:
  """The files git tracks (as they are in the working tree) copied into `where`/kernelgen."""
  listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True,
                          check=True).stdout.decode().split("\0")
  copy = where / "kernelgen"
  for name in filter(None, listed):
    source = REPO_ROOT / name
    if source.is_file() and not source.is_symlink():
      (copy / name).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(source, copy / name)
  return str(copy)


def bash(script: str, cwd: str) -> subprocess.CompletedProcess:
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
  return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=540)


def test_the_readmes_install_lines_work_on_a_fresh_copy(tmp_path):
  lines = readme_install_lines()
  assert lines[0] == "./build.sh install" and any("pip install dist/kernelgen-" in l
                                                   for l in lines), lines
  copy = fresh_copy(tmp_path)
  (tmp_path / "prog.py").write_text(EXAMPLE)
  done = bash("\n".join(lines) + "\n" + f"""
    echo "editable: $(python -c 'import kernelgen; print(kernelgen.__file__)')"
    cd ../myproject
    .venv/bin/kernelgen render ../prog.py --target ptx --arch sm_80 --out build/
    .venv/bin/kernelgen export ../prog.py --out bundle/
    echo "installed: $(.venv/bin/python -c 'import kernelgen; print(kernelgen.__file__)')"
    """, copy)
  assert done.returncode == 0, done.stdout + done.stderr
  out = done.stdout
  assert "kernelgen 0.1.0" in out                                       # kernelgen --version
  assert f"editable: {copy}/core/kernelgen/__init__.py" in out, out
  project = tmp_path / "myproject"
  assert (project / "build" / "manifest.json").exists() and list(project.glob("build/*.ptx"))
  assert {"model.js", "manifest.json", "weights.safetensors"} <= \
    {p.name for p in (project / "bundle").iterdir()}
  installed = re.search(r"installed: (.*)", out).group(1)
  assert installed.startswith(str(project / ".venv" / "lib")), installed
  assert "1 kernels; inputs x; outputs y" in out or "kernels; inputs x; outputs y" in out


def test_build_sh_help_lists_install_and_cors_and_no_issue_numbers():
  done = subprocess.run(["./build.sh", "help"], cwd=REPO_ROOT, capture_output=True, text=True)
  assert done.returncode == 0
  assert "./build.sh install" in done.stdout and "--cors" in done.stdout
  assert not re.search(r"issue \d", done.stdout), done.stdout
