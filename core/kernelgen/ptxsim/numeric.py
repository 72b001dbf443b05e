"""Exact PTX number semantics in plain Python: float formats, rounding modes, bit patterns.

Float registers hold Python floats whose values are exactly representable in their format;
integer registers hold unsigned bit patterns. Lists are warp-wide (one value per lane).
Round-to-nearest-even on f32/f64 uses the hardware double (exact for + - * / sqrt, since a
double has more than 2*24+2 bits); every other rounding goes through `round_rational`, which
is exact.
"""
from __future__ import annotations

import math
import struct
from array import array
from fractions import Fraction

# name -> (stored mantissa bits, minimum normal exponent, maximum exponent)
FORMATS = {"f16": (10, -14, 15), "bf16": (7, -126, 127), "tf32": (10, -126, 127),
           "f32": (23, -126, 127), "f64": (52, -1022, 1023)}
F32_MIN_NORMAL = 2.0 ** -126
NAN = float("nan")


# ---- rounding ------------------------------------------------------------------------------

def _round_up(q: int, r: int, den: int, neg: bool, mode: str) -> bool:
  """Whether to round the magnitude q + r/den up to q + 1 under `mode`."""
  if r == 0 or mode == "rz":
    return False
  if mode == "rn":
    return 2 * r > den or (2 * r == den and q & 1 == 1)
  if mode == "rna":
    return 2 * r >= den
  return neg if mode == "rm" else not neg   # rm rounds toward -inf, rp toward +inf


def _overflow(fmt: str, neg: bool, mode: str) -> float:
  man, _, emax = FORMATS[fmt]
  to_inf = mode in ("rn", "rna") or (mode == "rm" and neg) or (mode == "rp" and not neg)
  big = math.inf if to_inf else math.ldexp((1 << (man + 1)) - 1, emax - man)
  return -big if neg else big


def round_rational(x, fmt: str, mode: str = "rn") -> float:
  """The exact value `x` (int, float or Fraction) rounded to `fmt` with PTX rounding `mode`."""
  if isinstance(x, float) and not math.isfinite(x):
    return x
  if x == 0:
    return x if isinstance(x, float) else 0.0
  man, emin, emax = FORMATS[fmt]
  x = Fraction(x)
  neg = x < 0
  n, d = abs(x.numerator), x.denominator
  e = n.bit_length() - d.bit_length()
  if (n << max(0, -e)) < (d << max(0, e)):
    e -= 1
  e = max(e, emin)
  shift = man - e
  num, den = (n << shift, d) if shift >= 0 else (n, d << -shift)
  q, r = divmod(num, den)
  q += _round_up(q, r, den, neg, mode)
  if e > emax or (e == emax and q >= 2 << man):
    return _overflow(fmt, neg, mode)
  val = math.ldexp(q, -shift)
  return -val if neg else val


def round_int(x: float, mode: str) -> float:
  """Round a float to an integral float: rni (nearest even), rzi, rmi, rpi."""
  if not math.isfinite(x):
    return x
  if mode == "rni":
    r = float(round(x))
  elif mode == "rzi":
    r = float(math.trunc(x))
  elif mode == "rmi":
    r = float(math.floor(x))
  else:
    r = float(math.ceil(x))
  return math.copysign(r, x) if r == 0 else r


# ---- warp-wide format rounding (fast paths) ------------------------------------------------

def round_f32s(xs: list) -> list:
  """Round a list of doubles to f32 (nearest even; overflow -> inf)."""
  return array("f", xs).tolist()


def f16(x: float) -> float:
  try:
    return struct.unpack("<e", struct.pack("<e", x))[0]
  except OverflowError:
    return math.copysign(math.inf, x)


def round_f16s(xs: list) -> list:
  return [f16(x) for x in xs]


def bf16_bits_of(x: float) -> int:
  """bf16 bits of a double, nearest even (exact: goes through round_rational off fast path)."""
  if x != x:
    return 0x7FC0
  if array("f", [x])[0] == x or not math.isfinite(x):   # exactly an f32: round its bits
    f = f32_bits(x)
    return ((f + 0x7FFF + ((f >> 16) & 1)) >> 16) & 0xFFFF
  return f32_bits(round_rational(x, "bf16", "rn")) >> 16


def bf16_value(bits: int) -> float:
  return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


def round_bf16s(xs: list) -> list:
  return [bf16_value(bf16_bits_of(x)) for x in xs]


ROUND_LIST = {"f32": round_f32s, "f16": round_f16s, "bf16": round_bf16s, "f64": None}


def round_to(x: float, fmt: str) -> float:
  """One value rounded to nearest even in `fmt`."""
  if fmt == "f64":
    return x
  if fmt == "f32":
    return array("f", [x])[0]
  if fmt == "f16":
    return f16(x)
  return round_rational(x, fmt, "rn") if math.isfinite(x) else x


def ftz(x: float) -> float:
  """Flush an f32 subnormal to a zero of the same sign (the .ftz modifier)."""
  if x != 0.0 and -F32_MIN_NORMAL < x < F32_MIN_NORMAL:
    return math.copysign(0.0, x)
  return x


def sat(x: float) -> float:
  """Clamp to [0.0, 1.0]; NaN gives +0.0 (the .sat modifier on floats)."""
  if not x > 0.0:
    return 0.0
  return 1.0 if x > 1.0 else x


# ---- bit patterns ----------------------------------------------------------------------------

def f32_bits(x: float) -> int:
  return struct.unpack("<I", struct.pack("<f", x))[0]


def f32s_to_bits(xs: list) -> list:
  return array("I", array("f", xs).tobytes()).tolist()


def bits_to_f32s(bs: list) -> list:
  return array("f", array("I", bs).tobytes()).tolist()


def f64s_to_bits(xs: list) -> list:
  return array("Q", array("d", xs).tobytes()).tolist()


def bits_to_f64s(bs: list) -> list:
  return array("d", array("Q", bs).tobytes()).tolist()


def f16s_to_bits(xs: list) -> list:
  return list(struct.unpack(f"<{len(xs)}H", struct.pack(f"<{len(xs)}e", *xs)))


def bits_to_f16s(bs: list) -> list:
  return list(struct.unpack(f"<{len(bs)}e", struct.pack(f"<{len(bs)}H", *bs)))


def bf16s_to_bits(xs: list) -> list:
  return [b >> 16 for b in f32s_to_bits(xs)]


def bits_to_bf16s(bs: list) -> list:
  return bits_to_f32s([(b & 0xFFFF) << 16 for b in bs])


# float format -> (values to bits, bits to values), warp-wide
BITCASTS = {"f32": (f32s_to_bits, bits_to_f32s), "f64": (f64s_to_bits, bits_to_f64s),
            "f16": (f16s_to_bits, bits_to_f16s), "bf16": (bf16s_to_bits, bits_to_bf16s)}


def signed(x: int, bits: int) -> int:
  return x - (1 << bits) if x >> (bits - 1) else x


def f16_from_bits(b: int) -> float:
  return struct.unpack("<e", struct.pack("<H", b & 0xFFFF))[0]


def tf32_value(bits: int) -> float:
  """The value a tensor core reads from a .tf32 operand: the f32 with its low 13 bits ignored."""
  return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFE000))[0]


def round_to_f32(x: float) -> float:
  """One double rounded to f32 exactly as round_f32s rounds each of a list's."""
  return array("f", (x,))[0]
