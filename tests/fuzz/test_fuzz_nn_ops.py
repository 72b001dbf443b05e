"""The fuzzer's nn steps (tests/helpers/fuzz_nn_ops.py: meshgrid, batchnorm, group_norm, instance_norm,
nll_loss, cross_entropy with class indices and with probabilities, sdpa) and its linspace inputs:
fixed seeds of programs centred on them, on every device here against the numpy oracle (and their
PTX through ptxas); the seeds reach fused and split attention; the oracle is not vacuous."""
from __future__ import annotations

import collections

import numpy as np
import pytest

import fuzz_programs  # noqa: F401  (first: the fuzzer's modules import each other)
from fuzz_nn_ops import NN_OPS, fused, generate_nn
from fuzz_oracle import U, compare, evaluate
from fuzz_programs import RandomChooser, generate
from fuzz_runner import BUILD, assert_agrees, available_devices, build, build_input
from tools import DEVICE_NAMES

SEEDS = range(3 * len(NN_OPS))     # each step first in three programs
DEVICES = available_devices(DEVICE_NAMES)


def _program(seed: int):
  return generate_nn(RandomChooser(seed), NN_OPS[seed % len(NN_OPS)])


@pytest.mark.parametrize("seed", SEEDS)
def test_nn_program_agrees_on_every_device(seed):
  assert_agrees(_program(seed), DEVICES, seed)


def _sdpa_forms(seeds) -> set:
  """'fused' / 'split' for each sdpa step the programs of `seeds` build."""
  forms = set()
  for seed in seeds:
    values = []
    for step in _program(seed).steps:
      xs = [values[r] for r in step.refs]
      if step.op == "sdpa":
        forms.add("fused" if fused(step, xs) else "split")
      values.append(build_input(step, "PYTHON") if step.op == "input" else BUILD[step.op](step, xs))
  return forms


def test_the_fixed_seeds_cover_every_step_and_both_attention_forms():
  covered = collections.Counter()
  for seed in SEEDS:
    covered.update(_program(seed).ops() & set(NN_OPS))
  assert all(covered[op] >= 2 for op in NN_OPS), covered
  assert _sdpa_forms(SEEDS) == {"fused", "split"}


def test_the_general_generator_draws_nn_steps_and_linspace_inputs():
  drawn, sources = set(), set()
  for seed in range(300):
    program = generate(RandomChooser(seed))
    drawn |= program.ops() & set(NN_OPS)
    sources |= {s.param("source") for s in program.steps if s.op == "input"}
  assert len(drawn) >= 6 and "linspace" in sources, (drawn, sources)


def test_the_oracle_catches_a_small_error():
  """An nn result moved by 64 units of roundoff of its dtype fails the comparison wherever it is
  defined and non-zero: the error bounds are tight enough to matter."""
  caught = 0
  for seed in SEEDS:
    program = _program(seed)
    expected = evaluate(program)
    if expected.dtype not in U or not (expected.ok & (expected.a != 0)).any():
      continue
    got = build(program, "PYTHON").numpy().astype(np.float64)
    assert compare(expected, got) is None
    caught += compare(expected, got * (1 + 64 * U[expected.dtype]) + 1e-3) is not None
  assert caught >= 8, caught
