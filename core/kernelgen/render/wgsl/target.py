"""WGSL target facts: the renderer's options (what the device has), the dtypes WGSL lacks,
register types, operator and builtin spellings, helper functions, reserved words, and the
launch contract's names, geometry and limits. Read by legalize, the writer and render (wgsl.py).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields

from ...dtype import DType
from ...errors import LimitError, UnsupportedError
from ...uop.ops import GroupOp, Ops, UOp
from ...uop.program import Kernel
from ...graph.bind_limit import BufferLimit
from ..target import Target, unknown_options_message

# ---- options -------------------------------------------------------------------------------------

TARGET = "wgsl"


@dataclass(frozen=True)
class WGSLOptions:
  f16: bool = False                    # the device has `shader-f16`: native f16 (`enable f16;`)
  subgroups: bool = False              # the device has `subgroups`: kernels may use subgroup ops
  max_storage_buffers: int = 8         # storage buffers per shader stage
  max_uniform_buffers: int = 12        # uniform buffers per shader stage (kg_vars is one)
  max_uniform_bytes: int = 65536       # bytes one uniform buffer binding may have
  max_workgroup_size: int = 256        # invocations per workgroup
  max_workgroups_per_dim: int = 65535  # workgroups per grid dimension
  max_buffer_bytes: int = 134217728    # bytes one storage buffer binding may have (WebGPU default)
  fast_math: bool = False              # native sin, log2 (WGSL: 2**-11, 2**-21 absolute)


# the facts the optimizer and lowering read (WebGPU guarantees 256 invocations and 16 KiB of
# workgroup memory). Measured on lavapipe: elementwise kernels of 8 outputs per thread in
# workgroups of 128 (x * 2 + 1 and softmax's exp-divide over 4096x1024 1.2x), written as vectors
# (1.25x); grouped reductions unrolled 4 times (1.4x) with vec4 loads (1.7x more) and at least 16
# steps per lane; register tiles sharing loads over grouped reductions (conv2d 3x3 128ch 14x14:
# 8 vs 130 ms); workgroup-memory tiles off by default (slower there); no fma (a libcall on CPU
# adapters without FMA). See lowering/optimize.py for what each fact steers.
WGSL = Target(name=TARGET, title="WGSL",
              renderer_options=tuple(f.name for f in fields(WGSLOptions)),
              max_local=256, max_local_bytes=16384, upcast=8, upcast_local=128, upcast_vec=True,
              subgroup_dtypes=("float16", "float32", "int32", "uint32"), group_unroll=4,
              group_vec=4, group_min_steps=16, tile_over_group=True, stage_threads=(16, 16),
              runs_wmma=False, backend="wgsl", adapters=True)


def make_options(options: dict) -> WGSLOptions:
  """The renderer's options, checked as every target checks its options (render/target.py)."""
  unknown = [name for name in options if name not in WGSL.renderer_options]
  if unknown:
    raise UnsupportedError(unknown_options_message("WGSL", unknown, WGSL.renderer_options),
                           target=TARGET)
  return WGSLOptions(**options)


# ---- target facts --------------------------------------------------------------------------------

# dtypes WGSL has no type for, and what to do instead
NO_WGSL_TYPE = {
  "float64": "make float64 data float32 (kg.Tensor(data, dtype='float32'), or .cast('float32') "
             "of the data before any other op), or run on PYTHON, PTXSIM or CUDA (target 'ptx')",
  "int64": "make int64 data int32 (kg.Tensor(data, dtype='int32'), or .cast('int32') of the data "
           "before any other op), or run on PYTHON, PTXSIM or CUDA (target 'ptx')",
  "uint64": "make uint64 data uint32 (kg.Tensor(data, dtype='uint32'), or .cast('uint32') of the "
            "data before any other op), or run on PYTHON, PTXSIM or CUDA (target 'ptx')",
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
CALL = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.COS: "cos", Ops.SQRT: "sqrt",
        Ops.TRUNC: "trunc", Ops.MAX: "max", Ops.MIN: "min"}

# subgroup builtins, by the op they combine with
SUBGROUP_CALL = {Ops.ADD: "subgroupAdd", Ops.MUL: "subgroupMul", Ops.MAX: "subgroupMax",
                 Ops.MIN: "subgroupMin", Ops.AND: "subgroupAnd", Ops.OR: "subgroupOr",
                 Ops.XOR: "subgroupXor"}

# largest f32 values that convert into each 32-bit int type (the int maxima round up in f32)
F32_INT_MAX = {"int32": 2147483520.0, "uint32": 4294967040.0}

# whether a or b is NaN, as one integer compare (the larger magnitude's bits above inf's)
NAN_EITHER = ("  let nan = max(bitcast<u32>(a) & 0x7fffffffu, bitcast<u32>(b) & 0x7fffffffu)"
              " > 0x7f800000u;\n")
NAN_EITHER_F16 = NAN_EITHER.replace("(a)", "(f32(a))").replace("(b)", "(f32(b))")

# helper functions, emitted (in this order) when a kernel uses them
HELPERS = {
  "kg_isnan": "fn kg_isnan(x: f32) -> bool {\n"
              "  return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;\n}",
  # branch-free (one select): SwiftShader's shader compiler takes minutes on kernels that inline
  # a few hundred `if (...) { return ...; }` helpers (a register-tiled 3x3 max pool)
  "kg_fmax": "fn kg_fmax(a: f32, b: f32) -> f32 {\n" + NAN_EITHER
             + "  return select(max(a, b), a + b, nan);\n}",
  "kg_fmin": "fn kg_fmin(a: f32, b: f32) -> f32 {\n" + NAN_EITHER
             + "  return select(min(a, b), a + b, nan);\n}",
  "kg_hmax": "fn kg_hmax(a: f16, b: f16) -> f16 {\n" + NAN_EITHER_F16
             + "  return select(max(a, b), a + b, nan);\n}",
  "kg_hmin": "fn kg_hmin(a: f16, b: f16) -> f16 {\n" + NAN_EITHER_F16
             + "  return select(min(a, b), a + b, nan);\n}",
  # branch-free too: exp2 of any t (an indeterminate value out of range), then selects (SwiftShader
  # in Chromium, softmax 4096x1024 in one row kernel: 163 ms with the former `if`s, 95 with
  # these; tinygrad's bare exp2 133)
  "kg_exp2": "fn kg_exp2(t: f32) -> f32 {\n"
             "  let r = select(exp2(t), 0.0f, t < -150.0f);\n"
             "  return select(select(r, t * 3.0e38f, t >= 128.0f), t, kg_isnan(t));\n}",
  # exp2 of an argument never above 0 (render/wgsl/expressions.py bounded_exp2): NaN as x == x
  # (false only for NaN; one compare, where kg_isnan takes two operations)
  "kg_exp2_nonpositive": "fn kg_exp2_nonpositive(t: f32) -> f32 {\n"
                         "  return select(exp2(t), t, !(t == t));\n}",
  "kg_round_f16": "fn kg_round_f16(x: f32) -> f32 {\n"
                  "  return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0f))).x;\n}",
}
HELPER_NEEDS = {"kg_exp2": ("kg_isnan",)}

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
subgroupMin subgroupAnd subgroupOr subgroupXor subgroupAny quadBroadcast
""".split())

# names the renderer makes itself (a user-derived name must not look like one)
OWN_NAME = re.compile(r"(kg_|k_|[vrbl]\d|acc\d|u\d)")


# ops whose 8/16-bit result can leave the type's range: rendered in 32 bits, then wrapped
WRAPPING = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.SHL, Ops.IDIV, Ops.NOT, Ops.MULACC})
# ops that round: on f16 without shader-f16 they run on f32 registers and round to f16 after
ROUNDING = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC}) | GroupOp.Transcendental


# ---- names ---------------------------------------------------------------------------------------

_NOT_NAME, _UNDERSCORES = re.compile(r"[^A-Za-z0-9_]"), re.compile(r"_+")


def clean_name(text: str) -> str:
  """`text` with everything but ASCII letters, digits and single underscores removed."""
  return _UNDERSCORES.sub("_", _NOT_NAME.sub("_", str(text))).strip("_")


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


# ---- buffers and scalar arguments ----------------------------------------------------------------

def buffer_limit(options: dict) -> BufferLimit:
  """Buffers one kernel may bind (the scheduler splits kernels that need more): storage buffers,
  and small read-only inputs as uniform buffers besides (one uniform buffer kept for kg_vars)."""
  opts = make_options(options)
  return BufferLimit(opts.max_storage_buffers, max(opts.max_uniform_buffers - 1, 0),
                     opts.max_uniform_bytes)


def uniform_nbytes(dtype: DType, size: int) -> int:
  """Bytes of a buffer of `size` elements bound as a uniform array of 16-byte words."""
  return -(-binding_nbytes(dtype, size, dtype.name in PACKED_BITS) // 16) * 16


def uniform_slots(kernel: Kernel, opts: WGSLOptions) -> frozenset:
  """The read-only inputs bound as uniform buffers: none while the kernel's buffers fit the
  storage buffers; else as many as it binds over them, smallest first, of those at most
  max_uniform_bytes (graph/bind_limit.py: the scheduler counted the same ones)."""
  over = len(kernel.buffers) - opts.max_storage_buffers
  if over <= 0:
    return frozenset()
  room = opts.max_uniform_buffers - 1     # one for kg_vars, used or not: a symbolic kernel's
                                          # variants (no vars) bind as it does
  small = sorted((nbytes, b.slot) for b in kernel.buffers if b.access == "read" and
                 (nbytes := uniform_nbytes(b.dtype, b.size)) <= opts.max_uniform_bytes)
  return frozenset(slot for _, slot in small[:max(min(over, room), 0)])


def check_buffer_count(count: int, opts: WGSLOptions) -> None:
  if count > opts.max_storage_buffers:
    raise LimitError(f"this kernel uses {count} storage buffers (besides its small read-only "
                     f"inputs bound as uniform buffers); the WebGPU device allows "
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



def uniform_binding(bindings) -> int:
  """The binding index of the uniform buffer of scalar arguments: after the last storage one."""
  return max((b.slot for b in bindings), default=-1) + 1


def kernel_vars(kernel: Kernel) -> tuple[UOp, ...]:
  """The kernel's scalar arguments, in order (Kernel.vars: make_kernel lists every VAR)."""
  return tuple(kernel.vars)
