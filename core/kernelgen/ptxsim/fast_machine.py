"""The fast engine: an entry's instructions over every thread of a batch of CTAs at once (numpy).

Each instruction is translated once into a function over numpy arrays holding a register's
value for every thread of a batch (fast_operands.py). The scheduler is the reference engine's
(machine.py) applied to the whole batch instead of one warp: the threads at the lowest PC run
first, a divergent branch splits them and groups merge when their PCs meet, so each warp's
lanes follow exactly the paths, masks and reconvergence points they follow in the reference.
`bar.sync` holds the threads that reach it until every live thread of the batch is at a barrier
or done; then the barrier epoch advances (the race checker's epochs, as in the reference).
CTAs are independent, so running a batch of them together changes no race-free result.

Registers that a static must-be-written analysis cannot prove written before a read carry a
per-thread "written" mask, so uninitialised reads are still reported.
"""
from __future__ import annotations

import time

import numpy as np

from .. import limits
from ..errors import ExecutionError, KernelgenError, StoppedError
from . import fast_alu as fa
from . import fast_direct
from . import fast_memory as fm
from .fast_operands import Fault, NotFast, reader
from .parser import Entry, Instr, PTXSyntaxError, SPECIAL_REGS
from .steps import BARRIER, BRANCH, EXIT, STEP, Context, Work

BATCH_THREADS = 1 << 16     # threads per batch of CTAs (bounds the memory a batch holds)
_END = 1 << 62
_EMPTY = np.zeros(0, dtype=np.intp)


class FastContext(Context):
  """The reference Context plus the registers whose reads are checked at run time."""

  def __init__(self, entry: Entry, shared_offsets: dict, tracked: set):
    super().__init__(entry, shared_offsets)
    self.tracked = tracked


def _regs_of(op):
  if op[0] == "reg":
    yield op[1]
  elif op[0] == "not":
    yield op[1]
  elif op[0] == "vec":
    for o in op[1]:
      yield from _regs_of(o)
  elif op[0] == "addr" and op[1] is not None and op[1][0] == "reg":
    yield op[1][1]


_NO_DEST = {"st", "bra", "ret", "exit", "bar", "barrier"}


def defs_uses(ins: Instr) -> tuple[set, set]:
  ops = ins.operands
  dest = ops[0] if ops and ins.opcode not in _NO_DEST else None
  defs = set(_regs_of(dest)) if dest is not None and dest[0] in ("reg", "vec") else set()
  uses = {r for op in ops if op is not dest for r in _regs_of(op)}
  if ins.guard:
    uses.add(ins.guard[0])
  return defs - SPECIAL_REGS, uses - SPECIAL_REGS


def tracked_registers(entry: Entry, kinds: list) -> set:
  """Registers read somewhere they may not have been written on every path (checked at run
  time); the others need no check. A guarded write does not count as a write."""
  n = len(entry.instrs)
  du = [defs_uses(ins) for ins in entry.instrs]
  names = sorted({r for d, u in du for r in d | u})
  bit = {r: 1 << i for i, r in enumerate(names)}
  top = (1 << len(names)) - 1
  gen = [0 if ins.guard else sum(bit[r] for r in d) for ins, (d, _) in zip(entry.instrs, du)]
  succ = [_successors(pc, kinds[pc], entry.instrs[pc], n) for pc in range(n)]
  inn = [top] * n
  if n:
    inn[0] = 0
  work = list(range(n))
  while work:
    pc = work.pop()
    out = inn[pc] | gen[pc]
    for s in succ[pc]:
      new = inn[s] & out if s else 0
      if new != inn[s]:
        inn[s] = new
        work.append(s)
  return {r for pc in range(n) for r in du[pc][1] if not inn[pc] & bit[r]}


def _successors(pc: int, kind: tuple, ins: Instr, n: int) -> list:
  k, _, target = kind
  nxt = [pc + 1] if pc + 1 < n else []
  if k == BRANCH:
    return [target] + (nxt if ins.guard else []) if target < n else nxt
  if k == EXIT:
    return nxt if ins.guard else []
  return nxt


HANDLERS = {"mov": fa.mov_step, "selp": fa.selp_step, "setp": fa.setp_step, "cvt": fa.cvt_step,
            "cvta": fa.cvta_step, "ld": fm.ld_step, "st": fm.st_step, "atom": fm.atom_step,
            "shfl": fm.shfl_step, "mma": fm.mma_step}


class FastProgram:
  """An entry (already compiled and checked by the reference engine) translated for batches."""

  def __init__(self, prog):
    self.prog, self.entry = prog, prog.entry
    tracked = tracked_registers(prog.entry, prog.code)
    ctx = FastContext(prog.entry, {name: off for name, off, _ in prog.layout}, tracked)
    self.code = [self._compile(ins, kind, ctx) for ins, kind in zip(prog.entry.instrs, prog.code)]
    self.tracked, self.race_gran = tracked, fm.race_granularity(prog.entry)
    self.runs = fast_direct.runs(self.code, set(prog.entry.labels.values()))

  def _compile(self, ins: Instr, kind: tuple, ctx) -> tuple:
    k, _, target = kind
    if k in (BRANCH, EXIT):
      return k, _guard(ins, ctx), target
    if k == BARRIER:
      return kind
    handler = HANDLERS.get(ins.opcode, fa.alu_step)
    step = handler(ins, ctx)[1]
    if ins.guard is not None:
      reads = defs_uses(ins)[1] - {ins.guard[0]}
      merged = getattr(step, "merged", None) if not reads & ctx.tracked else None
      step = _guarded(step, _guard(ins, ctx), merged)
    return STEP, step, None

  def error(self, S, pc: int, f: Fault) -> ExecutionError:
    ins = self.entry.instrs[pc]
    return ExecutionError(f"{f.message} by thread {S.thread(f.slot)} at line {ins.line}: "
                          f"`{ins.text}`")


def _guard(ins: Instr, ctx):
  """(S, idx) -> None (every active thread) or the bool mask of threads whose guard holds."""
  if ins.guard is None:
    return lambda S, idx: None
  pred, neg = ins.guard
  read = reader(("reg", pred), "pred", ctx, f"at line {ins.line}: `{ins.text}`")
  if neg:
    return lambda S, idx: ~read(S, idx)
  return read


def _guarded(fn, guard, merged=None):
  """A guarded step: on the threads whose guard holds; where most of the group's do and the
  step allows it, at full width with the results merged (no gather and scatter)."""
  def step(S, idx):
    m = guard(S, idx)
    k = np.count_nonzero(m)
    if k == len(m):
      fn(S, idx)
    elif merged is not None and 2 * k >= len(m):
      merged(S, idx, m)
    elif k:
      fn(S, S.slots(idx)[m])
  return step


# ---- one batch of CTAs ---------------------------------------------------------------------

class Batch:
  """The state of a batch of CTAs: registers, specials, shared memory, barrier epoch."""

  def __init__(self, fp, ctas: list, block: tuple, grid: tuple, params: dict, memory,
               check: bool):
    prog, self.race_gran = fp.prog, fp.race_gran
    self.ctas, self.block, self.grid, self.params, self.mem = ctas, block, grid, params, memory
    T = self.block_threads = block[0] * block[1] * block[2]
    self.nctas, self.nwarps = len(ctas), -(-T // 32)
    self.n = T * len(ctas)
    geometry = _geometry(block, len(ctas))
    self.slot_cta, self.slot_tid, shape_specials = geometry
    self.alive = np.ones(self.n, dtype=np.bool_)
    self.R, self.init, self.views, self.epoch = {}, {}, {}, 0
    self.specials = _Specials(shape_specials)
    self.check, self._all = check, None
    self.trips, self.uniform, self.most = None, 0, 0     # loop trips per warp (_count_trips)
    self._shared(prog)

  def _shared(self, prog) -> None:
    self.ssize = prog.shared_size
    if not prog.layout:
      return
    self.sstride = -(-self.ssize // 16) * 16
    self.shared = np.zeros(self.sstride * self.nctas, dtype=np.uint8)
    self.var_end = np.full(max(self.ssize, 1), -1, dtype=np.int64)
    for _, off, nbytes in prog.layout:
      self.var_end[off:off + nbytes] = off + nbytes
    self.layout_holder = prog     # SharedMemory._offset reads .layout
    if self.check:     # the race record: per byte, or per word (race_granularity)
      self.sh_writer = np.full(len(self.shared) // self.race_gran, -1, dtype=np.int32)
      self.sh_epoch = np.full(len(self.shared) // self.race_gran, -1, dtype=np.int32)

  def shared_view(self, dtype):
    return fm._view(self, self.shared, dtype)

  def slots(self, idx):
    if idx is not None:
      return idx
    if self._all is None:
      self._all = np.arange(self.n, dtype=np.intp)
    return self._all

  def special(self, name: str):
    arr = self.specials.get(name)
    if arr is None:
      arr = self._special(name).astype(np.uint32)
      arr.flags.writeable = False      # a register moved from it copies before a masked write
      self.specials.set(name, arr)
    return arr

  def _special(self, name: str):
    bx, by, _ = self.block
    t = self.slot_tid
    if name in ("%laneid", "%warpid", "%nwarpid", "%warpsize"):
      return {"%laneid": t % 32, "%warpid": t // 32, "%warpsize": np.full(self.n, 32),
              "%nwarpid": np.full(self.n, self.nwarps)}[name]
    kind, dim = name[1:].split(".")
    d = "xyz".index(dim)
    if kind == "tid":
      return (t % bx, t // bx % by, t // (bx * by))[d]
    if kind == "ctaid":
      return self.ctas.coord(d)[self.slot_cta]
    return np.full(self.n, (self.block if kind == "ntid" else self.grid)[d])

  def thread(self, slot) -> str:
    cta, t = slot if isinstance(slot, tuple) else divmod(slot, self.block_threads)
    bx, by, _ = self.block
    return f"ctaid={self.ctas[cta]} tid={(t % bx, t // bx % by, t // (bx * by))}"


class _Specials:
  """Special registers of a batch: those of the batch's shape shared by every batch of it."""

  def __init__(self, shape_specials: dict):
    self.shape, self.own = shape_specials, {}

  def get(self, name: str):
    return self.own.get(name) if name.startswith("%ctaid") else self.shape.get(name)

  def set(self, name: str, arr) -> None:
    (self.own if name.startswith("%ctaid") else self.shape)[name] = arr


_GEOMETRY: dict = {}


def _geometry(block: tuple, nctas: int):
  """(CTA of each slot, thread of each slot, specials cache) for batches of this shape."""
  key = (block, nctas)
  hit = _GEOMETRY.get(key)
  if hit is None:
    if len(_GEOMETRY) > 16:
      _GEOMETRY.clear()
    T = block[0] * block[1] * block[2]
    hit = _GEOMETRY[key] = (np.repeat(np.arange(nctas, dtype=np.int64), T),
                            np.tile(np.arange(T, dtype=np.int64), nctas), {})
  return hit


def _merge(a, b, n: int):
  """The sorted union of two groups' slots (None: every slot), by a mask (np.union1d hashes)."""
  if a is None or b is None:
    return None
  if not len(a):
    return b
  if not len(b):
    return a
  mask = np.zeros(n, dtype=np.bool_)
  mask[a] = True
  mask[b] = True
  m = np.flatnonzero(mask)
  return None if len(m) == n else m


def _check_converged(S, idx) -> None:
  """bar.sync must be reached by every live lane of a warp (as in the reference)."""
  if idx is None:
    return
  gw = S.slot_cta * S.nwarps + S.slot_tid // 32
  here = np.bincount(gw[idx], minlength=S.nctas * S.nwarps)
  live = np.bincount(gw[S.alive], minlength=S.nctas * S.nwarps)
  bad = (here > 0) & (here != live)
  if bad.any():
    w = int(np.argmax(bad))
    raise Fault(int(idx[np.argmax(gw[idx] == w)]), "bar.sync reached by only part of a warp "
                "(the others are elsewhere): barriers must be in uniform control flow")


def run_batch(fp: FastProgram, S: Batch, work: Work) -> None:
  """Run every thread of the batch to completion, spending `work` at backward branches."""
  code, n = (fp.code, fp.runs), len(fp.code)
  groups, waiting = {}, {}
  pc, idx = 0, None
  while True:
    stop = min(groups) if groups else _END
    try:
      pc, idx = _run_group(code, n, S, groups, waiting, pc, idx, stop, work)
    except Fault as f:
      raise fp.error(S, f.pc, f) from None
    except KernelgenError:
      raise
    if idx is None or len(idx):
      groups[pc] = _merge(groups.get(pc, _EMPTY), idx, S.n)
    if not groups:
      if not waiting:
        return
      for bpc, b in waiting.items():
        groups[bpc + 1] = _merge(groups.get(bpc + 1, _EMPTY), b, S.n)
      waiting = {}
      S.epoch += 1
    pc = min(groups)
    idx = groups.pop(pc)


def _run_group(code, n, S, groups, waiting, pc, idx, stop, work):
  """Run the threads `idx` from `pc` until they split, wait, finish or reach `stop`; `code` is
  (the steps, the fused runs: fast_direct.runs)."""
  code, runs = code
  try:
    while pc < stop and pc < n:
      kind, fn, target = code[pc]
      if kind == STEP:
        run = runs[pc]
        if run is not None and run[1] <= stop:
          run[0](S, idx)
          pc = run[1]
        else:
          fn(S, idx)
          pc += 1
      elif kind == BRANCH:
        taken = fn(S, idx)
        if target <= pc:
          _count_trips(S, idx, taken, work)
        ntaken = -1 if taken is None else np.count_nonzero(taken)
        if ntaken < 0 or ntaken == len(taken):
          pc = target
        elif not ntaken:
          pc += 1
        else:
          a = S.slots(idx)
          groups[target] = _merge(groups.get(target, _EMPTY), a[taken], S.n)
          return pc + 1, a[~taken]
      elif kind == BARRIER:
        _check_converged(S, idx)
        waiting[pc] = _merge(waiting.get(pc, _EMPTY), idx, S.n)
        return pc, _EMPTY
      else:
        gone = fn(S, idx)
        a = S.slots(idx)
        S.alive[a if gone is None else a[gone]] = False
        idx = _EMPTY if gone is None else a[~gone]
        if not len(idx):
          return pc, _EMPTY
        pc += 1
  except Fault as f:
    f.pc = pc + getattr(f, "seg_off", 0)     # seg_off: its instruction inside a fused run
    raise
  except KernelgenError:
    raise
  except Exception as e:   # a simulator bug: still say where it happened
    f = Fault(int(S.slots(idx)[0]), f"internal simulator error {e!r}")
    f.pc = pc + getattr(e, "seg_off", 0)
    raise f from e
  return pc, (_EMPTY if pc >= n else idx)


def _count_trips(S, idx, taken, work) -> None:
  """A backward branch taken: one trip for each warp (as the reference engine forms them) with
  a lane among `idx` that takes it; work.over() once a warp has taken more than work.limit.
  S.most bounds the most trips any warp has taken (at most one per branch), so the exact
  maximum is looked up only near the limit."""
  if idx is None and taken is None:
    S.uniform += 1                  # every warp of the batch: no per-warp array touched
  else:
    a = S.slots(idx) if taken is None else S.slots(idx)[taken]
    if not len(a):
      return
    warp = S.slot_cta[a] * S.nwarps + S.slot_tid[a] // 32   # non-decreasing: slots are sorted
    first = np.empty(len(warp), dtype=np.bool_)
    first[0] = True
    np.not_equal(warp[1:], warp[:-1], out=first[1:])
    if S.trips is None:
      S.trips = np.zeros(S.nctas * S.nwarps, dtype=np.int64)
    S.trips[warp[first]] += 1
  S.most += 1
  if S.most > work.limit:
    S.most = S.uniform + (int(S.trips.max()) if S.trips is not None else 0)
    if S.most > work.limit:
      raise work.over()


# ---- launching -----------------------------------------------------------------------------

def launch(fp: FastProgram, grid: tuple, block: tuple, params: dict, memory,
           check_races: bool = True, progress=None) -> None:
  """Run the grid in batches of whole CTAs (in the reference's CTA order)."""
  T = block[0] * block[1] * block[2]
  per = max(1, BATCH_THREADS // T)
  total = grid[0] * grid[1] * grid[2]
  start, work = time.perf_counter(), Work(fp.entry.name)
  with np.errstate(all="ignore"):
    for first in range(0, total, per):
      limits.tick()        # the web page's time limit (nothing unless a command is timed)
      chunk = CtaRange(first, min(first + per, total), grid)
      run_batch(fp, Batch(fp, chunk, block, grid, params, memory, check_races), work)
      if progress is not None and progress(first + len(chunk), total,
                                           time.perf_counter() - start) is False:
        raise StoppedError(f"simulation of {fp.entry.name} stopped after {first + len(chunk)} of "
                      f"{total} blocks")


class CtaRange:
  """CTAs first..end-1 of a grid in the reference's order (x fastest, then y, then z), with
  no tuple made per CTA: `coord(d)` gives dimension d of every one as an array."""

  def __init__(self, first: int, end: int, grid: tuple):
    self.first, self.end, self.grid = first, end, grid

  def __len__(self) -> int:
    return self.end - self.first

  def __getitem__(self, i: int) -> tuple:
    k, (gx, gy, _) = self.first + i, self.grid
    return (k % gx, k // gx % gy, k // (gx * gy))

  def coord(self, d: int):
    k, (gx, gy, _) = np.arange(self.first, self.end, dtype=np.int64), self.grid
    return (k % gx, k // gx % gy, k // (gx * gy))[d]


def build(prog) -> FastProgram | None:
  """The fast translation of a compiled Program, or None where it needs the reference engine
  (FALLBACKS records why)."""
  try:
    return FastProgram(prog)
  except (NotFast, PTXSyntaxError) as e:
    FALLBACKS[prog.entry.name] = str(e)
  except Exception as e:    # a bug in the translation: the reference engine still runs it
    FALLBACKS[prog.entry.name] = f"internal error in the fast engine's translation: {e!r}"
  return None


FALLBACKS: dict[str, str] = {}
