"""The PTX renderer: a linearized kernel -> PTX text for one NVIDIA arch (sm_75 .. sm_121).

Two steps, as every renderer (the PTX Target calls them: render/target.py):

- `legalize(sink, arch)`: this target's own rewrite rules, run on the kernel graph before it is
  linearized. Half-precision ops the arch has no instruction for are computed in float32 and
  rounded back; int8/uint8 arithmetic is done on 16-bit values (PTX has no 8-bit registers, so
  8-bit values live sign/zero-extended in 16-bit registers); bool logic is reduced to and/or/xor/not
  on predicates; bfloat16 conversions go through float32; tensor-core shapes are checked against
  the arch, with an UnsupportedError naming the archs that have the shape, before any source exists.
- `render(kernel, arch)`: one pass over the linearized list. Every value gets fresh typed
  registers (SSA style; vectors are a list of scalar registers), constants are immediates (f16,
  bf16 and bool constants are moved into registers first), loops are labels and branches.

Every instruction form these files can emit is listed in PTX-SUBSET.md (the PTX simulator implements
exactly that list). Float add/sub/mul are written with `.rn` so ptxas never contracts them into
fma: results match numpy's separately rounded operations.

The parts: target.py (the PTX Target and facts: types, archs, opcodes), legalize.py (the rewrite
rules), writer.py (registers, operands, the `.entry` text), instructions.py (the value ops'
instructions); this file has the definitions and control flow, the op -> handler table and
`render`.
"""
from __future__ import annotations

import struct

from ...dtype import DType, dtypes
from ...errors import LimitError, UnsupportedError
from ...uop.ops import GroupOp, Ops, UOp
from ...uop.program import Binding, CompiledKernel, Kernel, Launch
from .instructions import (emit_alu, emit_atomic_add, emit_bitcast, emit_cast, emit_load,
                           emit_store, emit_subgroup_reduce, emit_wmma)
from .legalize import legalize
from .target import MAX_THREADS, parse_arch, ptx_identifier
from ..templates import ENTRY_MARK, NAME_MARK, Templates, buffer_mark, fill
from .writer import Writer, emit_mov, param_name, var_name

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
  from ...dtype import to_bits
  return "0x%04X" % to_bits(value, dt.scalar)


# ---- definitions ---------------------------------------------------------------------------

def _param(w: Writer, u: UOp) -> None:
  reg = w.new_reg(dtypes.uint64)
  w.emit(f"ld.param.u64 {reg}, [{buffer_mark(u.arg)}]")
  w.emit(f"cvta.to.global.u64 {reg}, {reg}")
  w.lanes[u] = [reg]


def _var(w: Writer, u: UOp) -> None:
  reg = w.new_reg(dtypes.int32)
  w.emit(f"ld.param.s32 {reg}, [{var_name(u)}]")
  w.lanes[u] = [reg]


def _define_local(w: Writer, u: UOp) -> None:
  base = u.dtype.base
  nbytes = max(u.dtype.size, 1) * base.itemsize * base.count
  w.shared.append(f"\t.shared .align 16 .b8 smem{u.arg}[{nbytes}];")
  reg = w.new_reg(dtypes.uint64)
  w.emit(f"mov.u64 {reg}, smem{u.arg}")
  w.lanes[u] = [reg]


def _special(w: Writer, u: UOp) -> None:
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


def _const(w: Writer, u: UOp) -> None:
  text = _immediate(u.arg, u.dtype)
  if text is not None:
    w.lanes[u] = [text]
  elif u.dtype == dtypes.bool:
    w.lanes[u] = [w.const_reg("1" if u.arg else "0", dtypes.bool)]
  else:
    w.lanes[u] = [w.const_reg(_half_bits(u.arg, u.dtype), u.dtype)]


# ---- accumulators, loops, blocks -----------------------------------------------------------

def _define_acc(w: Writer, u: UOp) -> None:
  regs = [w.new_reg(u.dtype) for _ in range(u.dtype.count)]
  for lane, reg in enumerate(regs):
    emit_mov(w, u.dtype, reg, w.operand(u.src[0], lane))
  w.lanes[u] = regs


def _assign(w: Writer, u: UOp) -> None:
  acc, value = u.src
  for lane, reg in enumerate(w.lanes[acc]):
    emit_mov(w, acc.dtype, reg, w.operand(value, lane))
  w.lanes[u] = w.lanes[acc]


def _after(w: Writer, u: UOp) -> None:
  w.lanes[u] = w.lanes[u.src[0]]


def _range(w: Writer, u: UOp) -> None:
  counter, done = w.new_reg(dtypes.int32), w.new_reg(dtypes.bool)
  top = w.label(u, "loop")
  w.emit(f"mov.u32 {counter}, 0")
  w.body.append(f"{top}:")
  w.emit(f"setp.ge.s32 {done}, {counter}, {w.operand(u.src[0])}")
  w.emit(f"@{done} bra {top}_end")
  w.lanes[u] = [counter]


def _endrange(w: Writer, u: UOp) -> None:
  rng = u.src[0]
  counter, top = w.lanes[rng][0], w.labels[rng]
  w.emit(f"add.s32 {counter}, {counter}, 1")
  w.emit(f"bra {top}")
  w.body.append(f"{top}_end:")


def _if(w: Writer, u: UOp) -> None:
  w.emit(f"@!{w.reg(u.src[0])} bra {w.label(u, 'if')}_end")


def _endif(w: Writer, u: UOp) -> None:
  w.body.append(f"{w.labels[u.src[0]]}_end:")


def _barrier(w: Writer, u: UOp) -> None:
  w.emit("bar.sync 0")


def _nothing(w: Writer, u: UOp) -> None:
  return None


def _vectorize(w: Writer, u: UOp) -> None:
  w.lanes[u] = [w.operand(s) for s in u.src]


def _gep(w: Writer, u: UOp) -> None:
  w.lanes[u] = [w.operand(u.src[0], u.arg)]


# ---- render --------------------------------------------------------------------------------

# op -> how the writer renders it
_HANDLERS = {Ops.PARAM: _param, Ops.VAR: _var, Ops.DEFINE_LOCAL: _define_local,
             Ops.SPECIAL: _special, Ops.CONST: _const, Ops.DEFINE_ACC: _define_acc,
             Ops.ASSIGN: _assign, Ops.AFTER: _after, Ops.RANGE: _range, Ops.ENDRANGE: _endrange,
             Ops.IF: _if, Ops.ENDIF: _endif, Ops.BARRIER: _barrier, Ops.SINK: _nothing,
             Ops.VECTORIZE: _vectorize, Ops.GEP: _gep, Ops.CAST: emit_cast, Ops.BITCAST: emit_bitcast,
             Ops.LOAD: emit_load, Ops.STORE: emit_store, Ops.WMMA: emit_wmma,
             Ops.SUBGROUP_REDUCE: emit_subgroup_reduce, Ops.ATOMIC_ADD: emit_atomic_add,
             **{op: emit_alu for op in GroupOp.ALU}}


def _bindings(kernel: Kernel) -> tuple[Binding, ...]:
  return tuple(Binding(b.slot, b.name, b.dtype.name, b.size, b.access, b.size * b.dtype.itemsize)
               for b in kernel.buffers)


# the kernels written last, names left as marks (render/templates.py): a kernel of the same
# structure under other names is filled in, not written again
_TEMPLATES = Templates()


def _template(kernel: Kernel, sm: int) -> tuple:
  """(the kernel's PTX with its names left as marks, its folded grid or None)."""
  writer = Writer(kernel, sm, _HANDLERS)
  return writer.render(), writer.grid


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
  template, grid = _TEMPLATES.get(kernel, sm, lambda k: _template(k, sm))
  source = fill(template, {NAME_MARK: ascii(kernel.name), ENTRY_MARK: ptx_identifier(kernel.name),
                           **{buffer_mark(b.slot): param_name(b.slot, kernel)
                              for b in kernel.buffers}})
  launch = Launch("ptx", source, ptx_identifier(kernel.name), _bindings(kernel),
                  kernel.local_size, grid or kernel.global_size,
                  tuple((v.arg[0], "int32") for v in kernel.vars))
  return CompiledKernel(kernel.name, "ptx", source, kernel.global_size, kernel.local_size,
                        kernel.buffers, launch, kernel)
