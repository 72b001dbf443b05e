"""PTX target facts: the archs and their ISA versions, register and instruction types per dtype,
the half-precision ops each arch has, tensor-core shapes, launch limits, the opcode of each ALU op,
and the identifiers PTX accepts. Data only, read by the legalize rules and the writer (ptx.py).
"""
from __future__ import annotations

import hashlib
import re

from ...dtype import DType, dtypes
from ...errors import UnsupportedError
from ...uop.ops import Ops
from ..target import Target

# ---- archs and types -----------------------------------------------------------------------

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

_ARCH, _NOT_IDENTIFIER = re.compile(r"(?:sm_)?(\d+)"), re.compile(r"[^A-Za-z0-9_]")


def parse_arch(arch: str) -> int:
  """The sm number of an arch name ('sm_80' or '80'); UnsupportedError for unknown archs."""
  match = _ARCH.fullmatch(str(arch))
  if match is None or int(match.group(1)) not in ISA_VERSION:
    known = ", ".join(f"sm_{n}" for n in ISA_VERSION)
    raise UnsupportedError(f"unknown PTX arch {arch!r}: use one of {known}", target="ptx")
  return int(match.group(1))


# the facts the optimizer and lowering read: 256 threads per block used (CUDA allows 1024), 48 KiB
# of shared memory, 4 outputs per thread of large elementwise kernels, warp shuffles on 32-bit
# values (bool and 8/16-bit integers fold through memory) and only for whole warps, grouped
# reductions unrolled 4 times with scalar loads, workgroup-memory tiles of 16x16 threads by
# default (the standard shared-memory win on GPUs), fused multiply-add in register tiles, and
# tensor cores (MMA_SHAPES) for matmuls
PTX = Target(name="ptx", title="PTX", renderer_options=("arch", "fast_math", "subgroups"),
             max_local=256, max_local_bytes=49152, subgroup_dtypes=("float32", "int32", "uint32"),
             subgroup_whole_warps=True, group_unroll=4, stage_threads=(16, 16), stage_default=True,
             tile_fma=True, tensor_cores=True, mma_shapes=MMA_SHAPES, arch_number=parse_arch,
             backend="ptx")


def isa_version(arch: str) -> str:
  """The `.version` for an arch, e.g. '7.8' for sm_80 and '8.7' for sm_120."""
  major, minor = ISA_VERSION[parse_arch(arch)]
  return f"{major}.{minor}"


# ---- ALU opcodes ---------------------------------------------------------------------------

# op -> (spelling for integers, for floats, for predicates): {t} the operand type, {b} its bits,
# {s} its signed type. Float max/min also get a NaN fix-up (instructions.emit_alu), selp takes
# (x, y, cond).
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
  Ops.SIN: (None, "sin.approx.{t}", None), Ops.COS: (None, "cos.approx.{t}", None),
  Ops.SQRT: (None, "sqrt.rn.{t}", None),
  Ops.RECIP: (None, "rcp.rn.{t}", None), Ops.TRUNC: (None, "cvt.rzi.{t}.{t}", None),
  Ops.WHERE: ("selp.{b}", "selp.{b}", None), Ops.MULACC: ("mad.lo.{t}", "fma.rn.{t}", None),
}


def alu_opcode(op: Ops, dt: DType) -> str:
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


# ---- names ---------------------------------------------------------------------------------

def ptx_identifier(name: str, prefix: str = "k_") -> str:
  """A valid, readable PTX identifier for any text; a changed name gets a short hash suffix so
  two different names never collide."""
  clean = _NOT_IDENTIFIER.sub("_", name) or "kernel"
  if not clean[0].isalpha():
    clean = prefix + clean
  if clean != name:
    clean += "_" + hashlib.sha1(name.encode()).hexdigest()[:6]
  return clean
