"""The fast engine's dispatch cut down: direct steps and fused straight-line runs.

A direct step is an ALU instruction (the ones fast_alu.py computes with a vectorized primitive)
whose operands are plain registers (no conversion, no uninitialised-read check) or immediates and
whose destination is a plain register: it is written once as Python source that, when every
thread of the batch runs it (`idx` None), reads the batch's register dict, calls the
instruction's own primitive and stores the result as the instruction's writer would (the same
dtype cast, conversion and read-only marking), without the reader, compute and writer closures
in between. Any other call (a subset of the threads) takes the instruction's general step.

A run is a maximal sequence of STEP instructions with no branch target inside it after its
first: one generated function calls their steps in order, so the scheduler dispatches once per
run instead of once per instruction. A fault inside it carries `seg_off`, the offset of its
instruction in the run, so the error still names the instruction. Both are the same steps on
the same arrays in the same order, so every result is the per-instruction path's.
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
  env = {"fn": fn, "post": post, "general": general, "asarray": np.asarray, "shared": shared,
         "full": np.full}
  args = []
  for k, r in enumerate(srcs):
    if getattr(r, "reg", None) is not None:
      args.append(f"R[{r.reg!r}]")
    elif hasattr(r, "const"):
      env[f"c{k}"] = r.const
      args.append(f"c{k}")
    else:
      return None
  name, it, conv, rt = dest
  env.update(it=it, conv=conv, rt=rt)
  value = f"fn({', '.join(args)})" if post is None else f"post(fn({', '.join(args)}))"
  lines = ["def step(S, idx):",
           "  if idx is not None:",
           "    return general(S, idx)",
           "  R = S.R",
           f"  v = asarray({value}, it)"]
  if conv is not None:
    lines.append("  v = conv(v)")
  lines += ["  if v.ndim:",
            f"    R[{name!r}] = v if v.base is None else shared(v)",
            "  else:",
            f"    R[{name!r}] = full(S.n, v, rt)"]
  exec("\n".join(lines), env)      # noqa: S102 (source built above from register names)
  return env["step"]


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
      out[pc] = (_run_function([fn for _, fn, _ in code[pc:end]]), end)
    pc = max(end, pc + 1)
  return out


def _run_function(steps: list):
  env = {f"f{k}": fn for k, fn in enumerate(steps)}
  body = []
  for k in range(len(steps)):
    body += [f"    f{k}(S, idx)", f"    k = {k + 1}"]
  lines = ["def run(S, idx):", "  k = 0", "  try:", *body[:-1],
           "  except BaseException as e:", "    e.seg_off = k", "    raise"]
  exec("\n".join(lines), env)      # noqa: S102 (source built above, no outside text)
  return env["run"]
