"""The CI slice of the differential fuzzer: fixed seeds on every device here, plus hypothesis.

`./build.sh fuzz N` runs the full fuzzer; this file keeps a small, fixed, fast slice of it.
Seeds that hit a known open bug are listed in KNOWN with the regression test that names the bug.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_oracle import OVal, compare, evaluate, input_oval
from fuzz_programs import (SIZED, SIZED_KINDS, SOURCES, HypothesisChooser, RandomChooser,
                           ReplayChooser, Step, generate, generate_sized)
from fuzz_runner import available_devices, build_input, failure_key, run_program, shrink
from tools import DEVICE_NAMES

SEEDS = range(22)     # (22: the sized programs below keep the file at its former run time)
KNOWN: dict[int, str] = {}   # seed -> the open bug it hits (a test in tests/fuzz/test_regressions.py)
DEVICES = available_devices(DEVICE_NAMES)


@pytest.mark.tools       # every device here (WEBGPU: wgpu) and ptxas on each program's PTX
@pytest.mark.parametrize("seed", [
  pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=KNOWN[s])) if s in KNOWN else s
  for s in SEEDS])
def test_fixed_seed_program_agrees_on_every_device(seed):
  outcome = run_program(generate(RandomChooser(seed)), DEVICES, seed)
  assert not outcome.failed, f"seed {seed}:\n{outcome.program}\n{outcome.messages}"


# one program per kind of generate_sized (sizes on both sides of the optimizer's thresholds):
# seed -> kind, run where affordable, else compiled for WGSL (naga) and PTX (ptxas, the arch
# picked by the seed, so these cover sm_75 .. sm_121)
SIZED_SEEDS = {0: "outputs", 1: "matmul", 2: "rows", 3: "conv", 5: "batched", 7: "wide",
               9: "trips", 13: "elementwise", 14: "split", 17: "fold", 19: "scatter"}


@pytest.mark.parametrize("seed", sorted(SIZED_SEEDS), ids=lambda s: f"{s}-{SIZED_SEEDS[s]}")
def test_sized_program_agrees_or_compiles_everywhere(seed):
  program = generate_sized(RandomChooser(seed))
  outcome = run_program(program, DEVICES, seed)
  assert not outcome.failed, f"seed {seed}:\n{program}\n{outcome.messages}"
  assert "ptxas" in outcome.verdicts and outcome.verdicts["ptxas"] == "agree"


def test_sized_seeds_cover_every_kind_and_random_programs_every_source():
  # (generate_sized's first choice is the kind)
  kinds = {seed: SIZED_KINDS[RandomChooser(seed).integer(0, len(SIZED_KINDS) - 1)]
           for seed in SIZED_SEEDS}
  assert kinds == SIZED_SEEDS and set(kinds.values()) == set(SIZED)
  sources = {s.param("source", "numpy") for seed in range(60)
             for s in generate(RandomChooser(seed)).steps if s.op == "input"}
  assert sources == set(SOURCES)


@pytest.mark.parametrize("source", [s for s in SOURCES if s != "empty"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8", "uint32", "bool",
                                   "int64"])
def test_oracle_knows_what_each_creation_function_gives(source, dtype):
  step = Step("input", (), (("shape", (3, 7)), ("dtype", dtype), ("seed", 11), ("special", 0.3),
                            ("start", -3), ("step", 2 if dtype not in ("float32", "float16",
                                                                      "bfloat16") else 0.5),
                            ("stop", 37 if dtype in ("int8", "uint32", "bool", "int64") else 0.3),
                            ("endpoint", True), ("source", source)))   # (linspace: 2 a step)
  expected = input_oval(step)
  got = build_input(step, "PYTHON")
  assert got.dtype.name == dtype
  assert compare(expected, got.numpy()) is None


def test_oracle_compares_nothing_read_from_an_unwritten_empty():
  step = Step("input", (), (("shape", (2, 3)), ("dtype", "float32"), ("seed", 1),
                            ("special", 0.0), ("source", "empty")))
  expected = input_oval(step)
  assert not expected.ok.any()
  assert compare(expected, np.full((2, 3), 7.0, np.float32)) is None
  assert "shape" in compare(expected, np.zeros((3, 2), np.float32))


@st.composite
def programs(draw):
  return generate(HypothesisChooser(draw), max_steps=4)


@settings(max_examples=25, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_program_agrees_on_the_reference_interpreter(program):
  outcome = run_program(program, ["PYTHON"], ptxas=False)
  assert not outcome.failed, f"\n{program}\n{outcome.messages}"


# ---- the fuzzer's own parts can fail ---------------------------------------------------------

def test_replaying_recorded_choices_gives_the_same_program():
  chooser = RandomChooser(1234)
  program = generate(chooser)
  assert generate(ReplayChooser(chooser.choices)) == program


def test_oracle_rejects_a_wrong_value_and_accepts_nan_for_nan():
  expected = OVal(np.array([1.0, np.nan], np.float32), "float32", np.zeros(2),
                  np.ones(2, bool))
  assert compare(expected, np.array([1.0, np.nan], np.float32)) is None
  assert "1 of 2 elements differ" in compare(expected, np.array([1.5, np.nan], np.float32))
  assert "shape" in compare(expected, np.array([1.0], np.float32))


def test_oracle_ints_are_bit_exact_and_undefined_elements_are_skipped():
  expected = OVal(np.array([7, 0], np.int32), "int32", np.zeros(2), np.array([True, False]))
  assert compare(expected, np.array([7, 123], np.int32)) is None
  assert compare(expected, np.array([8, 0], np.int32)) is not None


def test_every_generated_program_has_an_oracle_result():
  for seed in range(200):
    program = generate(RandomChooser(seed))
    assert evaluate(program).a.dtype is not None


def test_shrinker_keeps_the_failure_and_makes_the_program_smaller(monkeypatch):
  import fuzz_runner
  real = fuzz_runner.run_program

  def fails_on_matmul(program, devices, seed=None, ptxas=True):
    outcome = real(program, [], seed, ptxas=False)
    if "matmul" in program.ops():
      outcome.verdicts["PYTHON"], outcome.messages["PYTHON"] = "FAIL", "matmul: planted"
    return outcome

  monkeypatch.setattr(fuzz_runner, "run_program", fails_on_matmul)
  seed = next(s for s in range(100) if "matmul" in generate(RandomChooser(s)).ops()
              and len(generate(RandomChooser(s)).steps) > 4)
  chooser = RandomChooser(seed)
  big = generate(chooser)
  key = failure_key(fails_on_matmul(big, []))
  small = shrink(chooser.choices, ["PYTHON"], key, budget=300)
  assert "matmul" in small.ops() and len(small.steps) < len(big.steps)
