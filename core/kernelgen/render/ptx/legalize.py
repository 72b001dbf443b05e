"""PTX legalize: this target's rewrite rules, run on the kernel graph before it is linearized
(what they do: ptx.py's module doc).
"""
from __future__ import annotations

from ...dtype import DType, dtypes, truncate
from ...errors import UnsupportedError
from ...uop.ops import GroupOp, Ops, UOp, describe
from ...uop.pattern import PatternMatcher, UPat, graph_rewrite
from ...rules.transcendental import FLOAT32, FLOAT64
from .target import HALF_NATIVE, ISA_VERSION, MMA_SHAPES, parse_arch

class _Arch:
  def __init__(self, sm: int, fast_math: bool = False):
    self.sm, self.fast_math = sm, fast_math


def _like(dt: DType, scalar: DType) -> DType:
  return scalar.vec(dt.count)


def _operand_dtype(x: UOp) -> DType:
  return x.src[1].dtype if x.op is Ops.WHERE else x.src[0].dtype


def _compute_as(x: UOp, wide: DType) -> UOp:
  """The ALU node `x` computed on its operands cast to `wide`, the result cast back."""
  srcs = [s if s.dtype.scalar == dtypes.bool else s.cast(_like(s.dtype, wide)) for s in x.src]
  out = UOp(x.op, x.dtype if x.op in GroupOp.Comparison else _like(x.dtype, wide), tuple(srcs))
  return out.cast(x.dtype)


def _half_in_f32(ctx: _Arch, x: UOp):
  operand = _operand_dtype(x).scalar
  if operand not in (dtypes.float16, dtypes.bfloat16) or x.op is Ops.WHERE:
    return None
  if HALF_NATIVE.get((operand.name, x.op), 1 << 30) <= ctx.sm:
    return None
  return _compute_as(x, dtypes.float32)


# ops whose low 8 bits depend only on their operands' low 8 bits (arithmetic mod 2**n)
_WRAPPING = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR})


def _bytes_in_16bit(x: UOp):
  operand = _operand_dtype(x).scalar
  if operand not in (dtypes.int8, dtypes.uint8) or x.op is Ops.WHERE:
    return None
  wide = dtypes.int16 if operand == dtypes.int8 else dtypes.uint16
  if x.op in _WRAPPING:    # an operand that is a 16-bit value truncated to 8 bits: those 16
    src = tuple(_unwrapped(s, wide) for s in x.src)   # bits (x's own result is truncated)
    if src != x.src:
      return UOp(x.op, _like(x.dtype, wide), src).cast(x.dtype)
  return _compute_as(x, wide)


def _unwrapped(s: UOp, wide: DType) -> UOp:
  """`s` as a `wide` operand of a wrapping op: the 16-bit value `s` truncates, else s cast."""
  if s.op is Ops.CAST and s.src[0].dtype == _like(s.dtype, wide):
    return s.src[0]
  return s.cast(_like(s.dtype, wide))


def _f64_transcendental(x: UOp):
  return FLOAT64[x.op](x.src[0]) if x.src[0].dtype.scalar == dtypes.float64 else None


def _f32_transcendental(ctx: _Arch, x: UOp):
  if ctx.fast_math or x.src[0].dtype.scalar != dtypes.float32:
    return None
  return FLOAT32[x.op](x.src[0])


def _bf16_to_f32(x: UOp, y: UOp):
  bits = y.bitcast(_like(y.dtype, dtypes.uint16)).cast(_like(y.dtype, dtypes.uint32))
  return (bits << 16).bitcast(x.dtype)


def _f32_to_bf16_bits(ctx: _Arch, x: UOp, y: UOp):
  """f32 -> bf16 rounding to nearest even on the bits, for archs without cvt.rn.bf16.f32."""
  if ctx.sm >= 80:
    return None
  u32 = _like(y.dtype, dtypes.uint32)
  bits = y.bitcast(u32)
  rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
  quiet_nan = (bits >> 16) | 0x40
  chosen = y.ne(y).where(quiet_nan, rounded)
  return chosen.cast(_like(y.dtype, dtypes.uint16)).bitcast(x.dtype)


def _through_f32(x: UOp, y: UOp):
  return y.cast(_like(y.dtype, dtypes.float32)).cast(x.dtype)


def _check_wmma(ctx: _Arch, x: UOp):
  name, (m, n, k), dtype_in, dtype_acc = x.arg
  dtype_in = dtypes.from_name(getattr(dtype_in, "name", dtype_in))
  key = (m, n, k, dtype_in.name)
  if key not in MMA_SHAPES or getattr(dtype_acc, "name", dtype_acc) != "float32":
    shapes = ", ".join(f"m{a}n{b}k{c} {d}" for a, b, c, d in MMA_SHAPES)
    raise UnsupportedError(f"PTX renders no tensor-core shape m{m}n{n}k{k} {dtype_in} -> "
                           f"{dtype_acc}: use one of {shapes} (accumulating in float32)\n"
                           f"{describe(x)}", target="ptx", dtype=dtype_in)
  oldest = MMA_SHAPES[key][0]
  if ctx.sm < oldest:
    archs = ", ".join(f"sm_{s}" for s in ISA_VERSION if s >= oldest)
    raise UnsupportedError(f"tensor-core shape m{m}n{n}k{k} {dtype_in} -> {dtype_acc} needs sm_{oldest}"
                           f" or newer (supported on {archs}); this kernel targets sm_{ctx.sm}: "
                           f"compile for a newer arch or use m16n8k8 float16, which sm_75 has",
                           target="ptx", dtype=dtype_in)
  return None


# dtypes SUBGROUP_REDUCE takes (a warp shuffle moves 32 bits)
SHUFFLE_DTYPES = frozenset({"float32", "int32", "uint32"})


def _check_shuffle(x: UOp):
  if x.dtype.name not in SHUFFLE_DTYPES:
    raise UnsupportedError(f"PTX subgroup (warp) reductions take "
                           f"{', '.join(sorted(SHUFFLE_DTYPES))}, not {x.dtype}: lower this "
                           f"kernel without subgroups\n{describe(x)}", target="ptx",
                           dtype=x.dtype)
  return None


def _no_quad_broadcast(x: UOp):
  raise UnsupportedError(f"PTX renders no quad broadcast (the PTX simulator has no shfl.sync.idx "
                         f"to check it on): compile for PTX without option quad_weights\n"
                         f"{describe(x)}", target="ptx")


def _fold_cast(x: UOp, c: UOp):
  return UOp.const(x.dtype, truncate(c.arg, x.dtype)) if x.dtype.count == 1 else None


_HALF = (dtypes.float16, dtypes.bfloat16)
_BYTES = (dtypes.int8, dtypes.uint8)
_BOOL = UPat.var("a", dtypes.bool)
# ALU ops whose operands have the result's dtype (the rules below match on its scalar, so the rule
# index skips them for every other dtype; WHERE is left alone, comparisons match on operands)
_SAME_TYPE_ALU = GroupOp.ALU - GroupOp.Comparison - {Ops.WHERE}

legalize_rules = PatternMatcher([
  # warp reduction of a dtype a shuffle cannot move -> UnsupportedError
  (UPat(Ops.SUBGROUP_REDUCE, name="x"), _check_shuffle),
  # quad broadcast (shfl.sync.idx, which the simulator lacks) -> UnsupportedError
  (UPat(Ops.QUAD_BROADCAST, name="x"), _no_quad_broadcast),
  # cast of a constant -> the converted constant (IR CAST semantics, dtype.truncate)
  (UPat(Ops.CAST, src=(UPat.cvar("c"),), name="x"), _fold_cast),
  # half op the arch has no instruction for -> the op in f32, rounded back
  (UPat(_SAME_TYPE_ALU, name="x", scalar=_HALF), _half_in_f32),
  (UPat(GroupOp.Comparison, name="x", src=(UPat(scalar=_HALF), UPat())), _half_in_f32),
  # int8/uint8 op -> the op on 16-bit values, wrapped back to 8 bits
  (UPat(_SAME_TYPE_ALU, name="x", scalar=_BYTES), _bytes_in_16bit),
  (UPat(GroupOp.Comparison, name="x", src=(UPat(scalar=_BYTES), UPat())), _bytes_in_16bit),
  # f64 exp2/log2/sin/cos -> range reduction and polynomial in f64 (PTX has only f32
  # approximations)
  (UPat((Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS), name="x"), _f64_transcendental),
  # f32 sin/cos -> range reduction and polynomial in f32 (sin/cos.approx.f32 are 2**-20.9
  # absolute only within 100 pi), unless fast_math
  (UPat((Ops.SIN, Ops.COS), name="x"), _f32_transcendental),
  # bool where(c, a, b) -> (c and a) or (not c and b)
  (UPat(Ops.WHERE, src=(UPat.var("c"), _BOOL, UPat.var("b")), name="x"),
   lambda x, c, a, b: (c & a) | (~c & b)),
  # bool a != b -> a xor b
  (UPat(Ops.CMPNE, src=(_BOOL, UPat.var("b"))), lambda a, b: a ^ b),
  # bool a == b -> not (a xor b)
  (UPat(Ops.CMPEQ, src=(_BOOL, UPat.var("b"))), lambda a, b: ~(a ^ b)),
  # bool a < b -> (not a) and b
  (UPat(Ops.CMPLT, src=(_BOOL, UPat.var("b"))), lambda a, b: ~a & b),
  # bool max -> or; bool min -> and
  (UPat(Ops.MAX, src=(_BOOL, UPat.var("b"))), lambda a, b: a | b),
  (UPat(Ops.MIN, src=(_BOOL, UPat.var("b"))), lambda a, b: a & b),
  # bf16 -> f32: the bf16 bits become the high half of the f32
  (UPat(Ops.CAST, dtype=dtypes.float32, src=(UPat.var("y", dtypes.bfloat16),), name="x"),
   _bf16_to_f32),
  # f32 -> bf16 on sm_75: round to nearest even on the bits
  (UPat(Ops.CAST, dtype=dtypes.bfloat16, src=(UPat.var("y", dtypes.float32),), name="x"),
   _f32_to_bf16_bits),
  # bf16 <-> anything but f32, and half -> bool: through f32
  (UPat(Ops.CAST, src=(UPat.var("y", dtypes.bfloat16),), name="x",
        custom=lambda x: x.dtype.scalar != dtypes.float32), _through_f32),
  (UPat(Ops.CAST, dtype=dtypes.bfloat16, name="x",
        src=(UPat(name="y", custom=lambda y: y.dtype.scalar != dtypes.float32),)), _through_f32),
  (UPat(Ops.CAST, dtype=dtypes.bool, src=(UPat.var("y", _HALF),), name="x"), _through_f32),
  # tensor-core shape the arch lacks -> UnsupportedError naming the archs that have it
  (UPat(Ops.WMMA, name="x"), _check_wmma),
])


def _vector_rules(rules: PatternMatcher) -> PatternMatcher:
  """The dtype-matched rules also for vectors of those dtypes (a vector matches its own dtype)."""
  extra = []
  for pat, fn in rules.rules:
    if pat.dtypes is None and not any(p.dtypes for p in (pat.src or ()) if isinstance(p, UPat)):
      continue
    extra.append((_vectorized(pat), fn))
  return PatternMatcher(rules.rules + extra)


def _vectorized(pat: UPat) -> UPat:
  dts = None if pat.dtypes is None else {d.vec(n) for d in pat.dtypes for n in (2, 3, 4, 8)}
  src = pat.src if not isinstance(pat.src, tuple) else tuple(_vectorized(s) for s in pat.src)
  return UPat(pat.ops, dts, src, pat.arg, pat.name, pat.allow_any_len, pat.custom, pat.scalars)


legalize_rules = _vector_rules(legalize_rules)


def legalize(sink: UOp, arch: str = "sm_80", **options) -> UOp:
  """The kernel graph rewritten into what ptx.py can render for `arch` (see its module doc)."""
  return graph_rewrite(sink, legalize_rules,
                       ctx=_Arch(parse_arch(arch), bool(options.get("fast_math", False))))
