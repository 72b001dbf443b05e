"""The memory and warp instructions as steps: ld, st (global, shared, param; .v2/.v4),
atom.shared.add and shfl.sync.bfly (compile.py dispatches to them).
"""
from __future__ import annotations

import struct

from .operands import FULL, TYPES, LaneFault, first_lane, lanes, reader, writer
from .parser import Instr, PTXSyntaxError
from .steps import STEP, Context, checked_operands, split_mods, where_text, unsupported

CACHE_OPS = {"ca", "cg", "cs", "lu", "cv", "nc", "wb", "wt", "weak", "volatile", "relaxed"}
# memory type -> struct code of one element (integers as unsigned bit patterns)
MEM_CODES = {"u8": "B", "s8": "B", "b8": "B", "u16": "H", "s16": "H", "b16": "H", "f16": "e",
             "bf16": "H", "u32": "I", "s32": "I", "b32": "I", "f32": "f", "u64": "Q",
             "s64": "Q", "b64": "Q", "f64": "d"}
# memory type -> the type a register is read/written as (bf16 moves as raw bits)
MEM_AS = {"bf16": "b16"}


def mem_mods(ins: Instr) -> tuple[str, int, str]:
  """(space, vector width, element type) of an ld/st."""
  mods, t = split_mods(ins, {"global", "shared", "param", "v2", "v4"} | CACHE_OPS)
  spaces = mods & {"global", "shared", "param"}
  if len(spaces) > 1 or t not in MEM_CODES:
    raise unsupported(ins)
  vec = 4 if "v4" in mods else 2 if "v2" in mods else 1
  return (next(iter(spaces), "generic"), vec, t)


def ld_operands(ins: Instr) -> tuple:
  """(space, vector width, memory type, register type, destination operands, address operand)
  of an ld, checked: what both engines decode the same way."""
  space, vec, t = mem_mods(ins)
  dst, addr = checked_operands(ins, 2)
  dsts = dst[1] if dst[0] == "vec" and space != "param" else (dst,)
  if space != "param" and len(dsts) != vec:
    raise unsupported(ins, f"{vec} destination registers expected")
  return space, vec, t, MEM_AS.get(t, t), dsts, addr


def st_operands(ins: Instr) -> tuple:
  """(space, vector width, memory type, register type, address operand, source operands) of
  an st, checked (both engines)."""
  space, vec, t = mem_mods(ins)
  if space == "param":
    raise unsupported(ins, "kernels cannot store to parameters")
  addr, src = checked_operands(ins, 2)
  srcs = src[1] if src[0] == "vec" else (src,)
  if len(srcs) != vec:
    raise unsupported(ins, f"{vec} source values expected")
  return space, vec, t, MEM_AS.get(t, t), addr, srcs


def param_name(ins: Instr, ctx: Context, addr) -> str:
  """The kernel parameter an ld.param reads, checked (both engines)."""
  if addr[0] != "addr" or addr[1] is None or addr[1][0] != "sym" or addr[2] != 0:
    raise unsupported(ins, "ld.param reads a kernel parameter by name: [name]")
  name = addr[1][1]
  if name not in ctx.params:
    raise PTXSyntaxError(f"unknown kernel parameter {name} {where_text(ins)}", line=ins.line)
  return name


def _address(op, ctx: Context, ins: Instr):
  """(W, am) -> the byte address of every lane."""
  if op[0] != "addr":
    raise unsupported(ins, "the address must be written [reg+offset] or [symbol+offset]")
  base, off = op[1], op[2]
  if base is None:
    const = [off] * 32
    return lambda W, am: const
  if base[0] == "sym":
    const = [ctx.symbol_address(base[1], where_text(ins)) + off] * 32
    return lambda W, am: const
  t = "u64" if ctx.regs.get(base[1], "u64")[-2:] == "64" else "u32"
  read = reader(base, t, ctx, where_text(ins))
  if off == 0:
    return read
  return lambda W, am: [a + off for a in read(W, am)]


def _space(W, space: str, addrs: list, am: int):
  if space == "global":
    return None
  if space == "shared":
    return W.cta.shared
  a = addrs[first_lane(am)]
  return W.cta.shared if a < (1 << 32) else None


def compile_ld(ins: Instr, ctx: Context):
  space, vec, t, rt, dsts, addr = ld_operands(ins)
  where = where_text(ins)
  if space == "param":
    return _ld_param(ins, ctx, t, dsts[0], addr)
  writes = [writer(d, rt, ctx, where) for d in dsts]
  size = TYPES[t][1] // 8 * vec
  unpack = struct.Struct("<" + MEM_CODES[t] * vec).unpack_from
  get_addr = _address(addr, ctx, ins)

  def step(W, am):
    addrs = get_addr(W, am)
    shared = _space(W, space, addrs, am)
    if shared is None:
      vals = W.cta.memory.load(addrs, lanes(am), unpack, size, vec == 1)
    else:
      vals = shared.load(addrs, lanes(am), unpack, size, vec == 1, W.tid0)
    if vec == 1:
      writes[0](W, am, vals)
      return
    for k, wr in enumerate(writes):
      wr(W, am, [v[k] if v else 0 for v in vals])
  return STEP, step, None


def _ld_param(ins, ctx, t, dst, addr):
  name = param_name(ins, ctx, addr)
  write = writer(dst, t, ctx, where_text(ins))
  cls, w = TYPES[t]

  def step(W, am):
    value = W.cta.params[name]
    write(W, am, [value if cls == "f" else value & ((1 << w) - 1)] * 32)
  return STEP, step, None


def compile_st(ins: Instr, ctx: Context):
  space, vec, t, rt, addr, src_ops = st_operands(ins)
  where = where_text(ins)
  srcs = [reader(s, rt, ctx, where) for s in src_ops]
  size = TYPES[t][1] // 8 * vec
  pack = struct.Struct("<" + MEM_CODES[t] * vec).pack_into
  get_addr = _address(addr, ctx, ins)

  def step(W, am):
    addrs = get_addr(W, am)
    values = list(zip(*[r(W, am) for r in srcs]))
    shared = _space(W, space, addrs, am)
    if shared is None:
      W.cta.memory.store(addrs, lanes(am), pack, size, values)
    else:
      shared.store(addrs, lanes(am), pack, size, values, W.tid0)
  return STEP, step, None


def compile_atom(ins: Instr, ctx: Context):
  """atom.shared.add.{u32,s32} d, [addr], b: the active lanes add in lane order; each gets the
  value before its own add. Atomics are not data races (the race detector skips them)."""
  mods, t = split_mods(ins, {"shared", "add"})
  if mods != {"shared", "add"} or t not in ("u32", "s32"):
    raise unsupported(ins, "only atom.shared.add.u32 / .s32 are simulated")
  dst, addr, src = checked_operands(ins, 3)
  where = where_text(ins)
  write, read = writer(dst, t, ctx, where), reader(src, t, ctx, where)
  get_addr, codec = _address(addr, ctx, ins), struct.Struct("<I")

  def step(W, am):
    addrs, values, old = get_addr(W, am), read(W, am), [0] * 32
    shared = W.cta.shared
    for i in lanes(am):
      off = shared._offset(addrs[i], 4, i, "atomic add")
      old[i] = codec.unpack_from(shared.data, off)[0]
      codec.pack_into(shared.data, off, (old[i] + values[i]) & 0xFFFFFFFF)
    write(W, am, [v - (1 << 32) if t == "s32" and v >> 31 else v for v in old])
  return STEP, step, None


def shfl_form(ins: Instr) -> tuple:
  """(destination, source, lane xor, clamp, member mask) of a shfl.sync.bfly.b32, checked
  (both engines)."""
  if ins.mods != ("sync", "bfly", "b32"):
    raise unsupported(ins, "only shfl.sync.bfly.b32 is simulated")
  dst, src, b, c, member = checked_operands(ins, 5)
  if any(op[0] != "imm" for op in (b, c, member)) or c[1] & ~0x1F:
    raise unsupported(ins, "lane offset, clamp and member mask must be immediates (no segments)")
  return dst, src, b[1] & 31, c[1], member[1] & FULL


def compile_shfl(ins: Instr, ctx: Context):
  """shfl.sync.bfly.b32 d, a, b, c, membermask: lane i reads a from lane i ^ b (its own when that
  is past the clamp c); every lane of membermask must execute it, and read only active lanes."""
  dst, src, step_, clamp, wanted = shfl_form(ins)
  where = where_text(ins)
  write, read = writer(dst, "b32", ctx, where), reader(src, "b32", ctx, where)

  def step(W, am):
    if am != wanted & W.live:
      raise LaneFault(first_lane(am ^ (wanted & W.live)), "shfl.sync: the lanes executing it "
                      "must be exactly the member mask's (converged warp)")
    values, out = read(W, am), [0] * 32
    for i in lanes(am):
      j = i ^ step_
      j = i if j > clamp else j
      if not am >> j & 1:
        raise LaneFault(i, f"shfl.sync reads lane {j}, which is not active: undefined value")
      out[i] = values[j]
    write(W, am, out)
  return STEP, step, None
