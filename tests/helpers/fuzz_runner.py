"""The differential runner: each fuzz program on numpy (the oracle) and on every device here.

    python tests/helpers/fuzz_runner.py 300 [--seed 0] [--devices PYTHON,WEBGPU,PTXSIM] [--no-shrink]
                                            [--files N]

Per program and device the verdict is one of
  agree        the device's values match the oracle (fuzz_oracle.py: tolerances, undefined cases)
  unsupported  the device raised UnsupportedError for a dtype its target lacks (float64, int64,
               uint64 and bfloat16 on WEBGPU): the typed error is the right answer
  skip         the device is not available here
  FAIL         anything else: wrong values, wrong dtype/shape, an untyped exception, a typed error
               without a reason, or PTX that ptxas rejects (every program's PTX is assembled)
Beside every SYMBOLIC_EVERY-th seed's program runs that seed's symbolic program
(fuzz_symbolic.py: a kg.Dim's range and bound values drawn, each value against numpy, nothing
compiled again after the first), then again with each value in the static kernels that
graph/at_value.py's item_at cuts to it (fuzz_symbolic.static_cuts); it is reported by its
printed form (not shrunk).
A failing program is shrunk (its recorded choices are shortened and simplified while it still
fails the same way) and printed as a `Program(...)` to paste into tests/fuzz/test_regressions.py.
Then (--files, as many as programs by default) fuzz_files.py's mutated manifests, kernel files,
safetensors files and ONNX models, each a result or a typed error within its time limit.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "core"))
sys.path.insert(0, os.path.dirname(__file__))

import kernelgen as kg  # noqa: E402
from tools import DEVICE_NAMES  # noqa: E402
from kernelgen import Tensor  # noqa: E402
from fuzz_oracle import (OVal, compare, evaluate, fill_value, input_values,  # noqa: E402
                         reassociates_nonfinite)
from fuzz_programs import (Program, RandomChooser, ReplayChooser, Step, generate,  # noqa: E402
                           generate_sized)
import fuzz_ops_models  # noqa: E402
from fuzz_symbolic import generate_symbolic, run_symbolic  # noqa: E402

DEVICES = DEVICE_NAMES   # (tools.py: the one list)
# dtypes a device's target has no type for: there, UnsupportedError is the expected answer
UNSUPPORTED = {"WEBGPU": {"float64", "int64", "uint64", "bfloat16"}}
PTX_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_101", "sm_103",
             "sm_120", "sm_121")     # every arch the PTX renderer knows (render/ptx_target.py)
# the most work (values computed, times the reduced elements of matmul and conv2d) a device runs
# for one program; a larger program is compiled for it only (WGSL validated, PTX assembled)
RUN_LIMIT = {"PYTHON": 1 << 15, "PTXSIM": 1 << 15, "WEBGPU": 1 << 22, "CUDA": 1 << 26}
# every SIZED_EVERY-th seed is a program at the optimizer's size thresholds (generate_sized)
SIZED_EVERY = 4
# of each DEEP_EVERY seeds, one is a program of fuzz_ops_deep.generate_deep (issue 18's
# operations in forms the others never draw); the sized seeds stay as they were
DEEP_EVERY, DEEP_AT = 8, 5
# beside every SYMBOLIC_EVERY-th seed's program, the seed's symbolic program (fuzz_symbolic.py)
SYMBOLIC_EVERY = 3
# a progress line every this many programs
PROGRESS_EVERY = 50


# ---- building a program with kernelgen --------------------------------------------------------

def build_input(step: Step, device: str) -> Tensor:
  """An input as the program's source makes it: numpy data, a list, or a creation function."""
  source, shape, dtype = step.param("source", "numpy"), step.param("shape"), step.param("dtype")
  if source in CREATE:
    return CREATE[source](step, shape, dtype, device)
  values = input_values(step)
  if dtype == "bfloat16" or source == "list":
    if source == "list" and 0 not in values.shape:   # nested lists (0-d: a Python number)
      return Tensor(values.tolist(), dtype=dtype, device=device)
    flat = Tensor(values.ravel().tolist(), dtype=dtype, device=device)   # lists lose (1, 0, 7)
    return flat.reshape(values.shape)
  return Tensor(values, device=device)


def _eye(step: Step, shape, dtype: str, device: str) -> Tensor:
  rows = shape[0] if shape else 1
  cols = int(np.prod(shape[1:], dtype=np.int64)) if shape else 1
  return Tensor.eye(rows, cols, dtype=dtype, device=device).reshape(shape)


def _arange(step: Step, shape, dtype: str, device: str) -> Tensor:
  n, start, by = int(np.prod(shape, dtype=np.int64)), step.param("start"), step.param("step")
  return Tensor.arange(start, start + n * by, by, dtype=dtype, device=device).reshape(shape)


def _linspace(step: Step, shape, dtype: str, device: str) -> Tensor:
  n = int(np.prod(shape, dtype=np.int64))
  return Tensor.linspace(step.param("start"), step.param("stop"), n, step.param("endpoint"),
                         dtype=dtype, device=device).reshape(shape)


CREATE = {
  "zeros": lambda s, shape, dt, dev: Tensor.zeros(*shape, dtype=dt, device=dev),
  "ones": lambda s, shape, dt, dev: Tensor.ones(*shape, dtype=dt, device=dev),
  "empty": lambda s, shape, dt, dev: Tensor.empty(*shape, dtype=dt, device=dev),
  "full": lambda s, shape, dt, dev: Tensor.full(shape, fill_value(s), dtype=dt, device=dev),
  "rand": lambda s, shape, dt, dev: Tensor.rand(*shape, seed=s.param("seed"), dtype=dt,
                                                device=dev),
  "randn": lambda s, shape, dt, dev: Tensor.randn(*shape, seed=s.param("seed"), dtype=dt,
                                                  device=dev),
  "eye": _eye, "arange": _arange, "linspace": _linspace,
}


def _binary(fn):
  def build(step: Step, xs: list):
    scalar = step.param("scalar")
    if scalar is None:
      return fn(xs[0], xs[1])
    return fn(scalar, xs[0]) if step.param("reverse") else fn(xs[0], scalar)
  return build


def _where(step: Step, xs: list):
  other = xs[2] if len(xs) > 2 else step.param("scalar")
  return kg.where(xs[0], xs[1], other)


def _index(step: Step, xs: list):
  index = [slice(None)] * xs[0].ndim
  index[step.param("axis")] = slice(*step.param("slice"))
  return xs[0][tuple(index)]


def _reduce(name: str):
  def build(step: Step, xs: list):
    axes = step.param("axes")
    axis = axes[0] if name in ("argmax", "argmin") else axes
    if name == "var":
      return xs[0].var(axis=axis, ddof=step.param("ddof"), keepdim=step.param("keepdim"))
    return getattr(xs[0], name)(axis=axis, keepdim=step.param("keepdim"))
  return build


def _conv2d(step: Step, xs: list):
  return xs[0].conv2d(xs[1], stride=step.param("stride"), padding=step.param("padding"))


def _method(name: str):
  return lambda step, xs: getattr(xs[0], name)()


def _maximum(a, b):
  return a.maximum(b) if isinstance(a, Tensor) else b.maximum(a)


def _minimum(a, b):
  return a.minimum(b) if isinstance(a, Tensor) else b.minimum(a)


BUILD = {
  "neg": lambda s, xs: -xs[0], "abs": lambda s, xs: xs[0].abs(), "invert": lambda s, xs: ~xs[0],
  **{name: _method(name) for name in ("relu", "sqrt", "exp", "exp2", "log", "log2", "sin", "cos",
                                      "reciprocal", "sigmoid", "tanh")},
  "add": _binary(lambda a, b: a + b), "sub": _binary(lambda a, b: a - b),
  "mul": _binary(lambda a, b: a * b), "truediv": _binary(lambda a, b: a / b),
  "floordiv": _binary(lambda a, b: a // b), "mod": _binary(lambda a, b: a % b),
  "and": _binary(lambda a, b: a & b), "or": _binary(lambda a, b: a | b),
  "xor": _binary(lambda a, b: a ^ b), "lshift": _binary(lambda a, b: a << b),
  "rshift": _binary(lambda a, b: a >> b), "maximum": _binary(_maximum),
  "minimum": _binary(_minimum), "lt": _binary(lambda a, b: a < b),
  "eq": _binary(lambda a, b: a == b), "ne": _binary(lambda a, b: a != b),
  "where": _where,
  "cast": lambda s, xs: xs[0].cast(s.param("dtype")),
  "bitcast": lambda s, xs: xs[0].bitcast(s.param("dtype")),
  "reshape": lambda s, xs: xs[0].reshape(s.param("shape")),
  "permute": lambda s, xs: xs[0].permute(*s.param("order")),
  "pad": lambda s, xs: xs[0].pad(s.param("pads")),
  "shrink": lambda s, xs: xs[0].shrink(s.param("bounds")),
  "flip": lambda s, xs: xs[0].flip(s.param("axes")),
  "slice": _index,
  **{name: _reduce(name) for name in ("sum", "max", "min", "mean", "argmax", "argmin", "prod",
                                      "var")},
  "matmul": lambda s, xs: xs[0] @ xs[1],
  "expand": lambda s, xs: xs[0].expand(s.param("shape")),
  "cat": lambda s, xs: kg.cat(xs, axis=s.param("axis")),
  "stack": lambda s, xs: kg.stack(xs, axis=s.param("axis")),
  "pow": _binary(lambda a, b: a ** b),
  "softmax": lambda s, xs: xs[0].softmax(axis=s.param("axis")),
  "conv2d": _conv2d,
}
BUILD.update(fuzz_ops_models.BUILD)   # issue 18's operations (tests/helpers/fuzz_ops_models.py)


from fuzz_scan_sort import BUILD as SCAN_SORT_BUILD  # noqa: E402  (scans, sorts, einsum: issue 18)
BUILD.update(SCAN_SORT_BUILD)
from fuzz_nn_ops import BUILD as NN_BUILD  # noqa: E402  (norms, losses, attention: issue 18)
BUILD.update(NN_BUILD)
from fuzz_ops_deep import BUILD as DEEP_BUILD, generate_deep  # noqa: E402  (issue 18: deeper)
BUILD.update(DEEP_BUILD)

def build(program: Program, device: str) -> Tensor:
  """The program's output as a lazy kernelgen Tensor on `device`."""
  values: list = []
  for step in program.steps:
    if step.op == "input":
      values.append(build_input(step, device))
    else:
      values.append(BUILD[step.op](step, [values[r] for r in step.refs]))
  return values[program.output]


def used_dtypes(program: Program) -> set[str]:
  """Every dtype a value of the program has (the oracle knows them all)."""
  from fuzz_oracle import input_oval
  from fuzz_oracle_ops import apply
  from fuzz_programs import COMPARE, result_dtype
  values: list[OVal] = []
  used = set()
  for step in program.steps:
    if step.op == "input":
      values.append(input_oval(step))
      continue
    xs = [values[r] for r in step.refs]
    if step.op in COMPARE:     # compares run in the operands' promoted dtype
      other = step.param("scalar") if len(xs) == 1 else xs[1].dtype
      used.add(result_dtype(xs[0].dtype, other))
    values.append(apply(step, xs))
  return used | {v.dtype for v in values} | program.dtypes()


# ---- running one program ------------------------------------------------------------------------

@dataclass
class Outcome:
  seed: int | None
  program: Program
  kernels: int = 0
  verdicts: dict = field(default_factory=dict)    # device -> "agree" | "unsupported" | "skip" | "FAIL"
  messages: dict = field(default_factory=dict)    # device -> what went wrong

  @property
  def failed(self) -> bool:
    return "FAIL" in self.verdicts.values()


def available_devices(names=DEVICES) -> list[str]:
  return [d for d in names if kg.Device.available(d)]


def program_for(seed: int, chooser) -> Program:
  """Seed `seed`'s program: every SIZED_EVERY-th a sized one, one in DEEP_EVERY a deep one, the
  others random."""
  return generator_for(seed)(chooser)


def generator_for(seed: int | None):
  """The generator seed `seed`'s program comes from."""
  if is_sized(seed):
    return generate_sized
  return generate_deep if seed is not None and seed % DEEP_EVERY == DEEP_AT else generate


def is_sized(seed: int | None) -> bool:
  return seed is not None and seed % SIZED_EVERY == SIZED_EVERY - 1


def work(program: Program) -> int:
  """How much computing running `program` takes: each value's elements, a reduction's (and a
  matmul's or conv2d's) source elements; the lazy graph is built, nothing runs."""
  values, total = [], 0
  for step in program.steps:
    xs = [values[r] for r in step.refs]
    value = build_input(step, "PYTHON") if step.op == "input" else BUILD[step.op](step, xs)
    values.append(value)
    total += value.numel()
    if step.op == "matmul":
      total += value.numel() * xs[0].shape[-1]
    elif step.op == "conv2d":
      total += value.numel() * int(np.prod(xs[1].shape[1:]))
    elif step.op != "input":
      total += sum(x.numel() for x in xs)
  return total


def assert_agrees(program: Program, devices, seed: int) -> None:
  """The fixed-seed tests' check: every device here agrees with the oracle (and ptxas takes the
  PTX); WEBGPU missing is a failure under KERNELGEN_REQUIRE_ALL=1, never a silent pass."""
  from tools import missing_tool, require_all
  if require_all() and "WEBGPU" not in devices:
    missing_tool("device WEBGPU", "pip install wgpu; apt-get install mesa-vulkan-drivers")
  outcome = run_program(program, devices, seed)
  assert not outcome.failed, f"seed {seed}:\n{program}\n{outcome.messages}"


def run_program(program: Program, devices, seed: int | None = None, ptxas=True) -> Outcome:
  out = Outcome(seed, program)
  cost = work(program)
  ran = [d for d in devices if cost <= RUN_LIMIT.get(d, 0)]
  expected = evaluate(program) if ran else None
  dtypes = used_dtypes(program) if ran else set()
  for device in devices:
    if device in ran:
      verdict, message = _run_on(program, device, expected, dtypes)
    else:
      verdict, message = "skip", f"compiled only: work {cost} is above {RUN_LIMIT.get(device)}"
    out.verdicts[device], out.messages[device] = verdict, message
  if ptxas:
    verdict, message, out.kernels = _ptx_check(program, seed or 0)
    out.verdicts["ptxas"], out.messages["ptxas"] = verdict, message
  if ptxas and "WEBGPU" not in ran:     # WGSL not run: compiled and validated
    verdict, message = _wgsl_check(program)
    out.verdicts["wgsl"], out.messages["wgsl"] = verdict, message
  return out


def _run_on(program: Program, device: str, expected: OVal, dtypes: set[str]):
  try:
    tensor = build(program, device)
    if tensor.dtype.name != expected.dtype:
      return "FAIL", f"dtype {tensor.dtype.name}, expected {expected.dtype}"
    actual = tensor.numpy()
  except kg.UnsupportedError as error:
    if dtypes & UNSUPPORTED.get(device, set()):
      return "unsupported", str(error).splitlines()[0]
    return "FAIL", f"UnsupportedError without an unsupported dtype: {error}"
  except Exception as error:  # noqa: BLE001 - every other exception is a finding
    return "FAIL", f"{_name(error)}: {str(error)[:2000]}"
  problem = compare(expected, actual,
                    nonfinite_sums=device == "WEBGPU" and reassociates_nonfinite(program))
  return ("agree", "") if problem is None else ("FAIL", problem)


def _name(error: BaseException) -> str:
  """The error's type; for kernelgen's report of an internal error, the original's too."""
  cause = error.__cause__ if getattr(error, "pass_name", None) else None
  return type(error).__name__ + (f"({type(cause).__name__})" if cause is not None else "")


def _wgsl_check(program: Program):
  """Compile for WGSL and validate every kernel with wgpu (naga)."""
  import tools
  try:
    kernels = kg.compile(build(program, "PYTHON"), target="wgsl")
    for kernel in kernels:
      tools.wgsl_validate(kernel.source, kernel.launch.entry_point)
  except AssertionError as error:
    return "FAIL", f"naga: {str(error)[:3000]}"
  except kg.UnsupportedError as error:
    if used_dtypes_cheap(program) & UNSUPPORTED["WEBGPU"]:
      return "unsupported", str(error).splitlines()[0]
    return "FAIL", f"UnsupportedError without an unsupported dtype: {error}"
  except Exception as error:  # noqa: BLE001
    return "FAIL", f"compile for wgsl: {_name(error)}: {str(error)[:2000]}"
  return "agree", ""


def used_dtypes_cheap(program: Program) -> set[str]:
  """The dtypes of the program's values, from the lazy graph (no oracle: sizes may be large)."""
  values = []
  for step in program.steps:
    xs = [values[r] for r in step.refs]
    values.append(build_input(step, "PYTHON") if step.op == "input" else BUILD[step.op](step, xs))
  return {v.dtype.name for v in values} | program.dtypes()


def _ptx_check(program: Program, seed: int):
  """Compile for PTX (an arch picked by the seed) and assemble every kernel with ptxas."""
  import tools
  arch = PTX_ARCHS[seed % len(PTX_ARCHS)]
  which = "12" if arch == "sm_101" else None     # CUDA 13's ptxas calls it sm_110
  if tools._find_ptxas("12") is None:
    return "skip", "ptxas 12.x is not installed", 0
  try:
    kernels = kg.compile(build(program, "PYTHON"), target="ptx", arch=arch)
    for kernel in kernels:
      tools.ptxas_check(kernel.source, arch, which)
  except AssertionError as error:
    return "FAIL", f"ptxas ({arch}): {str(error)[:3000]}", 0
  except kg.UnsupportedError as error:
    return "unsupported", str(error).splitlines()[0], 0
  except Exception as error:  # noqa: BLE001
    return "FAIL", f"compile for {arch}: {_name(error)}: {str(error)[:2000]}", 0
  return "agree", "", len(kernels)


# ---- shrinking ------------------------------------------------------------------------------------

def failure_key(outcome: Outcome) -> tuple:
  """What kind of failure it is: the failing devices and the first word of each message."""
  return tuple(sorted((d, outcome.messages[d].split(":")[0].split(" ")[0])
                      for d, v in outcome.verdicts.items() if v == "FAIL"))


def shrink(choices: list[int], devices, key: tuple, budget: int = 200, sized=False,
           generator=None) -> Program:
  """Shorten and simplify the recorded choices while the program still fails the same way
  (programs of `generator`: by default generate, or generate_sized when `sized`)."""
  generator = generator or (generate_sized if sized else generate)
  fail_devices = [d for d, _ in key if d not in ("ptxas", "wgsl")]
  use_ptxas = any(d in ("ptxas", "wgsl") for d, _ in key)

  def still_fails(candidate: list[int]) -> bool:
    nonlocal budget
    budget -= 1
    program = generator(ReplayChooser(candidate))
    outcome = run_program(program, fail_devices, ptxas=use_ptxas)
    return failure_key(outcome) == key

  best = list(choices)
  improved = True
  while improved and budget > 0:
    improved = False
    for size in (8, 4, 2, 1):
      i = 0
      while i < len(best) and budget > 0:
        candidate = best[:i] + best[i + size:]
        if still_fails(candidate):
          best, improved = candidate, True
        else:
          i += size
    for i in range(len(best)):
      for value in (0, best[i] // 2, best[i] - 1):
        if 0 <= value < best[i] and budget > 0 and still_fails(best[:i] + [value] + best[i + 1:]):
          best, improved = best[:i] + [value] + best[i + 1:], True
          break
  return generator(ReplayChooser(best)).pruned()


# ---- the fuzz command -----------------------------------------------------------------------------

def fuzz(count: int, start: int = 0, devices=None, do_shrink=True, out=sys.stdout) -> list:
  devices = available_devices(devices or DEVICES)
  print(f"fuzzing {count} programs (seeds {start}..{start + count - 1}) on numpy and "
        f"{', '.join(devices)} + ptxas", file=out)
  began, outcomes = time.time(), []
  try:
    for seed in range(start, start + count):
      chooser = RandomChooser(seed)
      outcome = run_program(program_for(seed, chooser), devices, seed)
      outcome.choices = chooser.choices
      outcomes.append(outcome)
      if outcome.failed:
        print(f"  seed {seed}: FAIL on {', '.join(d for d, _ in failure_key(outcome))}", file=out)
      if seed % SYMBOLIC_EVERY == 0:
        outcomes.append(symbolic_outcome(seed, devices, out))
      if len(outcomes) % PROGRESS_EVERY == 0:
        print(f"  {len(outcomes)} programs, {sum(o.failed for o in outcomes)} failing, "
              f"{time.time() - began:.0f} s", file=out, flush=True)
  except KeyboardInterrupt:     # Ctrl-C, or SIGTERM (main): the summary of what ran
    print(f"\nstopped after {len(outcomes)} of {count} programs", file=out)
  _summary(outcomes, devices, time.time() - began, out)
  failures = [o for o in outcomes if o.failed and hasattr(o, "choices")]
  if do_shrink:
    _report_shrunk(failures[:10], devices, out)
  return outcomes


def symbolic_outcome(seed: int, devices, out=sys.stdout) -> Outcome:
  """Seed `seed`'s symbolic program on `devices` (PYTHON and WEBGPU where present: PTXSIM is
  too slow for several bound values a program); failures are printed with the program."""
  program = generate_symbolic(seed)
  outcome = Outcome(seed, program)
  devices = [d for d in devices if d in ("PYTHON", "WEBGPU")]
  for cut in (False, True):         # (then in item_at's static kernels: static_cuts)
    for device, (verdict, message) in run_symbolic(program, devices, cut).items():
      if outcome.verdicts.get(device) == "FAIL":
        continue
      message = f"cut to each value (static_cuts): {message}" if cut and message else message
      outcome.verdicts[device], outcome.messages[device] = verdict, message
      if verdict == "FAIL":
        print(f"  symbolic seed {seed}: FAIL on {device}: {program}\n    {message[:600]}",
              file=out)
  return outcome


def _summary(outcomes: list, devices, seconds: float, out) -> None:
  print(f"\n{len(outcomes)} programs, {sum(o.kernels for o in outcomes)} PTX kernels, "
        f"{seconds:.0f} s", file=out)
  for device in list(devices) + ["ptxas", "wgsl"]:
    counts = {v: sum(o.verdicts.get(device) == v for o in outcomes)
              for v in ("agree", "unsupported", "skip", "FAIL")}
    print(f"  {device:8s} " + "  ".join(f"{k} {n}" for k, n in counts.items()), file=out)
  failures = [o for o in outcomes if o.failed]
  print(f"failures: {len(failures)}" + (" (seeds " + ", ".join(str(o.seed) for o in failures) +
                                         ")" if failures else ""), file=out)


def _report_shrunk(failures: list, devices, out) -> None:
  seen = set()
  for outcome in failures:
    key = failure_key(outcome)
    if key in seen:
      continue
    seen.add(key)
    small = shrink(outcome.choices, devices, key, generator=generator_for(outcome.seed))
    result = run_program(small, [d for d, _ in key if d not in ("ptxas", "wgsl")],
                         ptxas=any(d in ("ptxas", "wgsl") for d, _ in key))
    print(f"\n--- seed {outcome.seed}, shrunk ---\n{small}", file=out)
    for device, verdict in result.verdicts.items():
      if verdict == "FAIL":
        print(f"  {device}: {result.messages[device][:600]}", file=out)
    print(f"  regression: {small!r}", file=out)


def _interrupt(signum, frame):
  raise KeyboardInterrupt


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("count", nargs="?", type=int, default=300)
  parser.add_argument("--seed", type=int, default=0, help="first seed")
  parser.add_argument("--devices", default=",".join(DEVICES))
  parser.add_argument("--no-shrink", action="store_true")
  parser.add_argument("--files", type=int, default=None,
                      help="mutated files to try after the programs (fuzz_files.py; default: "
                           "as many as programs)")
  args = parser.parse_args(argv)
  signal.signal(signal.SIGTERM, _interrupt)   # a stopped run still prints its summary
  outcomes = fuzz(args.count, args.seed, args.devices.split(","), not args.no_shrink)
  files = args.count if args.files is None else args.files
  if files:    # in a process of its own: its address space is capped (fuzz_files.py)
    import subprocess
    print(f"\n{files} mutated files (tests/helpers/fuzz_files.py):", flush=True)
    run = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__),
                                                       "fuzz_files.py"), str(files),
                          "--seed", str(args.seed)])
    if run.returncode:
      return 1
  return 1 if any(o.failed for o in outcomes) else 0


if __name__ == "__main__":
  sys.exit(main())
