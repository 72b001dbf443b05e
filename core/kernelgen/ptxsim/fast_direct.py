"""The fast engine's dispatch cut down: direct steps and fused straight-line runs.

A direct step is an ALU instruction (the ones fast_alu.py computes with a vectorized primitive)
whose operands are plain registers (no conversion, no uninitialised-read check) or immediates and
whose destination is a plain register: generated Python (compiled once per operand pattern and
bound to the instruction's registers) that, when every thread of the batch runs it (`idx` None),
reads the batch's register dict, calls the instruction's own primitive and stores the result as
the instruction's writer would (the same dtype cast, conversion and read-only marking), without
the reader, compute and writer closures in between. Any other call (a subset of the threads)
takes the instruction's general step.

A run is a maximal sequence of STEP instructions with no branch target inside it after its
first: one generated function (compiled once per run length) calls their steps in order, so the
scheduler dispatches once per run instead of once per instruction. A fault inside it carries
`seg_off`, the offset of its instruction in the run, so the error still names the instruction.
Both are the same steps on the same arrays in the same order, so every result is the
per-instruction path's.
"""
from __future__ import annotations

import numpy as np

from .fast_operands import shared
from .steps import STEP


def direct_step(write, compute, general):
  """A step equal to `general` (write(compute)) that skips the closures when idx is None, or
  None where the instruction's operands or destination need the general path."""
  parts, dest = getattr(compute, "parts", None), getattr(write, "direct", None)
  if parts is None or dest is None:
    return None
  fn, srcs, post = parts
  values, shape = [], []
  for r in srcs:
    if getattr(r, "reg", None) is not None:
      values.append(r.reg)
      shape.append("r")
    elif hasattr(r, "const"):
      values.append(r.const)
      shape.append("c")
    else:
      return None
  name, it, conv, rt = dest
  make = _factory(("direct", "".join(shape), post is None, conv is None), _direct_source)
  return make(fn, post, general, name, it, conv, rt, *values)


def _direct_source(key) -> str:
  """The source of a factory of direct steps for one operand pattern (`r` a register read
  from the dict, `c` an immediate)."""
  _, shape, no_post, no_conv = key
  ops = ", ".join(f"v{k}" for k in range(len(shape)))
  args = ", ".join(f"R[v{k}]" if kind == "r" else f"v{k}" for k, kind in enumerate(shape))
  value = f"fn({args})" if no_post else f"post(fn({args}))"
  return "\n".join([
    f"def make(fn, post, general, name, it, conv, rt, {ops}):",
    "  def step(S, idx):",
    "    if idx is not None:",
    "      return general(S, idx)",
    "    R = S.R",
    f"    v = asarray({value}, it)",
    *([] if no_conv else ["    v = conv(v)"]),
    "    if v.ndim:",
    "      R[name] = v if v.base is None else shared(v)",
    "    else:",
    "      R[name] = full(S.n, v, rt)",
    "  return step"])


_FACTORIES: dict = {}


def _factory(key, source):
  """The `make` function of the generated source for `key`, compiled once per key (compiling
  source per instruction would cost more than it saves on short kernels)."""
  make = _FACTORIES.get(key)
  if make is None:
    env = {"asarray": np.asarray, "shared": shared, "full": np.full}
    exec(source(key), env)      # noqa: S102 (source built from the key, no outside text)
    make = _FACTORIES[key] = env["make"]
  return make


def runs(code: list, targets: set) -> list:
  """For each pc, (function running the STEP run that starts there, pc after it), or None (a
  pc inside a run, or a run of one instruction)."""
  out: list = [None] * len(code)
  pc = 0
  while pc < len(code):
    end = pc
    while end < len(code) and code[end][0] == STEP and (end == pc or end not in targets):
      end += 1
    if end - pc >= 2:
      steps = [fn for _, fn, _ in code[pc:end]]
      out[pc] = (_factory(("run", len(steps)), _run_source)(*steps), end)
    pc = max(end, pc + 1)
  return out


def _run_source(key) -> str:
  n = key[1]
  body = []
  for k in range(n):
    body += [f"      f{k}(S, idx)", f"      k = {k + 1}"]
  return "\n".join([f"def make({', '.join(f'f{k}' for k in range(n))}):",
                    "  def run(S, idx):", "    k = 0", "    try:", *body[:-1],
                    "    except BaseException as e:", "      e.seg_off = k", "      raise",
                    "  return run"])
