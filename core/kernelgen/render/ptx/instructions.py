"""The PTX instructions of value ops: ALU, conversions, loads and stores, tensor cores, warp
reductions and shared atomics, one handler per op (ptx.py maps ops to handlers).
"""
from __future__ import annotations

from ...dtype import DType, dtypes
from ...uop.ops import Ops, UOp
from ...rules.ranges import divisible
from .target import COMPUTE_TYPE, MEMORY_TYPE, MMA_SHAPES, PTX_TYPE, alu_opcode
from .writer import emit_mov, Writer

# ---- ALU -----------------------------------------------------------------------------------

def _shift_amount(w: Writer, u: UOp, lane: int) -> str:
  """PTX shifts take a u32 amount: 16- and 64-bit amounts are converted."""
  amount, dt = w.operand(u.src[1], lane), u.src[1].dtype.scalar
  if dt.itemsize == 4 or not amount.startswith("%"):
    return amount
  reg = w.new_reg(dtypes.uint32)
  w.emit(f"cvt.u32.{COMPUTE_TYPE[dt.name].replace('s', 'u')} {reg}, {amount}")
  return reg


def emit_alu(w: Writer, u: UOp) -> None:
  dt = (u.src[1] if u.op is Ops.WHERE else u.src[0]).dtype.scalar
  opcode = alu_opcode(u.op, dt)
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


def _nan_propagate(w: Writer, dt: DType, reg: str, args: list[str]) -> None:
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


def emit_cast(w: Writer, u: UOp) -> None:
  src, dst = u.src[0].dtype.scalar, u.dtype.scalar
  if _extended_load(u.src[0], src, dst):   # ld.s8/u8 already sign/zero-extended the 16 bits
    w.lanes[u] = w.lanes[u.src[0]]
    return
  regs = []
  for lane in range(u.dtype.count):
    if src == dst:
      regs.append(w.operand(u.src[0], lane))
      continue
    reg = w.new_reg(dst)
    w.emit(_cast_line(src, dst, reg, w.reg(u.src[0], lane)))
    regs.append(reg)
  w.lanes[u] = regs


def _extended_load(x: UOp, src: DType, dst: DType) -> bool:
  """x is an ungated 8-bit integer load cast to a 16-bit integer: the register ld wrote (.b16,
  sign- or zero-extended by ld per src) holds the 16-bit value already."""
  return (x.op is Ops.LOAD and src.itemsize == 1 and dst.itemsize == 2 and src.is_int()
          and dst.is_int() and len(x.src) != 4)


def emit_bitcast(w: Writer, u: UOp) -> None:
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


def _pack(w: Writer, x: UOp, group: int, dst: DType) -> list[str]:
  """Every `group` lanes of x moved into one register of dst (first lane in the low bits)."""
  regs = []
  for first in range(0, x.dtype.count, group):
    reg = w.new_reg(dst)
    lanes = ", ".join(w.reg(x, lane) for lane in range(first, first + group))
    w.emit(f"mov.b{dst.itemsize * 8} {reg}, {{{lanes}}}")
    regs.append(reg)
  return regs


def _unpack(w: Writer, x: UOp, group: int, dst: DType) -> list[str]:
  regs = []
  for lane in range(x.dtype.count):
    parts = [w.new_reg(dst) for _ in range(group)]
    w.emit(f"mov.b{x.dtype.itemsize * 8} {{{', '.join(parts)}}}, {w.reg(x, lane)}")
    regs += parts
  return regs


# ---- memory --------------------------------------------------------------------------------

def _base_buffer(buf: UOp) -> UOp:
  while buf.op is Ops.AFTER:
    buf = buf.src[0]
  return buf


def _chunks(dt: DType, index: UOp) -> list[tuple[int, int]]:
  """(first lane, lanes) of each ld/st: .v4/.v2 when the access is provably aligned."""
  for n in (4, 2):
    if dt.count % n == 0 and n * dt.itemsize <= 16 and dt.scalar != dtypes.bool \
        and divisible(index, n):
      return [(first, n) for first in range(0, dt.count, n)]
  return [(lane, 1) for lane in range(dt.count)]


def _address(w: Writer, buf: UOp, index: UOp) -> tuple[str, int]:
  """(64-bit address register, constant byte offset) of buf[index]."""
  base, size = w.reg(buf), buf.dtype.base.scalar.itemsize
  if index.op is Ops.CONST and index.arg >= 0:
    return base, index.arg * size
  if index.op is Ops.ADD and index.src[1].op is Ops.CONST and index.src[1].arg > 0:
    addr, offset = _address(w, buf, index.src[0])
    return addr, offset + index.src[1].arg * size
  key, scaled = (buf, index), (index, size)
  if key not in w.addresses:             # computed once per block (and index * size too)
    if scaled not in w.addresses:
      w.addresses[scaled] = w.new_reg(dtypes.int64)
      w.emit(f"mul.wide.s32 {w.addresses[scaled]}, {w.operand(index)}, {size}")
    w.addresses[key] = w.new_reg(dtypes.int64)
    w.emit(f"add.s64 {w.addresses[key]}, {base}, {w.addresses[scaled]}")
  return w.addresses[key], 0


def _memory_args(w: Writer, u: UOp, value_dtype: DType):
  buf = _base_buffer(u.src[0])
  space = "shared" if buf.dtype.local else "global"
  addr, offset = _address(w, buf, u.src[1])
  mem_type = MEMORY_TYPE[value_dtype.scalar.name]
  return space, addr, offset, mem_type, _chunks(value_dtype, u.src[1])


def _at(addr: str, offset: int) -> str:
  return f"[{addr}+{offset}]" if offset else f"[{addr}]"


def emit_load(w: Writer, u: UOp) -> None:
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
      emit_mov(w, u.dtype, reg, w.operand(u.src[3], lane), pred=gate.replace("@", "@!"))
  w.lanes[u] = regs


def emit_store(w: Writer, u: UOp) -> None:
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


def _byte_of(w: Writer, value: UOp, lane: int) -> str:
  reg = w.new_reg(dtypes.uint16)
  w.emit(f"selp.u16 {reg}, 1, 0, {w.reg(value, lane)}")
  return reg


# ---- tensor cores --------------------------------------------------------------------------

def _mma_operand(w: Writer, x: UOp, ptx_in: str) -> list[str]:
  """A fragment as the 32-bit registers mma.sync takes: two halfs per register, or tf32."""
  if ptx_in != "tf32":
    return _pack(w, x, 2, dtypes.uint32)
  regs = []
  for lane in range(x.dtype.count):
    reg = w.new_reg(dtypes.uint32)
    w.emit(f"cvt.rna.tf32.f32 {reg}, {w.reg(x, lane)}")
    regs.append(reg)
  return regs


def emit_wmma(w: Writer, u: UOp) -> None:
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


def emit_subgroup_reduce(w: Writer, u: UOp) -> None:
  dt, acc = u.dtype, w.reg(u.src[0])
  opcode = alu_opcode(u.arg, dt)
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


def emit_atomic_add(w: Writer, u: UOp) -> None:
  buf = _base_buffer(u.src[0])
  addr, offset = _address(w, buf, u.src[1])
  gate = f"@{w.reg(u.src[3])} " if len(u.src) == 4 else ""
  reg, t = w.new_reg(u.dtype), PTX_TYPE[u.dtype.name]
  w.emit(f"{gate}atom.shared.add.{t} {reg}, {_at(addr, offset)}, {w.operand(u.src[2])}")
  if gate:
    emit_mov(w, u.dtype, reg, "0", pred=gate.replace("@", "@!"))
  w.lanes[u] = [reg]
