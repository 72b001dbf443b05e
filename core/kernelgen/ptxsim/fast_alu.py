"""The fast engine's arithmetic, logic, comparison and conversion instructions over numpy arrays.

Each instruction computes exactly what the reference engine computes per lane (compile.py,
alu.py): the hot forms (integer add/sub/mul/mad/logic/shifts/min/max/div/rem of up to 32 bits,
round-to-nearest f32/f64 add/sub/mul/div/fma/min/max/sqrt/rsqrt/rcp, setp, selp, common cvts)
are vectorized, with the reference's own rules written as array expressions (double arithmetic
rounded to f32, the same fma tie test with the exact fallback for the lanes it flags). Every
other form maps the reference engine's lane function over the active lanes, so it is the same
code on the same values.

One concept, the fast engine's ALU instruction table; it runs past 500 lines because each
vectorized instruction family sits with the exact rules it must reproduce.
"""
from __future__ import annotations

import numpy as np

from . import alu
from . import compile as ref
from . import numeric as nm
from .fast_direct import direct_step
from .fast_operands import NAN, SINT, UINT, count, full, has_nan, rdtype, reader, shared, writer
from .operands import TYPES
from .parser import Instr
from .steps import STEP, checked_operands, split_mods, unsupported, where_text

F32_TINY = 2.0 ** -126
INF = np.float64(np.inf)


def lanewise(fn, srcs, post, out_t: str):
  """(S, idx) -> the reference lane function `fn` mapped over the active lanes, then `post`."""
  dt = rdtype(out_t)

  def compute(S, idx):
    n = count(S, idx)
    cols = [_as_list(r(S, idx), n) for r in srcs]
    return np.array(post(list(map(fn, *cols))), dtype=dt)
  compute.lanewise = True
  return compute


def _as_list(v, n: int) -> list:
  return v.tolist() if np.ndim(v) else [v.item()] * n


def _ident(xs):
  return xs


def store(write, compute):
  """A step writing `compute`'s values; vectorized ones can also run a guarded instruction at
  full width and merge (`step.merged(S, idx, mask)`): they cannot fault on inactive lanes.
  Where the operands allow, the step is fast_direct.py's (the same values, fewer calls)."""
  def general(S, idx):
    write(S, idx, compute(S, idx))
  step = direct_step(write, compute, general) or general
  if not getattr(compute, "lanewise", False):
    step.merged = lambda S, idx, mask: write(S, idx, compute(S, idx), mask)
  return STEP, step, None


# ---- floats --------------------------------------------------------------------------------

def round_f32(x):
  """Round to f32 (f32 registers are float32 arrays: a cast from double rounds once)."""
  return np.asarray(x, np.float32)


def ftz(x):
  x = np.asarray(x)
  tiny = (x != 0) & (np.abs(x) < F32_TINY)
  return np.where(tiny, np.copysign(0.0, x), x) if tiny.any() else x


def sat(x):
  return np.where(x > 0.0, np.where(x > 1.0, 1.0, x), 0.0)


def _nan_first(fn):
  """add/sub/mul/div whose NaN lanes keep the first NaN operand's NaN, quieted (alu.nan_of)."""
  def run(a, b):
    r = fn(a, b)
    if not has_nan(r):
      return r
    a, b = np.broadcast_to(a, r.shape), np.broadcast_to(b, r.shape)
    return np.where(np.isnan(a), a + a, np.where(np.isnan(b), b + b, r)).astype(r.dtype)
  return run


def fdiv(a, b):
  r = np.asarray(_nan_first(np.divide)(a, b), np.float64)
  zero = b == 0
  if np.any(zero):
    inf = np.copysign(INF, a) * np.copysign(1.0, b)
    r = np.where(zero, np.where((a != a) | (a == 0), NAN, inf), r)
  return r


def _min_max(pick, zero_pick):
  """The reference's min/max: NaN loses to a number (both NaN: b), -0.0 < +0.0. numpy's
  fmin/fmax agree but for those two cases, which are patched where they occur."""
  def fn(a, b):
    r = pick(a, b)
    zeros = (a == 0) & (b == 0)
    if np.any(zeros):
      r = np.where(zeros, np.where(zero_pick(np.signbit(a)), a, b), r)
    nans = (a != a) & (b != b)
    if np.any(nans):
      r = np.where(nans, b, r)
    return r
  return fn


fmin = _min_max(np.fmin, lambda neg: neg)
fmax = _min_max(np.fmax, lambda neg: ~neg)


def fsqrt(a):
  return np.where(a < 0, NAN, np.sqrt(a))


def frsqrt(a):
  a = np.asarray(a, np.float64)     # the reference takes 1 / sqrt in double, then rounds
  pos = a > 0
  r = 1.0 / np.sqrt(np.where(pos, a, 1.0))
  r = np.where(pos, r, np.where(a != a, a, NAN))
  return np.where(a == 0, np.copysign(INF, a), r)


def fma_f32(fn):
  """The reference's f32 fma: a*b + c in double (a*b is exact); the lanes where that sum could
  round twice (it sits exactly halfway between two f32 values, or is tiny) and is inexact take
  the reference's exact path. Halfway: the 29 bits of the double below the f32's 24 are
  1000...0, which is the reference's frexp test."""
  def fma(a, b, c):
    s = a.astype(np.float64)       # a fresh array: the product and the sum in place (in double:
    s *= b.astype(np.float64)      # the product is exact), each operand widened exactly
    s += c.astype(np.float64)
    s = np.asarray(s)
    u = s.view(np.uint64)
    if np.count_nonzero((u & _LOW29) == _HALF29) or \
            np.count_nonzero(np.abs(s) < 2.0 ** -120):
      tie = ((u & _LOW29) == _HALF29) | (np.abs(s) < 2.0 ** -120)
      p = np.asarray(a, np.float64) * np.asarray(b, np.float64)
      s = _fma_fix(fn, a, b, c, p, s, tie)
    return s
  return fma


_LOW29, _HALF29 = np.uint64(0x1FFFFFFF), np.uint64(0x10000000)


def _fma_fix(fn, a, b, c, p, s, tie):
  shape = s.shape
  a, b, c, p = (np.broadcast_to(np.asarray(v, np.float64), shape) for v in (a, b, c, p))
  at = np.flatnonzero(tie & np.isfinite(s))
  z = s[at] - p[at]
  err = (p[at] - (s[at] - z)) + (c[at] - z)
  at = at[err != 0]
  if len(at):
    s = np.array(s, copy=True)
    s[at] = list(map(fn, a[at].tolist(), b[at].tolist(), c[at].tolist()))
  return s


# on f32 operands these round once to f32 (float32 arithmetic is correctly rounded, and the
# reference's double result rounded to f32 is the same value: a double holds 2*24+2 bits)
VEC_FLOAT = {"add": _nan_first(np.add), "sub": _nan_first(np.subtract),
             "mul": _nan_first(np.multiply), "div": fdiv,
             "min": fmin, "max": fmax, "neg": np.negative, "abs": np.abs, "sqrt": fsqrt,
             "rsqrt": frsqrt, "rcp": lambda a: fdiv(1.0, a)}


def _float_op(ins: Instr, op: str, t: str, mods: set):
  """The vectorized op and post-rounding for a float instruction, or None (lane-wise)."""
  mode = next(iter(mods & ref.ROUNDING), "rn")
  if mode != "rn" or t not in ("f32", "f64") or "sat" in mods and t != "f32":
    return None
  if op in ("fma", "mad"):
    if t != "f32":
      return None
    fn = fma_f32(alu._float_fma("f32"))
  else:
    fn = VEC_FLOAT.get(op)
  if fn is None:
    return None
  flush = "ftz" in mods and t == "f32"
  rnd = round_f32 if t == "f32" else None    # fma and rsqrt compute in double

  def post(x):
    x = rnd(x) if rnd else x
    x = ftz(x) if flush else x
    return sat(x) if "sat" in mods else x
  if flush:
    inner = fn
    fn = lambda *xs: inner(*map(ftz, xs))
  return fn, post


def alu_step(ins: Instr, ctx):
  mods, t = split_mods(ins, ref._ALU_MODS)
  cls, w = TYPES[t]
  op, where = ins.opcode, where_text(ins)
  nsrc = 3 if op in ("fma", "mad") else 1 if op in alu.FLOAT_UNARY or op in ref._INT_UNARY \
    else 2
  dst, *src_ops = checked_operands(ins, nsrc + 1)
  if cls == "p":
    return _pred_logic(ins, ctx, op, dst, src_ops)
  if cls != "f":
    return _int_alu(ins, ctx, op, mods, t, dst, src_ops)
  if op not in ref._FLOAT_OPS:
    raise unsupported(ins)
  srcs = [reader(o, t, ctx, where) for o in src_ops]
  vec = _float_op(ins, op, t, mods)
  if vec is None:
    fn, post = ref._float_lane_fn(ins, op, t, mods), ref._float_post(t, mods)
    if "ftz" in mods and t == "f32":
      inner = fn
      fn = lambda *xs: inner(*map(nm.ftz, xs))
    return store(writer(dst, t, ctx, where), lanewise(fn, srcs, post, t))
  fn, post = vec
  return store(writer(dst, t, ctx, where), _apply(fn, srcs, post))


def _apply(fn, srcs, post):
  if len(srcs) == 1:
    r0 = srcs[0]
    compute = lambda S, idx: post(fn(r0(S, idx)))
  elif len(srcs) == 2:
    r0, r1 = srcs
    compute = lambda S, idx: post(fn(r0(S, idx), r1(S, idx)))
  else:
    r0, r1, r2 = srcs
    compute = lambda S, idx: post(fn(r0(S, idx), r1(S, idx), r2(S, idx)))
  return _parts(compute, fn, srcs, None if post is _ident else post)


def _parts(compute, fn, srcs, post=None):
  """`compute` marked as post(fn(*operands)) for fast_direct.py."""
  compute.parts = (fn, srcs, post)
  return compute


# ---- integers ------------------------------------------------------------------------------

def _signed(x, w):
  return np.asarray(x).view(SINT[w]) if np.ndim(x) else np.asarray(x).view(SINT[w])[()]


def _wide(x, cls, w):
  """Values as int64 (w <= 32): signed types sign-extended."""
  x = np.asarray(x)
  return (x.view(SINT[w]) if cls == "s" else x).astype(np.int64)


def _int_vec(op: str, cls: str, w: int, hi_lo: str):
  """A vectorized integer op over arrays of UINT[w] (None: lane-wise)."""
  D = UINT[w]
  if op in ("add", "sub", "and", "or", "xor") or (op == "mul" and hi_lo == "lo"):
    return {"add": np.add, "sub": np.subtract, "and": np.bitwise_and, "or": np.bitwise_or,
            "xor": np.bitwise_xor, "mul": np.multiply}[op]
  if op == "not":
    return np.invert
  if op == "neg":
    return lambda a: (D(0) - a).astype(D)
  if w > 32:
    return _int_vec64(op, cls, w)
  if op == "mul":
    return _mul_vec(cls, w, hi_lo)
  if op in ("shl", "shr"):
    return _shift_vec(op, cls, w)
  if op in ("min", "max", "div", "rem", "abs"):
    return _signed_vec(op, cls, w)
  return None


def _int_vec64(op, cls, w):
  if op in ("shl", "shr"):
    return _shift_vec(op, cls, w)
  if op in ("min", "max"):
    pick = np.minimum if op == "min" else np.maximum
    if cls == "s":
      return lambda a, b: pick(_signed(a, w), _signed(b, w)).view(np.uint64)
    return pick
  return None


def _mul_vec(cls, w, hi_lo):
  M = (1 << w) - 1
  if hi_lo == "hi":
    return lambda a, b: ((_wide(a, cls, w) * _wide(b, cls, w)) >> w) & M
  if w == 32:      # the product mod 2**64 of the operands widened to u64 (signed ones
    if cls == "s":  # sign-extended first) is the exact product's bits
      return lambda a, b: a.view(np.int32).astype(np.uint64) * b.view(np.int32).astype(np.uint64)
    return lambda a, b: a.astype(np.uint64) * b.astype(np.uint64)
  return lambda a, b: (_wide(a, cls, w) * _wide(b, cls, w)).astype(UINT[2 * w])


def _shift_vec(op, cls, w):
  D = UINT[w]

  def shift(a, b):
    a = np.asarray(a, D)
    b = np.asarray(b, np.uint32)
    if op == "shl":
      return np.where(b < w, a << np.minimum(b, w - 1).astype(D), D(0))
    if cls == "s":
      amount = np.minimum(b, w - 1).astype(SINT[w])
      return (a.view(SINT[w]) >> amount).astype(SINT[w]).view(D)
    return np.where(b < w, a >> np.minimum(b, w - 1).astype(D), D(0))
  return shift


def _signed_vec(op, cls, w):
  M = (1 << w) - 1
  if op == "abs":
    return lambda a: np.abs(_wide(a, "s", w)) & M
  if op in ("min", "max"):
    pick = np.minimum if op == "min" else np.maximum
    return lambda a, b: pick(_wide(a, cls, w), _wide(b, cls, w)) & M

  def divrem(a, b):
    if np.ndim(b) == 0 and int(b) != 0:
      return _divrem_by_constant(op, cls, w, a, b)
    A, B = _wide(a, cls, w), _wide(b, cls, w)
    zero = B == 0
    Bs = np.where(zero, 1, B)
    if op == "div":
      q = np.abs(A) // np.abs(Bs)
      q = np.where((A < 0) != (Bs < 0), -q, q)
      return np.where(zero, M, q) & M
    r = np.abs(A) % np.abs(Bs)
    r = np.where(A < 0, -r, r)
    return np.where(zero, A, r) & M
  return divrem


def _divrem_by_constant(op, cls, w, a, b):
  """div/rem by a nonzero immediate: C semantics (toward zero; the remainder takes the
  dividend's sign) in the type itself; INT_MIN / -1 wraps to INT_MIN as in the reference.
  Nonnegative dividends over a positive divisor (index arithmetic) take numpy's division by a
  scalar, and the remainder from the quotient."""
  if cls != "s":
    q = a // b
    return q if op == "div" else a - q * b
  D, S = UINT[w], SINT[w]
  sa, sb = np.asarray(a).view(S), np.asarray(b).view(S)[()]
  if sb > 0 and (not sa.size or sa.min() >= 0):
    q = sa // sb
    return (q if op == "div" else sa - q * sb).view(D)
  r = np.fmod(sa, sb)
  if op == "rem":
    return r.view(D)
  return ((sa - r) // sb).astype(S).view(D)


def _int_alu(ins, ctx, op, mods, t, dst, src_ops):
  cls, w = TYPES[t]
  where = where_text(ins)
  hi_lo, types, dtype, lane = ref.int_alu_form(ins, op, mods, t, len(src_ops))
  if op == "mad":
    fn = _mad_vec(cls, w, hi_lo)
  else:
    fn = None if "sat" in mods else _int_vec(op, cls, w, hi_lo)
  srcs = [reader(o, ty, ctx, where) for o, ty in zip(src_ops, types)]
  compute = _apply(fn, srcs, _ident) if fn is not None else lanewise(lane, srcs, _ident, dtype)
  return store(writer(dst, dtype, ctx, where), compute)


def _mad_vec(cls, w, hi_lo):
  if w > 32 and hi_lo != "lo":
    return None
  if hi_lo == "lo":
    return lambda a, b, c: a * b + c
  mul = _mul_vec(cls, w, hi_lo)
  if hi_lo == "wide":
    out = UINT[2 * w]
    return lambda a, b, c: (mul(a, b) + np.asarray(c, out)).astype(out)
  M = (1 << w) - 1
  return lambda a, b, c: (mul(a, b) + np.asarray(c).astype(np.int64)) & M


def _pred_logic(ins, ctx, op, dst, src_ops):
  fns = {"and": np.logical_and, "or": np.logical_or, "xor": np.not_equal, "not": np.logical_not}
  if op not in fns:
    raise unsupported(ins)
  where = where_text(ins)
  srcs = [reader(o, "pred", ctx, where) for o in src_ops]
  return store(writer(dst, "pred", ctx, where), _apply(fns[op], srcs, _ident))


# ---- moves, selects, comparisons, conversions ----------------------------------------------

def _copy(read, t):
  """A move: the array itself (the writer marks it shared, and copies on a masked write)."""
  def compute(S, idx):
    v = read(S, idx)
    return shared(v) if np.ndim(v) else full(S, idx, v, t)
  if getattr(read, "reg", None) is not None:    # a register always holds an array
    _parts(compute, shared, [read])
  return compute


def mov_step(ins: Instr, ctx):
  _, t = split_mods(ins, set())
  dst, src = checked_operands(ins, 2)
  where = where_text(ins)
  if dst[0] == "vec":
    return _unpack(ins, ctx, t, dst[1], src)
  if src[0] == "vec":
    return _pack(ins, ctx, t, dst, src[1])
  return store(writer(dst, t, ctx, where), _copy(reader(src, t, ctx, where), t))


def _pack(ins, ctx, t, dst, parts):
  pt, pw = ref._part_type(ins, t, len(parts))
  where = where_text(ins)
  srcs = [reader(p, pt, ctx, where) for p in parts]
  D = rdtype(t)

  def compute(S, idx):
    out = np.zeros(count(S, idx), D)
    for k, r in enumerate(srcs):
      out |= np.asarray(r(S, idx)).astype(D) << D(k * pw)
    return out
  return store(writer(dst, t, ctx, where), compute)


def _unpack(ins, ctx, t, parts, src):
  pt, pw = ref._part_type(ins, t, len(parts))
  where = where_text(ins)
  read = reader(src, t, ctx, where)
  writes = [writer(p, pt, ctx, where) for p in parts]
  D, P = rdtype(t), rdtype(pt)

  def step(S, idx):
    vals = full(S, idx, read(S, idx), t)
    for k, wr in enumerate(writes):
      wr(S, idx, (vals >> D(k * pw)).astype(P))
  return STEP, step, None


def selp_step(ins: Instr, ctx):
  _, t = split_mods(ins, set())
  dst, a, b, c = checked_operands(ins, 4)
  where = where_text(ins)
  ra, rb, rc = reader(a, t, ctx, where), reader(b, t, ctx, where), reader(c, "pred", ctx, where)

  def compute(S, idx):
    return full(S, idx, np.where(rc(S, idx), ra(S, idx), rb(S, idx)), t)
  return store(writer(dst, t, ctx, where), _parts(compute, np.where, [rc, ra, rb]))


FLOAT_CMP = {
  "eq": lambda a, b: a == b, "ne": lambda a, b: (a != b) & (a == a) & (b == b),
  "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
  "equ": lambda a, b: (a == b) | (a != a) | (b != b), "neu": np.not_equal,
  "ltu": lambda a, b: ~(a >= b), "leu": lambda a, b: ~(a > b),
  "gtu": lambda a, b: ~(a <= b), "geu": lambda a, b: ~(a < b),
  "num": lambda a, b: (a == a) & (b == b), "nan": lambda a, b: (a != a) | (b != b)}
INT_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
           "gt": np.greater, "ge": np.greater_equal}


def setp_step(ins: Instr, ctx):
  if len(ins.mods) < 2:
    raise unsupported(ins)
  cmp = ins.mods[0]
  mods, t = split_mods(Instr(ins.line, ins.text, ins.opcode, ins.mods[1:], ()), {"ftz"})
  dst, a, b = checked_operands(ins, 3)
  cls, w = TYPES[t]
  lane = alu.FLOAT_CMP.get(cmp) if cls == "f" else alu.int_compare(cmp, cls, w)
  if lane is None or (cls == "b" and cmp not in ("eq", "ne")):
    raise unsupported(ins, f"comparison .{cmp} on .{t}")
  where = where_text(ins)
  ra, rb = reader(a, t, ctx, where), reader(b, t, ctx, where)
  if cls == "f":
    fn = FLOAT_CMP[cmp]
    if "ftz" in mods:
      inner = fn
      fn = lambda x, y: inner(ftz(x), ftz(y))
  else:
    if cmp in ("lo", "ls", "hi", "hs"):
      cmp, cls = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}[cmp], "u"
    base = INT_CMP[cmp]
    sd = SINT.get(w)    # readers give arrays or numpy scalars: both have .view
    fn = (lambda x, y: base(x.view(sd), y.view(sd))) if cls == "s" else base
  compute = lambda S, idx: full(S, idx, fn(ra(S, idx), rb(S, idx)), "pred")
  return store(writer(dst, "pred", ctx, where), _parts(compute, fn, [ra, rb]))


ROUND_INT = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}


def _cvt_vec(dst_t, src_t, rnd, mods):
  """A vectorized cvt for the common forms, or None."""
  (dc, dw), (sc, sw) = TYPES[dst_t], TYPES[src_t]
  if mods:
    return None
  if sc == "f" and dc == "f" and src_t in ("f32", "f64") and dst_t in ("f32", "f64"):
    if rnd in ROUND_INT:
      return ROUND_INT[rnd]
    if dst_t == "f32" and src_t == "f64" and rnd in (None, "rn"):
      return round_f32
    if dst_t == "f64" or src_t == dst_t:
      return lambda a: shared(np.asarray(a, rdtype(dst_t)))
    return None
  if sc in "us" and dst_t in ("f32", "f64") and sw <= 32 and rnd in (None, "rn"):
    rounding = round_f32 if dst_t == "f32" else (lambda x: x)
    return lambda a: rounding(_wide(a, sc, sw).astype(np.float64))
  if sc == "f" and src_t in ("f32", "f64") and dc in "us" and dw <= 32:
    return _float_to_int(dc, dw, rnd or "rzi")
  if sc in "usb" and dc in "usb":
    return _int_to_int(dc, dw, sc, sw)
  return None


def _float_to_int(dc, dw, rnd):
  lo, hi = (-(1 << (dw - 1)), (1 << (dw - 1)) - 1) if dc == "s" else (0, (1 << dw) - 1)
  how = ROUND_INT.get(rnd, np.rint)
  D = UINT[dw]

  def conv(a):
    a = np.asarray(a, np.float64)
    r = np.clip(how(np.where(a != a, 0.0, a)), lo, hi)
    return r.astype(np.int64).astype(D)
  return conv


def _int_to_int(dc, dw, sc, sw):
  D = UINT[dw]
  if sc == "s" and sw < dw:
    return lambda a: np.asarray(a).view(SINT[sw]).astype(SINT[dw]).view(D)
  return lambda a: np.asarray(a).astype(D)


def cvt_step(ins: Instr, ctx):
  if len(ins.mods) < 2 or ins.mods[-1] not in TYPES or ins.mods[-2] not in TYPES:
    raise unsupported(ins)
  dst_t, src_t = ins.mods[-2], ins.mods[-1]
  mods = set(ins.mods[:-2])
  if not mods <= ref.ROUNDING | ref.INT_ROUNDING | {"rna", "ftz", "sat"} or \
          len(mods - {"ftz", "sat"}) > 1:
    raise unsupported(ins)
  rnd = next(iter(mods - {"ftz", "sat"}), None)
  lane = alu.cvt(dst_t, src_t, rnd, "sat" in mods, "ftz" in mods)
  if lane is None:
    raise unsupported(ins)
  dst, src = checked_operands(ins, 2)
  where = where_text(ins)
  out_t = "b32" if dst_t == "tf32" else dst_t
  read = reader(src, src_t, ctx, where)
  vec = _cvt_vec(dst_t, src_t, rnd, mods & {"ftz", "sat"})
  if vec is None:
    compute = lanewise(lane, [read], _ident, out_t)
  else:
    compute = lambda S, idx: vec(full(S, idx, read(S, idx), src_t))
    if getattr(read, "reg", None) is not None:    # a register always holds an array
      _parts(compute, vec, [read])
  return store(writer(dst, out_t, ctx, where), compute)


def cvta_step(ins: Instr, ctx):
  mods, t = split_mods(ins, {"to", "global", "shared"})
  dst, src = checked_operands(ins, 2)
  where = where_text(ins)
  return store(writer(dst, t, ctx, where), _copy(reader(src, t, ctx, where), t))

