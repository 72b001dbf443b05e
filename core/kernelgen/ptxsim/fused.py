"""The pure-Python fast path of the simulator: straight-line runs of instructions fused into one
generated Python function each (the engine where numpy is missing, as in the page's Pyodide).

The reference engine (machine.py) calls one closure per instruction, and most closures map a
per-lane Python function over the warp. Here each maximal run of unguarded-or-guarded STEP
instructions between branch targets becomes a SEGMENT: Python source written once per entry.
The hot instructions (integer add/sub/mul/mad/logic/shifts/min/max, f32/f64 add/sub/mul, f32
fma, integer setp, selp, mov, cvta and the common cvt forms; fused_ops.py) are inlined, and
consecutive inlined instructions share one lane loop: a `for` over the lanes of the lists they
read, one statement per instruction on plain lane values, appending to lists only the values
read after the loop (f32 results are rounded lane by lane in the loop, bit for bit as the
reference rounds them: fused_ops.py). Every other instruction calls its reference closure in place.
Registers, masks, the scheduler (divergence, reconvergence, `bar.sync`, `exit`) and memory are
the reference engine's own, so results are bit-identical by construction; a segment's
registers read before being written in it are checked once at its start, and when that check
fails the segment runs instruction by instruction on the reference closures, which report the
uninitialised read exactly as the reference does. A fault inside a segment carries the pc of
its instruction (`ptx_pc`), so errors still name the instruction.
"""
from __future__ import annotations

from .fused_ops import inline
from .operands import FULL, immediate, read_conversion, register_type, store_lanes
from .operands import write_conversion
from .parser import SPECIAL_REGS, Instr
from .steps import BRANCH, SEGMENT, STEP
from . import numeric as nm

class _Segment:
  """The source of one segment being written: operand expressions, constants, and the
  registers it holds in Python locals (lists loaded from W.R on first read, stored back before a
  reference closure runs and at the end, except those no other instruction reads).

  Consecutive inlined instructions share one lane loop (`for` over the lanes of their input
  lists, one statement per instruction on lane values, `e_` names), which appends only the
  values read after it to output lists."""

  def __init__(self, prog, start: int, private: frozenset = frozenset(), later=None):
    self.prog, self.regs, self.private = prog, prog.entry.regs, private
    self.names: dict = {"ST": store_lanes, "FULL": FULL, "R1": nm.round_to_f32}
    self.lines: list[str] = []
    self.needed: list[str] = []       # registers read before this segment writes them
    self.defined: set = set()
    self.local: dict[str, str] = {}   # register -> the local list holding its current value
    self.dirty: set = set()           # locals not yet stored back into W.R
    self.start = start
    self.later = later or (lambda pc: set())   # registers read at pc or after, in this segment
    self.body: list[str] = []         # the open lane loop's statements
    self.inputs: dict[str, str] = {}  # list local -> the lane name its loop reads it as
    self.scalar: set = set()          # registers the open loop has written (lane names)
    self.pc = self.loop_pc = start    # the instruction being written, the open loop's first
    self.bound: dict[str, int] = {}   # integer register -> the largest value any lane holds
    self.facts: dict[str, tuple] = {} # f32 register -> (lo, hi, q): multiples of q in [lo, hi]

  def state(self) -> tuple:
    return (len(self.lines), list(self.needed), set(self.defined), dict(self.local),
            set(self.dirty), len(self.body), dict(self.inputs), set(self.scalar),
            dict(self.bound), dict(self.facts))

  def restore(self, state: tuple) -> None:
    n, self.needed, self.defined, self.local, self.dirty, nb, self.inputs, self.scalar, \
      self.bound, self.facts = state
    del self.lines[n:]
    del self.body[nb:]

  def const(self, value) -> str:
    name = f"k{len(self.names)}"
    self.names[name] = value
    return name

  def literal(self, value) -> str:
    """Source for a constant: ints and finite floats written out (repr round-trips a
    double exactly), other values through a name."""
    if type(value) is int or (type(value) is float and value - value == 0):
      return f"({value!r})"
    return self.const(value)

  def var(self, reg: str) -> str:
    return "v" + "".join(ch if ch.isalnum() else "_" for ch in reg)

  def elem(self, reg: str) -> str:
    return "e" + "".join(ch if ch.isalnum() else "_" for ch in reg)

  def operand(self, op, t: str):
    """The lane expression of a readable operand (a register's lane name, a literal), or None
    where it needs a conversion the reference engine applies (left to the reference)."""
    if op[0] in ("imm", "fimm"):
      try:
        value = immediate(op, t, "")
      except Exception:    # the reference closure reports the bad literal
        return None
      return self.literal(value)
    if op[0] != "reg" or (op[1] not in SPECIAL_REGS and op[1] not in self.regs):
      return None
    if read_conversion(register_type(op[1], self.regs, ""), t, "") is not None:
      return None
    reg = op[1]
    if reg not in self.defined and reg not in self.needed:
      self.needed.append(reg)
    if reg in self.scalar:
      return self.elem(reg)
    if reg not in self.local:
      self.local[reg] = self.var(reg)
      self.lines.append(f"{self.local[reg]} = R[{reg!r}]")
    self.inputs.setdefault(self.local[reg], self.elem(reg))
    return self.inputs[self.local[reg]]

  def dest(self, op, t: str):
    if op[0] != "reg" or op[1] in SPECIAL_REGS or op[1] not in self.regs:
      return None
    if write_conversion(t, self.regs[op[1]], "") is not None:
      return None
    return op[1]

  def lanes(self, template: str, ops, types, **fill) -> str | None:
    """`template` applied to the operands' lane expressions, or None (not inlined): at least
    one operand must be a register."""
    if not any(op[0] == "reg" for op in ops):
      return None
    elems = [self.operand(op, t) for op, t in zip(ops, types)]
    if any(e is None for e in elems):
      return None
    return template.format(*elems, **fill)

  def store(self, dst: str, expr: str) -> None:
    """`dst` = `expr` in the open lane loop."""
    if not self.body:
      self.loop_pc = self.pc
    self.body.append(f"{self.elem(dst)} = {expr}")
    self.forget(dst)
    self.scalar.add(dst)
    self.defined.add(dst)
    self.local.pop(dst, None)

  def forget(self, reg: str) -> None:
    """Drop what is known of `reg`'s values (it is written anew)."""
    self.bound.pop(reg, None)
    self.facts.pop(reg, None)

  def close(self, pc: int) -> None:
    """End the open lane loop before instruction `pc`: its results read at pc or later, or
    kept in W.R, become lists (a loop none of whose results is read is dropped: its
    instructions have no other effect)."""
    later = self.later(pc)
    outs = sorted(r for r in self.scalar if r not in self.private or r in later)
    ins = list(self.inputs.items())
    if outs and not ins:
      raise ValueError("a lane loop without an input list")
    if outs:
      self.lines.append(f"at = {self.loop_pc}")
      self.lines += self._loop(ins, outs)
    for r in outs:
      self.local[r] = self.var(r)
      if r not in self.private:
        self.dirty.add(r)
    self.body, self.inputs, self.scalar = [], {}, set()

  def _loop(self, ins: list, outs: list) -> list[str]:
    """The lines of the open loop: a list comprehension where it has one result (each
    statement a `for name in [value]` clause, which CPython runs as a plain assignment; not
    where a statement assigns inside its expression, which a clause cannot), else a `for`
    loop appending each result to its list."""
    names, lists = ", ".join(e for _, e in ins), ", ".join(v for v, _ in ins)
    source = lists if len(ins) == 1 else f"zip({lists})"
    if len(outs) == 1 and not any(":=" in line for line in self.body):
      clauses = "".join(f" for {line.replace(' = ', ' in [', 1)}]" for line in self.body)
      return [f"{self.var(outs[0])} = [{self.elem(outs[0])} for {names} in {source}{clauses}]"]
    lines = [f"O{k} = []; A{k} = O{k}.append" for k in range(len(outs))]
    lines.append(f"for {names} in {source}:")
    lines += ["  " + line for line in self.body]
    lines += [f"  A{k}({self.elem(r)})" for k, r in enumerate(outs)]
    return lines + [f"{self.var(r)} = O{k}" for k, r in enumerate(outs)]

    self.body, self.inputs, self.scalar = [], {}, set()

  def flush(self) -> None:
    """Store the changed locals back into W.R (and their lanes' written marks)."""
    if not self.dirty:
      return
    regs = sorted(self.dirty)
    self.lines.append("if full:")
    self.lines += [f"  R[{r!r}] = {self.local[r]}; I[{r!r}] = FULL" for r in regs]
    self.lines.append("else:")
    self.lines += [f"  ST(W, am, {r!r}, {self.local[r]})" for r in regs]
    self.dirty = set()


def _written(ins: Instr) -> list[str]:
  """The registers an unguarded instruction writes in every active lane (its destination)."""
  if ins.guard is not None or ins.opcode in ("st", "bar", "barrier", "bra", "ret", "exit"):
    return []
  if not ins.operands:
    return []
  dst = ins.operands[0]
  if dst[0] == "reg":
    return [dst[1]]
  return [d[1] for d in dst[1] if d[0] == "reg"] if dst[0] == "vec" else []


def _segment(prog, start: int, end: int, private: frozenset):
  """The generated function of instructions start..end-1, or None where none is inlined."""
  seg, inlined = _Segment(prog, start, private, _later(prog, start, end)), 0
  for pc in range(start, end):
    ins = prog.entry.instrs[pc]
    seg.pc = pc
    state = seg.state()
    if inline(seg, ins):
      inlined += 1
      continue
    seg.restore(state)
    seg.close(pc)
    seg.flush()
    seg.lines.append(f"at = {pc}")
    seg.names[f"S{pc}"] = prog.code[pc][1]
    seg.lines.append(f"S{pc}(W, am)")
    seg.defined.update(_written(ins))
    for reg in _destinations(ins):
      seg.local.pop(reg, None)
      seg.forget(reg)
  seg.close(end)
  seg.flush()
  if not inlined:
    return None
  seg.names["SLOW"] = _slow(prog.code, start, end)
  check = " & ".join(f"I.get({r!r}, 0)" for r in seg.needed)
  head = ["def segment(W, am):", "  R, I = W.R, W.init"]
  if check:
    head.append(f"  if ({check} & am) != am:\n    return SLOW(W, am)")
  body = "\n".join("    " + line for line in seg.lines)
  source = "\n".join(head) + f"\n  full = am == W.live\n  at = {start}\n  try:\n{body}\n" + (
    "  except Exception as e:\n    if not hasattr(e, 'ptx_pc'):\n      e.ptx_pc = at\n    raise\n")
  exec(compile(source, f"<ptx segment {prog.entry.name}:{start}>", "exec"), seg.names)
  seg.names["segment"].source = source
  return seg.names["segment"]


def _later(prog, start: int, end: int):
  """pc -> the registers instructions pc..end-1 read."""
  after, seen = {end: frozenset()}, set()
  for pc in range(end - 1, start - 1, -1):
    seen.update(_reads(prog.entry.instrs[pc]))
    after[pc] = frozenset(seen)
  return after.__getitem__


def _destinations(ins: Instr) -> list[str]:
  """Every register an instruction may write (its first operand), guarded or not."""
  if ins.opcode in ("st", "bar", "barrier", "bra", "ret", "exit") or not ins.operands:
    return []
  dst = ins.operands[0]
  if dst[0] == "reg":
    return [dst[1]]
  return [d[1] for d in dst[1] if d[0] == "reg"] if dst[0] == "vec" else []


def _reads(ins: Instr) -> list[str]:
  """Every register an instruction reads (sources, address bases, its guard; a guarded
  instruction's destination too, whose lanes the guard leaves keep their values)."""
  out = [ins.guard[0]] + _destinations(ins) if ins.guard else []
  ops = ins.operands if ins.opcode in ("st",) else ins.operands[1:]
  stack = list(ops)
  while stack:
    op = stack.pop()
    if op[0] in ("reg", "not"):
      out.append(op[1])
    elif op[0] == "vec":
      stack.extend(op[1])
    elif op[0] == "addr" and op[1] is not None:
      stack.append(op[1])
  return out


def _private(prog, runs: list) -> dict:
  """run start -> the registers only that run's inlined instructions touch, each written
  before any read there: they live in locals and never go back to W.R."""
  instrs = prog.entry.instrs
  touched: dict[str, set] = {}
  for pc, ins in enumerate(instrs):
    for reg in _reads(ins) + _destinations(ins):
      touched.setdefault(reg, set()).add(pc)
  out = {}
  for start, end in runs:
    inlined = {pc for pc in range(start, end) if inline(_Segment(prog, pc), instrs[pc])}
    mine = set()
    for reg, pcs in touched.items():
      if pcs <= inlined and reg in _destinations(instrs[min(pcs)]) \
          and reg not in _reads(instrs[min(pcs)]):
        mine.add(reg)
    out[start] = frozenset(mine)
  return out


def _slow(code: list, start: int, end: int):
  """The segment instruction by instruction on the reference closures (exact errors)."""
  steps = [(pc, code[pc][1]) for pc in range(start, end)]

  def run(W, am):
    for pc, fn in steps:
      try:
        fn(W, am)
      except Exception as e:
        e.ptx_pc = pc
        raise
  return run


# entry name -> why it runs on the plain reference steps (a translation error; none expected)
FALLBACKS: dict[str, str] = {}


def build(prog) -> list:
  """The entry's step list with every fusable run of STEP instructions replaced at its first pc
  by (SEGMENT, function, length); the other entries (and the run's later pcs, where a branch
  may still land) are the reference steps."""
  code = list(prog.code)
  targets = {target for kind, _, target in prog.code if kind == BRANCH}
  runs, pc, n = [], 0, len(code)
  while pc < n:
    if code[pc][0] != STEP:
      pc += 1
      continue
    end = pc + 1
    while end < n and prog.code[end][0] == STEP and end not in targets:
      end += 1
    runs.append((pc, end))
    pc = end
  private = _private(prog, runs)
  for start, end in runs:
    fn = _segment(prog, start, end, private[start])
    if fn is not None:
      code[start] = (SEGMENT, fn, end - start)
  return code
