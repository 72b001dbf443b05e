"""Compile cost in the optimizer's choices: what a kernel costs the driver to build, weighed
against how often it will run.

Unrolled windows, large register tiles and many query rows per thread win GPU time, and the
kernels they make are long straight-line code that a software adapter's shader compiler (Mesa
lavapipe's LLVM, SwiftShader's) takes seconds to tens of seconds to build at first use. A user
waits for that once per kernel: a one-off run (a realize, a model's first run) pays it in full,
a training loop or a jit'd step spreads it over every run.

The model: the adapter's table (render/wgsl/adapters.py, DRIVER_COST, measured with
bench/compile_cost.py) gives the driver's compile of one kernel as

    driver ms = a * uops + b * uops^2 / 1000

in the UOps of its lowered graph (the optimizer's measure of size: it has them before rendering),
and reaches the optimizer as the adapter default `driver_cost` = (a, b). Option `runs` is how
many times the caller expects to run the plan (1 unless said: realize and a model's first run;
kg.jit and a plan realized again ask for RUNS_MANY). A choice whose estimate passes
`budget_ms` = ONE_OFF_MS * runs takes the next smaller one; adapters without a measured cost
(GPUs, unknown) are not capped, so their kernels are as before.
"""
from __future__ import annotations

# the estimated driver compile one kernel of a one-off run may cost (ms): lavapipe then builds a
# fused sdpa at L=512, d=64 in about a second instead of a minute, a 5x5 depthwise conv looped
# instead of 140-330 KB of unrolled windows (bench/compile_cost.py, adapters.py DRIVER_COST)
ONE_OFF_MS = 1500.0
# the runs a plan that runs many times is taken to have (kg.jit, a graph realized again): its
# kernels may take the large forms, whose GPU time pays for their compile over that many runs
RUNS_MANY = 100


def runs(options: dict) -> int:
  """The runs the caller expects of the kernel (option `runs`, 1 when not given)."""
  return max(int(options.get("runs") or 1), 1)


def estimate_ms(options: dict, uops: int) -> float | None:
  """The driver's estimated compile (ms) of a kernel of `uops` UOps on the options' adapter, or
  None where its class has no measured cost (a GPU, an unknown adapter: no cap)."""
  cost = options.get("driver_cost")
  if not cost:
    return None
  a, b = cost                      # (checked by Target.check_options)
  return a * uops + b * uops * uops / 1000.0


def budget_ms(options: dict) -> float:
  """The most estimated driver compile one kernel may cost: ONE_OFF_MS per expected run."""
  return ONE_OFF_MS * runs(options)


def affordable(options: dict, uops: int) -> bool:
  """A kernel of `uops` UOps fits the compile budget (always, where the adapter has no cost)."""
  estimate = estimate_ms(options, uops)
  return estimate is None or estimate <= budget_ms(options)


def capped(options: dict) -> bool:
  """The options' choices may be capped by compile cost: the adapter has a measured cost and the
  caller expects fewer than RUNS_MANY runs (where the cap bites, a plan realized again may swap
  in the kernel compiled for RUNS_MANY: realize.py)."""
  return bool(options.get("driver_cost")) and runs(options) < RUNS_MANY
