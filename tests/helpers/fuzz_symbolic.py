"""Random programs over a symbolic axis (kg.Dim) for the differential fuzzer (fuzz_runner.py draws
one beside every SYMBOLIC_EVERY-th seed's program; tests/fuzz/test_symbolic_fuzz.py runs a fixed
slice): a range lo..hi and bound values are drawn (the range's ends, a value no tile, vector or
workgroup size divides, one more), then a chain of operations over a (n, cols) tensor whose axis 0
is symbolic, and a final operation. Some programs (`even`) take x of (2n, cols) and one of STEPS
in their chain: a slice with step 2 or a window of stride 2 along the axis declared 2 * n
(tensor/symbolic_steps.py: a step's count is a size there), which halves it to n. Each bound
value runs against numpy (float64), and after the
first value nothing compiles again: one compiled set of kernels serves the whole range. Some
programs (`wide`) end in WIDE_FINAL, a matmul wide enough that WEBGPU's adapters tile it in
registers over the symbolic axis from hi = 40 (with variants for small values: lowering/
variants.py). With `cut` (run_symbolic), every kernel that graph/at_value.py's item_at cuts to a
bound value takes the static kernel of that size as its variant for that value (static_cuts:
the form option static_low_end gives a register tile's low end, which no adapter sets, so
nothing else reaches item_at), so each value runs the cut graphs.

    program = generate_symbolic(seed); verdicts = run_symbolic(program, ["PYTHON", "WEBGPU"])
    verdicts = run_symbolic(program, ["PYTHON", "WEBGPU"], cut=True)     # item_at's cuts
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

import kernelgen as kg

LOWS, HIGHS = (1, 1, 2, 5), (24, 40, 67, 13)    # range ends drawn from
ODD = (7, 11, 13, 17, 19, 23, 29, 31, 37)         # values that divide no tile or vector width
RTOL = ATOL = 3e-4
EVEN_SHARE = 0.3                                  # programs over (2n, cols) with one of STEPS
# programs whose final is WIDE_FINAL's: cols padded to 8 (TILE_MIN_REDUCE), @ (8, WIDE), whose
# padded output (hi, WIDE) lavapipe and SwiftShader tile in registers from hi = 40
WIDE_SHARE, WIDE = 0.2, 128


def _softmax(a, axis):
  e = np.exp(a - a.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


def _layernorm(a, axis):
  mu = a.mean(axis, keepdims=True)
  return (a - mu) / np.sqrt(a.var(axis, keepdims=True) + 1e-5)


def _sdpa(q, k):
  s = q @ k.T / np.sqrt(k.shape[-1])
  return _softmax(s, -1) @ k


def _keys(x, n):
  """(1, 1, n, cols) keys and values from x (n, cols): sdpa's symbolic key length."""
  return x.reshape(1, 1, *x.shape)


def _symbolic_w(w, rows: int, n, cols: int):
  """The first `rows` rows of `w` as a tensor whose axis 0 is the bound dim n (a symbolic K)."""
  return kg.Tensor(np.ascontiguousarray(w[:rows, :cols])).symbolic(n, cols)


# name -> (kernelgen op (x, w, n, v), numpy op (a, w, v)); x: (n, cols) with n symbolic; every
# op keeps axis 0 symbolic of the same size, so any chain of them is valid
OPS = {
  "exp_tanh": (lambda x, w, n, v: (x * 0.3).exp().tanh(), lambda a, w, v: np.tanh(np.exp(a * 0.3))),
  "add_row": (lambda x, w, n, v: x + kg.Tensor(w[0, :x.shape[-1]]),
              lambda a, w, v: a + w[0, :a.shape[-1]]),
  "where": (lambda x, w, n, v: kg.where(x > 0, x, x * -2.0),
            lambda a, w, v: np.where(a > 0, a, a * -2.0)),
  "softmax_s": (lambda x, w, n, v: x.softmax(0), lambda a, w, v: _softmax(a, 0)),
  "softmax_last": (lambda x, w, n, v: x.softmax(-1), lambda a, w, v: _softmax(a, -1)),
  "log_softmax_s": (lambda x, w, n, v: x.log_softmax(0) * 0.2,
                    lambda a, w, v: (a - a.max(0) - np.log(np.exp(a - a.max(0)).sum(0))) * 0.2),
  "cumsum_s": (lambda x, w, n, v: x.cumsum(0) * 0.1, lambda a, w, v: np.cumsum(a, 0) * 0.1),
  "matmul_m": (lambda x, w, n, v: x @ kg.Tensor(w[:x.shape[-1], :6]) * 0.2,
               lambda a, w, v: a @ w[:a.shape[-1], :6] * 0.2),
  "layernorm_last": (lambda x, w, n, v: x.layernorm(-1), lambda a, w, v: _layernorm(a, -1)),
  "layernorm_s": (lambda x, w, n, v: x.layernorm(0), lambda a, w, v: _layernorm(a, 0)),
  "center_s": (lambda x, w, n, v: x - x.mean(0, keepdim=True),
               lambda a, w, v: a - a.mean(0, keepdims=True)),
  "rescale_max_s": (lambda x, w, n, v: x / (x.abs().max(0, keepdim=True) + 1),
                    lambda a, w, v: a / (np.abs(a).max(0, keepdims=True) + 1)),
  "flip": (lambda x, w, n, v: x.flip(0), lambda a, w, v: a[::-1]),
  "sort_s": (lambda x, w, n, v: x.sort(0), lambda a, w, v: np.sort(a, 0)),
  "sort_desc_s": (lambda x, w, n, v: x.sort(0, descending=True), lambda a, w, v: -np.sort(-a, 0)),
  "sdpa_keys": (lambda x, w, n, v: kg.scaled_dot_product_attention(
                  x.reshape(1, 1, n, x.shape[-1]), x.reshape(1, 1, n, x.shape[-1]),
                  x.reshape(1, 1, n, x.shape[-1])).reshape(n, x.shape[-1]),
                lambda a, w, v: _softmax(a @ a.T / np.sqrt(a.shape[-1]), -1) @ a),
}
# ops that change the symbolic axis' size (a chain ends its symbolic part with at most one)
GROW = {
  "pad": (lambda x, w, n, v: x.pad(((1, 2), (0, 0)), value=0.5),
          lambda a, w, v: np.pad(a, ((1, 2), (0, 0)), constant_values=0.5)),
  "cat_self": (lambda x, w, n, v: kg.cat([x, x * 2], 0),
               lambda a, w, v: np.concatenate([a, a * 2], 0)),
}
# ops that halve a symbolic axis of 2 * n (an even program's one step; nothing grows it before)
STEPS = {
  "step2": (lambda x, w, n, v: x[::2], lambda a, w, v: a[::2]),
  "step2_odd": (lambda x, w, n, v: x[1::2] * 1.5, lambda a, w, v: a[1::2] * 1.5),
  "max_pool2": (lambda x, w, n, v: _rows(_series(x, n).max_pool1d(2)),
                lambda a, w, v: a.reshape(-1, 2, a.shape[-1]).max(1)),
  "avg_pool2": (lambda x, w, n, v: _rows(_series(x, n).avg_pool1d(2)),
                lambda a, w, v: a.reshape(-1, 2, a.shape[-1]).mean(1)),
  "conv_s2": (lambda x, w, n, v: _rows(_series(x, n).conv1d(
                kg.Tensor(_conv_weight(x.shape[-1])), stride=2, padding=1)),
              lambda a, w, v: _conv_s2_np(a)),
}


def _series(x, n):
  """x (n, cols) as (1, cols, n): a signal whose length is the symbolic axis."""
  return x.permute(1, 0).reshape(1, x.shape[-1], n)


def _rows(y):
  """(1, cols, m) back to (m, cols)."""
  return y.reshape(y.shape[1], y.symbolic_shape[-1]).permute(1, 0)


def _conv_weight(cols: int) -> np.ndarray:
  return (np.cos(np.arange(cols * cols * 3)) * 0.3).reshape(cols, cols, 3).astype(np.float32)


def _conv_s2_np(a):
  """conv1d of a (2v, cols) as channels-last rows: kernel 3, stride 2, padding 1."""
  wt = _conv_weight(a.shape[-1]).astype(np.float64)
  xp = np.pad(a, ((1, 1), (0, 0)))
  return np.stack([np.einsum("ock,kc->o", wt, xp[2 * t:2 * t + 3]) for t in range(len(a) // 2)])


# the last step: reductions over the symbolic axis, or none
FINAL = {
  "sum_s": (lambda x, w, n, v: x.sum(0), lambda a, w, v: a.sum(0)),
  "max_s": (lambda x, w, n, v: x.max(0), lambda a, w, v: a.max(0)),
  "min_s": (lambda x, w, n, v: x.min(0), lambda a, w, v: a.min(0)),
  "mean_s": (lambda x, w, n, v: x.mean(0), lambda a, w, v: a.mean(0)),
  "var_s": (lambda x, w, n, v: x.var(0), lambda a, w, v: a.var(0)),
  "logsumexp_s": (lambda x, w, n, v: x.logsumexp(0),
                  lambda a, w, v: np.log(np.exp(a - a.max(0)).sum(0)) + a.max(0)),
  "argmax_s": (lambda x, w, n, v: x.argmax(0), lambda a, w, v: a.argmax(0)),
  "matmul_k": (lambda x, w, n, v: x.permute(1, 0) @ _symbolic_w(w, v, n, 5),
               lambda a, w, v: a.T @ w[:v, :5]),
  "take_s": (lambda x, w, n, v: x[kg.Tensor(np.array([0, v - 1, v // 2], np.int32))],
             lambda a, w, v: a[[0, v - 1, v // 2]]),
  "keep": (lambda x, w, n, v: x, lambda a, w, v: a),
  "mean_all": (lambda x, w, n, v: x.mean(), lambda a, w, v: a.mean()),
}


def _wide_weight() -> np.ndarray:
  return (np.cos(np.arange(8 * WIDE)) * 0.3).reshape(8, WIDE).astype(np.float32)


def _wide(x):
  """x (n, cols) with its columns zero-padded to 8, @ (8, WIDE)."""
  return x.pad(((0, 0), (0, 8 - x.shape[-1]))) @ kg.Tensor(_wide_weight())


# a `wide` program's final (drawn apart from FINAL: earlier seeds' draws stay)
WIDE_FINAL = {
  "matmul_wide": (lambda x, w, n, v: _wide(x),
                  lambda a, w, v: a @ _wide_weight()[:a.shape[-1]].astype(np.float64)),
}


@dataclass(frozen=True)
class SymbolicProgram:
  """A drawn program: the dim's range, the values it is bound to (in order), the columns, the
  chain of OPS (and at most one of GROW; an `even` program's x is (2n, cols) and its chain holds
  one of STEPS, before any GROW), the FINAL step and the data seed."""
  seed: int
  lo: int
  hi: int
  values: tuple
  cols: int
  steps: tuple
  final: str
  even: bool = False

  @property
  def rows(self) -> str:
    """x's symbolic axis: n, or 2 * n in an even program."""
    return "2*n" if self.even else "n"

  def __str__(self) -> str:
    return (f"n = kg.Dim('n', {self.lo}, {self.hi}); x: ({self.rows}, {self.cols}) at n in "
            f"{self.values}; "
            f"{' -> '.join(self.steps + (self.final,))} (seed {self.seed})")


def generate_symbolic(seed: int) -> SymbolicProgram:
  """Seed `seed`'s symbolic program (numpy's generator: the same program every time)."""
  rng = np.random.default_rng(seed)
  lo, hi = int(rng.choice(LOWS)), int(rng.choice(HIGHS))
  hi = max(hi, lo + 1)
  odd = [v for v in ODD if lo < v < hi] or [hi - 1]
  middle = int(rng.integers(lo, hi + 1))
  values = tuple(dict.fromkeys([lo, hi, int(rng.choice(odd)), middle]))
  steps = [str(rng.choice(sorted(OPS))) for _ in range(int(rng.integers(1, 4)))]
  if rng.random() < 0.3:
    steps.insert(int(rng.integers(0, len(steps) + 1)), str(rng.choice(sorted(GROW))))
  final = str(rng.choice(sorted(FINAL)))
  if final == "matmul_k" and any(s in GROW for s in steps):
    final = "sum_s"       # (its weight rows follow the bound value, not a grown size)
  cols = int(rng.integers(1, 9))
  even = bool(rng.random() < EVEN_SHARE)       # (drawn last: earlier seeds' draws stay)
  if even:
    grow = [i for i, s in enumerate(steps) if s in GROW]
    steps.insert(int(rng.integers(0, (grow[0] if grow else len(steps)) + 1)),
                 str(rng.choice(sorted(STEPS))))
  if rng.random() < WIDE_SHARE:                # (drawn last, as `even`)
    final = "matmul_wide"
  return SymbolicProgram(seed, lo, hi, values, cols, tuple(steps), final, even)


def _table(name: str):
  return OPS.get(name) or STEPS.get(name) or GROW.get(name) or WIDE_FINAL.get(name) or \
    FINAL[name]


def expected(program: SymbolicProgram, data, w, v: int, final: bool = True):
  """numpy's result (float64) at bound value v; without `final`, the value the final reads."""
  a = data[:2 * v if program.even else v].astype(np.float64)
  for name in program.steps + ((program.final,) if final else ()):
    a = _table(name)[1](a, w, v)
  return np.asarray(a)


def computed(program: SymbolicProgram, data, w, n, v: int):
  rows = 2 * n.bind(v) if program.even else n.bind(v)
  x = kg.Tensor(np.ascontiguousarray(data[:2 * v if program.even else v])).symbolic(
    rows, program.cols)
  for name in program.steps + (program.final,):
    size = x.symbolic_shape[0] if x.ndim else None
    x = _table(name)[0](x, w, size if name in OPS or name in STEPS else n.bind(v), v)
  return x.numpy()


def run_symbolic(program: SymbolicProgram, devices, cut: bool = False,
                 made: list | None = None) -> dict:
  """device -> (verdict "agree" | "FAIL", message): every bound value against numpy, and no
  compile after the first value; with `cut`, each value in the kernels item_at cuts to it
  (static_cuts; `made`: the (kernel name, value) of each such static kernel built)."""
  rng = np.random.default_rng(1000 + program.seed)
  data = rng.standard_normal((program.hi * (2 if program.even else 1), program.cols))
  data = data.astype(np.float32)
  w = rng.standard_normal((max(program.hi, 16), 16)).astype(np.float32)
  return {device: _run_on(program, device, data, w, cut, made) for device in devices}


@contextmanager
def static_cuts(program: SymbolicProgram, made: list | None = None):
  """Meanwhile every kernel compiled whose graph graph/at_value.py's item_at cuts to a bound
  value of `program` (a cut that changes it) takes the static kernel of that size as its
  variant for that one value (pinned.STATIC, first among its variants: compiler.with_variants
  builds it with the kernel, exact, binding the kernel's buffers); the kernels' names and values
  so made are appended to `made`. On the compile options as they are (the device's)."""
  from kernelgen import compiler
  from kernelgen.graph.at_value import item_at
  from kernelgen.lowering import variants as module
  from kernelgen.lowering.pinned import STATIC
  plain, build = module.variants, compiler.with_variants
  arg, depth = ("n", program.lo, program.hi), []

  def with_cuts(item, target, options, opts, gridded):
    if len(depth) > 1:          # (a variant's own compile: runtimes run one level of variants)
      return plain(item, target, options, opts, gridded)
    cuts = [(v, item_at(item, "n", v)) for v in program.values]
    static = [("n", v, {STATIC: arg}) for v, at in cuts
              if at is not None and at.out is not item.out]
    return static + plain(item, target, options, opts, gridded)

  def counted(compiled, item, *rest):
    depth.append(item)
    try:
      out = build(compiled, item, *rest)
    finally:
      depth.pop()
    if made is not None and not depth:
      made.extend((item.name, most) for _, most, v in out.variants if v.exact)
    return out
  module.variants, compiler.with_variants = with_cuts, counted
  try:
    yield made
  finally:
    module.variants, compiler.with_variants = plain, build
    kg.clear_cache()           # (no kernel compiled meanwhile serves a later program)


def _run_on(program: SymbolicProgram, device: str, data, w, cut: bool = False,
            made: list | None = None) -> tuple[str, str]:
  if cut:
    with static_cuts(program, made):
      return _run_on(program, device, data, w)
  n = kg.Dim("n", program.lo, program.hi)
  kg.clear_cache()
  misses, default = None, kg.Device.DEFAULT
  kg.Device.DEFAULT = device
  try:
    for v in program.values:
      try:
        got = computed(program, data, w, n, v)
      except Exception as error:  # noqa: BLE001 - every exception is a finding
        return "FAIL", f"n = {v}: {type(error).__name__}: {str(error)[:1000]}"
      problem = _compare(got, expected(program, data, w, v), program, data, w, v)
      if problem:
        return "FAIL", f"n = {v}: {problem}"
      info = kg.cache_info()       # a capped kernel grown for more runs is no recompile
      now = info["misses"] - info["grown"]
      if misses is not None and now != misses:
        return "FAIL", f"n = {v} compiled {now - misses} kernel(s) again"
      misses = now
  finally:
    kg.Device.DEFAULT = default
  return "agree", ""


def _compare(got, want, program: SymbolicProgram, data, w, v: int) -> str | None:
  if got.shape != want.shape:
    return f"shape {got.shape}, expected {want.shape}"
  if program.final == "argmax_s":      # an index whose value ties the maximum within rounding
    a = expected(program, data, w, v, final=False)
    picked = a[got.astype(np.int64), np.arange(a.shape[1])]
    close = np.isclose(picked, a.max(0), rtol=RTOL, atol=ATOL)
    return None if close.all() else f"argmax {got} picks no maximum (numpy {want})"
  if not np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
    return f"max error {np.nanmax(np.abs(got - want)):.3g}"
  return None
