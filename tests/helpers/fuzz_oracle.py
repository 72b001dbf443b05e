"""The numpy oracle for fuzz programs: expected values, an error bound and a "defined" mask.

Each value is an `OVal`: the numbers (bfloat16 kept as float32 holding bf16 values), the dtype
kernelgen must give, `err` (an absolute error bound per element, 0 where the result is exact),
and `ok` (False where the result is not defined, so it is not compared). Semantics are numpy's,
with kernelgen's documented differences (tensor.py's docstring) written out in fuzz_programs.

TOLERANCES (u = unit roundoff of the dtype an op computes in; float16/bfloat16 math and
reductions compute in float32 and round once more to the half type: + 1 ulp of the output):

| op                              | error added per element                          |
|---------------------------------|--------------------------------------------------|
| movement, where, cast, bitcast, |  0: bit-exact (floats: equal, or both NaN)       |
| compare, max/min, int anything  |                                                  |
| add, sub, mul                   |  1 ulp of the result (allows fused multiply-add) |
| truediv, reciprocal, sqrt       |  3 ulp                                           |
| exp, exp2                       |  (4 + 2|x|) ulp  (exp is exp2(x * log2 e))       |
| log, log2                       |  4 ulp + 4u absolute                             |
| sin, cos                        |  2**-11 + 4u|x| absolute (WGSL's bound)          |
| sigmoid, tanh                   |  (8 + 2|x|)u relative + 4u absolute              |
| sum, mean, matmul (n terms)     |  n * u * sum(|terms|) + 1 ulp (any order)        |

Errors of the inputs propagate to first order (add: ea + eb; mul: |b| ea + |a| eb; ...).
A float result passes when |actual - expected| <= 2 * err + the dtype's smallest normal
(GPUs may flush subnormal results to zero).

UNDEFINED (not compared, `ok` False), where numpy's result is not a defined value or the
result depends on rounding the tolerances allow:
- float -> int casts of NaN, +-inf, or values whose truncation is out of the int's range
  (numpy's result is platform-specific; kernelgen clamps like PTX's cvt);
- integer // and % by zero, and INT_MIN // -1 or % -1 (C undefined behaviour);
- shifts by a negative count;
- bitcasts of NaNs (NaN payloads and signs are not specified on GPUs) and of inexact values,
  including zero results of sums, matmuls and convolutions: the sign of a zero sum depends on
  the order and the start value (numpy: sum([-0.0]) is -0.0, 0.0 + -0.0 is 0.0), and lavapipe
  folds `0.0 + x` into `x` (fuzz seed 5337: an f16 conv2d over padding, bitcast to int16);
- sin/cos with |x| > 1000 (GPU approximations have no error bound there);
- results that depend on whether subnormal inputs are flushed to zero (WGSL allows it);
- inexact inputs within their error of a boundary: a comparison of values closer than their
  errors, a float -> int cast near an integer, sqrt/log/division near 0, argmax near a tie;
- sums/matmuls whose finite terms add up beyond the accumulator's range (order decides
  whether they overflow), and inexact results that are not finite.

WEBGPU ONLY (`compare(..., nonfinite_sums=True)`, chosen by `reassociates_nonfinite`): where a
float sum, mean, matmul or conv2d reads an infinity, a NaN result may come back as +-inf. WGSL lets
implementations assume that no infinities or NaNs occur during shader execution (WGSL spec,
"Floating Point Evaluation"), and lavapipe uses that: after unrolling a short reduction loop it
factors a common multiplier out of the sum, x0*c + x1*c -> (x0 + x1)*c, so with c = inf and
x1 = 0 the NaN of 0*inf never happens (fuzz seed 1144: a conv2d with a `full(inf)` weight). The
result must still be non-finite: only NaN -> +-inf is accepted, and only at the output.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fuzz_programs import FLOATS, Program, Step, acc_dtype, float_of, mean_dtype, result_dtype

U = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24, "float64": 2.0 ** -53}
TINY = {"float16": 6.103515625e-05, "bfloat16": 1.1754943508222875e-38,
        "float32": 1.1754943508222875e-38, "float64": 2.2250738585072014e-308}
FMAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38,
        "float64": 1.7976931348623157e308}


@dataclass
class OVal:
  a: np.ndarray      # values (bfloat16: float32 holding bf16 values)
  dtype: str         # the dtype kernelgen must give
  err: np.ndarray    # float64 absolute error bound per element (0: exact)
  ok: np.ndarray     # bool: the element is defined


def storage(dtype: str) -> np.dtype:
  return np.dtype("float32" if dtype == "bfloat16" else dtype)


def work_dtype(dtype: str) -> str:
  """The dtype float math runs in: float32 for the half types."""
  return "float32" if dtype in ("float16", "bfloat16") else dtype


def round_to(x, dtype: str) -> np.ndarray:
  """Values as `dtype` holds them: floats round to nearest even (once), ints wrap."""
  x = np.asarray(x)
  with np.errstate(all="ignore"):
    if dtype == "bfloat16":
      return _round_bf16(x.astype(np.float64))
    if dtype == "bool":
      return x.astype(bool)
    if dtype in FLOATS or x.dtype.kind in "biu":
      return x.astype(storage(dtype))
    return x.astype(np.float64).astype(storage(dtype))


def _round_bf16(x: np.ndarray) -> np.ndarray:
  """float64 -> bfloat16 (in float32) with one rounding: a sticky bit stops double rounding."""
  f = x.astype(np.float32)
  bits = f.view(np.uint32).astype(np.int64)
  inexact = np.isfinite(f) & (f.astype(np.float64) != x) & ~np.isnan(x)
  bits += np.where(inexact, np.where(np.abs(x) > np.abs(f), 1, -1), 0)
  rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
  rounded = np.where(np.isnan(f), (bits >> 16 << 16) | 0x400000, rounded)
  return (rounded & 0xFFFFFFFF).astype(np.uint32).view(np.float32)


def ulp(y: np.ndarray, dtype: str) -> np.ndarray:
  with np.errstate(all="ignore"):
    return np.where(np.isfinite(y), np.abs(y.astype(np.float64)) * 2 * U[dtype], 0.0)


def zero_sign(r: np.ndarray) -> np.ndarray:
  """The error bound a zero sum carries: the smallest float64 (so a bitcast of it is not
  compared: its sign is not defined; see UNDEFINED), 0 elsewhere."""
  return np.where(r == 0, 5e-324, 0.0)


def times(x: np.ndarray, e: np.ndarray) -> np.ndarray:
  """|x| * e, with 0 where e is 0 (so inf * exact stays exact)."""
  with np.errstate(all="ignore"):
    return np.where(e == 0, 0.0, np.abs(x.astype(np.float64)) * e)


# ---- inputs -------------------------------------------------------------------------------------

def _specials(dtype: str) -> list:
  if dtype == "bool":
    return [False, True]
  if dtype not in FLOATS:
    info = np.iinfo(dtype)
    return [0, 1, info.min, info.max, info.min + 1, info.max - 1] + ([-1] if info.min else [])
  tiny = TINY[dtype]
  return [0.0, -0.0, np.nan, np.inf, -np.inf, tiny / 4, -tiny / 2, FMAX[dtype], -FMAX[dtype],
          tiny, 1.0, -1.0, 0.5]


def input_values(step: Step) -> np.ndarray:
  """An input step's values, deterministic in its seed."""
  shape, dtype = step.param("shape"), step.param("dtype")
  rng = np.random.default_rng(step.param("seed"))
  n = int(np.prod(shape, dtype=np.int64))
  if dtype == "bool":
    values = rng.random(n) < 0.5
  elif dtype in FLOATS:
    values = np.round(rng.standard_normal(n) * 3, 2)
  else:
    low = -20 if np.iinfo(dtype).min else 0
    values = rng.integers(low, 21, n)
  specials = np.array(_specials(dtype), dtype=np.float64 if dtype in FLOATS else object)
  pick = rng.random(n) < step.param("special")
  chosen = specials[rng.integers(0, len(specials), n)]
  values = np.where(pick, chosen, values.astype(object if dtype not in FLOATS else np.float64))
  if dtype not in FLOATS:
    values = np.array([int(v) for v in values], dtype=dtype)
  return round_to(values, dtype).reshape(shape)


# ---- inputs made by creation functions (fuzz_programs.SOURCES) --------------------------------

def input_oval(step: Step) -> OVal:
  """An input step's expected values: the numpy/list data, or what the creation function gives
  (kernelgen's documented semantics, written out in numpy). `empty` is unwritten: its values are
  unspecified, so nothing computed from them is compared (ok False); shapes and dtypes still
  are. randn goes through log, sqrt and cos: an error bound, as those ops have."""
  source, shape, dtype = step.param("source", "numpy"), step.param("shape"), step.param("dtype")
  n = int(np.prod(shape, dtype=np.int64))
  if source in ("numpy", "list"):
    return exact(input_values(step), dtype)
  if source in ("zeros", "ones", "empty"):
    out = exact(round_to(np.full(shape, 1 if source == "ones" else 0), dtype), dtype)
    if source == "empty":
      out.ok[...] = False
    return out
  if source == "full":
    return exact(round_to(np.full(shape, fill_value(step)), dtype), dtype)
  if source == "eye":
    rows = shape[0] if shape else 1
    cols = int(np.prod(shape[1:], dtype=np.int64)) if shape else 1
    return exact(round_to(np.eye(rows, cols), dtype).reshape(shape), dtype)
  if source == "arange":
    return exact(_arange(n, step.param("start"), step.param("step"), dtype).reshape(shape), dtype)
  if source == "rand":
    return exact(round_to(rand_unit(n, step.param("seed")), dtype).reshape(shape), dtype)
  if source == "linspace":
    return _linspace(n, step, dtype, shape)
  return _randn(n, step.param("seed"), dtype, shape)


def fill_value(step: Step):
  """The Python value `full` fills with: one value drawn as the input's values are."""
  one = Step("input", (), tuple((k, () if k == "shape" else v) for k, v in step.params))
  return input_values(one).item()


def _arange(n: int, start, step, dtype: str) -> np.ndarray:
  """Tensor.arange(start, start + n * step, step, dtype): (ramp.cast(dtype) * step + start)
  in dtype (bool: the arithmetic in int32), each op rounding or wrapping once."""
  ramp = round_to(np.arange(n), dtype)
  if dtype in FLOATS:
    return round_to(round_to(ramp.astype(np.float64) * step, dtype).astype(np.float64) + start,
                    dtype)
  wide = ramp.astype(np.int64) * step + start     # ints wrap: the same modulo 2**bits
  return round_to(wide.astype("int32") if dtype == "bool" else wide, dtype)


def rand_unit(n: int, seed: int) -> np.ndarray:
  """Tensor.rand's float32 values in [0, 1): the lowbias32-style hash of (seed, index),
  documented in tensor.py, written out in numpy uint64 arithmetic modulo 2**32."""
  mask = 0xFFFFFFFF
  x = np.arange(n, dtype=np.uint64) ^ np.uint64((seed * 0x9E3779B9 + 0x85EBCA6B) & mask)
  for shift, mult in ((16, 0x7FEB352D), (15, 0x846CA68B), (16, None)):
    x = x ^ (x >> np.uint64(shift))
    if mult is not None:
      x = (x * np.uint64(mult)) & np.uint64(mask)
  return ((x >> np.uint64(8)).astype(np.float32) * np.float32(2.0 ** -24))


def _linspace(n: int, step: Step, dtype: str, shape) -> OVal:
  """numpy.linspace(start, stop, n, endpoint) in float64, as float32 (Tensor.linspace computes
  start + i * step in float32, the last value exactly stop) then cast to dtype. The bound: the
  step's rounding times i, and one rounding of i * step and of the sum, each 0 where exact."""
  from fuzz_oracle_ops import apply
  start, stop, endpoint = step.param("start"), step.param("stop"), step.param("endpoint")
  ref = np.linspace(start, stop, n, endpoint=endpoint)
  div = (n - 1) if endpoint else n
  by = (stop - start) / div if div > 0 else 0.0
  i = np.arange(n, dtype=np.float64)
  by32, start32 = float(np.float32(by)), float(np.float32(start))
  inexact = lambda v: np.where(np.float32(v).astype(np.float64) == v, 0.0,
                               np.abs(v) * 2 * U["float32"])
  err = i * abs(by - by32) + abs(start - start32) + inexact(i * by32) + inexact(ref)
  if endpoint and n > 1:
    err[-1] = 0.0
  out = OVal(round_to(ref, "float32").reshape(shape), "float32", err.reshape(shape),
             np.ones(shape, dtype=bool))
  return out if dtype == "float32" else apply(Step("cast", (0,), (("dtype", dtype),)), [out])


def _randn(n: int, seed: int, dtype: str, shape) -> OVal:
  """Box-Muller in float32 (sqrt(-2 log u1) cos(2 pi u2)): float64 values with the error bound
  of log, sqrt, cos (2**-11 absolute, as the oracle allows cos) and the roundings between."""
  from fuzz_oracle_ops import apply
  u1 = 1.0 - rand_unit(n, seed * 2 + 1).astype(np.float64)
  u2 = rand_unit(n, seed * 2 + 2).astype(np.float64)
  radius = np.sqrt(-2.0 * np.log(u1))
  value = radius * np.cos(2 * np.pi * u2)
  err = radius * 2.0 ** -11 + (np.abs(value) + radius) * 16 * U["float32"] + 1e-6
  out = OVal(round_to(value, "float32").reshape(shape), "float32", err.reshape(shape),
             np.ones(shape, dtype=bool))
  return out if dtype == "float32" else apply(Step("cast", (0,), (("dtype", dtype),)), [out])


# ---- the oracle -----------------------------------------------------------------------------------

def exact(a: np.ndarray, dtype: str) -> OVal:
  return OVal(a, dtype, np.zeros(a.shape), np.ones(a.shape, dtype=bool))


def evaluate_all(program: Program) -> list[OVal]:
  """The expected value of every step of `program`."""
  from fuzz_oracle_ops import apply
  values: list[OVal] = []
  for step in program.steps:
    if step.op == "input":
      values.append(input_oval(step))
    else:
      values.append(apply(step, [values[r] for r in step.refs]))
  return values


def evaluate(program: Program) -> OVal:
  """The expected output of `program`."""
  return evaluate_all(program)[program.output]


def compare(expected: OVal, actual: np.ndarray, nonfinite_sums: bool = False) -> str | None:
  """None when `actual` agrees with the oracle; otherwise what differs, for the report.
  `nonfinite_sums`: accept +-inf where NaN is expected (WEBGPU; see the module docstring)."""
  exp = expected.a
  if tuple(actual.shape) != tuple(exp.shape):
    return f"shape {tuple(actual.shape)}, expected {tuple(exp.shape)}"
  if expected.dtype in FLOATS:
    bad = _float_mismatch(expected, actual.astype(np.float64))
    if nonfinite_sums:
      bad &= ~(np.isnan(exp.astype(np.float64)) & np.isinf(actual.astype(np.float64)))
  else:
    bad = expected.ok & (actual.astype(exp.dtype) != exp)
  if not bad.any():
    return None
  where = tuple(int(i) for i in np.argwhere(bad)[0])
  return (f"{int(bad.sum())} of {bad.size} elements differ; first at {where}: got "
          f"{actual[where]!r}, expected {exp[where]!r} (error bound {expected.err[where]:.3g})")


def _float_mismatch(expected: OVal, got: np.ndarray) -> np.ndarray:
  exp = expected.a.astype(np.float64)
  with np.errstate(all="ignore"):
    both_nan = np.isnan(exp) & np.isnan(got)
    same_inf = np.isinf(exp) & (exp == got)
    close = np.abs(got - exp) <= 2 * expected.err + TINY[expected.dtype]
  return expected.ok & ~(both_nan | same_inf | (close & np.isfinite(exp)))


SUMS = ("sum", "mean", "matmul", "conv2d")


def reassociates_nonfinite(program: Program) -> bool:
  """True when a float sum, mean, matmul or conv2d of `program` reads an infinity: WGSL may
  then turn the NaN of an inf * 0 term into +-inf (see the module docstring)."""
  values = evaluate_all(program)
  return any(step.op in SUMS and any(values[r].dtype in FLOATS and
                                     np.isinf(values[r].a.astype(np.float64)).any()
                                     for r in step.refs)
             for step in program.steps)
