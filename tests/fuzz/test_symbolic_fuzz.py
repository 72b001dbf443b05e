"""The fixed slice of the symbolic-size fuzzer (tests/helpers/fuzz_symbolic.py; `./build.sh fuzz`
runs one beside every third seed's program): random chains of operations over a tensor with a
symbolic axis (kg.Dim), the range's ends and a value no tile divides drawn per program, each
bound value against numpy, and compiled once for all of them; some programs' axis is 2n, which a
step-2 slice or a stride-2 pooling or conv window halves. PYTHON and WEBGPU. Each program again
with its kernels cut to each bound value by graph/at_value.py's item_at (static_cuts: the
static kernel of that size, as option static_low_end gives a register tile's low end; no
adapter sets it, so nothing else reaches item_at on the default options)."""
from __future__ import annotations

import io
import os

import pytest

import kernelgen as kg
from fuzz_symbolic import FINAL, GROW, OPS, STEPS, WIDE, WIDE_FINAL, SymbolicProgram, \
  generate_symbolic, run_symbolic
from tools import device_fixture

SEEDS = int(os.environ.get("KERNELGEN_SYMBOLIC_SEEDS", 16))   # more: KERNELGEN_SYMBOLIC_SEEDS=500
device = device_fixture(("PYTHON", "WEBGPU"))


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_program_over_a_symbolic_axis_agrees_with_numpy(device, seed):
  program = generate_symbolic(seed)
  verdict, message = run_symbolic(program, [device])[device]
  assert verdict == "agree", f"{program}: {message}"


def test_programs_draw_range_ends_odd_values_and_every_operation():
  programs = [generate_symbolic(seed) for seed in range(300)]
  assert all(p.lo in p.values and p.hi in p.values for p in programs)
  assert any(p.lo > 1 for p in programs)
  assert all(any(v % 2 for v in p.values) for p in programs if p.hi - p.lo > 2)
  drawn = {name for p in programs for name in p.steps + (p.final,)}
  assert drawn == set(OPS) | set(STEPS) | set(GROW) | set(FINAL) | set(WIDE_FINAL)
  even = [p for p in programs if p.even]        # over (2n, cols): one step or stride-2 window
  assert even and all(sum(s in STEPS for s in p.steps) == 1 for p in even)
  assert not any(s in STEPS for p in programs if not p.even for s in p.steps)
  assert all(not any(s in GROW for s in p.steps[:p.steps.index(next(t for t in p.steps
                                                                   if t in STEPS))])
             for p in even)
  assert any(p.even for p in programs[:SEEDS]), "the fixed slice runs no even program"


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_program_cut_to_each_value_agrees_with_numpy(device, seed):
  program = generate_symbolic(seed)
  verdict, message = run_symbolic(program, [device], cut=True)[device]
  assert verdict == "agree", f"{program}: {message}"


# x (n, 4) padded to (n, 8), @ (8, WIDE): one kernel, a register tile over n on WEBGPU's adapters
WIDE_PROGRAM = SymbolicProgram(0, 1, 67, (1, 2, 3, 29, 67), 4, (), "matmul_wide")


def test_a_register_tile_cut_to_each_small_value(device):
  """The shape option static_low_end cuts (a register tile whose dim leads its output, with the
  tile ladder's variants: lowering/variants.py), cut at every value but the top (no cut)."""
  made = []
  verdict, message = run_symbolic(WIDE_PROGRAM, [device], cut=True, made=made)[device]
  assert verdict == "agree", message
  assert sorted(v for _, v in made) == [1, 2, 3, 29]
  x = kg.Tensor.empty(kg.Dim("n", 1, 67), 4, name="x")
  for adapter in ("lavapipe", "swiftshader"):
    (kernel,) = kg.compile(x.pad(((0, 0), (0, 4))) @ kg.Tensor.empty(8, WIDE, name="w"),
                           "wgsl", adapter=adapter)
    assert kernel.variants and all(v.launch.grid for _, _, v in kernel.variants), adapter


def test_a_wrong_cut_is_caught(monkeypatch):
  """What static_cuts runs is item_at's: a cut one row short (each value cut to value - 1) fails
  against numpy."""
  from kernelgen.graph import at_value
  cut = at_value.item_at
  monkeypatch.setattr(at_value, "item_at", lambda item, name, v: cut(item, name, max(v - 1, 1)))
  program = SymbolicProgram(0, 1, 13, (3, 7), 4, (), "matmul_wide")
  verdict, message = run_symbolic(program, ["PYTHON"], cut=True)["PYTHON"]
  assert verdict == "FAIL" and "n = 3" in message


def test_the_main_fuzzer_runs_symbolic_programs():
  import fuzz_runner
  out = io.StringIO()
  outcomes = fuzz_runner.fuzz(1, 0, ["PYTHON"], do_shrink=False, out=out)
  symbolic = [o for o in outcomes if isinstance(o.program, SymbolicProgram)]
  assert len(symbolic) == 1 and symbolic[0].verdicts == {"PYTHON": "agree"}, out.getvalue()
