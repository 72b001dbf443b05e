"""The fuzzer's deeper draws of issue 18's operations (tests/helpers/fuzz_ops_deep.py): fixed seeds of
programs centred on them, on every device here against the numpy oracle (and their PTX through
ptxas); the seeds reach each form the module adds (kg.take by name with every index kind, device
loss targets, sdpa head dims past ATTENTION_MAX_DIM, scans past SCAN_BLOCK and SCAN_BLOCK^2,
sorts past 2^SORT_BITS, interpolate's modes by size and scale, roll / split / repeat_interleave
forms); the oracle is not vacuous; the runner gives one seed in DEEP_EVERY to this generator."""
from __future__ import annotations

import numpy as np
import pytest

import fuzz_programs  # noqa: F401  (first: the fuzzer's modules import each other)
import fuzz_runner
from fuzz_nn_ops import fused
from fuzz_ops_deep import DEEP_OPS, STEP_OPS, generate_deep
from fuzz_oracle import U, compare, evaluate
from fuzz_programs import RandomChooser, generate, generate_sized
from fuzz_runner import BUILD, assert_agrees, available_devices, build, build_input
from kernelgen.tensor.ops.attention import ATTENTION_MAX_DIM
from kernelgen.tensor.ops.scan import SCAN_BLOCK
from kernelgen.tensor.ops.sort import SORT_BITS
from tools import DEVICE_NAMES

# seed s starts with DEEP_OPS[s % len(DEEP_OPS)]: the first of each, then seeds picked (greedily,
# from the first 300; 456: a scan of 32) until every form counted in _forms below is reached,
# leaving out the slow ones (a fused attention with a head dim of 64 and more, a sort of more
# than 100: seconds of shader compiling or simulating each)
SEEDS = (0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 17, 18, 19, 20, 21, 22, 25, 35, 51, 63,
         67, 82, 89, 111, 119, 123, 125, 128, 155, 164, 185, 229, 265, 456)
DEVICES = available_devices(DEVICE_NAMES)


def _program(seed: int):
  return generate_deep(RandomChooser(seed), DEEP_OPS[seed % len(DEEP_OPS)])


@pytest.mark.parametrize("seed", SEEDS)
def test_deep_program_agrees_on_every_device(seed):
  assert_agrees(_program(seed), DEVICES, seed)


def _source_op(program, ref: int) -> str:
  """The op that made value `ref`, looking through a cast."""
  step = program.steps[ref]
  return program.steps[step.refs[0]].op if step.op == "cast" else step.op


def _forms(program) -> set:
  """The forms a program reaches (sizes from the lazy graph, built on PYTHON)."""
  forms, values = set(), []
  for step in program.steps:
    xs = [values[r] for r in step.refs]
    if step.op == "sdpa":
      wide = max(xs[0].shape[-1], xs[2].shape[-1]) > ATTENTION_MAX_DIM
      forms.add(("sdpa", "fused" if fused(step, xs) else "split", wide))
    if step.op in ("cumsum", "cumprod", "cummax", "cummax_index"):
      n = xs[0].shape[step.param("axis")]
      forms |= {("scan", n <= SCAN_BLOCK, n <= SCAN_BLOCK ** 2), step.op}
    if step.op in ("sort", "argsort", "topk", "topk_index"):
      forms |= {("sort", xs[0].shape[step.param("axis")] <= 2 ** SORT_BITS), step.op}
    if step.op == "take_fn":
      forms |= {("take", step.param("kind")), ("take axis None", step.param("axis") is None)}
    if step.op in ("nll_loss_t", "cross_entropy_t", "cross_entropy_prob"):
      forms.add((step.op, _source_op(program, step.refs[1])))
    if step.op == "interp":
      forms |= {("interp", step.param("mode")), ("interp scale", bool(step.param("scale")))}
    if step.op == "setitem_tensor":
      forms.add(("setitem", step.param("kind")))
    if step.op == "shape_more":
      forms.add(("shape_more", step.param("form")))
    if step.op == "take_mask":
      forms.add(("mask", "host" if step.param("mask") is not None else "realized"))
    forms |= {step.op} & set(STEP_OPS)
    values.append(build_input(step, "PYTHON") if step.op == "input" else BUILD[step.op](step, xs))
  return forms


def test_the_fixed_seeds_reach_every_form():
  forms = set()
  for seed in SEEDS:
    forms |= _forms(_program(seed))
  want = set(STEP_OPS) | {("sdpa", "split", True), ("sdpa", "fused", False),
                          ("scan", True, True), ("scan", False, True), ("scan", False, False),
                          ("sort", True), ("sort", False), ("take axis None", True),
                          ("take axis None", False), ("interp scale", True),
                          ("interp scale", False), ("cross_entropy_prob", "softmax"),
                          ("cross_entropy_prob", "one_hot")}
  want |= {("take", k) for k in ("list", "numpy", "tensor", "ref")}
  want |= {(op, src) for op in ("nll_loss_t", "cross_entropy_t") for src in ("argmax", "mod")}
  want |= {("interp", m) for m in ("nearest", "linear", "bilinear")}
  want |= {("setitem", k) for k in ("slice", "list", "tensor")}
  want |= {("mask", "host"), ("mask", "realized")}
  want |= {("shape_more", f) for f in ("roll_none", "roll_axes", "split_sizes", "repeat_none")}
  want |= {"cumsum", "cumprod", "cummax", "cummax_index", "sort", "argsort", "topk",
           "topk_index"}
  assert want <= forms, want - forms


def test_the_oracle_catches_a_small_error():
  """A result moved by 64 units of roundoff of its float dtype (ints: by 1) fails the comparison
  wherever it is defined: the oracle of these steps is not vacuous."""
  caught = considered = 0
  for seed in SEEDS:
    program = _program(seed)
    expected = evaluate(program)
    if not (expected.ok & (expected.a != 0)).any():
      continue
    considered += 1
    got = build(program, "PYTHON").numpy()
    assert compare(expected, got) is None, f"seed {seed}"
    if expected.dtype in U:
      with np.errstate(over="ignore"):     # (the largest floats move to inf)
        moved = got.astype(np.float64) * (1 + 64 * U[expected.dtype]) + 1e-3
    elif expected.dtype == "bool":
      moved = ~got
    else:
      moved = got + np.ones((), got.dtype)
    caught += compare(expected, moved) is not None
  assert considered >= len(SEEDS) * 2 // 3 and caught >= considered * 3 // 4, (considered, caught)


def test_the_runner_gives_one_seed_in_deep_every_to_the_deep_generator():
  every, at = fuzz_runner.DEEP_EVERY, fuzz_runner.DEEP_AT
  for seed in range(3 * every):
    want = generate_sized if fuzz_runner.is_sized(seed) else generate_deep if \
      seed % every == at else generate
    assert fuzz_runner.generator_for(seed) is want
    assert fuzz_runner.program_for(seed, RandomChooser(seed)) == want(RandomChooser(seed))
