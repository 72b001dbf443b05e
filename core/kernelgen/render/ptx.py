"""The PTX renderer: a linearized kernel -> PTX text for one NVIDIA arch (sm_75 .. sm_121).

Two steps, as every renderer (compiler.py):

- `legalize(sink, arch)`: this target's own rewrite rules, run on the kernel graph before it is
  linearized. Half-precision ops the arch has no instruction for are computed in float32 and
  rounded back; int8/uint8 arithmetic is done on 16-bit values (PTX has no 8-bit registers, so
  8-bit values live sign/zero-extended in 16-bit registers); bool logic is reduced to and/or/xor/not
  on predicates; bfloat16 conversions go through float32; tensor-core shapes are checked against
  the arch, with an UnsupportedError naming the archs that have the shape, before any source exists.
- `render(kernel, arch)`: one pass over the linearized list. Every value gets fresh typed
  registers (SSA style; vectors are a list of scalar registers), constants are immediates (f16,
  bf16 and bool constants are moved into registers first), loops are labels and branches.

Every instruction form this file can emit is listed in PTX-SUBSET.md (the PTX simulator implements
exactly that list). Float add/sub/mul are written with `.rn` so ptxas never contracts them into
fma: results match numpy's separately rounded operations.
"""
from __future__ import annotations

import hashlib
import re
import struct

from ..dtype import DType, PtrDType, dtypes, truncate
from ..errors import LimitError, UnsupportedError
from ..ops import GroupOp, Ops, UOp, describe
from ..pattern import PatternMatcher, UPat, graph_rewrite
from ..program import Binding, CompiledKernel, Kernel, Launch
from ..rules.ranges import divisible
from ..rules.transcendental import FLOAT32, FLOAT64

# ---- target facts ------------------------------------------------------------------------------

# sm number -> the PTX ISA version written in `.version` (the lowest both the arch and our
# instruction set need; ptxas 12.9 accepts <= 8.8, so sm_75..sm_90 stay at 7.8)
ISA_VERSION = {75: (7, 8), 80: (7, 8), 86: (7, 8), 87: (7, 8), 89: (7, 8), 90: (7, 8),
               100: (8, 6), 101: (8, 6), 103: (8, 8), 120: (8, 7), 121: (8, 8)}

# dtype name -> (register declaration type, register name prefix)
REGISTER = {"bool": ("pred", "%p"), "int8": ("b16", "%rs"), "uint8": ("b16", "%rs"),
            "int16": ("b16", "%rs"), "uint16": ("b16", "%rs"), "float16": ("b16", "%h"),
            "bfloat16": ("b16", "%h"), "int32": ("b32", "%r"), "uint32": ("b32", "%r"),
            "float32": ("f32", "%f"), "int64": ("b64", "%rd"), "uint64": ("b64", "%rd"),
            "float64": ("f64", "%fd")}

# dtype name -> the instruction type suffix
PTX_TYPE = {"bool": "pred", "int8": "s8", "uint8": "u8", "int16": "s16", "uint16": "u16",
            "int32": "s32", "uint32": "u32", "int64": "s64", "uint64": "u64", "float16": "f16",
            "bfloat16": "bf16", "float32": "f32", "float64": "f64"}

# dtype name -> the type ld/st use in memory (bool is one byte; halfs move as raw bits)
MEMORY_TYPE = {**PTX_TYPE, "bool": "u8", "float16": "b16", "bfloat16": "b16"}

# 8-bit ints compute in the 16-bit type of their register
COMPUTE_TYPE = {**PTX_TYPE, "int8": "s16", "uint8": "u16"}

BIT_TYPE = {1: "b16", 2: "b16", 4: "b32", 8: "b64"}   # itemsize -> untyped bits (8-bit in 16)
SIGNED_TYPE = {"u16": "s16", "u32": "s32", "u64": "s64"}  # neg has no unsigned form

# half-precision (dtype, op) -> the oldest sm with a native instruction; others compute in f32
HALF_NATIVE = {("float16", Ops.ADD): 53, ("float16", Ops.SUB): 53, ("float16", Ops.MUL): 53,
               ("float16", Ops.MULACC): 53, ("float16", Ops.NEG): 53,
               ("float16", Ops.CMPLT): 53, ("float16", Ops.CMPEQ): 53, ("float16", Ops.CMPNE): 53,
               ("bfloat16", Ops.ADD): 90, ("bfloat16", Ops.SUB): 90, ("bfloat16", Ops.MUL): 90,
               ("bfloat16", Ops.MULACC): 80, ("bfloat16", Ops.NEG): 80,
               ("bfloat16", Ops.CMPLT): 90, ("bfloat16", Ops.CMPEQ): 90,
               ("bfloat16", Ops.CMPNE): 90}

# tensor-core (M, N, K, input dtype) -> (oldest sm, PTX input type, 32-bit regs for a, b)
MMA_SHAPES = {(16, 8, 16, "float16"): (80, "f16", 4, 2), (16, 8, 16, "bfloat16"): (80, "bf16", 4, 2),
              (16, 8, 8, "float16"): (75, "f16", 2, 1), (16, 8, 8, "bfloat16"): (80, "bf16", 2, 1),
              (16, 8, 8, "float32"): (80, "tf32", 4, 2)}

MAX_THREADS = 1024          # threads per block on every supported arch
MAX_GRID_YZ = 65535         # blocks per grid in y and z (x allows 2**31 - 1)


def parse_arch(arch: str) -> int:
  """The sm number of an arch name ('sm_80' or '80'); UnsupportedError for unknown archs."""
  match = re.fullmatch(r"(?:sm_)?(\d+)", str(arch))
  if match is None or int(match.group(1)) not in ISA_VERSION:
    known = ", ".join(f"sm_{n}" for n in ISA_VERSION)
    raise UnsupportedError(f"unknown PTX arch {arch!r}: use one of {known}", target="ptx")
  return int(match.group(1))


def isa_version(arch: str) -> str:
  """The `.version` for an arch, e.g. '7.8' for sm_80 and '8.7' for sm_120."""
  major, minor = ISA_VERSION[parse_arch(arch)]
  return f"{major}.{minor}"


# ---- legalize: this target's rewrite rules -----------------------------------------------------

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


def _bytes_in_16bit(x: UOp):
  operand = _operand_dtype(x).scalar
  if operand not in (dtypes.int8, dtypes.uint8) or x.op is Ops.WHERE:
    return None
  return _compute_as(x, dtypes.int16 if operand == dtypes.int8 else dtypes.uint16)


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


def _fold_cast(x: UOp, c: UOp):
  return UOp.const(x.dtype, truncate(c.arg, x.dtype)) if x.dtype.count == 1 else None


_HALF = (dtypes.float16, dtypes.bfloat16)
_BYTES = (dtypes.int8, dtypes.uint8)
_BOOL = UPat.var("a", dtypes.bool)
# ALU ops whose operands have the result's dtype (the rules below match on its scalar, so the rule
# index skips them for every other dtype; WHERE is left alone, comparisons match on operands)
_SAME_TYPE_ALU = GroupOp.ALU - GroupOp.Comparison - {Ops.WHERE}

legalize_rules = PatternMatcher([
  # cast of a constant -> the converted constant (IR CAST semantics, dtype.truncate)
  (UPat(Ops.CAST, src=(UPat.cvar("c"),), name="x"), _fold_cast),
  # half op the arch has no instruction for -> the op in f32, rounded back
  (UPat(_SAME_TYPE_ALU, name="x", scalar=_HALF), _half_in_f32),
  (UPat(GroupOp.Comparison, name="x", src=(UPat(scalar=_HALF), UPat())), _half_in_f32),
  # int8/uint8 op -> the op on 16-bit values, wrapped back to 8 bits
  (UPat(_SAME_TYPE_ALU, name="x", scalar=_BYTES), _bytes_in_16bit),
  (UPat(GroupOp.Comparison, name="x", src=(UPat(scalar=_BYTES), UPat())), _bytes_in_16bit),
  # f64 exp2/log2/sin -> range reduction and polynomial in f64 (PTX has only f32 approximations)
  (UPat((Ops.EXP2, Ops.LOG2, Ops.SIN), name="x"), _f64_transcendental),
  # f32 sin -> range reduction and polynomial in f32 (sin.approx.f32 is 2**-20.9 absolute only
  # within 100 pi), unless fast_math
  (UPat(Ops.SIN, name="x"), _f32_transcendental),
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


# dtypes SUBGROUP_REDUCE takes (a warp shuffle moves 32 bits)
SHUFFLE_DTYPES = frozenset({"float32", "int32", "uint32"})


def legalize(sink: UOp, arch: str = "sm_80", **options) -> UOp:
  """The kernel graph rewritten into what this file can render for `arch` (see module doc)."""
  for u in sink.toposort():
    if u.op is Ops.SUBGROUP_REDUCE and u.dtype.name not in SHUFFLE_DTYPES:
      raise UnsupportedError(f"PTX subgroup (warp) reductions take "
                             f"{', '.join(sorted(SHUFFLE_DTYPES))}, not {u.dtype}: lower this "
                             f"kernel without subgroups\n{describe(u)}", target="ptx",
                             dtype=u.dtype)
  return graph_rewrite(sink, legalize_rules,
                       ctx=_Arch(parse_arch(arch), bool(options.get("fast_math", False))))


# ---- constants -----------------------------------------------------------------------------

def _immediate(value, dt: DType) -> str | None:
  """`value` as a PTX immediate operand of dtype `dt`; None where PTX has no immediate form."""
  name = dt.scalar.name
  if name == "float32":
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", value))[0]
  if name == "float64":
    return "0d%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]
  if dt.is_int():
    return str(int(value))
  return None


def _half_bits(value, dt: DType) -> str:
  from ..dtype import to_bits
  return "0x%04X" % to_bits(value, dt.scalar)


# ---- names ---------------------------------------------------------------------------------

def ptx_identifier(name: str, prefix: str = "k_") -> str:
  """A valid, readable PTX identifier for any text; a changed name gets a short hash suffix so
  two different names never collide."""
  clean = re.sub(r"[^A-Za-z0-9_]", "_", name) or "kernel"
  if not clean[0].isalpha():
    clean = prefix + clean
  if clean != name:
    clean += "_" + hashlib.sha1(name.encode()).hexdigest()[:6]
  return clean


# ---- the writer ----------------------------------------------------------------------------

def _base_buffer(buf: UOp) -> UOp:
  while buf.op is Ops.AFTER:
    buf = buf.src[0]
  return buf


# value ops that may read an accumulator through a node legalize made (a conversion, an op in a
# wider type); the linearizer places such a node by its sources, so possibly before the loop
_DEFERRABLE = frozenset({Ops.CAST, Ops.BITCAST, Ops.GEP, Ops.VECTORIZE}) | GroupOp.ALU


def _reads_accumulator(u: UOp, deferred: set) -> bool:
  """A value computed from an accumulator's current value. Placed before the accumulator's loop
  it would see only the initial value (int8 max reduced with cvt.s16.s8 of the initial value),
  so it is rendered where it is used instead (_Writer.materialize)."""
  return u.op in _DEFERRABLE and any(s.op is Ops.DEFINE_ACC or s in deferred for s in u.src)


class _Writer:
  """Renders one Kernel: registers, operands, and the instruction lines."""

  def __init__(self, kernel: Kernel, sm: int):
    self.kernel, self.sm = kernel, sm
    self.lanes: dict[UOp, list[str]] = {}    # value node -> one operand string per lane
    self.counts: dict[str, int] = {}         # register prefix -> registers used
    self.decl: dict[str, str] = {}           # register prefix -> declaration type
    self.prologue: list[str] = []
    self.body: list[str] = []
    self.shared: list[str] = []
    self.consts: dict[tuple, str] = {}
    self.labels: dict[UOp, str] = {}
    self.grid = _folded_grid(kernel.global_size)
    self.deferred: set[UOp] = set()          # conversions of accumulators, rendered at each use

  # ---- registers and operands ----
  def new_reg(self, dt: DType) -> str:
    kind, prefix = REGISTER[dt.scalar.name]
    n = self.counts.get(prefix, 0)
    self.counts[prefix], self.decl[prefix] = n + 1, kind
    return f"{prefix}{n}"

  def emit(self, line: str) -> None:
    self.body.append("\t" + line + ";")

  def operand(self, u: UOp, lane: int = 0) -> str:
    if u not in self.lanes:
      raise UnsupportedError(f"the PTX renderer reached a value before its definition (the "
                             f"kernel is not linearized?)\n{describe(u)}", target="ptx")
    return self.lanes[u][lane]

  def reg(self, u: UOp, lane: int = 0) -> str:
    """The operand as a register (an immediate is moved into one, once, in the prologue)."""
    text = self.operand(u, lane)
    if text.startswith("%"):
      return text
    return self.const_reg(text, u.dtype.scalar)

  def const_reg(self, text: str, dt: DType) -> str:
    key = (text, REGISTER[dt.name][0])
    if key not in self.consts:
      reg = self.new_reg(dt)
      kind = REGISTER[dt.name][0]
      self.prologue.append(f"\tmov.{kind} {reg}, {text};")
      self.consts[key] = reg
    return self.consts[key]

  def label(self, u: UOp, kind: str) -> str:
    if u not in self.labels:
      self.labels[u] = f"$L{kind}_{len(self.labels)}"
    return self.labels[u]

  # ---- the whole kernel ----
  def render(self) -> str:
    for u in self.kernel.uops:
      handler = _HANDLERS.get(u.op)
      if handler is None:
        raise UnsupportedError(f"the PTX renderer has no rule for {u.op.name}; this op should "
                               f"have been rewritten before rendering\n{describe(u)}", target="ptx")
      if u.op in _DEFERRABLE and _reads_accumulator(u, self.deferred):
        self.deferred.add(u)
        continue
      if self.deferred:
        self.materialize(u)
      handler(self, u)
    return self.source()

  def materialize(self, u: UOp, done: set | None = None) -> None:
    """Renders the deferred values `u` reads (once each for this `u`), here, where it reads them."""
    done = set() if done is None else done
    for s in u.src:
      if s in self.deferred and s not in done:
        done.add(s)
        self.materialize(s, done)
        _HANDLERS[s.op](self, s)

  def source(self) -> str:
    k, name = self.kernel, ptx_identifier(self.kernel.name)
    params = [f"\t.param .u64 {_param_name(b.slot)}" for b in k.buffers]
    params += [f"\t.param .s32 {_var_name(v)}" for v in k.vars]
    regs = [f"\t.reg .{self.decl[p]} {p}<{n}>;" for p, n in sorted(self.counts.items())]
    lx, ly, lz = k.local_size
    head = [f"// kernelgen: kernel {ascii(k.name)} for sm_{self.sm}",
            f".version {'.'.join(map(str, ISA_VERSION[self.sm]))}", f".target sm_{self.sm}",
            ".address_size 64", "", f".visible .entry {name}(", ",\n".join(params), ")",
            f".maxntid {lx}, {ly}, {lz}", "{"]
    return "\n".join(head + regs + self.shared + self.prologue + self.body + ["\tret;", "}", ""])


def _param_name(slot: int) -> str:
  return f"data{slot}"


def _var_name(v: UOp) -> str:
  return "var_" + ptx_identifier(str(v.arg[0]), prefix="v_")


def _folded_grid(grid: tuple[int, int, int]) -> tuple[int, int, int] | None:
  """The 1-D grid used when y or z exceed CUDA's 65535 blocks; None when no folding is needed."""
  gx, gy, gz = grid
  if gy <= MAX_GRID_YZ and gz <= MAX_GRID_YZ:
    return None
  if gx * gy * gz >= 1 << 31:
    raise LimitError(f"a grid of {grid} blocks exceeds CUDA's 2**31 - 1 blocks: use bigger "
                     f"workgroups (local size) or split the kernel")
  return (gx * gy * gz, 1, 1)


# ---- definitions ---------------------------------------------------------------------------

def _param(w: _Writer, u: UOp) -> None:
  reg = w.new_reg(dtypes.uint64)
  w.emit(f"ld.param.u64 {reg}, [{_param_name(u.arg)}]")
  w.emit(f"cvta.to.global.u64 {reg}, {reg}")
  w.lanes[u] = [reg]


def _var(w: _Writer, u: UOp) -> None:
  reg = w.new_reg(dtypes.int32)
  w.emit(f"ld.param.s32 {reg}, [{_var_name(u)}]")
  w.lanes[u] = [reg]


def _define_local(w: _Writer, u: UOp) -> None:
  base = u.dtype.base
  nbytes = max(u.dtype.size, 1) * base.itemsize * base.count
  w.shared.append(f"\t.shared .align 16 .b8 smem{u.arg}[{nbytes}];")
  reg = w.new_reg(dtypes.uint64)
  w.emit(f"mov.u64 {reg}, smem{u.arg}")
  w.lanes[u] = [reg]


def _special(w: _Writer, u: UOp) -> None:
  kind, dim, _ = u.arg
  reg = w.new_reg(dtypes.int32)
  if kind == "sglane":
    w.emit(f"mov.u32 {reg}, %laneid")
  elif kind == "lid" or w.grid is None:
    w.emit(f"mov.u32 {reg}, %{'tid' if kind == 'lid' else 'ctaid'}.{'xyz'[dim]}")
  else:
    gx, gy, _ = w.kernel.global_size
    w.emit(f"mov.u32 {reg}, %ctaid.x")
    if dim > 0:
      w.emit(f"div.u32 {reg}, {reg}, {gx if dim == 1 else gx * gy}")
    if dim < 2:
      w.emit(f"rem.u32 {reg}, {reg}, {gx if dim == 0 else gy}")
  w.lanes[u] = [reg]


def _const(w: _Writer, u: UOp) -> None:
  text = _immediate(u.arg, u.dtype)
  if text is not None:
    w.lanes[u] = [text]
  elif u.dtype == dtypes.bool:
    w.lanes[u] = [w.const_reg("1" if u.arg else "0", dtypes.bool)]
  else:
    w.lanes[u] = [w.const_reg(_half_bits(u.arg, u.dtype), u.dtype)]


# ---- accumulators, loops, blocks -----------------------------------------------------------

def _mov(w: _Writer, dt: DType, dst: str, src: str, pred: str = "") -> None:
  w.emit(f"{pred}mov.{REGISTER[dt.scalar.name][0]} {dst}, {src}")


def _define_acc(w: _Writer, u: UOp) -> None:
  regs = [w.new_reg(u.dtype) for _ in range(u.dtype.count)]
  for lane, reg in enumerate(regs):
    _mov(w, u.dtype, reg, w.operand(u.src[0], lane))
  w.lanes[u] = regs


def _assign(w: _Writer, u: UOp) -> None:
  acc, value = u.src
  for lane, reg in enumerate(w.lanes[acc]):
    _mov(w, acc.dtype, reg, w.operand(value, lane))
  w.lanes[u] = w.lanes[acc]


def _after(w: _Writer, u: UOp) -> None:
  w.lanes[u] = w.lanes[u.src[0]]


def _range(w: _Writer, u: UOp) -> None:
  counter, done = w.new_reg(dtypes.int32), w.new_reg(dtypes.bool)
  top = w.label(u, "loop")
  w.emit(f"mov.u32 {counter}, 0")
  w.body.append(f"{top}:")
  w.emit(f"setp.ge.s32 {done}, {counter}, {w.operand(u.src[0])}")
  w.emit(f"@{done} bra {top}_end")
  w.lanes[u] = [counter]


def _endrange(w: _Writer, u: UOp) -> None:
  rng = u.src[0]
  counter, top = w.lanes[rng][0], w.labels[rng]
  w.emit(f"add.s32 {counter}, {counter}, 1")
  w.emit(f"bra {top}")
  w.body.append(f"{top}_end:")


def _if(w: _Writer, u: UOp) -> None:
  w.emit(f"@!{w.reg(u.src[0])} bra {w.label(u, 'if')}_end")


def _endif(w: _Writer, u: UOp) -> None:
  w.body.append(f"{w.labels[u.src[0]]}_end:")


def _barrier(w: _Writer, u: UOp) -> None:
  w.emit("bar.sync 0")


def _nothing(w: _Writer, u: UOp) -> None:
  return None


def _vectorize(w: _Writer, u: UOp) -> None:
  w.lanes[u] = [w.operand(s) for s in u.src]


def _gep(w: _Writer, u: UOp) -> None:
  w.lanes[u] = [w.operand(u.src[0], u.arg)]


# ---- ALU -----------------------------------------------------------------------------------

# op -> (spelling for integers, for floats, for predicates): {t} the operand type, {b} its bits,
# {s} its signed type. Float max/min also get a NaN fix-up (_alu), selp takes (x, y, cond).
ALU_SPELLING = {
  Ops.ADD: ("add.{t}", "add.rn.{t}", None), Ops.SUB: ("sub.{t}", "sub.rn.{t}", None),
  Ops.MUL: ("mul.lo.{t}", "mul.rn.{t}", None), Ops.IDIV: ("div.{t}", None, None),
  Ops.MOD: ("rem.{t}", None, None), Ops.FDIV: (None, "div.rn.{t}", None),
  Ops.MAX: ("max.{t}", "max.{t}", None), Ops.MIN: ("min.{t}", "min.{t}", None),
  Ops.CMPLT: ("setp.lt.{t}", "setp.lt.{t}", None), Ops.CMPEQ: ("setp.eq.{t}", "setp.eq.{t}", None),
  Ops.CMPNE: ("setp.ne.{t}", "setp.neu.{t}", None),
  Ops.AND: ("and.{b}", None, "and.pred"), Ops.OR: ("or.{b}", None, "or.pred"),
  Ops.XOR: ("xor.{b}", None, "xor.pred"), Ops.NOT: ("not.{b}", None, "not.pred"),
  Ops.SHL: ("shl.{b}", None, None), Ops.SHR: ("shr.{t}", None, None),
  Ops.NEG: ("neg.{s}", "neg.{t}", None),
  Ops.EXP2: (None, "ex2.approx.{t}", None), Ops.LOG2: (None, "lg2.approx.{t}", None),
  Ops.SIN: (None, "sin.approx.{t}", None), Ops.SQRT: (None, "sqrt.rn.{t}", None),
  Ops.RECIP: (None, "rcp.rn.{t}", None), Ops.TRUNC: (None, "cvt.rzi.{t}.{t}", None),
  Ops.WHERE: ("selp.{b}", "selp.{b}", None), Ops.MULACC: ("mad.lo.{t}", "fma.rn.{t}", None),
}


def _spelling(op: Ops, dt: DType) -> str:
  got = _SPELLINGS.get((op, dt))
  return got if got is not None else _spell(op, dt)


def _spell(op: Ops, dt: DType) -> str:
  ints, floats, preds = ALU_SPELLING[op]
  form = preds if dt == dtypes.bool else floats if dt.is_float() else ints
  if form is None:
    raise UnsupportedError(f"PTX has no {op.name} for {dt}: cast the operands first",
                           target="ptx", dtype=dt)
  t = COMPUTE_TYPE[dt.name]
  return form.format(t=t, b=BIT_TYPE[dt.itemsize], s=SIGNED_TYPE.get(t, t))


def _spellings() -> dict:
  """(op, scalar dtype) -> opcode, for every pair PTX has (a table built once, at import)."""
  table = {}
  for op in ALU_SPELLING:
    for dt in dtypes.all:
      try:
        table[(op, dt)] = _spell(op, dt)
      except (UnsupportedError, KeyError):
        pass
  return table


_SPELLINGS = _spellings()


def _shift_amount(w: _Writer, u: UOp, lane: int) -> str:
  """PTX shifts take a u32 amount: 16- and 64-bit amounts are converted."""
  amount, dt = w.operand(u.src[1], lane), u.src[1].dtype.scalar
  if dt.itemsize == 4 or not amount.startswith("%"):
    return amount
  reg = w.new_reg(dtypes.uint32)
  w.emit(f"cvt.u32.{COMPUTE_TYPE[dt.name].replace('s', 'u')} {reg}, {amount}")
  return reg


def _alu(w: _Writer, u: UOp) -> None:
  dt = (u.src[1] if u.op is Ops.WHERE else u.src[0]).dtype.scalar
  opcode = _spelling(u.op, dt)
  regs = []
  for lane in range(u.dtype.count):
    args = [w.operand(s, lane) for s in u.src]
    if u.op is Ops.WHERE:
      args = [args[1], args[2], w.reg(u.src[0], lane)]
    elif u.op in (Ops.SHL, Ops.SHR):
      args[1] = _shift_amount(w, u, lane)
    reg = w.new_reg(u.dtype.scalar)
    w.emit(f"{opcode} {reg}, {', '.join(args)}")
    if u.op in (Ops.MAX, Ops.MIN) and dt.is_float():
      _nan_propagate(w, dt, reg, args)
    regs.append(reg)
  w.lanes[u] = regs


def _nan_propagate(w: _Writer, dt: DType, reg: str, args: list[str]) -> None:
  """PTX max/min return the non-NaN operand; numpy's maximum/minimum return NaN."""
  nan = w.new_reg(dtypes.bool)
  t = PTX_TYPE[dt.name]
  w.emit(f"setp.nan.{t} {nan}, {args[0]}, {args[1]}")
  w.emit(f"@{nan} add.rn.{t} {reg}, {args[0]}, {args[1]}")


# ---- conversions ---------------------------------------------------------------------------

_ONE = {"float32": "0f3F800000", "float64": "0d3FF0000000000000", "float16": "0x3C00"}
_ZERO = {"float32": "0f00000000", "float64": "0d0000000000000000", "float16": "0x0000"}


def _cast_line(src: DType, dst: DType, d: str, a: str) -> str:
  s, t = PTX_TYPE[src.name], PTX_TYPE[dst.name]
  if dst == dtypes.bool:
    zero = _ZERO.get(src.name, "0")
    return f"setp.{'neu' if src.is_float() else 'ne'}.{COMPUTE_TYPE[src.name]} {d}, {a}, {zero}"
  if src == dtypes.bool:
    kind = "b16" if dst == dtypes.float16 else COMPUTE_TYPE[dst.name]
    return f"selp.{kind} {d}, {_ONE.get(dst.name, '1')}, {_ZERO.get(dst.name, '0')}, {a}"
  if src.is_float() and dst.is_float():
    return f"cvt.{t}.{s} {d}, {a}" if dst.itemsize > src.itemsize else f"cvt.rn.{t}.{s} {d}, {a}"
  if src.is_float():
    return f"cvt.rzi.{t}.{s} {d}, {a}"
  if dst.is_float():
    return f"cvt.rn.{t}.{s} {d}, {a}"
  return f"cvt.{t}.{s} {d}, {a}"


def _cast(w: _Writer, u: UOp) -> None:
  src, dst = u.src[0].dtype.scalar, u.dtype.scalar
  regs = []
  for lane in range(u.dtype.count):
    if src == dst:
      regs.append(w.operand(u.src[0], lane))
      continue
    reg = w.new_reg(dst)
    w.emit(_cast_line(src, dst, reg, w.reg(u.src[0], lane)))
    regs.append(reg)
  w.lanes[u] = regs


def _bitcast(w: _Writer, u: UOp) -> None:
  src, dst = u.src[0].dtype, u.dtype
  if src.count == dst.count:
    regs = [w.new_reg(dst) for _ in range(dst.count)]
    for lane, reg in enumerate(regs):
      a = w.reg(u.src[0], lane)
      if src.itemsize == 1:
        w.emit(f"cvt.{PTX_TYPE[dst.scalar.name]}.{PTX_TYPE[src.scalar.name]} {reg}, {a}")
      else:
        w.emit(f"mov.b{dst.itemsize * 8} {reg}, {a}")
    w.lanes[u] = regs
  elif src.count > dst.count:
    w.lanes[u] = _pack(w, u.src[0], src.count // dst.count, dst)
  else:
    w.lanes[u] = _unpack(w, u.src[0], dst.count // src.count, dst)


def _pack(w: _Writer, x: UOp, group: int, dst: DType) -> list[str]:
  """Every `group` lanes of x moved into one register of dst (first lane in the low bits)."""
  regs = []
  for first in range(0, x.dtype.count, group):
    reg = w.new_reg(dst)
    lanes = ", ".join(w.reg(x, lane) for lane in range(first, first + group))
    w.emit(f"mov.b{dst.itemsize * 8} {reg}, {{{lanes}}}")
    regs.append(reg)
  return regs


def _unpack(w: _Writer, x: UOp, group: int, dst: DType) -> list[str]:
  regs = []
  for lane in range(x.dtype.count):
    parts = [w.new_reg(dst) for _ in range(group)]
    w.emit(f"mov.b{x.dtype.itemsize * 8} {{{', '.join(parts)}}}, {w.reg(x, lane)}")
    regs += parts
  return regs


# ---- memory --------------------------------------------------------------------------------

def _chunks(dt: DType, index: UOp) -> list[tuple[int, int]]:
  """(first lane, lanes) of each ld/st: .v4/.v2 when the access is provably aligned."""
  for n in (4, 2):
    if dt.count % n == 0 and n * dt.itemsize <= 16 and dt.scalar != dtypes.bool \
        and divisible(index, n):
      return [(first, n) for first in range(0, dt.count, n)]
  return [(lane, 1) for lane in range(dt.count)]


def _address(w: _Writer, buf: UOp, index: UOp) -> tuple[str, int]:
  """(64-bit address register, constant byte offset) of buf[index]."""
  base, size = w.reg(buf), buf.dtype.base.scalar.itemsize
  if index.op is Ops.CONST and index.arg >= 0:
    return base, index.arg * size
  if index.op is Ops.ADD and index.src[1].op is Ops.CONST and index.src[1].arg > 0:
    addr, offset = _address(w, buf, index.src[0])
    return addr, offset + index.src[1].arg * size
  offset, addr = w.new_reg(dtypes.int64), w.new_reg(dtypes.int64)
  w.emit(f"mul.wide.s32 {offset}, {w.operand(index)}, {size}")
  w.emit(f"add.s64 {addr}, {base}, {offset}")
  return addr, 0


def _memory_args(w: _Writer, u: UOp, value_dtype: DType):
  buf = _base_buffer(u.src[0])
  space = "shared" if buf.dtype.local else "global"
  addr, offset = _address(w, buf, u.src[1])
  mem_type = MEMORY_TYPE[value_dtype.scalar.name]
  return space, addr, offset, mem_type, _chunks(value_dtype, u.src[1])


def _at(addr: str, offset: int) -> str:
  return f"[{addr}+{offset}]" if offset else f"[{addr}]"


def _load(w: _Writer, u: UOp) -> None:
  space, addr, offset, mem_type, chunks = _memory_args(w, u, u.dtype)
  gate = f"@{w.reg(u.src[2])} " if len(u.src) == 4 else ""
  is_bool = u.dtype.scalar == dtypes.bool
  raw = [w.new_reg(dtypes.uint16 if is_bool else u.dtype) for _ in range(u.dtype.count)]
  size = u.dtype.itemsize
  for first, n in chunks:
    dst = raw[first] if n == 1 else "{" + ", ".join(raw[first:first + n]) + "}"
    vec = "" if n == 1 else f".v{n}"
    w.emit(f"{gate}ld.{space}{vec}.{mem_type} {dst}, {_at(addr, offset + first * size)}")
  regs = raw
  if is_bool:
    regs = [w.new_reg(dtypes.bool) for _ in raw]
    for reg, byte in zip(regs, raw):
      w.emit(f"{gate}setp.ne.u16 {reg}, {byte}, 0")
  if gate:
    for lane, reg in enumerate(regs):
      _mov(w, u.dtype, reg, w.operand(u.src[3], lane), pred=gate.replace("@", "@!"))
  w.lanes[u] = regs


def _store(w: _Writer, u: UOp) -> None:
  value = u.src[2]
  space, addr, offset, mem_type, chunks = _memory_args(w, u, value.dtype)
  gate = f"@{w.reg(u.src[3])} " if len(u.src) == 4 else ""
  lanes = [w.operand(value, lane) for lane in range(value.dtype.count)]
  if value.dtype.scalar == dtypes.bool:
    lanes = [_byte_of(w, value, lane) for lane in range(value.dtype.count)]
  size = value.dtype.itemsize
  for first, n in chunks:
    if n == 1:
      src = lanes[first]
    else:
      src = "{" + ", ".join(w.reg(value, lane) for lane in range(first, first + n)) + "}"
    vec = "" if n == 1 else f".v{n}"
    w.emit(f"{gate}st.{space}{vec}.{mem_type} {_at(addr, offset + first * size)}, {src}")


def _byte_of(w: _Writer, value: UOp, lane: int) -> str:
  reg = w.new_reg(dtypes.uint16)
  w.emit(f"selp.u16 {reg}, 1, 0, {w.reg(value, lane)}")
  return reg


# ---- tensor cores --------------------------------------------------------------------------

def _mma_operand(w: _Writer, x: UOp, ptx_in: str) -> list[str]:
  """A fragment as the 32-bit registers mma.sync takes: two halfs per register, or tf32."""
  if ptx_in != "tf32":
    return _pack(w, x, 2, dtypes.uint32)
  regs = []
  for lane in range(x.dtype.count):
    reg = w.new_reg(dtypes.uint32)
    w.emit(f"cvt.rna.tf32.f32 {reg}, {w.reg(x, lane)}")
    regs.append(reg)
  return regs


def _wmma(w: _Writer, u: UOp) -> None:
  _, (m, n, k), dtype_in, _ = u.arg
  dtype_in = dtypes.from_name(getattr(dtype_in, "name", dtype_in))
  ptx_in = MMA_SHAPES[(m, n, k, dtype_in.name)][1]
  a, b = _mma_operand(w, u.src[0], ptx_in), _mma_operand(w, u.src[1], ptx_in)
  c = [w.reg(u.src[2], lane) for lane in range(u.src[2].dtype.count)]
  d = [w.new_reg(dtypes.float32) for _ in c]
  shape = f"m{m}n{n}k{k}.row.col.f32.{ptx_in}.{ptx_in}.f32"
  groups = ", ".join("{" + ", ".join(regs) + "}" for regs in (d, a, b, c))
  w.emit(f"mma.sync.aligned.{shape} {groups}")
  w.lanes[u] = d


# ---- warps: subgroup reductions and shared atomics --------------------------------------------

# SUBGROUP_REDUCE is a butterfly over the warp: after these shfl.sync.bfly steps every lane holds
# the combination of all 32 (kernels with it have whole warps only: render checks)
BUTTERFLY = (16, 8, 4, 2, 1)


def _subgroup_reduce(w: _Writer, u: UOp) -> None:
  dt, acc = u.dtype, w.reg(u.src[0])
  opcode = _spelling(u.arg, dt)
  for step in BUTTERFLY:
    bits, got = w.new_reg(dtypes.uint32), w.new_reg(dtypes.uint32)
    w.emit(f"mov.b32 {bits}, {acc}")
    w.emit(f"shfl.sync.bfly.b32 {got}, {bits}, {step}, 31, -1")
    other = got
    if dt.is_float():
      other = w.new_reg(dt)
      w.emit(f"mov.b32 {other}, {got}")
    new = w.new_reg(dt)
    w.emit(f"{opcode} {new}, {acc}, {other}")
    if u.arg in (Ops.MAX, Ops.MIN) and dt.is_float():
      _nan_propagate(w, dt, new, [acc, other])
    acc = new
  w.lanes[u] = [acc]


def _atomic_add(w: _Writer, u: UOp) -> None:
  buf = _base_buffer(u.src[0])
  addr, offset = _address(w, buf, u.src[1])
  gate = f"@{w.reg(u.src[3])} " if len(u.src) == 4 else ""
  reg, t = w.new_reg(u.dtype), PTX_TYPE[u.dtype.name]
  w.emit(f"{gate}atom.shared.add.{t} {reg}, {_at(addr, offset)}, {w.operand(u.src[2])}")
  if gate:
    _mov(w, u.dtype, reg, "0", pred=gate.replace("@", "@!"))
  w.lanes[u] = [reg]


# ---- render --------------------------------------------------------------------------------

# op -> how the writer renders it
_HANDLERS = {Ops.PARAM: _param, Ops.VAR: _var, Ops.DEFINE_LOCAL: _define_local,
             Ops.SPECIAL: _special, Ops.CONST: _const, Ops.DEFINE_ACC: _define_acc,
             Ops.ASSIGN: _assign, Ops.AFTER: _after, Ops.RANGE: _range, Ops.ENDRANGE: _endrange,
             Ops.IF: _if, Ops.ENDIF: _endif, Ops.BARRIER: _barrier, Ops.SINK: _nothing,
             Ops.VECTORIZE: _vectorize, Ops.GEP: _gep, Ops.CAST: _cast, Ops.BITCAST: _bitcast,
             Ops.LOAD: _load, Ops.STORE: _store, Ops.WMMA: _wmma,
             Ops.SUBGROUP_REDUCE: _subgroup_reduce, Ops.ATOMIC_ADD: _atomic_add,
             **{op: _alu for op in GroupOp.ALU}}


def _bindings(kernel: Kernel) -> tuple[Binding, ...]:
  return tuple(Binding(b.slot, b.name, b.dtype.name, b.size, b.access, b.size * b.dtype.itemsize)
               for b in kernel.buffers)


def render(kernel: Kernel, arch: str = "sm_80", **options) -> CompiledKernel:
  """PTX source for `kernel` on `arch`, with the Launch a CUDA or PTXSIM runtime executes."""
  sm = parse_arch(arch)
  threads = kernel.local_size[0] * kernel.local_size[1] * kernel.local_size[2]
  if threads % 32 and any(u.op is Ops.SUBGROUP_REDUCE for u in kernel.uops):
    raise UnsupportedError(f"kernel {kernel.name!r} reduces over warps with {threads} threads per "
                           f"block: PTX warp reductions need whole warps (a multiple of 32)",
                           target="ptx")
  if threads > MAX_THREADS:
    raise LimitError(f"kernel {kernel.name!r} has {threads} threads per block; CUDA allows "
                     f"{MAX_THREADS}: use a smaller local size")
  writer = _Writer(kernel, sm)
  source = writer.render()
  launch = Launch("ptx", source, ptx_identifier(kernel.name), _bindings(kernel),
                  kernel.local_size, writer.grid or kernel.global_size,
                  tuple((_var_name(v), "int32") for v in kernel.vars))
  return CompiledKernel(kernel.name, "ptx", source, kernel.global_size, kernel.local_size,
                        kernel.buffers, launch, kernel)
