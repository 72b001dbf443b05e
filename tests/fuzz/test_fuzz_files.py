"""The file fuzzer (tests/helpers/fuzz_files.py, issue 41): seeded bit flips and truncations of a
bundle's manifest, kernel file and weights, a safetensors file and an ONNX model; in CI a fixed
range of seeds, in a child process with its address space capped and a time limit per case,
every outcome a result or a KernelgenError."""
from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

import fuzz_files

SEEDS = 60


@pytest.mark.timeout(600)
def test_mutated_files_are_handled_in_a_limited_process():
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
  run = subprocess.run([sys.executable, fuzz_files.__file__, str(SEEDS), "--seed", "1000"],
                       capture_output=True, text=True, timeout=580, env=env)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  assert f"{SEEDS} mutated files" in run.stdout and ": 0 not handled" in run.stdout, run.stdout
  for kind in fuzz_files.KINDS:
    assert kind in run.stdout


def test_mutations_are_seeded_and_change_the_file():
  blob = bytes(range(256)) * 4
  one = [fuzz_files.mutate(blob, random.Random(s)) for s in range(30)]
  assert one == [fuzz_files.mutate(blob, random.Random(s)) for s in range(30)]
  assert all(m != blob for m in one)
  assert any(len(m) < len(blob) for m in one) and any(len(m) == len(blob) for m in one)


@pytest.mark.parametrize("damage", [".version", ".address_size v4", ".address_size 64*",
                                    ".target"])
def test_damaged_module_directives_the_fuzzer_found_are_syntax_errors(damage):
  """Seeds 236, 396, 531 and 786 of the kernel files: a flipped bit in `.address_size 64` or a
  cut after `.version` was a raw ValueError / IndexError from the PTX parser."""
  from kernelgen import ptxsim
  with pytest.raises(ptxsim.PTXSyntaxError, match="line 1"):
    ptxsim.parse(damage + "\n.visible .entry k()\n{\n\tret;\n}\n")
