"""The fast engine's registers: numpy arrays over every thread of a batch of CTAs.

A register holds one array with a value per thread, holding the values the reference engine
holds per lane (operands.py): float32 for .f32, float64 for .f16/.bf16/.f64 (exact values of
the format), unsigned integers of the register's width for .b/.u/.s types, bools for .pred.
The reference engine widens an f32 to a double wherever it reads one from bits (which quiets a
signalling NaN), so f32 values read from bits are quieted the same way here. An
instruction runs for a sorted array `idx` of thread slots (or None: every slot of the batch);
readers return the operand for those slots, writers store into them. Conversions between a
register's type and an instruction's mirror operands.read_conversion / write_conversion, with
NaN lanes of .f16 going through the reference engine's own struct conversions.
"""
from __future__ import annotations

import numpy as np

from . import numeric as nm
from .operands import TYPES, conversion, immediate, register_type
from .parser import PTXSyntaxError, SPECIAL_REGS

UINT = {1: np.bool_, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
SINT = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
NAN = np.float64(float("nan"))


class Fault(Exception):
  """A fault of thread slot `slot` (the scheduler names the instruction and the thread)."""

  def __init__(self, slot: int, message: str):
    super().__init__(message)     # slot: a batch slot, or (CTA of the batch, thread in it)
    self.slot, self.message = slot if isinstance(slot, tuple) else int(slot), message


class NotFast(Exception):
  """An instruction the fast engine does not cover: the entry runs on the reference engine."""


def rdtype(t: str):
  """The numpy dtype a value of PTX type `t` is held in."""
  cls, w = TYPES[t]
  if cls == "p":
    return np.bool_
  if cls == "f":
    return np.float32 if t == "f32" else np.float64
  return UINT[w]


def has_nan(x) -> bool:
  """Whether an array (or numpy scalar) holds a NaN: for a 1-D array one NaN-propagating max
  (cheaper than a mask and its reduction)."""
  if type(x) is not np.ndarray or x.ndim != 1:
    return bool(np.isnan(x).any())
  if not x.size:
    return False
  m = np.maximum.reduce(x)
  return bool(m != m)


def quiet32(x):
  """f32 values with each NaN passed through a double, as the reference's struct/array
  conversions do (a signalling NaN becomes quiet)."""
  if has_nan(x):
    nan = x != x
    x = np.array(x, copy=True)
    x[nan] = x[nan].astype(np.float64).astype(np.float32)
  return x


def count(S, idx) -> int:
  return S.n if idx is None else len(idx)


def full(S, idx, value, t: str):
  """An operand value (array or scalar) as an array over the active slots."""
  arr = np.asarray(value)
  if arr.ndim:
    return arr
  return np.full(count(S, idx), arr, dtype=rdtype(t))


# ---- bit patterns of float formats, warp-wide as numpy arrays -----------------------------

def f16_bits(x):
  bits = x.astype(np.float16).view(np.uint16)
  nan = np.isnan(x)
  if nan.any():
    bits = bits.copy()
    bits[nan] = nm.f16s_to_bits(x[nan].tolist())
  return bits


def f16_values(b):
  b = b.astype(np.uint16)
  vals = b.view(np.float16).astype(np.float64)
  nan = np.isnan(vals)
  if nan.any():
    vals[nan] = nm.bits_to_f16s(b[nan].tolist())
  return vals


TO_BITS = {"f32": lambda x: np.asarray(x, np.float32).view(np.uint32),
           "f64": lambda x: np.ascontiguousarray(x).view(np.uint64),
           "f16": f16_bits,
           "bf16": lambda x: (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)}
FROM_BITS = {"f32": lambda b: quiet32(b.astype(np.uint32).view(np.float32)),
             "f64": lambda b: np.ascontiguousarray(b, np.uint64).view(np.float64),
             "f16": f16_values,
             "bf16": lambda b: (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)}


def read_conversion(rtype: str, itype: str, where: str):
  """operands.read_conversion for arrays: the register's values as the instruction type's."""
  kind = conversion(rtype, itype, True, where)
  if kind is None:
    return None
  if kind[0] == "int":
    d = UINT[kind[3]]
    return lambda x: x.astype(d)
  return TO_BITS[rtype] if kind[0] == "bits" else FROM_BITS[itype]


def write_conversion(itype: str, rtype: str, where: str):
  """operands.write_conversion for arrays: an instruction result into the register's form."""
  kind = conversion(itype, rtype, False, where)
  if kind is None:
    return None
  if kind[0] == "int":
    _, ic, iw, rw = kind
    d = UINT[rw]
    if iw < rw and ic == "s":
      s_in, s_out = SINT[iw], SINT[rw]
      return lambda x: x.view(s_in).astype(s_out).view(d)
    return lambda x: x.astype(d)
  return TO_BITS[itype] if kind[0] == "bits" else FROM_BITS[rtype]


# ---- readers and writers ------------------------------------------------------------------

def scalar(value, t: str):
  return np.asarray(value, dtype=rdtype(t))[()]


def reader(op, itype: str, ctx, where: str):
  """(S, idx) -> the operand's values for the slots `idx` (an array, or a numpy scalar)."""
  kind = op[0]
  if kind in ("imm", "fimm", "sym"):
    value = immediate(op, itype, where) if kind != "sym" else ctx.symbol_address(op[1], where)
    return _constant(scalar(value, itype))
  if kind == "not":
    inner = reader(("reg", op[1]), itype, ctx, where)
    return lambda S, idx: ~inner(S, idx)
  if kind != "reg":
    raise PTXSyntaxError(f"operand {op} cannot be read as .{itype} {where}")
  name = op[1]
  conv = read_conversion(register_type(name, ctx.regs, where), itype, where)
  if name in SPECIAL_REGS:
    get = _special_getter(name)
  elif name in ctx.tracked:
    get = _checked_getter(name)
  else:
    get = _getter(name)
  if conv is None:
    return get
  return lambda S, idx: conv(get(S, idx))


def _constant(const):
  def get(S, idx):
    return const
  get.const = const       # fast_direct.py reads immediates from here
  return get


def _getter(name):
  def get(S, idx):
    arr = S.R[name]
    return arr if idx is None else arr[idx]
  get.reg = name          # a plain register (no conversion, no check): fast_direct.py reads it
  return get


def _special_getter(name):
  def get(S, idx):
    arr = S.special(name)
    return arr if idx is None else arr[idx]
  return get


def _checked_getter(name):
  def get(S, idx):
    init = S.init.get(name)
    ok = init if idx is None or init is None else init[idx]
    if init is None or not ok.all():
      bad = 0 if init is None else int(np.argmin(ok))
      raise Fault(bad if idx is None else idx[bad], f"read of uninitialised register {name}")
    arr = S.R[name]
    return arr if idx is None else arr[idx]
  return get


def writer(op, itype: str, ctx, where: str):
  """(S, idx, values) -> store the values (as `itype` holds them) into the register."""
  if op[0] != "reg" or op[1] in SPECIAL_REGS:
    raise PTXSyntaxError(f"the destination must be a register {where}")
  name = op[1]
  rtype = register_type(name, ctx.regs, where)
  conv, it, rt = write_conversion(itype, rtype, where), rdtype(itype), rdtype(rtype)
  tracked = name in ctx.tracked

  def write(S, idx, vals, mask=None):
    vals = np.asarray(vals, dtype=it)
    if conv is not None:
      vals = conv(vals)
    if mask is not None:
      _merge_into(S, name, idx, vals, mask, rt, tracked)
    elif idx is None:   # a view would share memory with the register it came from: mark it
      S.R[name] = (vals if vals.base is None else shared(vals)) if vals.ndim else \
        np.full(S.n, vals, dtype=rt)
    else:
      arr = S.R.get(name)
      if arr is None:
        arr = S.R[name] = np.zeros(S.n, dtype=rt)
      elif not arr.flags.writeable:     # shared with another register: copy on write
        arr = S.R[name] = arr.copy()
      arr[idx] = vals
    if tracked and mask is None:
      _mark(S, name, idx)
  if not tracked:     # what fast_direct.py needs to store as this writer stores
    write.direct = (name, it, conv, rt)
  return write


def _merge_into(S, name, idx, vals, mask, rt, tracked):
  """Store `vals` (computed for every thread of the group) where `mask` holds: a guarded
  instruction run at full width."""
  old = S.R.get(name)
  if idx is None:
    S.R[name] = np.where(mask, vals, old if old is not None else rt(0)).astype(rt, copy=False)
  else:
    if old is None:
      old = S.R[name] = np.zeros(S.n, dtype=rt)
    elif not old.flags.writeable:
      old = S.R[name] = old.copy()
    old[idx] = np.where(mask, vals, old[idx])
  if tracked:
    _mark(S, name, np.flatnonzero(mask) if idx is None else idx[mask])


def shared(vals):
  """`vals` (an array another register, or a view's base, may also hold) marked read-only:
  a masked write to a register holding it copies it first."""
  if vals.base is not None:
    vals.base.flags.writeable = False
  vals.flags.writeable = False
  return vals


def _mark(S, name, idx):
  init = S.init.get(name)
  if init is None:
    init = S.init[name] = np.zeros(S.n, dtype=np.bool_)
  if idx is None:
    init[:] = True
  else:
    init[idx] = True
