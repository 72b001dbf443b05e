"""Executing a compiled entry: grid of CTAs, warps of 32 lanes, divergence, barriers.

Each warp runs its lanes in lockstep under an active mask. A divergent branch splits the warp
into groups at different PCs; the group with the lowest PC runs first and groups merge when
their PCs meet, which reconverges structured control flow (ifs and loops) at the join point.
The warps of a CTA run one after another up to each `bar.sync`, then the barrier opens.
"""
from __future__ import annotations

import itertools
import struct

from ..errors import ExecutionError, KernelgenError
from .compile import BARRIER, BRANCH, EXIT, STEP, Context, compile_instr
from .operands import FULL, TYPES, LaneFault, first_lane
from .memory import GlobalMemory, SharedMemory
from .parser import Entry, Module, PTXSyntaxError, SPECIAL_REGS, parse

_END = 1 << 62


class Program:
  """One entry compiled to steps, plus what a launch needs to set up (specials, shared)."""

  def __init__(self, entry: Entry, module_shared=()):
    self.entry = entry
    self.layout, offset = [], 0
    for name, align, t, n in list(module_shared) + entry.shared:
      offset = -(-offset // max(align, 16)) * max(align, 16)
      nbytes = n * (TYPES[t][1] // 8 if t in TYPES else 1)
      self.layout.append((name, offset, nbytes))
      offset += nbytes + 64     # a guard gap: overruns are reported, not silently shared
    self.shared_size = offset
    ctx = Context(entry, {name: off for name, off, _ in self.layout})
    self.code = [compile_instr(ins, ctx) for ins in entry.instrs]
    used = {op[1] for ins in entry.instrs for op in _flat(ins.operands) if op[0] == "reg"}
    self.specials = sorted(used & SPECIAL_REGS)


def _flat(ops):
  for op in ops:
    if op[0] == "vec":
      yield from _flat(op[1])
    elif op[0] == "addr" and op[1] is not None:
      yield op[1]
    else:
      yield op


class CTA:
  __slots__ = ("ctaid", "shared", "memory", "params", "block", "grid")

  def __init__(self, ctaid, shared, memory, params, block, grid):
    self.ctaid, self.shared, self.memory = ctaid, shared, memory
    self.params, self.block, self.grid = params, block, grid


class Warp:
  __slots__ = ("R", "init", "cta", "index", "tid0", "live")

  def __init__(self, cta: CTA, index: int, specials: list[str]):
    bx, by, bz = cta.block
    n = bx * by * bz
    self.cta, self.index, self.tid0 = cta, index, index * 32
    self.live = sum(1 << i for i in range(min(32, n - self.tid0)))
    self.R, self.init = {}, {}
    for name in specials:
      self.R[name] = _special_values(name, cta, self.tid0)
      self.init[name] = FULL

  def thread(self, lane: int) -> str:
    t = self.tid0 + lane
    bx, by, _ = self.cta.block
    return f"ctaid={self.cta.ctaid} tid={(t % bx, t // bx % by, t // (bx * by))}"


def _special_values(name: str, cta: CTA, tid0: int) -> list[int]:
  bx, by, _ = cta.block
  if name == "%laneid":
    return list(range(32))
  if name == "%warpsize":
    return [32] * 32
  if name in ("%warpid", "%nwarpid"):
    n = bx * by * cta.block[2]
    return [tid0 // 32 if name == "%warpid" else -(-n // 32)] * 32
  kind, dim = name[1:].split(".")
  d = "xyz".index(dim)
  if kind == "tid":
    ts = range(tid0, tid0 + 32)
    return [(t % bx, t // bx % by, t // (bx * by))[d] for t in ts]
  source = {"ntid": cta.block, "ctaid": cta.ctaid, "nctaid": cta.grid}[kind]
  return [source[d]] * 32


def _fault(W: Warp, prog: Program, pc: int, lane: int, message: str) -> ExecutionError:
  ins = prog.entry.instrs[pc]
  return ExecutionError(f"{message} by thread {W.thread(lane)} at line {ins.line}: `{ins.text}`")


def run_warp(prog: Program, W: Warp):
  """Run one warp to completion; yields at every bar.sync (the CTA scheduler resumes it)."""
  code, n = prog.code, len(prog.code)
  groups: dict[int, int] = {}
  pc, am = 0, W.live
  while True:
    stop = min(groups) if groups else _END
    try:
      while pc < stop and pc < n:
        kind, fn, target = code[pc]
        if kind == STEP:
          fn(W, am)
          pc += 1
        elif kind == BRANCH:
          taken = fn(W, am)
          if taken == am:
            pc = target
          elif not taken:
            pc += 1
          else:
            groups[target] = groups.get(target, 0) | taken
            am &= ~taken
            pc += 1
            break
        elif kind == BARRIER:
          if groups:
            raise LaneFault(first_lane(am), "bar.sync reached by only part of a warp (the "
                                            "others are elsewhere): barriers must be in uniform "
                                            "control flow")
          yield pc
          pc += 1
        else:
          am &= ~fn(W, am)
          if not am:
            break
          pc += 1
    except LaneFault as f:
      raise _fault(W, prog, pc, f.lane, f.message) from None
    except KernelgenError:
      raise
    except Exception as e:   # a simulator bug: still say where it happened
      raise _fault(W, prog, pc, first_lane(am), f"internal simulator error {e!r}") from e
    if pc >= n:
      am = 0
    if am:
      groups[pc] = groups.get(pc, 0) | am
    if not groups:
      return
    pc = min(groups)
    am = groups.pop(pc)


def run_cta(prog: Program, cta: CTA) -> None:
  bx, by, bz = cta.block
  nwarps = -(-(bx * by * bz) // 32)
  pending = [run_warp(prog, Warp(cta, w, prog.specials)) for w in range(nwarps)]
  while pending:
    waiting = []
    for gen in pending:
      try:
        next(gen)
        waiting.append(gen)
      except StopIteration:
        pass
    if cta.shared is not None:
      cta.shared.epoch += 1
    pending = waiting


def param_values(entry: Entry, args: list) -> dict:
  """Kernel arguments by parameter name: ints as bit patterns of their type, floats as values."""
  if len(args) != len(entry.params):
    names = ", ".join(n for n, _ in entry.params)
    raise ExecutionError(f"kernel {entry.name} takes {len(entry.params)} arguments ({names}), "
                         f"got {len(args)}")
  out = {}
  for (name, t), value in zip(entry.params, args):
    cls, w = TYPES.get(t, ("b", 64))
    out[name] = float(value) if cls == "f" else int(value) & ((1 << w) - 1)
  return out


def launch(prog: Program, grid, block, args: list, memory: GlobalMemory,
           check_races: bool = True) -> None:
  """Run `prog` on a grid of CTAs; `args` are the kernel parameters in order."""
  grid, block = tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block))
  if block[0] * block[1] * block[2] > 1024:
    raise ExecutionError(f"a block of {block} threads exceeds the 1024 threads per block limit")
  params = param_values(prog.entry, args)
  for z, y, x in itertools.product(range(grid[2]), range(grid[1]), range(grid[0])):
    shared = SharedMemory(prog.shared_size, prog.layout, check_races) if prog.layout else None
    run_cta(prog, CTA((x, y, z), shared, memory, params, block, grid))


# ---- modules, cached by source ----------------------------------------------------------------

_CACHE: dict[str, tuple[Module, dict]] = {}


def load(source: str) -> tuple[Module, dict]:
  """(parsed module, compiled programs by entry name) for PTX `source`, cached by its text."""
  hit = _CACHE.get(source)
  if hit is None:
    mod = parse(source)
    progs = {name: Program(e, mod.shared) for name, e in mod.entries.items()}
    if len(_CACHE) > 64:
      _CACHE.pop(next(iter(_CACHE)))
    hit = _CACHE[source] = (mod, progs)
  return hit


def program(source: str, entry: str | None = None) -> Program:
  _, progs = load(source)
  if not progs:
    raise PTXSyntaxError("the PTX has no .entry: nothing to run")
  if entry is None:
    return next(iter(progs.values()))
  if entry not in progs:
    raise PTXSyntaxError(f"no entry {entry!r} in the PTX (it has {', '.join(progs)})")
  return progs[entry]
