"""The oracle's op table: each fuzz op as numpy code with its error bound and undefined cases.

See fuzz_oracle.py for the tolerance table and the list of undefined results.
"""
from __future__ import annotations

import numpy as np

from fuzz_oracle import (FMAX, TINY, U, OVal, exact, round_to, storage, times, ulp, work_dtype,
                         zero_sign)
from fuzz_programs import FLOATS, ITEMSIZE, Step, acc_dtype, float_of, mean_dtype, result_dtype

LN2 = float(np.log(2.0))


def apply(step: Step, xs: list[OVal]) -> OVal:
  """One step on oracle values, with the subnormal-flush check and the finiteness rule."""
  fn = OPS[step.op]
  with np.errstate(all="ignore"):
    out = fn(step, xs)
    if step.op not in EXACT_MOVES and any(_has_subnormal(x) for x in xs):
      flushed = fn(step, [_flush(x) for x in xs])
      out.ok &= _agree(out, flushed)
    inexact = out.err > 0
    if out.dtype in FLOATS:
      out.ok &= ~(inexact & ~np.isfinite(out.a.astype(np.float64)))
    out.ok &= np.isfinite(out.err)
  return out


def _has_subnormal(x: OVal) -> bool:
  if x.dtype not in FLOATS:
    return False
  a = np.abs(x.a.astype(np.float64))
  return bool(((a > 0) & (a < TINY[x.dtype])).any())


def _flush(x: OVal) -> OVal:
  if x.dtype not in FLOATS:
    return x
  a = np.array(x.a)
  a[np.abs(a.astype(np.float64)) < TINY[x.dtype]] = 0
  return OVal(a, x.dtype, x.err, x.ok)


def _agree(a: OVal, b: OVal) -> np.ndarray:
  if a.a.shape != b.a.shape:
    return np.zeros(a.a.shape, dtype=bool)
  if a.dtype not in FLOATS:
    return a.a == b.a
  x, y = a.a.astype(np.float64), b.a.astype(np.float64)
  close = (np.abs(x - y) <= 2 * (a.err + b.err) + TINY[a.dtype]) & np.isfinite(a.err + b.err)
  return (np.isnan(x) & np.isnan(y)) | (x == y) | close


# ---- operands -------------------------------------------------------------------------------------

def _scalar(step: Step, x: OVal) -> OVal:
  value = step.param("scalar")
  dtype = result_dtype(x.dtype, value)
  return exact(round_to(np.asarray(value), dtype), dtype)


def _operands(step: Step, xs: list[OVal], dtype: str | None = None) -> list[OVal]:
  """Both operands of a binary op, promoted to one dtype (or `dtype`) and broadcast."""
  if step.param("scalar") is not None:
    xs = [xs[0], _scalar(step, xs[0])]
    xs = xs[::-1] if step.param("reverse") else xs
  dtype = dtype or result_dtype(xs[0].dtype, xs[1].dtype)
  shape = np.broadcast_shapes(*(x.a.shape for x in xs))
  return [OVal(np.broadcast_to(round_to(x.a, dtype), shape), dtype,
               np.broadcast_to(x.err, shape), np.broadcast_to(x.ok, shape)) for x in xs]


def _f64(x: OVal) -> np.ndarray:
  return x.a.astype(np.float64)


def _out(a, dtype: str, err, ok) -> OVal:
  a = round_to(a, dtype)
  return OVal(a, dtype, np.broadcast_to(err, a.shape).astype(np.float64),
              np.broadcast_to(ok, a.shape).copy())


# ---- elementwise: floats --------------------------------------------------------------------------

def _arith(step: Step, xs: list[OVal]) -> OVal:
  x, y = _operands(step, xs)
  if x.dtype not in FLOATS:
    return _int_arith(step.op, x, y)
  a, b = _f64(x), _f64(y)
  r, e = {"add": (a + b, x.err + y.err), "sub": (a - b, x.err + y.err),
          "mul": (a * b, times(b, x.err) + times(a, y.err))}[step.op]
  r = round_to(r, x.dtype)
  return _out(r, x.dtype, np.where(e > 0, e + ulp(r, x.dtype), 0) + ulp(r, x.dtype), x.ok & y.ok)


def _extreme(step: Step, xs: list[OVal]) -> OVal:
  x, y = _operands(step, xs)
  fn = np.maximum if step.op == "maximum" else np.minimum
  return _out(fn(x.a, y.a), x.dtype, np.maximum(x.err, y.err), x.ok & y.ok)


def _truediv(step: Step, xs: list[OVal]) -> OVal:
  scalar = step.param("scalar")
  dtype = result_dtype(xs[0].dtype, scalar if scalar is not None else xs[1].dtype)
  x, y = _operands(step, xs, float_of(dtype))
  a, b = _f64(x), _f64(y)
  q = round_to(a / b, x.dtype)
  e = times(1 / b, x.err) + times(q.astype(np.float64) / b, y.err)
  near_zero = (y.err > 0) & (np.abs(b) <= y.err)
  return _out(q, x.dtype, e + 3 * ulp(q, x.dtype), x.ok & y.ok & ~near_zero)


# name -> (numpy function, error of the result from (x, e, y) in the work dtype, domain edge)
UNARY = {
  "sqrt": (np.sqrt, lambda x, e, y, u: e / (2 * np.sqrt(np.abs(x))) + 3 * u * np.abs(y), True),
  "exp": (np.exp, lambda x, e, y, u: np.abs(y) * (e + u * (4 + 2 * np.abs(x))), False),
  "exp2": (np.exp2, lambda x, e, y, u: np.abs(y) * (e * LN2 + u * (4 + 2 * np.abs(x))), False),
  "log": (np.log, lambda x, e, y, u: e / np.abs(x) + 4 * u * (np.abs(y) + 1), True),
  "log2": (np.log2, lambda x, e, y, u: e / (np.abs(x) * LN2) + 4 * u * (np.abs(y) + 1), True),
  "sin": (np.sin, lambda x, e, y, u: e + 2.0 ** -11 + 4 * u * np.abs(x), False),
  "cos": (np.cos, lambda x, e, y, u: e + 2.0 ** -11 + 4 * u * np.abs(x), False),
  "reciprocal": (np.reciprocal, lambda x, e, y, u: e * y * y + 3 * u * np.abs(y), True),
  "sigmoid": (lambda x: 1 / (1 + np.exp(-x)),
              lambda x, e, y, u: e / 4 + u * (8 + 2 * np.abs(x)) * np.abs(y) + 4 * u, False),
  "tanh": (np.tanh, lambda x, e, y, u: e + u * (16 + 4 * np.abs(x)), False),
}


def _unary_float(step: Step, xs: list[OVal]) -> OVal:
  x = xs[0]
  out = float_of(x.dtype)
  work = work_dtype(out)
  fn, error, edge = UNARY[step.op]
  a = _f64(OVal(round_to(x.a, work), work, x.err, x.ok))
  y = round_to(fn(a), work).astype(np.float64)
  e = np.where(np.isnan(a) | np.isinf(a), 0.0, error(a, x.err, y, U[work]))
  e = np.where(x.err == 0, np.where(np.isfinite(e), e, 0.0), e)
  ok = x.ok & ~(edge & (x.err > 0) & (np.abs(a) <= x.err))
  if step.op in ("sin", "cos"):
    ok &= ~(np.abs(a) > 1000)
  r = round_to(y, out)
  return _out(r, out, e + (ulp(r, out) if out != work else 0), ok)


def _unary_simple(step: Step, xs: list[OVal]) -> OVal:
  x = xs[0]
  if step.op == "neg":
    a = -x.a
  elif step.op == "abs":
    a = np.abs(x.a)
  elif step.op == "invert":
    a = ~x.a
  else:  # relu: numpy's maximum(x, 0) (NaN stays NaN)
    a = np.maximum(x.a, round_to(np.asarray(0), x.dtype))
  return _out(a, x.dtype, x.err, x.ok)


def _unary(step: Step, xs: list[OVal]) -> OVal:
  if step.op in ("neg", "abs", "relu", "invert"):
    return _unary_simple(step, xs)
  return _unary_float(step, xs)


# ---- elementwise: integers ----------------------------------------------------------------------

def _int_arith(op: str, x: OVal, y: OVal) -> OVal:
  a, b = x.a, y.a
  r = {"add": a + b, "sub": a - b, "mul": a * b}[op]
  return _out(r, x.dtype, 0.0, x.ok & y.ok)


def _int_binary(step: Step, xs: list[OVal]) -> OVal:
  x, y = _operands(step, xs)
  a, b, op, ok = x.a, y.a, step.op, x.ok & y.ok
  if op in ("floordiv", "mod"):
    zero = b == 0
    overflow = np.zeros(a.shape, bool)
    if np.issubdtype(a.dtype, np.signedinteger):
      overflow = (a == np.iinfo(a.dtype).min) & (b == -1)
    safe_b = np.where(zero | overflow, 1, b).astype(a.dtype)
    r = a // safe_b if op == "floordiv" else a % safe_b
    return _out(r, x.dtype, 0.0, ok & ~zero & ~overflow)
  if op in ("and", "or", "xor"):
    fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    return _out(fn(a, b), x.dtype, 0.0, ok)
  return _shift(op, x, y, ok)


def _shift(op: str, x: OVal, y: OVal, ok) -> OVal:
  """numpy shifts: a count >= the width gives 0 (or -1 for negative >>); negative: undefined."""
  bits = ITEMSIZE[x.dtype] * 8
  count = y.a.astype(np.int64) if y.dtype not in ("uint64",) else y.a
  negative = count < 0 if y.dtype != "uint64" else np.zeros(count.shape, bool)
  big = (count >= bits) | negative
  safe = np.where(big, 0, count).astype(x.a.dtype)
  if op == "lshift":
    r = np.where(big, 0, np.left_shift(x.a, safe))
  else:
    fill = np.where(x.a < 0, -1, 0) if np.issubdtype(x.a.dtype, np.signedinteger) else 0
    r = np.where(big, fill, np.right_shift(x.a, safe))
  return _out(r.astype(x.a.dtype), x.dtype, 0.0, ok & ~negative)


def _binary(step: Step, xs: list[OVal]) -> OVal:
  if step.op in ("add", "sub", "mul"):
    return _arith(step, xs)
  if step.op in ("maximum", "minimum"):
    return _extreme(step, xs)
  if step.op == "truediv":
    return _truediv(step, xs)
  return _int_binary(step, xs)


def _compare(step: Step, xs: list[OVal]) -> OVal:
  x, y = _operands(step, xs)
  fn = {"lt": np.less, "eq": np.equal, "ne": np.not_equal}[step.op]
  r = fn(x.a, y.a)
  margin = x.err + y.err
  if x.dtype in FLOATS:
    close = (margin > 0) & (np.abs(_f64(x) - _f64(y)) <= 2 * margin)
  else:
    close = np.zeros(r.shape, bool)
  return _out(r, "bool", 0.0, x.ok & y.ok & ~close)


def _where(step: Step, xs: list[OVal]) -> OVal:
  cond, rest = xs[0], xs[1:]
  x, y = _operands(step, rest)
  shape = np.broadcast_shapes(cond.a.shape, x.a.shape)
  c = np.broadcast_to(cond.a.astype(bool), shape)
  pick = lambda p, q: np.where(c, np.broadcast_to(p, shape), np.broadcast_to(q, shape))
  ok = np.broadcast_to(cond.ok, shape) & pick(x.ok, y.ok)
  return _out(pick(x.a, y.a), x.dtype, pick(x.err, y.err), ok)


# ---- casts ------------------------------------------------------------------------------------------

def _cast(step: Step, xs: list[OVal]) -> OVal:
  x, to = xs[0], step.param("dtype")
  if x.dtype in FLOATS and to not in FLOATS:
    return _float_to_int(x, to)
  r = round_to(x.a, to)
  err = x.err
  if to in FLOATS:
    err = np.where(x.err > 0, x.err + ulp(r, to), 0.0)
  return _out(r, to, err if to in FLOATS else 0.0, x.ok)


def _float_to_int(x: OVal, to: str) -> OVal:
  a = _f64(x)
  if to == "bool":
    near = (x.err > 0) & (np.abs(a) <= x.err)
    return _out(a != 0, to, 0.0, x.ok & ~near)
  info = np.iinfo(to)
  t = np.trunc(a)
  ok = x.ok & np.isfinite(a) & (t >= info.min) & (t < float(info.max) + 1)
  near = (x.err > 0) & (np.trunc(a - 2 * x.err) != np.trunc(a + 2 * x.err))
  return _out(np.where(ok, t, 0).astype(to), to, 0.0, ok & ~near)


def _bitcast(step: Step, xs: list[OVal]) -> OVal:
  x, to = xs[0], step.param("dtype")
  bits = _bits(x)
  if to == "bfloat16":
    r = (bits.astype(np.uint32) << 16).view(np.float32)
  else:
    r = bits.view(storage(to))
  ok = x.ok
  if x.dtype in FLOATS:
    ok = ok & ~np.isnan(_f64(x)) & (x.err == 0)
  return _out(r, to, 0.0, ok)


def _bits(x: OVal) -> np.ndarray:
  """The raw bits of x as an unsigned array of its width."""
  if x.dtype == "bfloat16":
    return (x.a.copy().view(np.uint32) >> 16).astype(np.uint16)
  unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[ITEMSIZE[x.dtype]]
  return x.a.copy().view(unsigned)


# ---- movement -----------------------------------------------------------------------------------

def _move(step: Step, xs: list[OVal]) -> OVal:
  x = xs[0]
  fn = MOVES[step.op]
  fill = {"a": round_to(np.asarray(0), x.dtype), "err": 0.0, "ok": True}
  return OVal(np.array(fn(x.a, step, fill["a"])), x.dtype, np.array(fn(x.err, step, 0.0)),
              np.array(fn(x.ok, step, True)))


def _slice(a, step: Step):
  index = [slice(None)] * a.ndim
  index[step.param("axis")] = slice(*step.param("slice"))
  return a[tuple(index)]


MOVES = {
  "reshape": lambda a, s, fill: a.reshape(s.param("shape")),
  "permute": lambda a, s, fill: np.transpose(a, s.param("order")),
  "pad": lambda a, s, fill: np.pad(a, s.param("pads"), constant_values=fill),
  "shrink": lambda a, s, fill: a[tuple(slice(b, e) for b, e in s.param("bounds"))],
  "flip": lambda a, s, fill: np.flip(a, s.param("axes")),
  "slice": lambda a, s, fill: _slice(a, s),
  "expand": lambda a, s, fill: np.broadcast_to(a, s.param("shape")),
}
EXACT_MOVES = set(MOVES) | {"where", "bitcast", "cat", "stack"}


def _join(step: Step, xs: list[OVal]) -> OVal:
  """cat / stack: both parts cast to the promoted dtype (as `cast` does), then joined."""
  out = result_dtype(xs[0].dtype, xs[1].dtype)
  parts = [_cast(Step("cast", (0,), (("dtype", out),)), [x]) for x in xs]
  fn = np.concatenate if step.op == "cat" else np.stack
  axis = step.param("axis")
  return OVal(fn([p.a for p in parts], axis), out, fn([p.err for p in parts], axis),
              fn([p.ok for p in parts], axis))


# ---- reductions and matmul ------------------------------------------------------------------------

def _reduce(step: Step, xs: list[OVal]) -> OVal:
  x, op = xs[0], step.op
  axes, keep = tuple(step.param("axes")), step.param("keepdim")
  ok = np.all(x.ok, axis=axes, keepdims=keep)
  if op in ("max", "min"):
    fn = np.max if op == "max" else np.min
    return _out(fn(x.a, axis=axes, keepdims=keep), x.dtype,
                np.max(x.err, axis=axes, keepdims=keep), ok)
  if op in ("argmax", "argmin"):
    return _argmax(x, axes[0], keep, ok, op == "argmin")
  if op == "var":
    return _var(x, axes, keep, ok, step.param("ddof"))
  out = acc_dtype(x.dtype) if op in ("sum", "prod") else mean_dtype(x.dtype)
  if out not in FLOATS:
    fn = np.sum if op != "prod" else np.prod
    total = fn(x.a.astype(storage(out)), axis=axes, keepdims=keep, dtype=storage(out))
    return _out(total, out, 0.0, ok)
  if op == "prod":
    return _float_prod(x, axes, keep, ok, out)
  return _float_sum(x, axes, keep, ok, out, mean=op == "mean")


def _float_prod(x: OVal, axes, keep, ok, out: str) -> OVal:
  """prod: each multiply rounds once (relative u each); input errors through prod(|a| + e)."""
  a = np.abs(round_to(x.a, out).astype(np.float64))
  n = int(np.prod([x.a.shape[i] for i in axes]))
  r = round_to(np.prod(round_to(x.a, out).astype(np.float64), axis=axes, keepdims=keep), out)
  mag = np.prod(a, axis=axes, keepdims=keep)
  err = np.prod(a + x.err, axis=axes, keepdims=keep) - mag + mag * (n + 1) * U[work_dtype(out)]
  ok = ok & np.isfinite(np.prod(a + x.err, axis=axes, keepdims=keep))
  return _out(r, out, err + ulp(r, out), ok)


def _var(x: OVal, axes, keep, ok, ddof: int) -> OVal:
  """var: the mean, centered squares summed, / (n - ddof); NaN when n - ddof <= 0."""
  out = mean_dtype(x.dtype)
  work = work_dtype(out)
  a = round_to(x.a, out).astype(np.float64)
  n = int(np.prod([x.a.shape[i] for i in axes]))
  c = a - np.mean(a, axis=axes, keepdims=True)
  big_e = np.max(x.err, axis=axes, keepdims=True) if x.err.size else x.err
  terms = np.sum(c * c, axis=axes, keepdims=keep)
  squares = np.sum(a * a, axis=axes, keepdims=keep)
  err_in = np.sum(4 * np.abs(c) * big_e + 4 * big_e * big_e, axis=axes, keepdims=keep)
  d = n - ddof
  r = round_to(terms / d if d > 0 else terms * np.nan, out)
  err = (err_in + (3 * n + 8) * U[work] * squares) / max(d, 1)
  ok = ok & np.all(np.isfinite(a), axis=axes, keepdims=keep) & (squares < FMAX[work] / 4)
  return _out(r, out, err + ulp(r, out), ok)


def _float_sum(x: OVal, axes, keep, ok, out: str, mean: bool) -> OVal:
  work = work_dtype(out)
  a = round_to(x.a, out).astype(np.float64)
  n = int(np.prod([x.a.shape[i] for i in axes]))
  total = np.sum(a, axis=axes, keepdims=keep)
  finite_abs = np.sum(np.where(np.isfinite(a), np.abs(a), 0), axis=axes, keepdims=keep)
  err = np.sum(x.err, axis=axes, keepdims=keep) + n * U[work] * finite_abs
  ok = ok & (finite_abs < FMAX[work] / 2)
  if mean:
    total, err = total / n, err / n + 2 * ulp(total / n, out)
  r = round_to(total, out)
  return _out(r, out, err + ulp(r, out) + zero_sign(r), ok)


def _argmax(x: OVal, axis: int, keep: bool, ok, smallest: bool = False) -> OVal:
  r = (np.argmin if smallest else np.argmax)(x.a, axis=axis, keepdims=True)
  if x.dtype in FLOATS:
    a = x.a.astype(np.float64) * (-1 if smallest else 1)
    best = np.take_along_axis(a, r, axis)
    margin = 2 * (x.err + np.take_along_axis(x.err, r, axis))
    rivals = np.sum((a >= best - margin) & (margin > 0), axis=axis, keepdims=True)
    ok = ok & (np.squeeze(rivals, axis) <= 1 if not keep else rivals <= 1)
  r = r if keep else np.squeeze(r, axis)
  return _out(r.astype(np.int32), "int32", 0.0, ok)


def _matmul(step: Step, xs: list[OVal]) -> OVal:
  dtype = result_dtype(xs[0].dtype, xs[1].dtype)
  a, b = (round_to(x.a, dtype) for x in xs)
  ok = _matmul_ok(xs[0].ok, xs[1].ok)
  if dtype not in FLOATS:
    wide = np.uint64 if dtype == "uint64" else np.int64
    return _out(np.matmul(a.astype(wide), b.astype(wide)), dtype, 0.0, ok)
  a64, b64 = a.astype(np.float64), b.astype(np.float64)
  r = np.matmul(a64, b64)
  finite = lambda v: np.where(np.isfinite(v), np.abs(v), 0.0)
  terms = np.matmul(finite(a64), finite(b64))
  k = a.shape[-1]
  err = np.matmul(xs[0].err, finite(b64)) + np.matmul(finite(a64), xs[1].err)
  err = err + (U[dtype] + k * U[work_dtype(dtype)]) * terms
  r = round_to(r, dtype)
  return _out(r, dtype, err + ulp(r, dtype) + zero_sign(r), ok & (terms < FMAX[dtype] / 2))


def _matmul_ok(ok_a: np.ndarray, ok_b: np.ndarray) -> np.ndarray:
  """An output element is defined when its whole row of a and column of b are."""
  bad = np.matmul((~ok_a).astype(np.int64), np.ones(ok_b.shape, np.int64)) + \
    np.matmul(np.ones(ok_a.shape, np.int64), (~ok_b).astype(np.int64))
  return bad == 0


# ---- pow, softmax, conv2d -------------------------------------------------------------------------

def _pow(step: Step, xs: list[OVal]) -> OVal:
  x, y = _operands(step, xs)
  if x.dtype not in FLOATS:
    return _out(np.power(x.a, y.a.astype(x.a.dtype)), x.dtype, 0.0, x.ok & y.ok)
  a, b = _f64(x), _f64(y)
  r = round_to(np.power(a, b), x.dtype)
  rf = np.abs(r.astype(np.float64))
  la = np.log(np.where(np.abs(a) > 0, np.abs(a), 1.0))
  scalar_int = step.param("scalar") in (2, 3) and isinstance(step.param("scalar"), int)
  e_round = rf * U[work_dtype(x.dtype)] * (8 + 4 * np.abs(b * la / LN2))
  e_in = times(rf * np.abs(b / np.where(a != 0, a, 1.0)), x.err) + times(rf * np.abs(la), y.err)
  # undefined: 0 ** negative (-0.0 gives -inf in numpy, inf here) and 0 with an inexact base
  ok = x.ok & y.ok & ~((a == 0) & (b < 0)) & ~((x.err > 0) & (np.abs(a) <= x.err))
  ok &= ~((y.err > 0) & (a < 0))
  return _out(r, x.dtype, e_round * (2 if scalar_int else 1) + e_in + ulp(r, x.dtype), ok)


def _softmax(step: Step, xs: list[OVal]) -> OVal:
  x, axis = xs[0], step.param("axis")
  a = round_to(x.a, x.dtype).astype(np.float64)
  e = np.exp(a - np.max(a, axis=axis, keepdims=True))
  y = e / np.sum(e, axis=axis, keepdims=True)
  n = x.a.shape[axis]
  big_e = np.max(x.err, axis=axis, keepdims=True)
  err = y * ((n + 12) * U[x.dtype] + 4 * (big_e + x.err) * (1 + y))
  ok = np.all(x.ok & np.isfinite(a), axis=axis, keepdims=True)
  r = round_to(y, x.dtype)
  return _out(r, x.dtype, err + ulp(r, x.dtype), ok & np.ones(a.shape, bool))


def _conv2d(step: Step, xs: list[OVal]) -> OVal:
  """conv2d as sums of shifted products (NCHW, OIHW), error bound as matmul's."""
  x, w = xs
  dtype, stride, pad = x.dtype, step.param("stride"), step.param("padding")
  a = np.pad(round_to(x.a, dtype).astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  ea = np.pad(x.err, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  oka = np.pad(x.ok, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=True)
  # a padded 0 times an inf/NaN weight: undefined (WGSL may assume no inf/NaN; lavapipe gives 0)
  padded = np.pad(np.zeros(x.a.shape), ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=1)
  k = round_to(w.a, dtype).astype(np.float64)
  o, _, kh, kw = k.shape
  oh, ow = (a.shape[2] - kh) // stride + 1, (a.shape[3] - kw) // stride + 1
  finite = lambda v: np.where(np.isfinite(v), np.abs(v), 0.0)
  r, terms, err = (np.zeros((a.shape[0], o, oh, ow)) for _ in range(3))
  bad = np.zeros(r.shape)
  for i in range(kh):
    for j in range(kw):
      win = lambda v: v[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
      r += np.einsum("nchw,oc->nohw", win(a), k[:, :, i, j])
      terms += np.einsum("nchw,oc->nohw", finite(win(a)), finite(k[:, :, i, j]))
      err += np.einsum("nchw,oc->nohw", win(ea), finite(k[:, :, i, j]))
      err += np.einsum("nchw,oc->nohw", finite(win(a)), w.err[:, :, i, j])
      bad += np.einsum("nchw,oc->nohw", (~win(oka)).astype(float), np.ones(k.shape[:2]))
      bad += np.einsum("nchw,oc->nohw", win(padded), (~np.isfinite(k[:, :, i, j])).astype(float))
  bad += np.sum(~w.ok, axis=(1, 2, 3))[None, :, None, None]
  n_terms = k.shape[1] * kh * kw
  err += (U[dtype] + n_terms * U[work_dtype(dtype)]) * terms
  r = round_to(r, dtype)
  return _out(r, dtype, err + ulp(r, dtype) + zero_sign(r), (bad == 0) & (terms < FMAX[dtype] / 2))


OPS = {**{op: _unary for op in ("neg", "abs", "relu", "invert", *UNARY)},
       **{op: _binary for op in ("add", "sub", "mul", "maximum", "minimum", "truediv",
                                 "floordiv", "mod", "and", "or", "xor", "lshift", "rshift")},
       **{op: _compare for op in ("lt", "eq", "ne")},
       **{op: _move for op in MOVES},
       **{op: _reduce for op in ("sum", "max", "min", "mean", "argmax", "argmin", "prod", "var")},
       "where": _where, "cast": _cast, "bitcast": _bitcast, "matmul": _matmul,
       "cat": _join, "stack": _join, "pow": _pow, "softmax": _softmax, "conv2d": _conv2d}


from fuzz_scan_sort import ORACLE as SCAN_SORT_ORACLE  # noqa: E402  (scans, sorts, einsum: issue 18)
OPS.update(SCAN_SORT_ORACLE)
from fuzz_ops_models import ORACLE  # noqa: E402  (issue 18's operations)
OPS.update(ORACLE)
from fuzz_nn_ops import ORACLE as NN_ORACLE  # noqa: E402  (norms, losses, attention: issue 18)
OPS.update(NN_ORACLE)
from fuzz_ops_deep import ORACLE as DEEP_ORACLE  # noqa: E402  (issue 18: deeper draws)
OPS.update(DEEP_ORACLE)
