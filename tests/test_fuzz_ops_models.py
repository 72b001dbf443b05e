"""The fuzzer's model operations (tests/fuzz_ops_models.py): fixed seeds of programs centred on
them, on every device here against the numpy oracle (and their PTX through ptxas)."""
from __future__ import annotations

import collections

import pytest

from fuzz_ops_models import MODEL_OPS, generate_model
from fuzz_programs import RandomChooser, generate
from fuzz_runner import available_devices, run_program
from tools import missing_tool, require_all

SEEDS = range(4 * len(MODEL_OPS))     # each operation first in four programs (in three at least)
DEVICES = available_devices(["PYTHON", "WEBGPU", "PTXSIM", "CUDA"])


@pytest.mark.parametrize("seed", SEEDS)
def test_model_program_agrees_on_every_device(seed):
  if require_all() and "WEBGPU" not in DEVICES:
    missing_tool("device WEBGPU", "pip install wgpu; apt-get install mesa-vulkan-drivers")
  program = generate_model(RandomChooser(seed), MODEL_OPS[seed % len(MODEL_OPS)])
  outcome = run_program(program, DEVICES, seed)
  assert not outcome.failed, f"seed {seed}:\n{program}\n{outcome.messages}"


def test_the_fixed_seeds_cover_every_model_operation():
  covered = collections.Counter()
  for seed in SEEDS:
    program = generate_model(RandomChooser(seed), MODEL_OPS[seed % len(MODEL_OPS)])
    covered.update(program.ops() & set(MODEL_OPS))
  assert all(covered[op] >= 3 for op in MODEL_OPS), covered


def test_the_general_generator_draws_model_operations():
  drawn = set()
  for seed in range(300):
    drawn |= generate(RandomChooser(seed)).ops() & set(MODEL_OPS)
  assert len(drawn) >= 8, drawn
