"""Executing a compiled entry: grid of CTAs, warps of 32 lanes, divergence, barriers.

Each warp runs its lanes in lockstep under an active mask. A divergent branch splits the warp
into groups at different PCs; the group with the lowest PC runs first and groups merge when
their PCs meet, which reconverges structured control flow (ifs and loops) at the join point.
The warps of a CTA run one after another up to each `bar.sync`, then the barrier opens.
"""
from __future__ import annotations

import itertools
import os
import time

from .. import limits
from ..errors import ExecutionError, KernelgenError, StoppedError
from .compile import BARRIER, BRANCH, EXIT, STEP, Context, compile_instr
from .steps import SEGMENT, Work
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
    self._fast = self._fused = None

  def fused(self) -> list:
    """The step list with runs of straight-line instructions fused into generated Python
    (fused.py): the pure-Python fast path, built once."""
    if self._fused is None:
      from . import fused
      try:
        self._fused = fused.build(self)
      except Exception as e:    # a bug in the translation: the reference steps still run it
        fused.FALLBACKS[self.entry.name] = f"internal error in the fused translation: {e!r}"
        self._fused = self.code
    return self._fused

  def fast(self):
    """The fast engine's translation (fast_machine.py), or None where numpy is missing or the
    entry uses a form only the reference engine runs."""
    if self._fast is None:
      try:
        from . import fast_machine
      except ImportError:         # no numpy (Pyodide without it): the reference engine
        self._fast = False
      else:
        self._fast = fast_machine.build(self) or False
    return self._fast or None


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


def run_warp(prog: Program, W: Warp, work: Work, code: list | None = None):
  """Run one warp to completion; yields at every bar.sync (the CTA scheduler resumes it).
  `code` is the step list (prog.code, or prog.fused()'s with SEGMENTs). Past `work.limit`
  backward branches taken (by any of its lanes) it stops with work.over()."""
  code = code or prog.code
  n = len(code)
  groups: dict[int, int] = {}
  pc, am, trips = 0, W.live, 0
  while True:
    stop = min(groups) if groups else _END
    try:
      while pc < stop and pc < n:
        kind, fn, target = code[pc]
        if kind == STEP:
          fn(W, am)
          pc += 1
        elif kind == SEGMENT:
          fn(W, am)
          pc += target
        elif kind == BRANCH:
          taken = fn(W, am)
          if taken and target <= pc:
            trips += 1
            if trips > work.limit:
              raise work.over()
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
    except LaneFault as f:    # ptx_pc: the instruction inside a SEGMENT
      raise _fault(W, prog, getattr(f, "ptx_pc", pc), f.lane, f.message) from None
    except KernelgenError:
      raise
    except Exception as e:   # a simulator bug: still say where it happened
      raise _fault(W, prog, getattr(e, "ptx_pc", pc), first_lane(am),
                   f"internal simulator error {e!r}") from e
    if pc >= n:
      am = 0
    if am:
      groups[pc] = groups.get(pc, 0) | am
    if not groups:
      return
    pc = min(groups)
    am = groups.pop(pc)


def run_cta(prog: Program, cta: CTA, work: Work, code: list | None = None) -> None:
  bx, by, bz = cta.block
  nwarps = -(-(bx * by * bz) // 32)
  pending = [run_warp(prog, Warp(cta, w, prog.specials), work, code) for w in range(nwarps)]
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


# which engine `launch` uses: "fast" (numpy, where it is importable and covers the entry; the
# pure-Python fused engine otherwise), "fused" (the pure-Python engine, fused.py: the reference's
# steps with straight-line runs fused into generated Python), "reference" (this module's
# warp-at-a-time engine), or "compare" (the engine named by KERNELGEN_PTXSIM_COMPARE, "fast" by
# default, against the reference on a copy of memory, every buffer compared byte for byte:
# COMPARED counts)
ENGINE = {"name": os.environ.get("KERNELGEN_PTXSIM_ENGINE", "fast"),
          "compare": os.environ.get("KERNELGEN_PTXSIM_COMPARE", "fast")}
# launches by the engine that ran them (the page's Verify PTX reports which ran)
LAUNCHED: dict[str, int] = {}
# every buffer is compared byte for byte, NaN payloads and signs included (alu.nan_of fixes
# which NaN an operation gives, so the reference is deterministic there)
COMPARED = {"launches": 0, "identical": 0, "both_failed": 0,
            "reference_only": 0}


def launch(prog: Program, grid, block, args: list, memory: GlobalMemory,
           check_races: bool = True, engine: str | None = None, progress=None) -> str:
  """Run `prog` on a grid of CTAs; `args` are the kernel parameters in order. `engine` picks
  "fast", "fused" or "reference" (default ENGINE); `progress(blocks done, blocks, seconds)`
  is called as it goes, and returning False from it stops the run (StoppedError). Returns
  the engine that ran."""
  grid, block = tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block))
  if block[0] * block[1] * block[2] > 1024:
    raise ExecutionError(f"a block of {block} threads exceeds the 1024 threads per block limit")
  params = param_values(prog.entry, args)
  engine = engine or ENGINE["name"]
  ran = _launch(prog, grid, block, args, params, memory, check_races, engine, progress)
  LAUNCHED[ran] = LAUNCHED.get(ran, 0) + 1
  return ran


def _launch(prog, grid, block, args, params, memory, check_races, engine, progress) -> str:
  if engine == "compare":
    return _compare(prog, grid, block, args, memory, check_races)
  if engine == "fast":
    fast = prog.fast()
    if fast is not None:
      from . import fast_machine
      fast_machine.launch(fast, grid, block, params, memory, check_races, progress)
      return "fast"
    engine = "fused"
  code = prog.fused() if engine == "fused" else prog.code
  start, total, work = time.perf_counter(), grid[0] * grid[1] * grid[2], Work(prog.entry.name)
  for done, (z, y, x) in enumerate(itertools.product(range(grid[2]), range(grid[1]),
                                                     range(grid[0])), 1):
    limits.tick()          # the web page's time limit (nothing unless a command is timed)
    shared = SharedMemory(prog.shared_size, prog.layout, check_races) if prog.layout else None
    run_cta(prog, CTA((x, y, z), shared, memory, params, block, grid), work, code)
    if progress is not None and progress(done, total, time.perf_counter() - start) is False:
      raise StoppedError(f"simulation of {prog.entry.name} stopped after {done} of {total} "
                         f"blocks")
  return engine


def _compare(prog: Program, grid, block, args, memory: GlobalMemory, check_races: bool) -> str:
  """Both engines on the same launch: identical memory afterwards, or the same error."""
  against = ENGINE["compare"]
  if against == "fast" and prog.fast() is None:
    COMPARED["reference_only"] += 1
    return launch(prog, grid, block, args, memory, check_races, "reference")
  copy, errors = memory.snapshot(), []
  for mem, engine in ((copy, "reference"), (memory, against)):
    try:
      launch(prog, grid, block, args, mem, check_races, engine)
      errors.append(None)
    except ExecutionError as e:
      errors.append(e)
  COMPARED["launches"] += 1
  if errors[0] is not None or errors[1] is not None:
    if errors[0] is None or errors[1] is None:
      raise ExecutionError(f"the engines disagree on {prog.entry.name}: reference "
                           f"{errors[0]!r}, {against} {errors[1]!r}")
    COMPARED["both_failed"] += 1
    raise errors[1]
  for base, buf in memory.buffers.items():
    ref = copy.buffers[base].data
    if ref != buf.data:
      at = next(i for i in range(len(ref)) if ref[i] != buf.data[i]) // 4 * 4
      raise ExecutionError(f"the engines disagree on {prog.entry.name}: {buf!r} differs at byte "
                           f"{at}: reference {ref[at:at + 8].hex()}, {against} "
                           f"{buf.data[at:at + 8].hex()}")
  COMPARED["identical"] += 1
  return "compare"


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
  if entry is not None and entry not in progs:
    raise PTXSyntaxError(f"no entry {entry!r} in the PTX (it has {', '.join(progs)})")
  prog = progs[entry] if entry is not None else next(iter(progs.values()))
  if ENGINE["name"] == "fast":
    prog.fast()      # translated once, with the compile
  return prog
