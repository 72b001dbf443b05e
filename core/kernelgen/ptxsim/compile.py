"""Parsed instructions -> executable steps: one closure per instruction, built once per entry.

A step is `(kind, fn, target)`. STEP functions `fn(W, am)` update warp W's registers in the
lanes of the active mask `am`; BRANCH and EXIT functions return the mask of lanes that take the
branch / leave; BARRIER marks `bar.sync`. Anything outside the supported subset is rejected here
with a PTXSyntaxError naming the instruction and its line. The memory and warp instructions are in
compile_memory.py; what every instruction's compile shares (Context, operand checks) in steps.py.
"""
from __future__ import annotations

from . import alu
from . import mma as mma_mod
from . import numeric as nm
from .compile_memory import compile_atom, compile_ld, compile_shfl, compile_st
from .operands import FULL, TYPES, LaneFault, first_lane, mask_of, reader, writer
from .parser import Instr, PTXSyntaxError
from .steps import (BARRIER, BRANCH, EXIT, STEP, Context, checked_operands, split_mods, where_text,
                    unsupported)

ROUNDING = {"rn", "rz", "rm", "rp"}
INT_ROUNDING = {"rni", "rzi", "rmi", "rpi"}


# ---- arithmetic -------------------------------------------------------------------------------

_FLOAT_OPS = set(alu.FLOAT_BINARY) | set(alu.FLOAT_UNARY) | {"fma", "mad"}
_INT_BINARY = {"add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor", "shl", "shr"}
_INT_UNARY = {"neg", "not", "abs", "popc", "clz", "brev"}
_ALU_MODS = ROUNDING | {"ftz", "sat", "approx", "full", "lo", "hi", "wide"}


def _float_lane_fn(ins: Instr, op: str, t: str, mods: set):
  mode = next(iter(mods & ROUNDING), "rn")
  if op in ("fma", "mad"):
    if op == "mad" and not mods & ROUNDING:
      raise unsupported(ins, "mad on floats needs a rounding modifier (mad.rn is fma)")
    return alu.directed(op, t, mode) if mode != "rn" else alu._float_fma(t)
  if mode != "rn" and op in ("add", "sub", "mul", "div"):
    return alu.directed(op, t, mode)
  if mode != "rn":
    raise unsupported(ins, "directed rounding is only simulated for add/sub/mul/div/fma")
  return alu.FLOAT_BINARY.get(op) or alu.FLOAT_UNARY[op]


def _compute(fn, srcs, post):
  """(W, am) -> fn mapped over the lanes of the source operands, then `post` on the list."""
  if len(srcs) == 1:
    r0 = srcs[0]
    return lambda W, am: post(list(map(fn, r0(W, am))))
  if len(srcs) == 2:
    r0, r1 = srcs
    return lambda W, am: post(list(map(fn, r0(W, am), r1(W, am))))
  r0, r1, r2 = srcs
  return lambda W, am: post(list(map(fn, r0(W, am), r1(W, am), r2(W, am))))


def _identity(xs):
  return xs


def _float_post(t: str, mods: set):
  rnd = nm.ROUND_LIST[t] or _identity
  if "ftz" in mods and t == "f32":
    flush = nm.ftz
    rnd0 = rnd
    rnd = lambda xs: [flush(x) for x in rnd0(xs)]
  if "sat" in mods:
    rnd1 = rnd
    rnd = lambda xs: [nm.sat(x) for x in rnd1(xs)]
  return rnd


# round-to-nearest add/sub/mul of f32/f64 lane lists (the caller rounds to the format); a NaN
# result is alu.nan_of's (the first NaN operand's, quieted)
_NAN_OF = alu.nan_of
FAST_FLOAT = {"add": lambda A, B: [r if (r := a + b) == r else _NAN_OF(a, b, r)
                                   for a, b in zip(A, B)],
              "sub": lambda A, B: [r if (r := a - b) == r else _NAN_OF(a, b, r)
                                   for a, b in zip(A, B)],
              "mul": lambda A, B: [r if (r := a * b) == r else _NAN_OF(a, b, r)
                                   for a, b in zip(A, B)]}


def _alu(ins: Instr, ctx: Context):
  mods, t = split_mods(ins, _ALU_MODS)
  cls, w = TYPES[t]
  op, where = ins.opcode, where_text(ins)
  nsrc = 3 if op in ("fma", "mad") else 1 if op in alu.FLOAT_UNARY or op in _INT_UNARY else 2
  dst, *src_ops = checked_operands(ins, nsrc + 1)
  if cls == "p":
    return _pred_logic(ins, ctx, op, dst, src_ops)
  if cls == "f":
    if op not in _FLOAT_OPS:
      raise unsupported(ins)
    fn, post = _float_lane_fn(ins, op, t, mods), _float_post(t, mods)
    if "ftz" in mods and t == "f32":
      inner = fn
      fn = lambda *xs: inner(*map(nm.ftz, xs))
    srcs = [reader(o, t, ctx, where) for o in src_ops]
    fast = FAST_FLOAT.get(op) if mods <= {"rn"} and t in ("f32", "f64") else None
    if fast is not None:
      r0, r1 = srcs
      return _store(writer(dst, t, ctx, where), lambda W, am: post(fast(r0(W, am), r1(W, am))))
    return _store(writer(dst, t, ctx, where), _compute(fn, srcs, post))
  return _int_alu(ins, ctx, op, mods, t, dst, src_ops)


# (op, signed, hi/lo/wide) -> a warp-wide builder(M, H) over lane lists, for the hot integer ops.
# Ints are unsigned bit patterns; (x ^ H) - H is x's signed value, with H the sign bit.
FAST_INT = {
  # wrapping add/sub/mul.lo, either signedness
  ("add", False, "lo"): lambda M, H: lambda A, B: [(a + b) & M for a, b in zip(A, B)],
  ("add", True, "lo"): lambda M, H: lambda A, B: [(a + b) & M for a, b in zip(A, B)],
  ("sub", False, "lo"): lambda M, H: lambda A, B: [(a - b) & M for a, b in zip(A, B)],
  ("sub", True, "lo"): lambda M, H: lambda A, B: [(a - b) & M for a, b in zip(A, B)],
  ("mul", False, "lo"): lambda M, H: lambda A, B: [(a * b) & M for a, b in zip(A, B)],
  ("mul", True, "lo"): lambda M, H: lambda A, B: [(a * b) & M for a, b in zip(A, B)],
  # mul.wide: the full product in twice the width
  ("mul", False, "wide"): lambda M, H: lambda A, B: [a * b for a, b in zip(A, B)],
  ("mul", True, "wide"): lambda M, H: lambda A, B: [
    (((a ^ H) - H) * ((b ^ H) - H)) & (M * M + 2 * M) for a, b in zip(A, B)],
  # mad.lo: a * b + c, low half
  ("mad", False, "lo"): lambda M, H: lambda A, B, C: [(a * b + c) & M for a, b, c in zip(A, B, C)],
  ("mad", True, "lo"): lambda M, H: lambda A, B, C: [(a * b + c) & M for a, b, c in zip(A, B, C)],
}


def _fast_int(op: str, cls: str, w: int, hi_lo: str, srcs):
  build = FAST_INT.get((op, cls == "s", hi_lo))
  if build is None:
    return None
  fn = build((1 << w) - 1, 1 << (w - 1))
  if len(srcs) == 2:
    r0, r1 = srcs
    return lambda W, am: fn(r0(W, am), r1(W, am))
  r0, r1, r2 = srcs
  return lambda W, am: fn(r0(W, am), r1(W, am), r2(W, am))


def int_alu_form(ins: Instr, op: str, mods: set, t: str, nsrc: int) -> tuple:
  """(lo/hi/wide, the source operands' types, the result type, the lane function) of an
  integer ALU instruction, checked: both engines decode it here."""
  cls, w = TYPES[t]
  hi_lo = next(iter(mods & {"lo", "hi", "wide"}), "lo")
  if mods - {"lo", "hi", "wide", "sat"} or ("sat" in mods and not (t == "s32" and op in
                                                                  ("add", "sub"))):
    raise unsupported(ins)
  types, dtype = [t] * nsrc, t
  if op in ("shl", "shr"):
    types[1] = "u32"
  if hi_lo == "wide":
    dtype = f"{cls}{2 * w}"
  if op == "mad":
    fn = alu.int_mad(cls, w, hi_lo)
    types[2] = dtype
  elif "sat" in mods:
    fn = alu.saturating(op, w)
  elif op in _INT_BINARY:
    fn = alu.int_binary(op, cls, w, hi_lo)
  elif op in _INT_UNARY:
    fn = alu.int_unary(op, cls, w)
    dtype = "u32" if op in ("popc", "clz") else t
  else:
    raise unsupported(ins)
  return hi_lo, types, dtype, fn


def _int_alu(ins, ctx, op, mods, t, dst, src_ops):
  cls, w = TYPES[t]
  where = where_text(ins)
  hi_lo, types, dtype, fn = int_alu_form(ins, op, mods, t, len(src_ops))
  srcs = [reader(o, ty, ctx, where) for o, ty in zip(src_ops, types)]
  fast = None if "sat" in mods else _fast_int(op, cls, w, hi_lo, srcs)
  return _store(writer(dst, dtype, ctx, where), fast or _compute(fn, srcs, _identity))


def _pred_logic(ins, ctx, op, dst, src_ops):
  fns = {"and": lambda a, b: a and b, "or": lambda a, b: a or b, "xor": lambda a, b: a != b,
         "not": lambda a: not a}
  if op not in fns:
    raise unsupported(ins)
  where = where_text(ins)
  srcs = [reader(o, "pred", ctx, where) for o in src_ops]
  return _store(writer(dst, "pred", ctx, where), _compute(fns[op], srcs, _identity))


def _store(write, compute):
  def step(W, am):
    write(W, am, compute(W, am))
  return STEP, step, None


# ---- moves, selects, comparisons, conversions --------------------------------------------------

def _mov(ins: Instr, ctx: Context):
  _, t = split_mods(ins, set())
  dst, src = checked_operands(ins, 2)
  where = where_text(ins)
  if dst[0] == "vec":
    return _unpack(ins, ctx, t, dst[1], src)
  if src[0] == "vec":
    return _pack(ins, ctx, t, dst, src[1])
  return _store(writer(dst, t, ctx, where), reader(src, t, ctx, where))


def _part_type(ins: Instr, t: str, n: int) -> tuple[str, int]:
  w = TYPES[t][1]
  if TYPES[t][0] != "b" or w % n or w // n < 8:
    raise unsupported(ins, "pack/unpack needs a .b16/.b32/.b64 move")
  return f"b{w // n}", w // n


def _pack(ins, ctx, t, dst, parts):
  pt, pw = _part_type(ins, t, len(parts))
  where = where_text(ins)
  srcs = [reader(p, pt, ctx, where) for p in parts]

  def compute(W, am):
    out = [0] * 32
    for k, r in enumerate(srcs):
      out = [o | (v << (k * pw)) for o, v in zip(out, r(W, am))]
    return out
  return _store(writer(dst, t, ctx, where), compute)


def _unpack(ins, ctx, t, parts, src):
  pt, pw = _part_type(ins, t, len(parts))
  where = where_text(ins)
  read = reader(src, t, ctx, where)
  writes = [writer(p, pt, ctx, where) for p in parts]
  m = (1 << pw) - 1

  def step(W, am):
    vals = read(W, am)
    for k, wr in enumerate(writes):
      wr(W, am, [(v >> (k * pw)) & m for v in vals])
  return STEP, step, None


def _selp(ins: Instr, ctx: Context):
  _, t = split_mods(ins, set())
  dst, a, b, c = checked_operands(ins, 4)
  where = where_text(ins)
  ra, rb, rc = reader(a, t, ctx, where), reader(b, t, ctx, where), reader(c, "pred", ctx, where)

  def compute(W, am):
    return [x if p else y for x, y, p in zip(ra(W, am), rb(W, am), rc(W, am))]
  return _store(writer(dst, t, ctx, where), compute)


def _setp(ins: Instr, ctx: Context):
  if len(ins.mods) < 2:
    raise unsupported(ins)
  cmp = ins.mods[0]
  mods, t = split_mods(Instr(ins.line, ins.text, ins.opcode, ins.mods[1:], ()), {"ftz"})
  dst, a, b = checked_operands(ins, 3)
  cls, w = TYPES[t]
  fn = alu.FLOAT_CMP.get(cmp) if cls == "f" else alu.int_compare(cmp, cls, w)
  if fn is None or (cls == "b" and cmp not in ("eq", "ne")):
    raise unsupported(ins, f"comparison .{cmp} on .{t}")
  if "ftz" in mods:
    inner = fn
    fn = lambda x, y: inner(nm.ftz(x), nm.ftz(y))
  where = where_text(ins)
  srcs = [reader(a, t, ctx, where), reader(b, t, ctx, where)]
  fast = FAST_CMP.get(cmp) if cls in "usb" and cmp in FAST_CMP else None
  if fast is not None:
    H = (1 << (w - 1)) if cls == "s" else 0     # xor with the sign bit orders signed values
    r0, r1 = srcs
    return _store(writer(dst, "pred", ctx, where), lambda W, am: fast(r0(W, am), r1(W, am), H))
  return _store(writer(dst, "pred", ctx, where), _compute(fn, srcs, _identity))


# integer setp over lane lists; H is the sign bit for signed types, 0 for unsigned
FAST_CMP = {
  "eq": lambda A, B, H: [a == b for a, b in zip(A, B)],
  "ne": lambda A, B, H: [a != b for a, b in zip(A, B)],
  "lt": lambda A, B, H: [a ^ H < b ^ H for a, b in zip(A, B)],
  "le": lambda A, B, H: [a ^ H <= b ^ H for a, b in zip(A, B)],
  "gt": lambda A, B, H: [a ^ H > b ^ H for a, b in zip(A, B)],
  "ge": lambda A, B, H: [a ^ H >= b ^ H for a, b in zip(A, B)],
}


def _cvt(ins: Instr, ctx: Context):
  if len(ins.mods) < 2 or ins.mods[-1] not in TYPES or ins.mods[-2] not in TYPES:
    raise unsupported(ins)
  dst_t, src_t = ins.mods[-2], ins.mods[-1]
  mods = set(ins.mods[:-2])
  if not mods <= ROUNDING | INT_ROUNDING | {"rna", "ftz", "sat"} or len(mods - {"ftz", "sat"}) > 1:
    raise unsupported(ins)
  rnd = next(iter(mods - {"ftz", "sat"}), None)
  fn = alu.cvt(dst_t, src_t, rnd, "sat" in mods, "ftz" in mods)
  if fn is None:
    raise unsupported(ins)
  dst, src = checked_operands(ins, 2)
  where = where_text(ins)
  out_t = "b32" if dst_t == "tf32" else dst_t
  compute = _compute(fn, [reader(src, src_t, ctx, where)], _identity)
  return _store(writer(dst, out_t, ctx, where), compute)


def _cvta(ins: Instr, ctx: Context):
  mods, t = split_mods(ins, {"to", "global", "shared"})
  dst, src = checked_operands(ins, 2)
  where = where_text(ins)
  return _store(writer(dst, t, ctx, where), reader(src, t, ctx, where))


# ---- control -----------------------------------------------------------------------------------

def _bra(ins: Instr, ctx: Context):
  if set(ins.mods) - {"uni"} or len(ins.operands) != 1 or ins.operands[0][0] != "sym":
    raise unsupported(ins)
  label = ins.operands[0][1]
  if label not in ctx.entry.labels:
    raise PTXSyntaxError(f"branch to unknown label {label} {where_text(ins)}", line=ins.line)
  return BRANCH, _guard_mask(ins, ctx), ctx.entry.labels[label]


def _exit(ins: Instr, ctx: Context):
  if ins.mods or ins.operands:
    raise unsupported(ins)
  return EXIT, _guard_mask(ins, ctx), None


def _bar(ins: Instr, ctx: Context):
  if set(ins.mods) - {"sync", "aligned"} or "sync" not in ins.mods:
    raise unsupported(ins, "only bar.sync / barrier.sync are simulated")
  if len(ins.operands) != 1 or ins.operands[0] != ("imm", 0):
    raise unsupported(ins, "only barrier 0 with all threads of the block (`bar.sync 0`)")
  if ins.guard:
    raise unsupported(ins, "a guarded barrier")
  return BARRIER, None, None


def _guard_mask(ins: Instr, ctx: Context):
  """(W, am) -> the lanes for which the guard holds (all active lanes without a guard)."""
  if ins.guard is None:
    return lambda W, am: am
  pred, neg = ins.guard
  read = reader(("reg", pred), "pred", ctx, where_text(ins))
  if neg:
    return lambda W, am: am & ~mask_of(read(W, am))
  return lambda W, am: am & mask_of(read(W, am))


def _mma(ins: Instr, ctx: Context):
  mods = ins.mods
  if (len(mods) != 9 or mods[:2] != ("sync", "aligned") or mods[3:5] != ("row", "col")
          or mods[5] != "f32" or mods[8] != "f32" or mods[6] != mods[7]
          or (mods[2], mods[6]) not in mma_mod.SHAPES):
    raise unsupported(ins, "supported: mma.sync.aligned.{m16n8k16,m16n8k8}.row.col.f32."
                      "{f16,bf16,tf32}.{same}.f32")
  shape, itype = mods[2], mods[6]
  d, a, b, c = checked_operands(ins, 4)
  _, _, _, _, na, _, nb, per = mma_mod.SHAPES[(shape, itype)]
  where = where_text(ins)
  groups = [(d, 4), (a, na // per), (b, nb // per), (c, 4)]
  if any(g[0] != "vec" or len(g[1]) != n for g, n in groups):
    raise unsupported(ins, "wrong number of fragment registers for this shape")
  ra = [reader(o, "b32", ctx, where) for o in a[1]]
  rb = [reader(o, "b32", ctx, where) for o in b[1]]
  rc = [reader(o, "f32", ctx, where) for o in c[1]]
  wd = [writer(o, "f32", ctx, where) for o in d[1]]

  def step(W, am):
    if am != FULL:
      raise LaneFault(first_lane(~am & FULL), "mma.sync needs all 32 lanes of the warp active "
                                              "and converged")
    out = mma_mod.mma(shape, itype, [r(W, am) for r in ra], [r(W, am) for r in rb],
                      [r(W, am) for r in rc])
    for wr, vals in zip(wd, out):
      wr(W, am, vals)
  return STEP, step, None


# ---- dispatch ----------------------------------------------------------------------------------

HANDLERS = {"mov": _mov, "selp": _selp, "setp": _setp, "cvt": _cvt, "cvta": _cvta,
            "ld": compile_ld, "st": compile_st, "bra": _bra, "ret": _exit, "exit": _exit, "bar": _bar,
            "barrier": _bar, "mma": _mma, "atom": compile_atom, "shfl": compile_shfl,
            **{op: _alu for op in _FLOAT_OPS | _INT_BINARY | _INT_UNARY}}


def _guarded(fn, ins: Instr, ctx: Context):
  mask = _guard_mask(ins, ctx)

  def step(W, am):
    m = mask(W, am)
    if m:
      fn(W, m)
  return step


def compile_instr(ins: Instr, ctx: Context) -> tuple:
  handler = HANDLERS.get(ins.opcode)
  if handler is None:
    raise unsupported(ins)
  kind, fn, target = handler(ins, ctx)
  if kind == STEP and ins.guard is not None:
    fn = _guarded(fn, ins, ctx)
  return kind, fn, target
