"""The instructions the fused engine (fused.py) writes inline into a segment's lane loops: each
translator reads its operands' lane expressions from the segment and stores one statement on
lane values; False leaves the instruction to its reference closure.

f32 results are rounded in the loop, lane by lane, to the bits the reference's list rounding (RF)
gives: Veltkamp's split of the double at 24 bits is the nearest f32, ties to even, wherever that
is a normal f32, and the other lanes (NaN, inf, subnormal or overflowing results) go through the
reference's own conversion (R1); a power-of-two factor only checks the range. Where the segment
proves a result exact (every value a multiple of a power of two q within bounds whose multiples
are all f32s, tracked from an integer conversion of a bounded integer through adds and
products: `fact`), it is not rounded at all.
"""
from __future__ import annotations

import math
from fractions import Fraction

from . import alu
from . import compile as ref
from .operands import TYPES, immediate
from .parser import Instr

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


def fact(seg, op):
  """(lo, hi, q) of an f32 operand whose every lane value is a multiple of q (a power of
  two) in [lo, hi] (Fractions), or None where that is not known."""
  if op[0] == "reg":
    return seg.facts.get(op[1])
  try:
    value = Fraction(immediate(op, "f32", ""))
  except Exception:       # NaN, inf or a bad literal: nothing known
    return None
  return (value, value, _quantum(value))


def _quantum(value: Fraction) -> Fraction:
  """The largest power of two `value` is a multiple of (2**128 for zero)."""
  if value == 0:
    return Fraction(2) ** 128
  num, den = value.numerator, value.denominator
  return Fraction(num & -num, den)


_TWO24, _QMIN = Fraction(2) ** 24, Fraction(2) ** -149


def _f32_fact(seg, op: str, srcs):
  """The (lo, hi, q) of an f32 add/sub/mul whose operands' facts make every result an f32
  exactly (so it needs no rounding), or None."""
  a, b = fact(seg, srcs[0]), fact(seg, srcs[1])
  if a is None or b is None:
    return None
  if op == "mul":
    ends = [x * y for x in a[:2] for y in b[:2]]
    out = (min(ends), max(ends), a[2] * b[2])
  elif op == "add":
    out = (a[0] + b[0], a[1] + b[1], min(a[2], b[2]))
  else:
    out = (a[0] - b[1], a[1] - b[0], min(a[2], b[2]))
  big = max(abs(out[0]), abs(out[1]))
  exact = out[2] >= _QMIN and big <= _TWO24 * out[2] and big <= Fraction(_F32_MAX)
  return out if exact else None


def _wrap(seg, dst_op, t: str, expr: str | None) -> bool:
  dst = seg.dest(dst_op, t)
  if dst is None or expr is None:
    return False
  seg.store(dst, expr)
  return True


def _int_op(seg, ins: Instr, op: str, mods: set, t: str) -> bool:
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
      done = _wrap(seg, ops[0], t, expr)
      if done and op == "shr" and cls != "s":
        seg.bound[ops[0][1]] = M >> ops[2][1]
      return done
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
  return _int_call(seg, ins, op, mods, t)


_INT_ARITY = {**{op: 2 for op in ("add", "sub", "mul", "div", "rem", "min", "max", "and", "or",
                                  "xor", "shl", "shr")},
              **{op: 1 for op in ("neg", "not", "abs", "popc", "clz", "brev")}, "mad": 3}


def _int_call(seg, ins: Instr, op: str, mods: set, t: str) -> bool:
  """Any other integer ALU instruction: its reference lane function called in the loop."""
  nsrc = _INT_ARITY.get(op)
  if nsrc is None or len(ins.operands) != nsrc + 1:
    return False
  _, types, dtype, fn = ref.int_alu_form(ins, op, mods, t, nsrc)
  call = seg.const(fn) + "(" + ", ".join("{%d}" % k for k in range(nsrc)) + ")"
  return _wrap(seg, ins.operands[0], dtype, seg.lanes(call, ins.operands[1:], types))


# fma with a single rounding: the double sum where it is exact (TwoSum error 0) or not finite,
# else the reference's own scalar fma (F), which settles the double-rounding cases exactly
# (a NaN or inf sum goes to F too: see _NAN)
_FMA = ("(s_ if (s_ := (p_ := {0} * {1}) + {2}) - s_ == 0 and (p_ - (s_ - (z_ := s_ - p_)))"
        " + ({2} - z_) == 0 else F({0}, {1}, {2}))")
# the NaN an add/sub/mul of lane values {0}, {1} gives: the first NaN operand's, quieted
# (alu.nan_of, the reference's rule). CPython's own a + b of two NaNs keeps either one, by code
# path, so the NaN lanes are settled explicitly.
_NAN = "({0} + {0} if {0} != {0} else {1} + {1} if {1} != {1} else x_)"
# an f32 result rounded in the lane loop: Veltkamp's split of the double at 24 bits is its
# nearest f32 (ties to even) where that is a normal f32; zeros are kept, and the other lanes (NaN,
# inf, subnormal or overflowing results) are rounded by R1, the same conversion as RF's (`slow`:
# R1(x_), or for an add/sub/mul R1 of its _NAN)
_F32_MAX, _F32_MIN = 3.4028234663852886e38, 1.1754943508222875e-38
_ROUND_F32 = (f"(h_ if {_F32_MIN!r} <= (h_ := (t_ := (x_ := {{x}}) * 536870913.0) - (t_ - x_)) "
              f"<= {_F32_MAX!r} or -{_F32_MAX!r} <= h_ <= -{_F32_MIN!r} else x_ if x_ == 0 "
              f"else {{slow}})")
# an f32 times a power of two: exact unless it leaves the normal range (or is NaN)
_SCALED_F32 = (f"(r_ if (r_ := {{x}}) == 0 or {_F32_MIN!r} <= r_ <= {_F32_MAX!r} or "
               f"-{_F32_MAX!r} <= r_ <= -{_F32_MIN!r} else R1(r_))")
# an integer of at most 25 bits magnitude is an f32 exactly
_INT_F32 = "(float(i_) if -16777216 <= (i_ := {i}) <= 16777216 else R1(float(i_)))"


def _float_op(seg, ins: Instr, op: str, mods: set, t: str) -> bool:
  ops = ins.operands
  if not mods <= {"rn"} or t not in ("f32", "f64"):
    return _float_call(seg, ins, op, mods, t)
  if op in _FLOAT_BIN and len(ops) == 3:
    expr = seg.lanes(_FLOAT_BIN[op], ops[1:], [t, t])
    if expr is None:
      return False
    nan = seg.lanes(_NAN, ops[1:], [t, t])
    if t == "f64":
      return _wrap(seg, ops[0], t, f"(x_ if (x_ := {expr}) == x_ else {nan})")
    fact = _f32_fact(seg, op, ops[1:])
    if fact is not None:
      done = _wrap(seg, ops[0], t, expr)
      seg.facts[ops[0][1]] = fact
      return done
    return _wrap(seg, ops[0], t, _f32_form(op, ops[1:]).format(x=expr, slow=f"R1({nan})"))
  if op in ("fma", "mad") and t == "f32" and mods == {"rn"} and len(ops) == 4:
    fma = seg.const(alu._float_fma(t))
    expr = seg.lanes(_FMA.replace("F(", fma + "("), ops[1:], [t, t, t])
    return _wrap(seg, ops[0], t, expr and _ROUND_F32.format(x=expr, slow="R1(x_)"))
  return _float_call(seg, ins, op, mods, t)


def _float_call(seg, ins: Instr, op: str, mods: set, t: str) -> bool:
  """Any other f32/f64 ALU instruction without .ftz/.sat: its reference lane function called
  in the loop, an f32 result rounded as the reference's post-rounding rounds it."""
  nsrc = 3 if op in ("fma", "mad") else 1 if op in alu.FLOAT_UNARY else 2
  if op not in alu.FLOAT_UNARY and op not in alu.FLOAT_BINARY and op not in ("fma", "mad"):
    return False
  if t not in ("f32", "f64") or mods & {"ftz", "sat"} or len(ins.operands) != nsrc + 1:
    return False
  fn = ref._float_lane_fn(ins, op, t, mods)
  call = seg.const(fn) + "(" + ", ".join("{%d}" % k for k in range(nsrc)) + ")"
  expr = seg.lanes(call, ins.operands[1:], [t] * nsrc)
  rounded = expr and t == "f32" and _ROUND_F32.format(x=expr, slow="R1(x_)")
  return _wrap(seg, ins.operands[0], t, rounded or expr)


def _f32_form(op: str, srcs) -> str:
  """How an f32 add/sub/mul rounds in the lane loop: _SCALED_F32 for a literal power-of-two
  factor, _ROUND_F32 otherwise."""
  lits = [o for o in srcs if o[0] in ("imm", "fimm")]
  if len(lits) != 1:
    return _ROUND_F32
  if op == "mul":
    try:
      value = immediate(lits[0], "f32", "")
    except Exception:
      return _ROUND_F32
    if value != 0 and value - value == 0 and math.frexp(value)[0] in (0.5, -0.5):
      return _SCALED_F32
  return _ROUND_F32


_UNSIGNED_CMP = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}
_FLOAT_CMP = {"eq": "{0} == {1}", "lt": "{0} < {1}", "le": "{0} <= {1}", "gt": "{0} > {1}",
              "ge": "{0} >= {1}", "neu": "{0} != {1}", "nan": "({0} != {0} or {1} != {1})",
              "num": "({0} == {0} and {1} == {1})"}


def _setp(seg, ins: Instr) -> bool:
  if len(ins.mods) != 2 or len(ins.operands) != 3:
    return False
  cmp, t = ins.mods
  if t in ("f32", "f64") and cmp in alu.FLOAT_CMP:
    tpl = _FLOAT_CMP.get(cmp) or seg.const(alu.FLOAT_CMP[cmp]) + "({0}, {1})"
    return _wrap(seg, ins.operands[0], "pred", seg.lanes(tpl, ins.operands[1:], [t, t]))
  if t not in TYPES or TYPES[t][0] not in "usb":
    return False
  cls, w = TYPES[t]
  if cmp in _UNSIGNED_CMP and cls != "b":
    cmp, cls = _UNSIGNED_CMP[cmp], "u"
  if cmp not in _CMP or (cls == "b" and cmp not in ("eq", "ne")):
    return False
  H = (1 << (w - 1)) if cls == "s" else 0
  return _wrap(seg, ins.operands[0], "pred", seg.lanes(_CMP[cmp], ins.operands[1:], [t, t], H=H))


_PRED = {"and": "({0} and {1})", "or": "({0} or {1})", "xor": "({0} != {1})", "not": "(not {0})"}


def _pred_op(seg, ins: Instr) -> bool:
  tpl = _PRED.get(ins.opcode)
  if tpl is None or len(ins.mods) != 1 or len(ins.operands) != (2 if ins.opcode == "not" else 3):
    return False
  return _wrap(seg, ins.operands[0], "pred", seg.lanes(tpl, ins.operands[1:], ["pred"] * 2))


def _selp(seg, ins: Instr, t: str) -> bool:
  if len(ins.operands) != 4:
    return False
  expr = seg.lanes("{0} if {2} else {1}", ins.operands[1:], [t, t, "pred"])
  return _wrap(seg, ins.operands[0], t, expr)


def _mov(seg, ins: Instr, t: str) -> bool:
  dst, src = ins.operands
  if src[0] != "reg" or dst[0] != "reg":
    return False
  read = seg.operand(src, t)
  return read is not None and _wrap(seg, dst, t, read)


def _cvt(seg, ins: Instr) -> bool:
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
      return read is not None and _wrap(seg, ins.operands[0], dst_t, read)
    return _wrap(seg, ins.operands[0], dst_t, seg.lanes(tpl, ins.operands[1:], [src_t]))
  if dst_t in ("f32", "f64") and mods <= {"rn"}:
    value = "(({0} ^ %d) - %d)" % (1 << (sw - 1), 1 << (sw - 1)) if sc == "s" else "{0}"
    src = ins.operands[1]
    bound = seg.bound.get(src[1]) if src[0] == "reg" and sc != "s" else None
    exact = dst_t == "f64" or (bound is not None and bound <= 1 << 24)
    tpl = f"float({value})" if exact else _INT_F32.format(i=value)
    done = _wrap(seg, ins.operands[0], dst_t, seg.lanes(tpl, ins.operands[1:], [src_t]))
    if done and dst_t == "f32" and bound is not None and exact:
      seg.facts[ins.operands[0][1]] = (Fraction(0), Fraction(bound), Fraction(1))
    return done
  return False


def inline(seg, ins: Instr) -> bool:
  """Write `ins` inline into the segment; False leaves it to its reference closure."""
  if not ins.mods or ins.mods[-1] not in TYPES:
    return False
  if ins.guard is not None:
    return _guarded(seg, ins)
  return _unguarded(seg, ins)


def _guarded(seg, ins: Instr) -> bool:
  """`@%p op d, ...`: d = (the result if the guard holds else d's value), in every lane (d is
  read as an operand, so its lanes are initialised)."""
  dst, (pred, neg) = ins.operands[0] if ins.operands else None, ins.guard
  if ins.opcode not in _GUARDABLE or dst is None or dst[0] != "reg" or dst[1] not in seg.regs:
    return False
  old = seg.operand(dst, seg.regs[dst[1]])
  guard = seg.operand(("reg", pred), "pred")
  if old is None or guard is None or not _unguarded(seg, ins):
    return False
  name = seg.elem(dst[1])
  if not seg.body or not seg.body[-1].startswith(f"{name} = "):
    return False
  expr = seg.body[-1][len(name) + 3:]
  seg.body[-1] = f"{name} = ({expr} if {'not ' if neg else ''}{guard} else {old})"
  seg.forget(dst[1])
  return True


_GUARDABLE = set(_INT_ARITY) | set(alu.FLOAT_UNARY) | set(alu.FLOAT_BINARY) | {
  "fma", "mad", "setp", "selp", "mov", "cvt"}


def _unguarded(seg, ins: Instr) -> bool:
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
  if cls == "p":
    return _pred_op(seg, ins)
  if cls == "f":
    return _float_op(seg, ins, op, mods, t)
  if cls in "usb":
    return _int_op(seg, ins, op, mods, t)
  return False
