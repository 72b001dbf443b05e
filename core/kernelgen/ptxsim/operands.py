"""PTX types, and warp-wide operand readers and destination writers.

A register holds one Python list of 32 lane values in the representation of its declared type:
floats for .f16/.bf16/.f32/.f64, unsigned bit patterns for .b/.u/.s types, bools for .pred.
An instruction of another type reads it through a conversion (bitcast, truncation) chosen once
at compile time. `W.init[name]` is the bitmask of lanes that have written the register, so a
read by an active lane that never wrote it is caught as an uninitialised read.
"""
from __future__ import annotations

from itertools import compress

from . import numeric as nm
from .parser import PTXSyntaxError, SPECIAL_REGS

FULL = (1 << 32) - 1
BITS = [1 << i for i in range(32)]

# type -> (class, width): class "f" float, "u"/"s"/"b" integers, "p" predicate
TYPES = {"pred": ("p", 1), "f16": ("f", 16), "bf16": ("f", 16), "f32": ("f", 32),
         "f64": ("f", 64), "f16x2": ("b", 32), "bf16x2": ("b", 32), "tf32": ("b", 32)}
TYPES.update({f"{c}{w}": (c, w) for c in "usb" for w in (8, 16, 32, 64)})

_LANES: dict[int, tuple[int, ...]] = {}


def lanes(mask: int) -> tuple[int, ...]:
  """The lane indices set in `mask` (cached: a kernel uses few distinct masks)."""
  found = _LANES.get(mask)
  if found is None:
    found = _LANES[mask] = tuple(i for i in range(32) if mask >> i & 1)
  return found


def mask_of(bools: list) -> int:
  return sum(compress(BITS, bools))


class LaneFault(Exception):
  """Raised inside a step for one lane; the scheduler adds the instruction and the thread."""

  def __init__(self, lane: int, message: str):
    super().__init__(message)
    self.lane, self.message = lane, message


def first_lane(mask: int) -> int:
  return (mask & -mask).bit_length() - 1


# ---- conversions between a register's type and an instruction's type -----------------------

def _masker(width: int):
  m = (1 << width) - 1
  return lambda xs: [x & m for x in xs]


def _sign_extender(frm: int, to: int):
  ext = ((1 << to) - 1) ^ ((1 << frm) - 1)
  top = 1 << (frm - 1)
  return lambda xs: [x | ext if x & top else x for x in xs]


def _compose(f, g):
  if f is None:
    return g
  if g is None:
    return f
  return lambda xs: g(f(xs))


def mismatch(rtype: str, itype: str, where: str):
  return PTXSyntaxError(f"register type .{rtype} does not fit the instruction type .{itype} "
                        f"{where}: declare the register with a matching type")


def conversion(src: str, dst: str, reading: bool, where: str):
  """How a value of type `src` becomes type `dst`: reading a register (`reading`: src is the
  register's type, dst the instruction's) or writing a result (src the instruction's, dst the
  register's). Both engines decide with this and implement the answer their way: None (the same
  bits), ("int", src class, src width, dst width), ("bits", src float type: a float's bits),
  ("float", dst float type: bits as a float; a read may take the low bits of a wider
  register). A PTXSyntaxError where the types cannot meet."""
  (sc, sw), (dc, dw) = TYPES[src], TYPES[dst]
  rtype, itype = (src, dst) if reading else (dst, src)
  if src == dst or (sc in "usb" and dc in "usb" and sw == dw):
    return None
  if sc == "p" or dc == "p" or (sc == "f" and dc == "f"):
    raise mismatch(rtype, itype, where)
  if sc in "usb" and dc in "usb":
    return ("int", sc, sw, dw)
  if sc == "f":
    if sw != dw:
      raise mismatch(rtype, itype, where)
    return ("bits", src)
  if sw < dw or (sw != dw and not reading):
    raise mismatch(rtype, itype, where)
  return ("float", dst)


def read_conversion(rtype: str, itype: str, where: str):
  """A function turning the register's lane list into the instruction type's, or None."""
  kind = conversion(rtype, itype, True, where)
  if kind is None:
    return None
  iw, rw = TYPES[itype][1], TYPES[rtype][1]
  if kind[0] == "int":
    return _masker(iw) if iw < rw else None
  if kind[0] == "bits":
    return nm.BITCASTS[rtype][0]
  return _compose(_masker(iw) if iw < rw else None, nm.BITCASTS[itype][1])


def write_conversion(itype: str, rtype: str, where: str):
  """A function turning an instruction result of `itype` into the register's representation."""
  kind = conversion(itype, rtype, False, where)
  if kind is None:
    return None
  if kind[0] == "int":
    _, ic, iw, rw = kind
    if iw > rw:
      return _masker(rw)
    return _sign_extender(iw, rw) if ic == "s" else None
  return nm.BITCASTS[itype][0] if kind[0] == "bits" else nm.BITCASTS[rtype][1]


# ---- readers --------------------------------------------------------------------------------

def register_type(name: str, regs: dict, where: str) -> str:
  if name in SPECIAL_REGS:
    return "u32"
  rtype = regs.get(name)
  if rtype is None:
    raise PTXSyntaxError(f"register {name} is not declared {where}: add a `.reg` line for it")
  return rtype


def immediate(op, itype: str, where: str):
  """The value of an immediate operand as the instruction type holds it."""
  cls, width = TYPES[itype]
  if op[0] == "imm":
    if cls == "f":
      return nm.round_to(float(op[1]), itype)
    return bool(op[1]) if cls == "p" else op[1] & ((1 << width) - 1)
  value, bits, bwidth = op[1], op[2], op[3]
  if cls == "f":
    return nm.round_to(value, itype)
  if cls == "p":
    raise PTXSyntaxError(f"a float literal cannot be a predicate {where}")
  if bits is not None and bwidth == width:
    return bits
  raise PTXSyntaxError(f"float literal {value} does not fit .{itype} {where}: write it as a "
                       f"0f (32-bit) or 0d (64-bit) hex literal of the right width")


def reader(op, itype: str, ctx, where: str):
  """A function (W, am) -> the operand's 32 lane values as `itype` holds them."""
  kind = op[0]
  if kind in ("imm", "fimm"):
    const = [immediate(op, itype, where)] * 32
    return lambda W, am: const
  if kind == "sym":
    const = [ctx.symbol_address(op[1], where)] * 32
    return lambda W, am: const
  if kind == "not":
    inner = reader(("reg", op[1]), itype, ctx, where)
    return lambda W, am: [not x for x in inner(W, am)]
  if kind != "reg":
    raise PTXSyntaxError(f"operand {op} cannot be read as .{itype} {where}")
  name = op[1]
  conv = read_conversion(register_type(name, ctx.regs, where), itype, where)

  def read(W, am):
    if W.init.get(name, 0) & am != am:
      raise LaneFault(first_lane(am & ~W.init.get(name, 0)),
                      f"read of uninitialised register {name}")
    return W.R[name] if conv is None else conv(W.R[name])
  return read


# ---- writers --------------------------------------------------------------------------------

def store_lanes(W, am: int, name: str, vals: list) -> None:
  """Set register `name` to `vals` in the lanes of `am`; the other lanes keep their values."""
  R = W.R
  if am == FULL:
    R[name] = vals
    W.init[name] = FULL
    return
  old = R.get(name)
  if old is None:
    R[name] = vals
  else:
    new = old[:]
    for i in lanes(am):
      new[i] = vals[i]
    R[name] = new
  W.init[name] = W.init.get(name, 0) | am


def writer(op, itype: str, ctx, where: str):
  """A function (W, am, values-as-itype) that stores a result into the destination register."""
  if op[0] != "reg" or op[1] in SPECIAL_REGS:
    raise PTXSyntaxError(f"the destination must be a register {where}")
  name = op[1]
  conv = write_conversion(itype, register_type(name, ctx.regs, where), where)
  if conv is None:
    return lambda W, am, vals: store_lanes(W, am, name, vals)
  return lambda W, am, vals: store_lanes(W, am, name, conv(vals))
