"""Data types: scalars, vectors and pointers; promotion; exact value semantics for constants.

A DType is a frozen, interned value (equal dtypes are one object, so hash and == are identity).
Scalars are module-level singletons in `dtypes`; `t.vec(n)` makes a vector of n lanes and
`t.ptr(size, local=False)` a pointer to `size` elements of `t` in global or workgroup (local)
memory. Constant values are kept in Python numbers, truncated with
`truncate(value, dtype)` so that folding gives the same bits a GPU would compute.
"""
from __future__ import annotations

import math
import struct
from dataclasses import MISSING, dataclass, fields

from .errors import DTypeError


class _Interned(type):
  """Every DType is interned: building one equal to an existing one returns that object, so
  equal dtypes are the same object and hash and == are identity (C-level: they run on every
  node built and every dtype check). Key: the class and the value of every field."""
  _table: dict = {}

  def __call__(cls, *args, **kwargs):
    n = len(args)
    key = (cls, *args) if n == len(cls._FIELDS) else (cls, *args, *[
      kwargs.get(f, d) for f, d in zip(cls._FIELDS[n:], cls._DEFAULTS[n:])])
    got = _Interned._table.get(key)
    if got is None:
      got = _Interned._table[key] = super().__call__(*args, **kwargs)
    return got


_SCALAR_OF: dict = {}   # name -> the scalar DType of that name


@dataclass(frozen=True, eq=False)
class DType(metaclass=_Interned):
  """An element type: `name` (numpy's spelling: "float32", "int8", "bool", plus "bfloat16"),
  `itemsize` (bytes), `kind` ("b", "i", "u" or "f"), `fmt` (the struct format character) and
  `count` (vector lanes, 1 for the scalar types users see). One object per type: compare with
  `==` or `is`. Use the ones in `kg.dtypes` (`kg.dtypes.float32`, `kg.dtypes.from_name(...)`);
  wherever a dtype is taken, its name works too."""
  name: str       # numpy-style name of the scalar: "float32", "int8", "bool"
  itemsize: int   # bytes of one lane
  kind: str       # "b" bool, "i" signed int, "u" unsigned int, "f" float
  fmt: str        # struct / memoryview format character of one lane
  count: int = 1  # lanes; 1 for a scalar

  def __post_init__(self):
    # plain attributes (read on hot paths): `scalar` the scalar dtype of the lanes (itself for a
    # scalar), `bits` of one lane, `nbytes` of all lanes
    if self.count == 1 and self.__class__ is DType:
      _SCALAR_OF.setdefault(self.name, self)
    object.__setattr__(self, "scalar", _SCALAR_OF.get(self.name))
    object.__setattr__(self, "bits", self.itemsize * 8)
    object.__setattr__(self, "nbytes", self.itemsize * self.count)

  def __reduce__(self):   # rebuilt through the class, so the copy is the interned object
    return self.__class__, tuple(getattr(self, f.name) for f in fields(self))

  def vec(self, count: int) -> DType:
    """The vector type of `count` lanes of this scalar type (the type itself for count 1), as the IR
    and the renderers use it.

    Raises DTypeError when this type is already a vector."""
    if self.count != 1:
      raise DTypeError(f"cannot make a vector of the vector type {self}")
    if count == 1:
      return self
    return DType(self.name, self.itemsize, self.kind, self.fmt, count)

  def ptr(self, size: int = -1, local: bool = False) -> PtrDType:
    """The pointer type to a buffer of this type (`size` elements, -1 unknown; `local`: workgroup /
    shared memory), as the IR uses it."""
    return PtrDType(self.name, self.itemsize, self.kind, self.fmt, self.count, self, local, size)

  def is_float(self) -> bool:
    """True for float16, bfloat16, float32 and float64."""
    return self.kind == "f"

  def is_int(self) -> bool:
    """True for the signed and unsigned integer types (not bool)."""
    return self.kind in "iu"

  def is_unsigned(self) -> bool:
    """True for uint8, uint16, uint32 and uint64."""
    return self.kind == "u"

  def __repr__(self) -> str:
    return f"dtypes.{self.name}" + (f".vec({self.count})" if self.count > 1 else "")

  def __str__(self) -> str:
    return self.name + (f"x{self.count}" if self.count > 1 else "")


@dataclass(frozen=True, eq=False)
class PtrDType(DType):
  base: DType = None    # the element type pointed to (may be a vector)
  local: bool = False   # True: workgroup (shared) memory; False: global memory
  size: int = -1        # number of elements of `base`; -1 when unknown

  def __repr__(self) -> str:
    return f"{self.base!r}.ptr({self.size}{', local=True' if self.local else ''})"

  def __str__(self) -> str:
    return f"{'local' if self.local else 'global'} {self.base}*[{self.size}]"


for _cls in (DType, PtrDType):   # the field names and defaults __new__ keys on
  _cls._FIELDS = tuple(f.name for f in fields(_cls))
  _cls._DEFAULTS = tuple(None if f.default is MISSING else f.default for f in fields(_cls))


def _scalar(name: str, itemsize: int, kind: str, fmt: str) -> DType:
  return DType(name, itemsize, kind, fmt)


class dtypes:
  """Namespace of the scalar dtypes and dtype groups."""
  bool = _scalar("bool", 1, "b", "?")
  int8 = _scalar("int8", 1, "i", "b")
  int16 = _scalar("int16", 2, "i", "h")
  int32 = _scalar("int32", 4, "i", "i")
  int64 = _scalar("int64", 8, "i", "q")
  uint8 = _scalar("uint8", 1, "u", "B")
  uint16 = _scalar("uint16", 2, "u", "H")
  uint32 = _scalar("uint32", 4, "u", "I")
  uint64 = _scalar("uint64", 8, "u", "Q")
  float16 = _scalar("float16", 2, "f", "e")
  bfloat16 = _scalar("bfloat16", 2, "f", "H")   # no struct code: stored as its raw 16 bits
  float32 = _scalar("float32", 4, "f", "f")
  float64 = _scalar("float64", 8, "f", "d")
  # aliases, numpy style
  half, float, double = float16, float32, float64
  int, uint = int32, uint32

  ints = (int8, int16, int32, int64)
  uints = (uint8, uint16, uint32, uint64)
  floats = (float16, bfloat16, float32, float64)
  integers = ints + uints
  all = (bool,) + integers + floats

  @staticmethod
  def from_name(name: str) -> DType:
    """The scalar dtype called `name` (numpy spelling, plus "bfloat16"); typed error otherwise."""
    if isinstance(name, DType):
      return name
    found = SCALARS.get(str(name)) or _ALIASES.get(str(name))
    if found is None:
      names = ", ".join(d.name for d in dtypes.all)
      raise DTypeError(f"unknown dtype {name!r}: use one of {names}")
    return found


SCALARS: dict[str, DType] = {d.name: d for d in dtypes.all}
_ALIASES = {"half": dtypes.float16, "float": dtypes.float32, "double": dtypes.float64,
            "int": dtypes.int32, "uint": dtypes.uint32, "bf16": dtypes.bfloat16,
            "f16": dtypes.float16, "f32": dtypes.float32, "f64": dtypes.float64}


# ---- limits -------------------------------------------------------------------------------

def min_value(dt: DType) -> int | float:
  if dt.kind == "b":
    return False
  if dt.kind == "u":
    return 0
  if dt.kind == "i":
    return -(1 << (dt.bits - 1))
  return -math.inf


def max_value(dt: DType) -> int | float:
  if dt.kind == "b":
    return True
  if dt.kind == "u":
    return (1 << dt.bits) - 1
  if dt.kind == "i":
    return (1 << (dt.bits - 1)) - 1
  return math.inf


FINFO_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38,
             "float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}


# ---- promotion ----------------------------------------------------------------------------

def _smallest_float_holding(dt: DType) -> DType:
  """numpy: the float type an integer type promotes to when mixed with a small float."""
  return {1: dtypes.float16, 2: dtypes.float32}.get(dt.itemsize, dtypes.float64)


def _promote_pair(a: DType, b: DType) -> DType:
  if a == b:
    return a
  if a.kind == "b":
    return b
  if b.kind == "b":
    return a
  if a.is_float() and b.is_float():
    if {a.name, b.name} == {"float16", "bfloat16"}:
      return dtypes.float32
    return a if a.itemsize >= b.itemsize else b
  if a.is_float() or b.is_float():
    f, i = (a, b) if a.is_float() else (b, a)
    need = _smallest_float_holding(i)
    if f == dtypes.bfloat16 and need == dtypes.float16:
      return dtypes.bfloat16
    return _promote_pair(f, need) if need.itemsize > f.itemsize else f
  if a.kind == b.kind:
    return a if a.itemsize >= b.itemsize else b
  s, u = (a, b) if a.kind == "i" else (b, a)
  if s.itemsize > u.itemsize:
    return s
  return {1: dtypes.int16, 2: dtypes.int32, 4: dtypes.int64}.get(u.itemsize, dtypes.float64)


# The one promotion table: numpy's rules for every pair of scalar dtypes (bfloat16 as numpy's
# ml_dtypes extension does it: it absorbs int8/uint8 and meets float16 at float32).
PROMOTION: dict[tuple[DType, DType], DType] = {
  (a, b): _promote_pair(a, b) for a in dtypes.all for b in dtypes.all}


def promote_types(*dts: DType) -> DType:
  """numpy-style result dtype of mixing `dts` (scalars only)."""
  out = dts[0].scalar
  for d in dts[1:]:
    out = PROMOTION[(out, d.scalar)]
  return out


def least_upper_float(dt: DType) -> DType:
  """The float dtype an operation like sqrt or true division gives for `dt` (numpy rules)."""
  return dt if dt.is_float() else promote_types(dt, dtypes.float16 if dt.itemsize == 1
                                                else dtypes.float32 if dt.itemsize == 2
                                                else dtypes.float64)


# ---- exact value semantics ----------------------------------------------------------------

def _round_f32(x: float) -> float:
  try:
    return struct.unpack("<f", struct.pack("<f", x))[0]
  except OverflowError:
    return math.copysign(math.inf, x)


def _round_f16(x: float) -> float:
  try:
    return struct.unpack("<e", struct.pack("<e", x))[0]
  except OverflowError:
    return math.copysign(math.inf, x)


def f32_bits(x: float) -> int:
  return struct.unpack("<I", struct.pack("<f", _round_f32(x)))[0]


def bf16_bits(x: float) -> int:
  """Round a float to bfloat16 (round to nearest even, through float32) and return its bits."""
  bits = f32_bits(x)
  if math.isnan(x):
    return (bits >> 16) | 0x40
  rounded = _round_f32(x)
  if rounded != x and math.isfinite(rounded):
    bits += 1 if abs(x) > abs(rounded) else -1   # sticky bit: no double rounding through f32
  return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bf16_from_bits(b: int) -> float:
  return struct.unpack("<f", struct.pack("<I", (b & 0xFFFF) << 16))[0]


def _round_bf16(x: float) -> float:
  return bf16_from_bits(bf16_bits(x))


_FLOAT_ROUND = {"float16": _round_f16, "bfloat16": _round_bf16, "float32": _round_f32,
                "float64": float}


def _wrap_int(x: int, dt: DType) -> int:
  x &= (1 << dt.bits) - 1
  if dt.kind == "i" and x >> (dt.bits - 1):
    x -= 1 << dt.bits
  return x


def truncate(value, dt: DType):
  """`value` as the dtype `dt` holds it: ints wrap around, floats round to nearest even.

  Float to int follows C (truncate toward zero); NaN/inf to int and out-of-range floats have no
  defined result on GPUs, so they are clamped to the type's range (NaN gives 0), as PTX's cvt does.
  """
  dt = dt.scalar
  if dt.kind == "b":
    return bool(value)
  if dt.kind in "iu":
    if isinstance(value, float):
      if math.isnan(value):
        return 0
      whole = value if math.isinf(value) else math.trunc(value)
      return int(max(min_value(dt), min(max_value(dt), whole)))
    return _wrap_int(int(value), dt)
  return _FLOAT_ROUND[dt.name](float(value))


def to_bits(value, dt: DType) -> int:
  """The raw bit pattern of `value` stored as `dt` (an unsigned int of dt.bits bits)."""
  dt = dt.scalar
  if dt == dtypes.bfloat16:
    return bf16_bits(value)
  if dt.kind == "b":
    return int(bool(value))
  packed = struct.pack("<" + dt.fmt, truncate(value, dt))
  return int.from_bytes(packed, "little")


def from_bits(bits: int, dt: DType):
  """The value whose raw bit pattern as `dt` is `bits`."""
  dt = dt.scalar
  if dt == dtypes.bfloat16:
    return bf16_from_bits(bits)
  if dt.kind == "b":
    return bool(bits & 0xFF)
  raw = (bits & ((1 << dt.bits) - 1)).to_bytes(dt.itemsize, "little")
  return struct.unpack("<" + dt.fmt, raw)[0]


def bitcast(value, src: DType, dst: DType):
  """Reinterpret the bits of `value` (of dtype `src`) as `dst`; the widths must be equal."""
  if src.scalar.itemsize != dst.scalar.itemsize:
    raise DTypeError(f"bitcast needs dtypes of one width: {src} is {src.itemsize} bytes, "
                     f"{dst} is {dst.itemsize}; use cast to convert values instead")
  return from_bits(to_bits(value, src), dst)


def python_type(dt: DType) -> type:
  return {"b": bool, "i": int, "u": int, "f": float}[dt.kind]
