"""The pure-Python fast path of the simulator: straight-line runs of instructions fused into one
generated Python function each (the engine where numpy is missing, as in the page's Pyodide).

The reference engine (machine.py) calls one closure per instruction, and most closures map a
per-lane Python function over the warp. Here each maximal run of unguarded-or-guarded STEP
instructions between branch targets becomes a SEGMENT: Python source written once per entry,
with the hot instructions (integer add/sub/mul/mad/logic/shifts/min/max, f32/f64 add/sub/mul,
f32 fma, integer setp, selp, mov, cvta and the common cvt forms) inlined as list
comprehensions over the warp's lane lists, and every other instruction calling its reference
closure in place. Registers, masks, the scheduler (divergence, reconvergence, `bar.sync`,
`exit`) and memory are the reference engine's own, so results are bit-identical by
construction; a segment's registers read before being written in it are checked once at its
start, and when that check fails the segment runs instruction by instruction on the reference
closures, which report the uninitialised read exactly as the reference does. A fault inside a
segment carries the pc of its instruction (`ptx_pc`), so errors still name the instruction.
"""
from __future__ import annotations

from .operands import FULL, TYPES, immediate, read_conversion, register_type, store_lanes
from .operands import write_conversion
from .parser import SPECIAL_REGS, Instr
from .steps import BRANCH, SEGMENT, STEP
from . import alu
from . import numeric as nm

# the templates of the inlined instructions: element expressions of the operands -> result
_INT_BIN = {
  "add": "({0} + {1}) & {M}", "sub": "({0} - {1}) & {M}", "mul": "({0} * {1}) & {M}",
  "and": "{0} & {1}", "or": "{0} | {1}", "xor": "{0} ^ {1}",
  "min": "{0} if {0} ^ {H} <= {1} ^ {H} else {1}", "max": "{0} if {0} ^ {H} >= {1} ^ {H} else {1}",
}
_CMP = {"eq": "{0} == {1}", "ne": "{0} != {1}", "lt": "{0} ^ {H} < {1} ^ {H}",
        "le": "{0} ^ {H} <= {1} ^ {H}", "gt": "{0} ^ {H} > {1} ^ {H}",
        "ge": "{0} ^ {H} >= {1} ^ {H}"}
_FLOAT_BIN = {"add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}"}
ELEMENT_NAMES = ("a", "b", "c")


class _Segment:
  """The source of one segment being written: operand expressions, constants, and the
  registers it holds in Python locals (loaded from W.R on first read, stored back before a
  reference closure runs and at the end, except those no other instruction reads)."""

  def __init__(self, prog, start: int, private: frozenset = frozenset()):
    self.prog, self.regs, self.private = prog, prog.entry.regs, private
    self.names: dict = {"ST": store_lanes, "FULL": FULL, "RF": nm.round_f32s}
    self.lines: list[str] = []
    self.needed: list[str] = []       # registers read before this segment writes them
    self.defined: set = set()
    self.local: dict[str, str] = {}   # register -> the local holding its current value
    self.dirty: set = set()           # locals not yet stored back into W.R
    self.start = start

  def state(self) -> tuple:
    return (len(self.lines), list(self.needed), set(self.defined), dict(self.local),
            set(self.dirty))

  def restore(self, state: tuple) -> None:
    n, self.needed, self.defined, self.local, self.dirty = state
    del self.lines[n:]

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

  def operand(self, op, t: str):
    """(element expression or None, list expression or None) of a readable operand, or None
    where it needs a conversion the reference engine applies (left to the reference)."""
    if op[0] in ("imm", "fimm"):
      try:
        value = immediate(op, t, "")
      except Exception:    # the reference closure reports the bad literal
        return None
      return self.literal(value), None
    if op[0] != "reg" or (op[1] not in SPECIAL_REGS and op[1] not in self.regs):
      return None
    if read_conversion(register_type(op[1], self.regs, ""), t, "") is not None:
      return None
    reg = op[1]
    if reg not in self.defined and reg not in self.needed:
      self.needed.append(reg)
    if reg not in self.local:
      self.local[reg] = self.var(reg)
      self.lines.append(f"{self.local[reg]} = R[{reg!r}]")
    return None, self.local[reg]

  def dest(self, op, t: str):
    if op[0] != "reg" or op[1] in SPECIAL_REGS or op[1] not in self.regs:
      return None
    if write_conversion(t, self.regs[op[1]], "") is not None:
      return None
    return op[1]

  def lanes(self, template: str, ops, types, tail: str = "", **fill) -> str | None:
    """A list comprehension applying `template` to the operands lane by lane, or None."""
    read = [self.operand(op, t) for op, t in zip(ops, types)]
    if any(r is None for r in read):
      return None
    elems, lists, names = [], [], []
    for (scalar, listed), var in zip(read, ELEMENT_NAMES):
      elems.append(scalar or var)
      if listed:
        lists.append(listed)
        names.append(var)
    if not lists:
      return None
    expr, tail = template.format(*elems, **fill), tail.format(*elems)
    if len(lists) == 1:
      return f"[{expr} for {names[0]} in {lists[0]}{tail}]"
    return f"[{expr} for {', '.join(names)} in zip({', '.join(lists)}){tail}]"

  def store(self, dst: str, expr: str) -> None:
    self.local[dst] = self.var(dst)
    self.lines.append(f"{self.local[dst]} = {expr}")
    self.defined.add(dst)
    if dst not in self.private:
      self.dirty.add(dst)

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


def _wrap(seg: _Segment, dst_op, t: str, expr: str | None) -> bool:
  dst = seg.dest(dst_op, t)
  if dst is None or expr is None:
    return False
  seg.store(dst, expr)
  return True


def _int_op(seg: _Segment, ins: Instr, op: str, mods: set, t: str) -> bool:
  cls, w = TYPES[t]
  M, H = (1 << w) - 1, (1 << (w - 1)) if cls == "s" else 0
  ops = ins.operands
  if op in _INT_BIN and mods <= {"lo"} and len(ops) == 3:
    return _wrap(seg, ops[0], t, seg.lanes(_INT_BIN[op], ops[1:], [t, t], M=M, H=H))
  if op in ("shl", "shr") and not mods and len(ops) == 3:
    if ops[2][0] == "imm" and 0 <= ops[2][1] < w - 1:     # a constant amount in range
      tpl = {"shl": "({0} << %d) & {M}", "shr": "{0} >> %d"}[op] % ops[2][1]
      if op == "shr" and cls == "s":
        tpl = "((({0} ^ {H}) - {H}) >> %d) & {M}" % ops[2][1]
      expr = seg.lanes(tpl, ops[1:2], [t], M=M, H=1 << (w - 1))
      return _wrap(seg, ops[0], t, expr)
    if op == "shl":
      tpl = "({0} << {1}) & {M} if {1} < {w} else 0"
    elif cls == "s":
      tpl = "((({0} ^ {H}) - {H}) >> ({1} if {1} < {w1} else {w1})) & {M}"
      H = 1 << (w - 1)
    else:
      tpl = "{0} >> {1} if {1} < {w} else 0"
    expr = seg.lanes(tpl, ops[1:], [t, "u32"], M=M, H=H, w=w, w1=w - 1)
    return _wrap(seg, ops[0], t, expr)
  if op == "mul" and mods == {"wide"} and len(ops) == 3:
    S = 1 << (w - 1)
    tpl = ("((({0} ^ {S}) - {S}) * (({1} ^ {S}) - {S})) & {MM}" if cls == "s"
           else "{0} * {1}")
    expr = seg.lanes(tpl, ops[1:], [t, t], S=S, MM=(1 << 2 * w) - 1)
    return _wrap(seg, ops[0], f"{cls}{2 * w}", expr)
  if op == "mad" and mods <= {"lo"} and len(ops) == 4:
    return _wrap(seg, ops[0], t, seg.lanes("({0} * {1} + {2}) & {M}", ops[1:], [t, t, t], M=M))
  return False


# fma with a single rounding: the double sum where it is exact (TwoSum error 0) or not finite,
# else the reference's own scalar fma (F), which settles the double-rounding cases exactly
_FMA = "s if s - s != 0 or (p - (s - (z := s - p))) + ({2} - z) == 0 else F({0}, {1}, {2})"
_FMA_TAIL = " for p in ({0} * {1},) for s in (p + {2},)"


def _float_op(seg: _Segment, ins: Instr, op: str, mods: set, t: str) -> bool:
  ops = ins.operands
  if not mods <= {"rn"} or t not in ("f32", "f64"):
    return False
  if op in _FLOAT_BIN and len(ops) == 3:
    expr = seg.lanes(_FLOAT_BIN[op], ops[1:], [t, t])
    if expr is not None and t == "f32":
      expr = f"RF({expr})"
    return _wrap(seg, ops[0], t, expr)
  if op in ("fma", "mad") and t == "f32" and mods == {"rn"} and len(ops) == 4:
    fma = seg.const(alu._float_fma(t))
    expr = seg.lanes(_FMA.replace("F(", fma + "("), ops[1:], [t, t, t], tail=_FMA_TAIL)
    return _wrap(seg, ops[0], t, expr and f"RF({expr})")
  return False


def _setp(seg: _Segment, ins: Instr) -> bool:
  if len(ins.mods) != 2 or ins.mods[0] not in _CMP or len(ins.operands) != 3:
    return False
  cmp, t = ins.mods
  if t not in TYPES or TYPES[t][0] not in "usb" or (TYPES[t][0] == "b" and cmp not in ("eq", "ne")):
    return False
  cls, w = TYPES[t]
  H = (1 << (w - 1)) if cls == "s" else 0
  return _wrap(seg, ins.operands[0], "pred", seg.lanes(_CMP[cmp], ins.operands[1:], [t, t], H=H))


def _selp(seg: _Segment, ins: Instr, t: str) -> bool:
  if len(ins.operands) != 4:
    return False
  expr = seg.lanes("{0} if {2} else {1}", ins.operands[1:], [t, t, "pred"])
  return _wrap(seg, ins.operands[0], t, expr)


def _mov(seg: _Segment, ins: Instr, t: str) -> bool:
  dst, src = ins.operands
  if src[0] != "reg" or dst[0] != "reg":
    return False
  read = seg.operand(src, t)
  return read is not None and _wrap(seg, dst, t, read[1])


def _cvt(seg: _Segment, ins: Instr) -> bool:
  if len(ins.mods) < 2 or len(ins.operands) != 2:
    return False
  dst_t, src_t, mods = ins.mods[-2], ins.mods[-1], set(ins.mods[:-2])
  if dst_t not in TYPES or src_t not in TYPES or dst_t == "tf32":
    return False
  (dc, dw), (sc, sw) = TYPES[dst_t], TYPES[src_t]
  if sc not in "usb" or sw > 32 and dc == "f":
    return False
  ext = ((1 << dw) - 1) ^ ((1 << sw) - 1)
  if dc in "usb" and not mods:
    tpl = "{0} & %d" % ((1 << dw) - 1) if dw < sw else (
      "{0} | %d if {0} & %d else {0}" % (ext, 1 << (sw - 1)) if sc == "s" and dw > sw else None)
    if tpl is None:         # the same bits: the register's list itself
      read = seg.operand(ins.operands[1], src_t) if ins.operands[1][0] == "reg" else None
      return read is not None and _wrap(seg, ins.operands[0], dst_t, read[1])
    return _wrap(seg, ins.operands[0], dst_t, seg.lanes(tpl, ins.operands[1:], [src_t]))
  if dst_t in ("f32", "f64") and mods <= {"rn"}:
    tpl = "float(({0} ^ %d) - %d)" % (1 << (sw - 1), 1 << (sw - 1)) if sc == "s" else "float({0})"
    expr = seg.lanes(tpl, ins.operands[1:], [src_t])
    return _wrap(seg, ins.operands[0], dst_t, f"RF({expr})" if expr and dst_t == "f32" else expr)
  return False


def _inline(seg: _Segment, ins: Instr) -> bool:
  """Write `ins` inline into the segment; False leaves it to its reference closure."""
  if ins.guard is not None or not ins.mods or ins.mods[-1] not in TYPES:
    return False
  op, t = ins.opcode, ins.mods[-1]
  mods = set(ins.mods[:-1])
  if op == "setp":
    return _setp(seg, ins)
  if op == "cvt":
    return _cvt(seg, ins)
  if op in ("mov", "cvta") and len(ins.operands) == 2 and mods <= {"to", "global"}:
    return _mov(seg, ins, t)
  if op == "selp" and not mods:
    return _selp(seg, ins, t)
  cls = TYPES[t][0]
  if cls == "f":
    return _float_op(seg, ins, op, mods, t)
  if cls in "usb":
    return _int_op(seg, ins, op, mods, t)
  return False


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
  seg, inlined = _Segment(prog, start, private), 0
  for pc in range(start, end):
    ins = prog.entry.instrs[pc]
    seg.lines.append(f"at = {pc}")
    state = seg.state()
    if _inline(seg, ins):
      inlined += 1
      continue
    seg.restore(state)
    seg.flush()
    seg.names[f"S{pc}"] = prog.code[pc][1]
    seg.lines.append(f"S{pc}(W, am)")
    seg.defined.update(_written(ins))
    for reg in _destinations(ins):
      seg.local.pop(reg, None)
  seg.flush()
  if not inlined:
    return None
  seg.names["SLOW"] = _slow(prog.code, start, end)
  check = " & ".join(f"I.get({r!r}, 0)" for r in seg.needed)
  head = ["def segment(W, am):", "  R, I = W.R, W.init"]
  if check:
    head.append(f"  if ({check} & am) != am:\n    return SLOW(W, am)")
  body = "\n".join("    " + line for line in seg.lines)
  source = "\n".join(head) + f"\n  full = am == FULL\n  at = {start}\n  try:\n{body}\n" + (
    "  except Exception as e:\n    if not hasattr(e, 'ptx_pc'):\n      e.ptx_pc = at\n    raise\n")
  exec(compile(source, f"<ptx segment {prog.entry.name}:{start}>", "exec"), seg.names)
  seg.names["segment"].source = source
  return seg.names["segment"]


def _destinations(ins: Instr) -> list[str]:
  """Every register an instruction may write (its first operand), guarded or not."""
  if ins.opcode in ("st", "bar", "barrier", "bra", "ret", "exit") or not ins.operands:
    return []
  dst = ins.operands[0]
  if dst[0] == "reg":
    return [dst[1]]
  return [d[1] for d in dst[1] if d[0] == "reg"] if dst[0] == "vec" else []


def _reads(ins: Instr) -> list[str]:
  """Every register an instruction reads (sources, address bases, its guard)."""
  out = [ins.guard[0]] if ins.guard else []
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
    inline = {pc for pc in range(start, end) if _inline(_Segment(prog, pc), instrs[pc])}
    mine = set()
    for reg, pcs in touched.items():
      if pcs <= inline and reg in _destinations(instrs[min(pcs)]) \
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
