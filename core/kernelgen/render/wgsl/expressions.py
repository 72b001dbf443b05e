"""WGSL expressions: the text of a value from its operands' texts (types, constants, conversions,
ALU, subgroup reductions, 8/16-bit wrapping and f16 rounding). The writer (writer.py) is one
of these that also writes statements.
"""
from __future__ import annotations

import math

from ...dtype import DType, dtypes, max_value, min_value
from ...errors import UnsupportedError
from ...uop.ops import EXP2_BOUNDS, EXP2_NAN_UNREAD, GroupOp, Ops, UOp
from .target import (BOOL_INFIX, CALL, F32_INT_MAX, HELPER_NEEDS, INFIX, REGISTER, ROUNDING,
                          SUBGROUP_CALL, TARGET, WRAPPING, WGSLOptions)


class Expressions:
  """WGSL expression text; records what the module must declare for it (helpers, f16, the bits
  of NaN and inf)."""

  def __init__(self, opts: WGSLOptions):
    self.opts = opts
    self.helpers: set[str] = set()
    self.special_bits = False
    self.opaque = False     # uses kg_nwg (num_workgroups), a value the shader compiler cannot know
    self.uses_f16 = False
    self.regs: dict[DType, str] = {}   # dtype -> its register type (dtypes are interned)

  # -- types --
  def reg(self, dt: DType) -> str:
    got = self.regs.get(dt)
    if got is None:
      name = REGISTER[dt.scalar.name]
      if name == "f16":
        self.uses_f16 = self.opts.f16
        name = "f16" if self.opts.f16 else "f32"
      got = self.regs[dt] = name if dt.count == 1 else f"vec{dt.count}<{name}>"
    return got

  def need(self, helper: str) -> str:
    self.helpers.update(HELPER_NEEDS.get(helper, ()) + (helper,))
    return helper

  # -- constants --
  def const(self, u: UOp) -> str:
    return self.const_text(u.dtype, u.arg)

  def const_text(self, dtype: DType, value) -> str:
    reg = self.reg(dtype)
    if reg == "bool":
      return "true" if value else "false"
    if reg == "u32":
      return f"0x{value:x}u" if value > 0xFFFF else f"{value}u"
    if reg == "i32":
      if value == -2**31:
        return "(-2147483647i - 1i)"
      return f"({value}i)" if value < 0 else f"{value}i"
    if math.isfinite(value):
      text = repr(float(value)) + ("h" if reg == "f16" else "f")
      return f"({text})" if text.startswith("-") else text
    self.special_bits = True
    lane = "y" if math.isnan(value) else "x"
    text = f"bitcast<f32>(kg_special.{lane})"
    text = text if reg == "f32" else f"f16({text})"
    return f"(-{text})" if value < 0 else text

  # -- float helpers --
  def isnan(self, x: str, dt: DType) -> str:
    if dt.count == 1:
      return f"{self.need('kg_isnan')}(f32({x}))"
    u = f"vec{dt.count}<u32>"
    return f"((bitcast<{u}>(vec{dt.count}<f32>({x})) & {u}(0x7fffffffu)) > {u}(0x7f800000u))"

  def lanewise(self, fn: str, dt: DType, args: list[str]) -> str:
    if dt.count == 1:
      return f"{fn}({', '.join(args)})"
    args = [a if a.isidentifier() else f"({a})" for a in args]   # (x * y)[i], not x * y[i]
    lanes = [f"{fn}({', '.join(f'{a}[{i}]' for a in args)})" for i in range(dt.count)]
    return f"{self.reg(dt)}({', '.join(lanes)})"

  # -- conversions --
  def cast(self, src: DType, dst: DType, x: str) -> str:
    s, d, t = src.scalar, dst.scalar, self.reg(dst)
    if d == dtypes.bool:   # floats: !(x == 0), as CMPNE (lavapipe's x != 0.0 is false for NaN)
      if s == dtypes.bool:
        return x
      return f"!({x} == {self.reg(src)}())" if s.is_float() else f"({x} != {self.reg(src)}())"
    if s == dtypes.bool:
      return f"select({t}(), {t}(1), {x})"
    if d.is_float():
      return self.to_float(src, dst, x)
    if s.is_float():
      return self.float_to_int(src, dst, x)
    return self.int_to_int(src, dst, x)

  def to_float(self, src: DType, dst: DType, x: str) -> str:
    t = self.reg(dst)
    value = x if self.reg(src) == t else f"{t}({x})"
    if dst.scalar == dtypes.float16 and not self.opts.f16 and src.scalar != dtypes.float16:
      return self.lanewise(self.need("kg_round_f16"), dst, [value])
    return value

  def float_to_int(self, src: DType, dst: DType, x: str) -> str:
    t, d = self.reg(dst), dst.scalar
    f32 = self.reg(dtypes.float32.vec(dst.count))
    f = f"{f32}({x})"
    lo, hi = float(min_value(d)), float(max_value(d))
    value = f"{t}(clamp({f}, {f32}({lo!r}f), {f32}({F32_INT_MAX.get(d.name, hi)!r}f)))"
    if d.name in F32_INT_MAX:
      value = f"select({value}, {t}({self.const_text(d, max_value(d))}), {f} >= {f32}({hi!r}f))"
    return f"select({value}, {t}(), {self.isnan(x, src)})"

  def int_to_int(self, src: DType, dst: DType, x: str) -> str:
    s, d, t = src.scalar, dst.scalar, self.reg(dst)
    value = x if self.reg(src) == t else f"bitcast<{t}>({x})"
    if d.itemsize < 4 and not (s.kind == d.kind and s.itemsize <= d.itemsize):
      value = f"extractBits({value}, 0u, {d.bits}u)"
    return value

  def bitcast(self, src: DType, dst: DType, x: str) -> str:
    if src.itemsize == 4:
      return f"bitcast<{self.reg(dst)}>({x})"
    if src.is_int() and dst.is_int() or dtypes.bool in (src.scalar, dst.scalar):
      return self.cast(src, dst, x)
    if src.count != 1:
      raise UnsupportedError(f"WGSL renders 16-bit bitcasts of scalars only, not {src}: bitcast "
                             f"each lane (GEP) instead", target=TARGET, dtype=src)
    return self.bits16_to(dst, self.bits16_of(src, x))

  def bits16_of(self, src: DType, x: str) -> str:
    if src == dtypes.float16:
      return f"(pack2x16float(vec2<f32>(f32({x}), 0.0f)) & 0xffffu)"
    return f"(bitcast<u32>({x}) & 0xffffu)" if src == dtypes.int16 else x

  def bits16_to(self, dst: DType, bits: str) -> str:
    if dst == dtypes.float16:
      return f"{self.reg(dst)}(unpack2x16float({bits}).x)"
    return f"extractBits(bitcast<i32>({bits}), 0u, 16u)" if dst == dtypes.int16 else bits

  # -- ALU --
  def alu(self, u: UOp, a: list[str]) -> str:
    dt = u.src[-1].dtype
    if u.op in _INT_INFIX and dt.kind in "iu":    # the common index arithmetic, as it is
      return f"{a[0]} {INFIX[u.op]} {a[1]}"
    if u.op is Ops.WHERE:
      return f"select({a[2]}, {a[1]}, {a[0]})"
    if dt.is_float() and u.op in (Ops.SUB, Ops.ADD, Ops.MUL, Ops.MULACC):
      if (got := self.zero_result(u, a)) is not None:
        return got
    if u.op is Ops.MULACC:
      return f"fma({a[0]}, {a[1]}, {a[2]})" if dt.is_float() else f"({a[0]} * {a[1]}) + {a[2]}"
    if dt.scalar == dtypes.bool:
      return self.bool_alu(u.op, a)
    if u.op is Ops.EXP2 and u.arg in EXP2_BOUNDS:
      return self.bounded_exp2(u.arg, dt, a[0])
    if u.op in GroupOp.Unary:
      return self.unary(u.op, dt, a[0])
    if u.op in (Ops.MAX, Ops.MIN) and dt.is_float():
      half = dt.scalar == dtypes.float16 and self.opts.f16
      fn = ("kg_h" if half else "kg_f") + ("max" if u.op is Ops.MAX else "min")
      return self.lanewise(self.need(fn), dt, a)
    if u.op in CALL:
      return f"{CALL[u.op]}({a[0]}, {a[1]})"
    if u.op is Ops.FDIV and _zero(u.src[1]):
      # x / 0.0 -> x * inf from run-time bits (shader compilers fold the division to garbage);
      # a vector of zeros (all lanes one constant) likewise
      zero = u.src[1] if u.src[1].op is Ops.CONST else u.src[1].src[0]
      inf = self.const_text(dt.scalar, math.copysign(math.inf, zero.arg))
      return f"{a[0]} * {inf if dt.count == 1 else f'{self.reg(dt)}({inf})'}"
    if u.op is Ops.FDIV and _zero(u.src[0]):
      # 0.0 / x: lavapipe folds it to 0 (IEEE: NaN for x 0 or NaN), so the 0 comes from run time
      return f"{self.unknowable(dt, a[0])} / {self.unknowable(dt, a[1])}"
    if u.op is Ops.FDIV and not _constant(u.src[1]):
      # the numerator opaque too: one the compiler proves 0 by its own algebra (fused attention's
      # accumulators of exp2(-inf) under a constant all-False mask) had 0 / 0 folded to 0
      top = a[0] if _constant(u.src[0]) else self.unknowable(dt, a[0])
      return f"{top} / {self.unknowable(dt, a[1])}"
    if u.op is Ops.CMPNE and dt.is_float():
      return f"!({a[0]} == {a[1]})"
    if u.op in (Ops.SHL, Ops.SHR) and not dt.is_unsigned():
      return f"{a[0]} {INFIX[u.op]} bitcast<{self.reg(dtypes.uint32.vec(dt.count))}>({a[1]})"
    return f"{a[0]} {INFIX[u.op]} {a[1]}"

  def zero_result(self, u: UOp, a: list[str]) -> str | None:
    """x - x, x + -x, x * 0.0 and fma(x, 0.0, y) from the bits of x, or None for other ALU.
    Shader compilers may assume no inf/NaN and fold these to 0 (IEEE: NaN for x inf or NaN), then
    a division by that known 0 to garbage; a select on the bits of x is exact, and opaque."""
    s = u.src
    if u.op is Ops.SUB and s[0] is s[1] or u.op is Ops.ADD and _negation(s[0], s[1]):
      return self.zero_of(u.dtype, a[0], sign=None)
    if u.op is Ops.ADD or u.op is Ops.SUB:
      return None
    for x, zero in ((0, 1), (1, 0)):
      if _zero(s[zero]):
        z = s[zero] if s[zero].op is Ops.CONST else s[zero].src[0]
        product = self.zero_of(u.dtype, a[x], sign=math.copysign(1.0, z.arg) < 0)
        return product if u.op is Ops.MUL else f"({product}) + {a[2]}"
    return None

  def unknowable(self, dt: DType, x: str) -> str:
    """x, as bits OR'd with (num_workgroups.x == 0), always 0: a divisor the shader compiler
    cannot prove 0 by its own algebra (e.g. (y + 1.0) - y - 1.0), whose division it then leaves
    undefined (on lavapipe the output went unwritten)."""
    self.opaque = True
    n = dt.count
    f32, u32 = self.reg(dtypes.float32.vec(n)), self.reg(dtypes.uint32.vec(n))
    never = "u32(kg_nwg.x == 0u)" if n == 1 else f"{u32}(u32(kg_nwg.x == 0u))"
    value = f"bitcast<{f32}>(bitcast<{u32}>({x if self.reg(dt) == f32 else f'{f32}({x})'}) | {never})"
    return value if self.reg(dt) == f32 else f"{self.reg(dt)}({value})"

  def zero_of(self, dt: DType, x: str, sign: bool | None) -> str:
    """NaN where x is inf or NaN, else +0.0 (sign None) or x's sign (flipped when `sign`)."""
    n = dt.count
    f32, u32 = self.reg(dtypes.float32.vec(n)), self.reg(dtypes.uint32.vec(n))
    word = (lambda v: v) if n == 1 else (lambda v: f"{u32}({v})")
    bits = f"bitcast<{u32}>({x if self.reg(dt) == f32 else f'{f32}({x})'})"
    zero = word("0u") if sign is None else f"({bits} & {word('0x80000000u')})"
    if sign:
      zero = f"({zero} ^ {word('0x80000000u')})"
    special = f"({bits} & {word('0x7f800000u')}) == {word('0x7f800000u')}"
    value = f"bitcast<{f32}>(select({zero}, {word('0x7fc00000u')}, {special}))"
    return value if self.reg(dt) == f32 else f"{self.reg(dt)}({value})"

  def bool_alu(self, op: Ops, a: list[str]) -> str:
    if op is Ops.NOT:
      return f"!{a[0]}"
    if op is Ops.CMPLT:
      return f"(!{a[0]}) & {a[1]}"
    if op not in BOOL_INFIX:
      raise UnsupportedError(f"{op.name} on bool has no WGSL form: cast to an integer first",
                             target=TARGET, dtype=dtypes.bool)
    return f"{a[0]} {BOOL_INFIX[op]} {a[1]}"

  def unary(self, op: Ops, dt: DType, x: str) -> str:
    if op is Ops.NOT:
      return f"~{x}"
    if op is Ops.NEG:
      return f"{self.reg(dt)}() - {x}" if dt.is_unsigned() else f"-{x}"
    if op is Ops.RECIP:
      return f"{self.reg(dt)}(1) / {self.unknowable(dt, x) if dt.is_float() else x}"
    if op is Ops.EXP2:
      return self.exp2(dt, x)
    if dt.scalar == dtypes.float16 and self.opts.f16 and op in GroupOp.Transcendental:
      f32 = self.reg(dtypes.float32.vec(dt.count))
      return f"{self.reg(dt)}({CALL[op]}({f32}({x})))"
    return f"{CALL[op]}({x})"

  def exp2(self, dt: DType, x: str) -> str:
    """exp2 through kg_exp2: Mesa fuses exp2(y * log2(x)) into its own pow, which gives 0 for
    0 ** -1 and for NaN; the helper returns the IEEE results for those arguments itself (from the
    argument, never from a constant inf the driver could fold)."""
    f32 = self.reg(dtypes.float32.vec(dt.count))
    value = self.lanewise(self.need("kg_exp2"), dt, [x if self.reg(dt) == f32 else f"{f32}({x})"])
    return value if self.reg(dt) == f32 else f"{self.reg(dt)}({value})"

  def bounded_exp2(self, bound: str, dt: DType, x: str) -> str:
    """exp2 of an argument never above 0 (EXP2_BOUNDS): no overflow to handle, and NaN kept by
    one compare (kg_exp2_nonpositive) unless its result is unread. -inf and arguments far below
    -126 go to exp2 itself, which gives 0 (or a denormal) there: IEEE 754, and probed in
    Chromium on SwiftShader (0 from -126.5 down, 0 at -inf) and lavapipe (denormals to -149, 0
    from -150 and at -inf). Holding the argument at -150 with max() instead cost 4 ms of 26 in
    softmax on SwiftShader (render/wgsl/adapters.py has the measurements). !(t == t) is true
    for a NaN computed at run time on both (probed: SwiftShader, and lavapipe through ANGLE)."""
    f32 = self.reg(dtypes.float32.vec(dt.count))
    t = x if self.reg(dt) == f32 else f"{f32}({x})"
    if bound == EXP2_NAN_UNREAD:
      value = f"exp2({t})"
    else:
      value = self.lanewise(self.need("kg_exp2_nonpositive"), dt, [t])
    return value if self.reg(dt) == f32 else f"{self.reg(dt)}({value})"

  def subgroup_reduce(self, u: UOp, x: str) -> str:
    """The subgroup builtin; float max/min give NaN when any lane has one, as MAX/MIN do."""
    call = f"{SUBGROUP_CALL[u.arg]}({x})"
    if u.arg in (Ops.MAX, Ops.MIN) and u.dtype.is_float():
      return f"select({call}, subgroupAdd({x}), subgroupAny({self.isnan(x, u.dtype)}))"
    return call

  def narrow_result(self, u: UOp, text: str) -> str:
    """Wrap 8/16-bit integer results to their width; round f16 results computed in f32."""
    dt = u.dtype.scalar
    if dt.itemsize >= 4:      # 32-bit results need neither
      return text
    op = u.arg if u.op is Ops.SUBGROUP_REDUCE else u.op
    if dt.kind in "iu" and op in WRAPPING:
      return f"extractBits({text}, 0u, {dt.bits}u)"
    if dt is not dtypes.float16 or op not in ROUNDING:
      return text
    if not self.opts.f16:
      return self.lanewise(self.need("kg_round_f16"), u.dtype, [text])
    return text


# integer ops WGSL writes as infix operators with no special case (shifts have one: alu)
_INT_INFIX = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.CMPLT, Ops.CMPEQ,
                        Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR})


def _negation(a: UOp, b: UOp) -> bool:
  return b.op is Ops.NEG and b.src[0] is a or a.op is Ops.NEG and a.src[0] is b


def _constant(u: UOp) -> bool:
  """A constant, a vector of constants, or a lane of one."""
  u = u.src[0] if u.op is Ops.GEP else u
  return u.op is Ops.CONST or u.op is Ops.VECTORIZE and all(x.op is Ops.CONST for x in u.src)


def _zero(u: UOp) -> bool:
  """A constant 0.0 (either sign), or a vector of one such constant in every lane."""
  if u.op is Ops.VECTORIZE and all(x is u.src[0] for x in u.src):
    u = u.src[0]
  return u.op is Ops.CONST and u.arg == 0
