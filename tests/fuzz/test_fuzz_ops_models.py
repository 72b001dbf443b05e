"""The fuzzer's model operations (tests/helpers/fuzz_ops_models.py): fixed seeds of programs centred on
them, on every device here against the numpy oracle (and their PTX through ptxas)."""
from __future__ import annotations

import collections

import pytest

from fuzz_ops_models import MODEL_OPS, generate_model
from fuzz_programs import RandomChooser, generate
from fuzz_runner import assert_agrees, available_devices
from tools import DEVICE_NAMES

SEEDS = range(4 * len(MODEL_OPS))     # each operation first in four programs (in three at least)
DEVICES = available_devices(DEVICE_NAMES)


@pytest.mark.parametrize("seed", SEEDS)
def test_model_program_agrees_on_every_device(seed):
  program = generate_model(RandomChooser(seed), MODEL_OPS[seed % len(MODEL_OPS)])
  assert_agrees(program, DEVICES, seed)


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


def test_the_fixed_seeds_reach_the_sorted_scatter():
  """Steps with form="sorted" (built in scatter.forced_form: the fuzz sizes are far below
  COMPARE_MAX) among the seeds above, for each scatter-making operation."""
  sorted_ops = collections.Counter()
  for seed in SEEDS:
    program = generate_model(RandomChooser(seed), MODEL_OPS[seed % len(MODEL_OPS)])
    sorted_ops.update(s.op for s in program.steps if s.param("form") == "sorted")
  assert {"scatter", "scatter_add", "setitem", "gather_grad"} <= set(sorted_ops), sorted_ops
