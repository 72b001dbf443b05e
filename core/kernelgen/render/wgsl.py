"""The WGSL renderer: a linearized kernel to WGSL source and a `Launch` (program.py).

`legalize(sink, **options)` runs first, on the kernel graph: typed errors for what WGSL cannot do
(64-bit types, tensor cores, too many buffers), then the target's own rules (8/16-bit integer
arithmetic moved to 32 bits, f16 math in f32 without `shader-f16`, isnan as a bit test).
`render(kernel, **options)` writes the text. Values live in 32-bit registers: int8/int16 in i32
(sign-extended), uint8/uint16 in u32, f16 in f16 with the f16 option or else in f32. Memory keeps
numpy's layout: bool, 8- and 16-bit buffers (and f16 without the f16 option) are arrays of u32
words read with extractBits; a kernel that writes one uses `atomic<u32>` words and writes with
atomicAnd/atomicOr, so neighbouring threads writing bytes of one word never race.

The launch contract, the same for wgpu here and navigator.gpu in the page:
  - storage buffer `slot` is `@group(0) @binding(slot)`; `Binding.nbytes` is what to allocate;
    bindings with access "read" are read-only-storage, the others storage;
  - scalar arguments (VAR) are the i32 fields, in `Launch.uniforms` order, of one uniform struct at
    `@group(0) @binding(uniform_binding(bindings))` (after the last storage buffer), 16 bytes a
    field group: the buffer is `4 * len(uniforms)` bytes rounded up to 16;
  - `Launch.dispatch` is the workgroup grid as launched: a grid over 65535 per dimension is folded
    across x/y/z and the kernel re-derives its group ids (extra groups return at once);
  - `Launch.features` names the WebGPU features the kernel needs ("subgroups", "shader-f16"). The
    source has `enable f16;` where it uses f16 but never `enable subgroups;`: naga (wgpu-native)
    rejects that directive and Tint (Chromium, Dawn) requires it, so a Tint runtime prepends it.

Subgroups (W14): SUBGROUP_REDUCE renders as subgroupAdd/Mul/Max/Min/And/Or/Xor (float max/min
keep IR's NaN propagation through subgroupAny), SPECIAL sglane is @builtin(subgroup_invocation_id),
a workgroup buffer that ATOMIC_ADD uses is array<atomic<i32>>, read with workgroupUniformLoad
(itself a workgroup barrier, so a BARRIER right before such a read is not written out).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields

from ..dtype import DType, PtrDType, dtypes, max_value, min_value
from ..errors import LimitError, UnsupportedError
from ..ops import GroupOp, Ops, UOp, describe, toposort
from ..pattern import PatternMatcher, UPat, graph_rewrite
from ..program import Binding, CompiledKernel, Kernel, Launch
from ..rules.ranges import divisible
from ..rules.transcendental import FLOAT32

TARGET = "wgsl"


@dataclass(frozen=True)
class WGSLOptions:
  f16: bool = False                    # the device has `shader-f16`: native f16 (`enable f16;`)
  subgroups: bool = False              # the device has `subgroups`: kernels may use subgroup ops
  max_storage_buffers: int = 8         # storage buffers per shader stage
  max_workgroup_size: int = 256        # invocations per workgroup
  max_workgroups_per_dim: int = 65535  # workgroups per grid dimension
  max_buffer_bytes: int = 134217728    # bytes one storage buffer binding may have (WebGPU default)
  fast_math: bool = False              # native sin, log2 (WGSL: 2**-11, 2**-21 absolute)


def make_options(options: dict) -> WGSLOptions:
  known = {f.name for f in fields(WGSLOptions)}
  unknown = sorted(set(options) - known)
  if unknown:
    raise UnsupportedError(f"unknown WGSL renderer option(s) {', '.join(unknown)}: use "
                           f"{', '.join(sorted(known))}", target=TARGET)
  return WGSLOptions(**options)


# ---- target facts --------------------------------------------------------------------------------

# dtypes WGSL has no type for, and what to do instead
NO_WGSL_TYPE = {
  "float64": "cast to float32 before the kernel, or compile for target 'ptx'",
  "int64": "cast to int32 before the kernel, or compile for target 'ptx'",
  "uint64": "cast to uint32 before the kernel, or compile for target 'ptx'",
  "bfloat16": "cast to float32 (or float16), or compile for target 'ptx'",
}

# the register type holding each scalar dtype (float16 is f32 without the f16 option)
REGISTER = {"bool": "bool", "int8": "i32", "int16": "i32", "int32": "i32", "uint8": "u32",
            "uint16": "u32", "uint32": "u32", "float16": "f16", "float32": "f32"}

# bits of one element of the dtypes global memory holds packed in u32 words
PACKED_BITS = {"bool": 8, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "float16": 16}

# infix operators, by op
INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "/", Ops.MOD: "%",
         Ops.CMPLT: "<", Ops.CMPEQ: "==", Ops.CMPNE: "!=", Ops.AND: "&", Ops.OR: "|",
         Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}

# infix operators on bool operands (WGSL has no arithmetic or ordering on bool)
BOOL_INFIX = {Ops.AND: "&", Ops.OR: "|", Ops.XOR: "!=", Ops.CMPEQ: "==", Ops.CMPNE: "!=",
              Ops.MAX: "|", Ops.MIN: "&", Ops.ADD: "|", Ops.MUL: "&"}

# builtin functions, by op
CALL = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc",
        Ops.MAX: "max", Ops.MIN: "min"}

# subgroup builtins, by the op they combine with
SUBGROUP_CALL = {Ops.ADD: "subgroupAdd", Ops.MUL: "subgroupMul", Ops.MAX: "subgroupMax",
                 Ops.MIN: "subgroupMin", Ops.AND: "subgroupAnd", Ops.OR: "subgroupOr",
                 Ops.XOR: "subgroupXor"}

# largest f32 values that convert into each 32-bit int type (the int maxima round up in f32)
F32_INT_MAX = {"int32": 2147483520.0, "uint32": 4294967040.0}

# helper functions, emitted (in this order) when a kernel uses them
HELPERS = {
  "kg_isnan": "fn kg_isnan(x: f32) -> bool {\n"
              "  return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;\n}",
  "kg_fmax": "fn kg_fmax(a: f32, b: f32) -> f32 {\n"
             "  if (kg_isnan(a) || kg_isnan(b)) { return a + b; }\n  return max(a, b);\n}",
  "kg_fmin": "fn kg_fmin(a: f32, b: f32) -> f32 {\n"
             "  if (kg_isnan(a) || kg_isnan(b)) { return a + b; }\n  return min(a, b);\n}",
  "kg_hmax": "fn kg_hmax(a: f16, b: f16) -> f16 {\n"
             "  if (kg_isnan(f32(a)) || kg_isnan(f32(b))) { return a + b; }\n  return max(a, b);\n}",
  "kg_hmin": "fn kg_hmin(a: f16, b: f16) -> f16 {\n"
             "  if (kg_isnan(f32(a)) || kg_isnan(f32(b))) { return a + b; }\n  return min(a, b);\n}",
  "kg_exp2": "fn kg_exp2(t: f32) -> f32 {\n"
             "  if (kg_isnan(t)) { return t; }\n"
             "  if (t >= 128.0f) { return t * 3.0e38f; }\n"
             "  if (t < -150.0f) { return 0.0f; }\n  return exp2(t);\n}",
  "kg_round_f16": "fn kg_round_f16(x: f32) -> f32 {\n"
                  "  return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0f))).x;\n}",
}
HELPER_NEEDS = {"kg_exp2": ("kg_isnan",), "kg_fmax": ("kg_isnan",), "kg_fmin": ("kg_isnan",),
                "kg_hmax": ("kg_isnan",), "kg_hmin": ("kg_isnan",)}

# NaN and inf cannot be constant expressions in WGSL: they are read from these bits at run time
SPECIAL_BITS = "var<private> kg_special: vec2<u32> = vec2<u32>(0x7f800000u, 0x7fc00000u);"

# words WGSL reserves or predeclares, that a user-derived identifier must not become
RESERVED = frozenset("""
alias break case const const_assert continue continuing default diagnostic discard else enable
false fn for if let loop override requires return struct switch true var while
NULL Self abstract active alignas alignof as asm asm_fragment async attribute auto await become
cast catch class co_await co_return co_yield coherent column_major common compile
compile_fragment concept const_cast consteval constexpr constinit crate debugger decltype delete
demote demote_to_helper do dynamic_cast enum explicit export extends extern external fallthrough
filter final finally friend from fxgroup get goto groupshared highp impl implements import inline
instanceof interface layout lowp macro macro_rules match mediump meta mod module move mut mutable
namespace new nil noexcept noinline nointerpolation non_coherent noncoherent noperspective null
nullptr of operator package packoffset partition pass patch pixelfragment precise precision
premerge priv protected pub public readonly ref regardless register reinterpret_cast require
resource restrict self set shared sizeof smooth snorm static static_assert static_cast std
subroutine super target template this thread_local throw trait try type typedef typeid typename
typeof union unless unorm unsafe unsized use using varying virtual volatile wgsl where with
writeonly yield
bool f16 f32 i32 u32 vec2 vec3 vec4 mat2x2 mat3x3 mat4x4 array atomic ptr sampler texture_2d
read write read_write function private workgroup uniform storage
abs all any atomicAdd atomicAnd atomicLoad atomicOr atomicStore bitcast ceil clamp cos exp exp2
extractBits floor fma insertBits log log2 max min pack2x16float select sin sqrt trunc
unpack2x16float workgroupBarrier workgroupUniformLoad subgroupAdd subgroupMul subgroupMax
subgroupMin subgroupAnd subgroupOr subgroupXor subgroupAny
""".split())

# names the renderer makes itself (a user-derived name must not look like one)
OWN_NAME = re.compile(r"(kg_|k_|[vrbl]\d|acc\d|u\d)")


# ---- legalize: the target's rules on the kernel graph --------------------------------------------

def _isnan_bits(x: UOp) -> UOp:
  bits = x.cast(dtypes.float32.vec(x.dtype.count)).bitcast(dtypes.uint32.vec(x.dtype.count))
  magnitude = bits & 0x7FFFFFFF
  return magnitude.const_like(0x7F800000).lt(magnitude)


# ops whose 8/16-bit result can leave the type's range: rendered in 32 bits, then wrapped
WRAPPING = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.SHL, Ops.IDIV, Ops.NOT, Ops.MULACC})
# ops that round: on f16 without shader-f16 they run on f32 registers and round to f16 after
ROUNDING = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC}) | GroupOp.Transcendental


# Rules on the graph. (8/16-bit wrapping and f16 rounding are done as each op is rendered: a
# graph rule would read an accumulator through a new node the linearizer may hoist out of its loop.)
LEGALIZE = PatternMatcher([
  # x != x on floats -> a bit test (a shader compiler may fold x != x to false)
  (UPat(Ops.CMPNE, src=(UPat.var("x"), UPat.var("x")),
        custom=lambda u: u.src[0].dtype.is_float()), _isnan_bits),
  # sin, log2 -> range reduction and polynomial in f32, a few ulp (unless fast_math: builtins)
  (UPat((Ops.SIN, Ops.LOG2), name="x"),
   lambda ctx, x: None if ctx.fast_math else FLOAT32[x.op](x.src[0])),
])


# the ops a LEGALIZE rule can rewrite: a graph without any is already legal
_LEGALIZE_OPS = frozenset(op for op, rules in LEGALIZE.by_op.items() if rules)


def _check_dtype(u: UOp) -> None:
  dt = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
  if dt is not None and dt.scalar.name in NO_WGSL_TYPE:
    raise UnsupportedError(
      f"{dt.scalar.name} is not available on target 'wgsl' (WebGPU has no {dt.scalar.name} "
      f"type): {NO_WGSL_TYPE[dt.scalar.name]}\n{describe(u)}", target=TARGET, dtype=dt.scalar)


def buffer_limit(options: dict) -> int:
  """Storage buffers one kernel may bind (the scheduler splits kernels that need more)."""
  return make_options(options).max_storage_buffers


def check_buffer_count(count: int, opts: WGSLOptions) -> None:
  if count > opts.max_storage_buffers:
    raise LimitError(f"this kernel uses {count} storage buffers; the WebGPU device allows "
                     f"{opts.max_storage_buffers} per shader stage: split the computation into "
                     f"kernels with fewer inputs (the scheduler does this where a part of the "
                     f"expression can be a kernel of its own; here none can), or raise "
                     f"max_storage_buffers if the adapter allows more")


def check_buffer_sizes(kernel: Kernel, opts: WGSLOptions) -> None:
  for b in kernel.buffers:
    nbytes = b.size * b.dtype.itemsize
    if nbytes > opts.max_buffer_bytes:
      raise LimitError(f"buffer {b.name} ({b.size} x {b.dtype.name}) has {nbytes} bytes; the "
                       f"WebGPU device binds at most {opts.max_buffer_bytes} bytes per storage "
                       f"buffer (maxStorageBufferBindingSize): split the tensor into smaller "
                       f"pieces, use a smaller dtype, or raise max_buffer_bytes if the adapter "
                       f"allows more")


def legalize(sink: UOp, **options) -> UOp:
  """The kernel graph made WGSL-legal; typed errors for what WGSL cannot do."""
  opts = make_options(options)
  params = set()
  rewrites = False
  for u in toposort([sink]):
    _check_dtype(u)
    if u.op is Ops.WMMA:
      raise UnsupportedError("tensor-core ops (WMMA) do not exist in WGSL: compile without "
                             "tensor cores for 'wgsl', or use target 'ptx'", target=TARGET)
    if u.op is Ops.PARAM:
      params.add(u.arg)
    if u.op is Ops.SUBGROUP_REDUCE and not opts.subgroups:
      raise UnsupportedError("this kernel uses subgroup operations, and the renderer was not told "
                             "the device has subgroups: compile with subgroups=True only for a "
                             "device with the `subgroups` feature", target=TARGET)
    rewrites = rewrites or u.op in _LEGALIZE_OPS
  check_buffer_count(len(params), opts)
  return graph_rewrite(sink, LEGALIZE, ctx=opts) if rewrites else sink


# ---- names ---------------------------------------------------------------------------------------

def clean_name(text: str) -> str:
  """`text` with everything but ASCII letters, digits and single underscores removed."""
  return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", str(text))).strip("_")


def entry_name(kernel_name: str) -> str:
  """A valid WGSL function name for the kernel, its own name when that is one."""
  name = clean_name(kernel_name)
  if name and name[0].isalpha() and name not in RESERVED and not OWN_NAME.match(name):
    return name
  return f"k_{name}" if name else "k_kernel"


def buffer_name(slot: int, user_name: str) -> str:
  name = clean_name(user_name)
  return f"b{slot}_{name}" if name else f"b{slot}"


# ---- launch geometry -----------------------------------------------------------------------------

def fold_grid(grid: tuple[int, int, int], limit: int) -> tuple[int, int, int]:
  """The dispatch for `grid`: itself when it fits, else its groups spread over x, y, z."""
  if all(g <= limit for g in grid):
    return tuple(grid)
  total = math.prod(grid)
  dx = min(total, limit)
  dy = min(-(-total // dx), limit)
  dz = -(-total // (dx * dy))
  if dz > limit:
    raise LimitError(f"a grid of {grid} workgroups ({total}) does not fit in WebGPU's "
                     f"{limit}^3 workgroups: use bigger workgroups or split the kernel")
  return dx, dy, dz


def check_workgroup(local: tuple[int, int, int], opts: WGSLOptions) -> None:
  size = math.prod(local)
  if size > opts.max_workgroup_size or local[2] > 64:
    raise LimitError(f"a workgroup of {local} = {size} threads is more than the device allows "
                     f"({opts.max_workgroup_size} in all, 64 in z): use smaller local sizes")


def binding_nbytes(dtype: DType, size: int, packed: bool) -> int:
  nbytes = size * dtype.itemsize
  if packed:
    nbytes = -(-size * PACKED_BITS[dtype.name] // 32) * 4
  return max(4, -(-nbytes // 4) * 4)


# ---- vector memory (W14) ---------------------------------------------------------------------------

# element dtypes a buffer may hold as vec4 words
VEC4_DTYPES = frozenset({"float32", "int32", "uint32"})


def _base(buf: UOp) -> UOp:
  while buf.op is Ops.AFTER:
    buf = buf.src[0]
  return buf


def vec4_slots(kernel: Kernel) -> frozenset:
  """Global buffers declared as array<vec4<T>>: 32-bit elements, a size divisible by 4, and every
  access in the kernel a 4-lane load or store at an index provably divisible by 4."""
  usable: dict[int, bool] = {}
  for u in kernel.uops:
    if u.op not in (Ops.LOAD, Ops.STORE) or _base(u.src[0]).op is not Ops.PARAM:
      continue
    dt = u.dtype if u.op is Ops.LOAD else u.src[2].dtype
    good = dt.count == 4 and dt.scalar.name in VEC4_DTYPES and divisible(u.src[1], 4)
    slot = _base(u.src[0]).arg
    usable[slot] = usable.get(slot, True) and good
  sizes = {b.slot: b.size for b in kernel.buffers}
  return frozenset(slot for slot, good in usable.items() if good and sizes.get(slot, 1) % 4 == 0)


# ---- the renderer --------------------------------------------------------------------------------

class _Writer:
  """Renders one kernel; holds the names given to nodes and the lines written so far."""

  def __init__(self, kernel: Kernel, opts: WGSLOptions, dispatch: tuple[int, int, int]):
    self.kernel, self.opts, self.dispatch = kernel, opts, dispatch
    self.var_fields = {v: f"u{i}_{clean_name(v.arg[0])}".rstrip("_")
                       for i, v in enumerate(kernel_vars(kernel))}
    self.names: dict[UOp, str] = {}
    self.lines: list[str] = []
    self.depth = 1
    self.helpers: set[str] = set()
    self.special_bits = False
    self.uses_f16 = False
    self.specs = {b.slot: b for b in kernel.buffers}
    self.vec4 = vec4_slots(kernel)
    # workgroup buffers that atomics use (declared atomic<i32>/atomic<u32>)
    self.atomic_locals = {_base(u.src[0]) for u in kernel.uops if u.op is Ops.ATOMIC_ADD}
    self.uses_subgroups = any(u.op is Ops.SUBGROUP_REDUCE or u.op is Ops.SPECIAL and
                              u.arg[0] == "sglane" for u in kernel.uops)

  # -- types --
  def reg(self, dt: DType) -> str:
    name = REGISTER[dt.scalar.name]
    if name == "f16":
      self.uses_f16 = self.opts.f16
      name = "f16" if self.opts.f16 else "f32"
    return name if dt.count == 1 else f"vec{dt.count}<{name}>"

  def packed(self, slot: int) -> bool:
    dt = self.specs[slot].dtype
    return dt.name in PACKED_BITS and not (dt == dtypes.float16 and self.opts.f16)

  def atomic(self, slot: int) -> bool:
    return self.packed(slot) and self.specs[slot].access != "read"

  def need(self, helper: str) -> str:
    self.helpers.update(HELPER_NEEDS.get(helper, ()) + (helper,))
    return helper

  def emit(self, line: str) -> None:
    self.lines.append("  " * self.depth + line)

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
    lanes = [f"{fn}({', '.join(f'{a}[{i}]' for a in args)})" for i in range(dt.count)]
    return f"{self.reg(dt)}({', '.join(lanes)})"

  # -- conversions --
  def cast(self, src: DType, dst: DType, x: str) -> str:
    s, d, t = src.scalar, dst.scalar, self.reg(dst)
    if d == dtypes.bool:
      return x if s == dtypes.bool else f"({x} != {self.reg(src)}())"
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
    if u.op is Ops.WHERE:
      return f"select({a[2]}, {a[1]}, {a[0]})"
    if u.op is Ops.MULACC:
      return f"fma({a[0]}, {a[1]}, {a[2]})" if dt.is_float() else f"({a[0]} * {a[1]}) + {a[2]}"
    if dt.scalar == dtypes.bool:
      return self.bool_alu(u.op, a)
    if u.op in GroupOp.Unary:
      return self.unary(u.op, dt, a[0])
    if u.op in (Ops.MAX, Ops.MIN) and dt.is_float():
      half = dt.scalar == dtypes.float16 and self.opts.f16
      fn = ("kg_h" if half else "kg_f") + ("max" if u.op is Ops.MAX else "min")
      return self.lanewise(self.need(fn), dt, a)
    if u.op in CALL:
      return f"{CALL[u.op]}({a[0]}, {a[1]})"
    if u.op is Ops.FDIV and u.src[1].op is Ops.CONST and u.src[1].arg == 0:
      # x / 0.0 -> x * inf from run-time bits (shader compilers fold the division to garbage)
      return f"{a[0]} * {self.const_text(dt, math.copysign(math.inf, u.src[1].arg))}"
    if u.op is Ops.CMPNE and dt.is_float():
      return f"!({a[0]} == {a[1]})"
    if u.op in (Ops.SHL, Ops.SHR) and not dt.is_unsigned():
      return f"{a[0]} {INFIX[u.op]} bitcast<{self.reg(dtypes.uint32.vec(dt.count))}>({a[1]})"
    return f"{a[0]} {INFIX[u.op]} {a[1]}"

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
      return f"{self.reg(dt)}(1) / {x}"
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

  # -- memory --
  def load_element(self, buf: UOp, idx: str, dt: DType) -> str:
    name = self.names[buf]
    if buf.op is Ops.DEFINE_LOCAL or not self.packed(buf.arg):
      return f"{name}[{idx}]"
    bits = PACKED_BITS[dt.name]
    word = f"{name}[u32({idx}) / {32 // bits}u]"
    word = f"atomicLoad(&{word})" if self.atomic(buf.arg) else word
    offset = f"((u32({idx}) % {32 // bits}u) * {bits}u)"
    if dt == dtypes.float16:
      return f"unpack2x16float({word} >> {offset}).x"
    if dt == dtypes.bool:
      return f"(extractBits({word}, {offset}, 8u) != 0u)"
    if dt.is_unsigned():
      return f"extractBits({word}, {offset}, {bits}u)"
    return f"extractBits(bitcast<i32>({word}), {offset}, {bits}u)"

  def lanes(self, idx: str, count: int) -> list[str]:
    return [idx] + [f"({idx} + {k}i)" for k in range(1, count)]

  def load(self, u: UOp, name: str) -> None:
    buf, idx = self.buffer(u.src[0]), self.names[u.src[1]]
    if buf in self.atomic_locals:   # a counter read after a barrier: the same for every thread
      if len(u.src) != 2:
        raise UnsupportedError(f"an atomic workgroup value is read ungated in uniform control "
                               f"flow only\n{describe(u)}", target=TARGET)
      value = f"workgroupUniformLoad(&{self.names[buf]}[{idx}])"
      self.emit(f"let {name}: {self.reg(u.dtype)} = {value};")
      return
    elem = u.dtype.scalar
    parts = [self.load_element(buf, i, elem) for i in self.lanes(idx, u.dtype.count)]
    value = parts[0] if len(parts) == 1 else f"{self.reg(u.dtype)}({', '.join(parts)})"
    if buf.op is Ops.PARAM and buf.arg in self.vec4:
      value = f"{self.names[buf]}[u32({idx}) >> 2u]"
    if len(u.src) == 2:
      self.emit(f"let {name}: {self.reg(u.dtype)} = {value};")
      return
    self.emit(f"var {name}: {self.reg(u.dtype)} = {self.names[u.src[3]]};")
    self.emit(f"if ({self.names[u.src[2]]}) {{ {name} = {value}; }}")

  def store(self, u: UOp) -> None:
    buf, idx, value = self.buffer(u.src[0]), self.names[u.src[1]], self.names[u.src[2]]
    if buf in self.atomic_locals:
      if len(u.src) != 3 or u.src[2].dtype.count != 1:
        raise UnsupportedError(f"an atomic workgroup value is set ungated, one element at a time"
                               f"\n{describe(u)}", target=TARGET)
      self.emit(f"atomicStore(&{self.names[buf]}[{idx}], {value});")
      return
    gated = len(u.src) == 4
    if gated:
      self.emit(f"if ({self.names[u.src[3]]}) {{")
      self.depth += 1
    count = u.src[2].dtype.count
    if buf.op is Ops.PARAM and buf.arg in self.vec4:
      self.emit(f"{self.names[buf]}[u32({idx}) >> 2u] = {value};")
    else:
      for k, i in enumerate(self.lanes(idx, count)):
        self.store_element(buf, i, value if count == 1 else f"{value}[{k}]", u.src[2].dtype.scalar)
    if gated:
      self.depth -= 1
      self.emit("}")

  def store_element(self, buf: UOp, idx: str, value: str, dt: DType) -> None:
    name = self.names[buf]
    if buf.op is Ops.DEFINE_LOCAL or not self.packed(buf.arg):
      self.emit(f"{name}[{idx}] = {value};")
      return
    bits = PACKED_BITS[dt.name]
    mask = f"0x{(1 << bits) - 1:x}u"
    self.emit("{")
    self.emit(f"  let kg_w = u32({idx}) / {32 // bits}u;")
    self.emit(f"  let kg_s = (u32({idx}) % {32 // bits}u) * {bits}u;")
    self.emit(f"  atomicAnd(&{name}[kg_w], ~({mask} << kg_s));")
    self.emit(f"  atomicOr(&{name}[kg_w], ({self.store_bits(value, dt)} & {mask}) << kg_s);")
    self.emit("}")

  def store_bits(self, value: str, dt: DType) -> str:
    if dt == dtypes.float16:
      return f"pack2x16float(vec2<f32>({value}, 0.0f))"
    if dt == dtypes.bool:
      return f"select(0u, 1u, {value})"
    return value if dt.is_unsigned() else f"bitcast<u32>({value})"

  @staticmethod
  def buffer(buf: UOp) -> UOp:
    return _base(buf)

  # -- nodes --
  def node(self, i: int, u: UOp) -> None:
    op, names = u.op, self.names
    if op in NAMED:
      names[u] = NAMED[op](self, u)
    elif op in BLOCK:
      BLOCK[op](self, i, u)
    elif op is Ops.LOAD:
      names[u] = f"v{i}"
      self.load(u, names[u])
    elif op is Ops.STORE:
      self.store(u)
    elif op is Ops.ATOMIC_ADD:
      names[u] = f"v{i}"
      self.atomic_add(u, names[u])
    elif op is Ops.WMMA:
      raise UnsupportedError("tensor-core ops (WMMA) do not exist in WGSL: use target 'ptx'",
                             target=TARGET)
    else:
      names[u] = f"v{i}"
      self.emit(f"let v{i}: {self.reg(u.dtype)} = {self.value(u)};")

  def value(self, u: UOp) -> str:
    a = [self.names[s] for s in u.src]
    if u.op is Ops.CAST:
      return self.cast(u.src[0].dtype, u.dtype, a[0])
    if u.op is Ops.BITCAST:
      return self.bitcast(u.src[0].dtype, u.dtype, a[0])
    if u.op is Ops.VECTORIZE:
      return f"{self.reg(u.dtype)}({', '.join(a)})"
    if u.op is Ops.GEP:
      return f"{a[0]}[{u.arg}]"
    if u.op in GroupOp.ALU:
      return self.narrow_result(u, self.alu(u, a))
    if u.op is Ops.SUBGROUP_REDUCE:
      return self.narrow_result(u, self.subgroup_reduce(u, a[0]))
    raise UnsupportedError(f"the WGSL renderer has no form for {u.op.name}\n{describe(u)}",
                           target=TARGET)

  def subgroup_reduce(self, u: UOp, x: str) -> str:
    """The subgroup builtin; float max/min give NaN when any lane has one, as MAX/MIN do."""
    call = f"{SUBGROUP_CALL[u.arg]}({x})"
    if u.arg in (Ops.MAX, Ops.MIN) and u.dtype.is_float():
      return f"select({call}, subgroupAdd({x}), subgroupAny({self.isnan(x, u.dtype)}))"
    return call

  def atomic_add(self, u: UOp, name: str) -> None:
    buf, idx, value = self.buffer(u.src[0]), self.names[u.src[1]], self.names[u.src[2]]
    call = f"atomicAdd(&{self.names[buf]}[{idx}], {value})"
    if len(u.src) == 3:
      self.emit(f"let {name}: {self.reg(u.dtype)} = {call};")
      return
    self.emit(f"var {name}: {self.reg(u.dtype)} = {self.reg(u.dtype)}();")
    self.emit(f"if ({self.names[u.src[3]]}) {{ {name} = {call}; }}")

  def narrow_result(self, u: UOp, text: str) -> str:
    """Wrap 8/16-bit integer results to their width; round f16 results computed in f32."""
    dt = u.dtype.scalar
    op = u.arg if u.op is Ops.SUBGROUP_REDUCE else u.op
    if dt.is_int() and dt.itemsize < 4 and op in WRAPPING:
      return f"extractBits({text}, 0u, {dt.bits}u)"
    if dt != dtypes.float16 or op not in ROUNDING:
      return text
    if not self.opts.f16:
      return self.lanewise(self.need("kg_round_f16"), u.dtype, [text])
    return text

  def barrier(self, i: int, u: UOp) -> None:
    """workgroupBarrier(), unless the next statement is a workgroupUniformLoad: that is itself
    a barrier with workgroup memory semantics (so the one before it adds nothing)."""
    for v in self.kernel.uops[i + 1:]:
      if v.op in NAMED:
        continue
      if v.op is Ops.LOAD and self.buffer(v.src[0]) in self.atomic_locals:
        return
      break
    self.emit("workgroupBarrier();")

  def define_acc(self, i: int, u: UOp) -> None:
    self.names[u] = f"acc{i}"
    self.emit(f"var acc{i}: {self.reg(u.dtype)} = {self.names[u.src[0]]};")

  def assign(self, i: int, u: UOp) -> None:
    self.emit(f"{self.names[u.src[0]]} = {self.names[u.src[1]]};")
    self.names[u] = self.names[u.src[1]]

  def open_range(self, i: int, u: UOp) -> None:
    self.names[u] = f"r{i}"
    self.emit(f"for (var r{i}: i32 = 0i; r{i} < {self.names[u.src[0]]}; r{i}++) {{")
    self.depth += 1

  def open_if(self, i: int, u: UOp) -> None:
    self.emit(f"if ({self.names[u.src[0]]}) {{")
    self.depth += 1

  def close(self, i: int, u: UOp) -> None:
    self.depth -= 1
    self.emit("}")

  # -- definitions --
  def var_field(self, u: UOp) -> str:
    return f"kg_vars.{self.var_fields[u]}"

  def special(self, u: UOp) -> str:
    kind, dim, _ = u.arg
    return f"kg_{kind}{dim}"

  def prologue(self) -> list[str]:
    """The thread and group ids the kernel uses, re-derived when the grid is folded."""
    used = sorted({u.arg[:2] for u in self.kernel.uops if u.op is Ops.SPECIAL})
    grid, lines = self.kernel.global_size, []
    folded = tuple(self.dispatch) != tuple(grid)
    if folded and any(kind == "gid" for kind, _ in used):
      dx, dy, _ = self.dispatch
      lines.append(f"let kg_group = kg_wid.x + kg_wid.y * {dx}u + kg_wid.z * {dx * dy}u;")
      if math.prod(self.dispatch) != math.prod(grid):
        lines.append(f"if (kg_group >= {math.prod(grid)}u) {{ return; }}")
    for kind, dim in used:
      xyz = "xyz"[dim]
      if kind == "lid":
        lines.append(f"let kg_lid{dim} = i32(kg_lid.{xyz});")
      elif kind == "sglane":
        lines.append(f"let kg_sglane{dim} = i32(kg_sglane);")
      elif folded:
        stride = math.prod(grid[:dim])
        lines.append(f"let kg_gid{dim} = i32((kg_group / {stride}u) % {grid[dim]}u);")
      else:
        lines.append(f"let kg_gid{dim} = i32(kg_wid.{xyz});")
    return ["  " + line for line in lines]


# nodes that only get a name (no line of their own)
NAMED = {
  Ops.PARAM: lambda w, u: buffer_name(u.arg, w.specs[u.arg].name),
  Ops.DEFINE_LOCAL: lambda w, u: f"l{u.arg}",
  Ops.VAR: _Writer.var_field,
  Ops.SPECIAL: _Writer.special,
  Ops.CONST: _Writer.const,
  Ops.AFTER: lambda w, u: w.names[u.src[0]],
  Ops.SINK: lambda w, u: "",
}

# nodes that write a statement or open/close a block
BLOCK = {
  Ops.DEFINE_ACC: _Writer.define_acc,
  Ops.ASSIGN: _Writer.assign,
  Ops.RANGE: _Writer.open_range,
  Ops.ENDRANGE: _Writer.close,
  Ops.IF: _Writer.open_if,
  Ops.ENDIF: _Writer.close,
  Ops.BARRIER: _Writer.barrier,
}


# ---- the module ----------------------------------------------------------------------------------

def uniform_binding(bindings) -> int:
  """The binding index of the uniform buffer of scalar arguments: after the last storage one."""
  return max((b.slot for b in bindings), default=-1) + 1


def kernel_vars(kernel: Kernel) -> tuple[UOp, ...]:
  if kernel.vars:
    return tuple(kernel.vars)
  return tuple(u for u in kernel.uops if u.op is Ops.VAR)


def _declarations(w: _Writer, variables: tuple[UOp, ...]) -> list[str]:
  lines = []
  if variables:
    lines.append("struct KgVars {")
    lines += [f"  {w.var_fields[v]}: i32," for v in variables]
    lines.append("}")
    lines.append(f"@group(0) @binding({uniform_binding(w.kernel.buffers)}) "
                 f"var<uniform> kg_vars: KgVars;")
  for b in w.kernel.buffers:
    access = "read" if b.access == "read" and not w.atomic(b.slot) else "read_write"
    elem = "atomic<u32>" if w.atomic(b.slot) else "u32" if w.packed(b.slot) else w.reg(b.dtype)
    elem = w.reg(b.dtype.vec(4)) if b.slot in w.vec4 else elem
    lines.append(f"@group(0) @binding({b.slot}) var<storage, {access}> "
                 f"{buffer_name(b.slot, b.name)}: array<{elem}>;")
  for u in w.kernel.uops:
    if u.op is Ops.DEFINE_LOCAL:
      elem = w.reg(u.dtype.base)
      elem = f"atomic<{elem}>" if u in w.atomic_locals else elem
      lines.append(f"var<workgroup> l{u.arg}: array<{elem}, {u.dtype.size}>;")
  return lines


def module_source(w: _Writer, entry: str) -> str:
  """The whole WGSL module of the kernel `w` renders."""
  variables = kernel_vars(w.kernel)
  for i, u in enumerate(w.kernel.uops):
    w.node(i, u)
  declarations = _declarations(w, variables)
  head = ["enable f16;", ""] if w.uses_f16 else []
  head += declarations + ([SPECIAL_BITS] if w.special_bits else [])
  helpers = [HELPERS[name] for name in HELPERS if name in w.helpers]
  lx, ly, lz = w.kernel.local_size
  lane = ", @builtin(subgroup_invocation_id) kg_sglane: u32" if w.uses_subgroups else ""
  entry_lines = [f"@compute @workgroup_size({lx}, {ly}, {lz})",
                 f"fn {entry}(@builtin(workgroup_id) kg_wid: vec3<u32>, "
                 f"@builtin(local_invocation_id) kg_lid: vec3<u32>{lane}) {{"]
  parts = head + [""] + ([*"\n\n".join(helpers).split("\n"), ""] if helpers else [])
  return "\n".join(parts + entry_lines + w.prologue() + w.lines + ["}", ""])


def render(kernel: Kernel, **options) -> CompiledKernel:
  """WGSL source and the Launch for a linearized kernel (options: see WGSLOptions)."""
  opts = make_options(options)
  check_buffer_count(len(kernel.buffers), opts)
  check_buffer_sizes(kernel, opts)
  check_workgroup(kernel.local_size, opts)
  for u in kernel.uops:
    _check_dtype(u)
  dispatch = fold_grid(kernel.global_size, opts.max_workgroups_per_dim)
  w = _Writer(kernel, opts, dispatch)
  entry = entry_name(kernel.name)
  source = module_source(w, entry)
  bindings = tuple(Binding(b.slot, b.name, b.dtype.name, b.size, b.access,
                           binding_nbytes(b.dtype, b.size, w.packed(b.slot)))
                   for b in kernel.buffers)
  uniforms = tuple((v.arg[0], "int32") for v in kernel_vars(kernel))
  features = ("shader-f16",) * w.uses_f16 + ("subgroups",) * w.uses_subgroups
  launch = Launch(TARGET, source, entry, bindings, tuple(kernel.local_size), dispatch, uniforms,
                  features)
  return CompiledKernel(kernel.name, TARGET, source, tuple(kernel.global_size),
                        tuple(kernel.local_size), kernel.buffers, launch, kernel)
