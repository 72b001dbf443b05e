"""The fuzzer's normalization, loss and attention steps (issue 18), and meshgrid: GROW kind "nn"
(the generator), ORACLE (merged into fuzz_oracle_ops.OPS) and BUILD (into fuzz_runner.BUILD).
Tensor.linspace is an input source (fuzz_programs.SOURCES, fuzz_oracle.input_oval).

    meshgrid(v..., indexing, part)        numpy.meshgrid(...)[part] of the flattened values
    batchnorm(x, mean, |var|, [w], [b])   (x - mean) / sqrt(var + eps) * w + b over channel axis 1
    group_norm(x, [w], [b], groups)       torch: each group of C/groups channels (and the spatial
    instance_norm(x, [w], [b])            dims) normalized, biased variance; then w, b per channel
    nll_loss(x, [|w|], target, ...)       torch: -w[t] x[t]; mean over the summed target weights
    cross_entropy(x, [|w|], target, ...)  torch: log_softmax over axis 1, then nll_loss (class
                                          indices, ignore_index, label_smoothing)
    cross_entropy_prob(x, p, [|w|], ...)  torch: -sum(w p' log_softmax(x)) (probability targets)
    sdpa(q, k, v, [mask], ...)            torch's scaled_dot_product_attention

The oracles are the formulas above in float64 (written from torch's definitions, not from
kernelgen's code) with first-order error bounds; undefined where an intermediate (x - mean; the
squares of the centered values, in float32 for half floats as torch takes them; x - max in
log_softmax) may overflow the dtype it is computed in. The bounds: each operation of the formula
rounds once in the dtype (+ once in float32 for the half types: uu below), input errors propagate
through the partial derivatives, a float16 eps (1e-5 is subnormal there) may be flushed to 0, exp and log
carry the oracle's exp/log ulps, and the online softmax of fused attention rescales up to S times.
Results are defined only where every value they read is finite and defined (as softmax's).

Attention reaches both of its forms (tensor/ops/attention.py _fusable): q, k, v of one float
dtype with no mask, a bool mask or a mask of that dtype, or is_causal, is the FUSED single
kernel (lazy ATTENTION); a float mask of another dtype, or `split=True` (q made a leaf that
requires grad: autograd needs the differentiable form) is matmul -> softmax -> matmul.
"""
from __future__ import annotations

from math import prod

import numpy as np

import fuzz_programs as fp   # (a module: fuzz_programs imports this one at its end)

NN_OPS = ("meshgrid", "batchnorm", "group_norm", "instance_norm", "nll_loss", "cross_entropy",
          "cross_entropy_prob", "sdpa")
LOSSES = ("nll_loss", "cross_entropy", "cross_entropy_prob")
REDUCTIONS = ("mean", "sum", "none")
TARGET_DTYPES = ("int64", "int32", "int8", "uint8", "int16")
EPS = (1e-5, 0.1)


# ---- the generator ---------------------------------------------------------------------------

def grow_nn(b, src: int, op: str | None = None):
  """One nn step on value `src` (or on a new input of a shape and dtype it applies to)."""
  op = op or b.c.choice(NN_OPS)
  GROWERS[op](b, src, op)


def _float_input(b, src: int, ok, make):
  """`src` when it is a float value that `ok(shape)` accepts, else a new input `make()`."""
  shape, dtype = b.values[src]
  if dtype in fp.FLOATS and shape and 0 not in shape and ok(shape):
    return src
  shape, dtype = make()
  return b.new_input(shape, dtype)


def _dims(c, rank: int, hi: int = 4) -> tuple:
  return tuple(c.integer(1, hi) for _ in range(rank))


def _optional(b, c, shape, dtype, positive=False):
  """A new input of `shape` about half the time (positive: its abs), else None."""
  if not c.chance(0.5):
    return None
  ref = b.new_input(shape, dtype)
  return b.push("abs", [ref], shape, dtype) if positive else ref


def _grow_meshgrid(b, src: int, op: str):
  c = b.c
  shape, dtype = b.values[src]
  first = src if 0 < prod(shape) <= 8 else b.new_input((c.integer(1, 6),), c.choice(fp.DTYPES))
  refs = [first] + [b.new_input((c.integer(1, 5),), c.choice(fp.DTYPES))
                    for _ in range(c.integer(0, 2))]
  out = [prod(b.values[r][0]) for r in refs]
  indexing = c.choice(("xy", "ij"))
  if indexing == "xy" and len(out) > 1:
    out[0], out[1] = out[1], out[0]
  part = c.integer(0, len(refs) - 1)
  if prod(out) <= fp.MAX_ELEMENTS:
    b.push(op, refs, tuple(out), b.values[refs[part]][1], indexing=indexing, part=part)


def _grow_batchnorm(b, src: int, op: str):
  c = b.c
  x = _float_input(b, src, lambda s: len(s) >= 2,
                   lambda: ((c.integer(1, 3), c.integer(1, 4)) + _dims(c, c.integer(0, 2)),
                            c.choice(fp.FLOATS)))
  shape, dtype = b.values[x]
  ch = (shape[1],)
  mean = b.new_input(ch, dtype)
  var = b.push("abs", [b.new_input(ch, dtype)], ch, dtype)
  refs = [x, mean, var]
  w, bias = _optional(b, c, ch, dtype), _optional(b, c, ch, dtype)
  refs += [r for r in (w, bias) if r is not None]
  b.push(op, refs, shape, dtype, weight=w is not None, bias=bias is not None, eps=c.choice(EPS))


def _grow_group_norm(b, src: int, op: str):
  c = b.c
  rank = 3 if op == "instance_norm" else 2
  x = _float_input(b, src, lambda s: len(s) >= rank,
                   lambda: ((c.integer(1, 2), c.choice((1, 2, 4, 6))) + _dims(c, c.integer(
                     rank - 2, 2), 5), c.choice(fp.FLOATS)))
  shape, dtype = b.values[x]
  ch = shape[1]
  groups = ch if op == "instance_norm" else c.choice([g for g in range(1, ch + 1) if ch % g == 0])
  refs = [x]
  w, bias = _optional(b, c, (ch,), dtype), _optional(b, c, (ch,), dtype)
  refs += [r for r in (w, bias) if r is not None]
  b.push(op, refs, shape, dtype, groups=groups, weight=w is not None, bias=bias is not None,
         eps=c.choice(EPS))


def _grow_loss(b, src: int, op: str):
  c = b.c
  x = _float_input(b, src, lambda s: len(s) <= 3,
                   lambda: ((c.integer(1, 4), c.integer(1, 6)) + _dims(c, c.integer(0, 1)),
                            c.choice(fp.FLOATS)))
  shape, dtype = b.values[x]
  ch = shape[1] if len(shape) >= 2 else shape[0]
  tshape = (shape[0],) + shape[2:] if len(shape) >= 2 else ()
  reduction = c.choice(REDUCTIONS)
  out = tshape if reduction == "none" else ()
  smoothing = c.choice((0.0, 0.0, 0.25)) if op != "nll_loss" else 0.0
  refs, params = [x], {}
  if op == "cross_entropy_prob":
    refs.append(b.new_input(shape, dtype))
  else:
    tdtype = c.choice(TARGET_DTYPES)
    ignore = c.integer(0, ch - 1) if tdtype == "uint8" or c.chance(0.5) else -100
    target = tuple(ignore if c.chance(0.15) else c.integer(0, ch - 1)
                   for _ in range(prod(tshape)))
    params = dict(target=target, target_shape=tshape, target_dtype=tdtype, ignore_index=ignore)
  w = _optional(b, c, (ch,), dtype, positive=True)
  refs += [w] if w is not None else []
  b.push(op, refs, out, dtype, weight=w is not None, reduction=reduction,
         label_smoothing=smoothing, **params)


def _grow_sdpa(b, src: int, op: str):
  c = b.c
  q = _float_input(b, src, lambda s: 2 <= len(s) <= 4 and s[-1] <= 8,
                   lambda: (_dims(c, c.integer(0, 2), 3) + (c.integer(1, 6), c.integer(1, 6)),
                            c.choice(fp.FLOATS)))
  qshape, dtype = b.values[q]
  lead, n, e = qshape[:-2], qshape[-2], qshape[-1]
  s, ev = c.integer(1, 6), c.integer(1, 6)
  klead = tuple(1 if c.chance(0.3) else d for d in lead)
  k, v = b.new_input(klead + (s, e), dtype), b.new_input(lead + (s, ev), dtype)
  refs, params = [q, k, v], {}
  kind = c.choice(("none", "bool", "float", "causal"))
  out_dtype = dtype
  if kind in ("bool", "float"):
    mshape = c.choice(((n, s), (1, s), (s,), (n, 1)) + ((lead + (n, s),) if lead else ()))
    mdtype = "bool" if kind == "bool" else dtype if c.chance(0.6) else c.choice(fp.FLOATS)
    refs.append(b.new_input(mshape, mdtype))
    out_dtype = dtype if kind == "bool" else fp.result_dtype(dtype, mdtype)
  params["causal"] = kind == "causal"
  if c.chance(0.3):
    params["split"] = True
  if c.chance(0.3):
    params["scale"] = c.choice((0.5, 1.0))
  out = lead + (n, ev)
  if prod(out) <= fp.MAX_ELEMENTS and prod(lead + (n, s)) <= fp.MAX_ELEMENTS:
    b.push(op, refs, out, out_dtype, **params)


GROWERS = {"meshgrid": _grow_meshgrid, "batchnorm": _grow_batchnorm,
           "group_norm": _grow_group_norm, "instance_norm": _grow_group_norm,
           "nll_loss": _grow_loss, "cross_entropy": _grow_loss, "cross_entropy_prob": _grow_loss,
           "sdpa": _grow_sdpa}


def generate_nn(c, first: str | None = None, max_steps: int = 3):
  """A random program whose steps are mostly nn steps, the first one `first` (when given)."""
  from fuzz_programs import GROW, _Builder, random_shape
  b = _Builder(c)
  b.new_input(random_shape(c, 3), c.choice(fp.FLOATS))
  kinds = tuple(k for k in GROW if k != "nn")
  for i in range(c.integer(1, max_steps)):
    src = len(b.values) - 1
    if i == 0 or c.chance(0.6):
      grow_nn(b, src, first if i == 0 else None)
    else:
      GROW[c.choice(kinds)](b, src)
  return b.program()


# ---- the oracle ------------------------------------------------------------------------------

def _uu(dtype: str) -> float:
  """One rounding in the dtype, after one in float32 for the half types."""
  from fuzz_oracle import U, work_dtype
  return U[dtype] + U[work_dtype(dtype)]


def _f(x) -> np.ndarray:
  from fuzz_oracle import round_to
  return round_to(x.a, x.dtype).astype(np.float64)


def _fine(x) -> np.ndarray:
  """Defined and finite (ints: defined)."""
  return x.ok & (np.isfinite(_f(x)) if x.dtype in fp.FLOATS else True)


def _meshgrid(step, xs):
  from fuzz_oracle import OVal
  indexing, part = step.param("indexing"), step.param("part")
  grid = lambda arrays: np.meshgrid(*[np.ravel(a) for a in arrays], indexing=indexing)[part]
  x = xs[part]
  return OVal(np.array(grid([v.a for v in xs])), x.dtype,
              np.array(grid([np.broadcast_to(v.err, v.a.shape) for v in xs])),
              np.array(grid([np.broadcast_to(v.ok, v.a.shape) for v in xs])))


def _channel(v, ndim: int):
  """A (C,) oracle value's arrays shaped to broadcast over (N, C, ...)."""
  shape = (1, -1) + (1,) * (ndim - 2)
  return (_f(v).reshape(shape), np.broadcast_to(v.err, v.a.shape).reshape(shape),
          _fine(v).reshape(shape))


def _eps_error(eps: float, dtype: str) -> float:
  """eps's rounding in the dtype, and in float16 (1e-5 is subnormal there) a flush to 0."""
  from fuzz_oracle import TINY
  return _uu(dtype) * eps + (eps if eps < TINY[dtype] else 0.0)


def _normalized(c, e_c, s, e_s, eps: float, dtype: str):
  """(c * rsqrt(s + eps), its error bound, where the bound holds) from the centered values c
  and the variance s with their error bounds."""
  uu = _uu(dtype)
  t = s + eps
  e_t = e_s + uu * t + _eps_error(eps, dtype)
  rel = e_t / t
  r = 1 / np.sqrt(t)
  e_r = r * (rel + 4 * uu)
  y = c * r
  return y, e_c * r + np.abs(c) * e_r + e_c * e_r + uu * np.abs(y), rel <= 0.25


def _affine(y, e, ok, step, rest, ndim: int, dtype: str):
  """y * w + b (the flags say which are given; their values in `rest`), errors carried."""
  uu = _uu(dtype)
  rest = list(rest)
  if step.param("weight"):
    w, ew, okw = _channel(rest.pop(0), ndim)
    y, e = y * w, e * np.abs(w) + np.abs(y) * ew + e * ew + uu * np.abs(y * w)
    ok = ok & okw
  if step.param("bias"):
    bb, eb, okb = _channel(rest.pop(0), ndim)
    y, e = y + bb, e + eb + uu * np.abs(y + bb)
    ok = ok & okb
  return y, e, ok


def _done(y, e, ok, dtype: str):
  from fuzz_oracle import round_to, ulp
  from fuzz_oracle_ops import _out
  r = round_to(y, dtype)
  return _out(r, dtype, e + ulp(r, dtype), ok)


def _batchnorm(step, xs):
  x, m, v, rest = xs[0], xs[1], xs[2], xs[3:]
  nd, uu = x.a.ndim, _uu(x.dtype)
  a, ex = _f(x), np.broadcast_to(x.err, x.a.shape)
  mm, em, okm = _channel(m, nd)
  vv, ev, okv = _channel(v, nd)
  d = a - mm
  e_d = ex + em + uu * np.abs(d)
  y, e, fine = _normalized(d, e_d, vv, ev, step.param("eps"), x.dtype)
  ok = _fine(x) & okm & okv & fine & _in_range(np.abs(d) + e_d, x.dtype)
  return _done(*_affine(y, e, ok, step, rest, nd, x.dtype), x.dtype)


def _group_norm(step, xs):
  x, rest = xs[0], xs[1:]
  shape, nd, uu = x.a.shape, x.a.ndim, _uu(x.dtype)
  g = step.param("groups")
  grouped = (shape[0], g, -1)
  a = _f(x).reshape(grouped)
  ex = np.broadcast_to(x.err, shape).reshape(grouped)
  n = a.shape[-1]
  fine = np.all(_fine(x).reshape(grouped), axis=-1, keepdims=True)
  a = np.where(fine, a, 0.0)
  big, big_e = np.max(np.abs(a), -1, keepdims=True), np.max(ex, -1, keepdims=True)
  mu = np.mean(a, -1, keepdims=True)
  e_mu = big_e + (n + 2) * uu * big
  c = a - mu
  e_c = ex + e_mu + uu * np.abs(c)
  ec = np.max(e_c, -1, keepdims=True)
  s = np.mean(c * c, -1, keepdims=True)
  e_s = np.mean(2 * np.abs(c) * ec + ec * ec, -1, keepdims=True) + \
    (n + 2) * uu * np.mean((np.abs(c) + ec) ** 2, -1, keepdims=True)
  y, e, held = _normalized(c, e_c, s, e_s, step.param("eps"), x.dtype)
  squares = (np.abs(c) + e_c) ** 2            # float32 for half floats, else the dtype's
  held = held & np.all(_in_range(squares, _stats_dtype(x.dtype))
                       & _in_range(n * squares + n * big, "float32"),
                       -1, keepdims=True)
  ok = np.broadcast_to(fine & held, a.shape).reshape(shape)
  return _done(*_affine(y.reshape(shape), e.reshape(shape), ok, step, rest, nd, x.dtype),
               x.dtype)


def _log_softmax(x):
  """(log_softmax over axis 1, its error bound, where it is defined) of an (N, C, ...) value."""
  uu = _uu(x.dtype)
  a, ex = _f(x), np.broadcast_to(x.err, x.a.shape)
  fine = np.all(_fine(x), axis=1, keepdims=True)
  a = np.where(fine, a, 0.0)
  d = a - np.max(a, axis=1, keepdims=True)
  e_d = ex + np.max(ex, axis=1, keepdims=True) + uu * np.abs(d)
  ex_d = np.exp(d)
  total = np.sum(ex_d, axis=1, keepdims=True)
  ch = a.shape[1]
  e_total = np.sum(ex_d * (e_d + (4 + 2 * np.abs(d)) * uu), axis=1, keepdims=True) + \
    ch * uu * total
  ls = np.log(total)
  e_ls = e_total / total * 2 + 4 * uu * np.abs(ls) + 4 * uu
  y = d - ls
  fine = fine & np.all(_in_range(np.abs(d) + e_d, x.dtype), axis=1, keepdims=True)
  return y, e_d + e_ls + uu * np.abs(y), np.broadcast_to(fine, a.shape)


def _batched(x):
  """An (N, C, ...) view of a loss input (a (C,) input gets N = 1)."""
  from fuzz_oracle import OVal
  if x.a.ndim >= 2:
    return x
  return OVal(x.a.reshape(1, -1), x.dtype, np.broadcast_to(x.err, x.a.shape).reshape(1, -1),
              np.broadcast_to(x.ok, x.a.shape).reshape(1, -1))


def _reduced(val, e, ok, step, dtype: str, denom=None, e_denom=None):
  """A loss's reduction: none (per element), sum, or mean (by `denom`: the summed target
  weights, or the element count when None)."""
  uu = _uu(dtype)
  reduction = step.param("reduction")
  if reduction == "none":
    return val, e, ok
  n = val.size
  total = np.sum(val)
  e_total = np.sum(e) + (n + 2) * uu * np.sum(np.abs(val))
  ok = np.all(ok)
  if reduction == "sum":
    return total, e_total, ok
  if denom is None:
    return total / max(n, 1), e_total / max(n, 1) + 2 * uu * abs(total / max(n, 1)), ok
  if denom == 0 and e_denom == 0 and e_total == 0:        # every target ignored: 0 / 0
    return total / denom if total else np.float64(np.nan), 0.0, ok
  r = total / denom if denom else np.inf
  e_r = e_total / abs(denom) + abs(r) * e_denom / abs(denom) + 3 * uu * abs(r) if denom else 0.0
  return r, e_r, ok & (abs(denom) > 2 * e_denom)


def _class_loss(step, xs):
  """nll_loss / cross_entropy with class-index targets (torch's definitions)."""
  x = _batched(xs[0])
  dtype, uu = x.dtype, _uu(x.dtype)
  if step.op == "nll_loss":
    logp, e_lp, ok_lp = _f(x), np.broadcast_to(x.err, x.a.shape), _fine(x)
  else:
    logp, e_lp, ok_lp = _log_softmax(x)
  ch, nd = logp.shape[1], logp.ndim
  if step.param("weight"):
    w, ew, okw = (z.reshape(ch) for z in _channel(xs[1], nd))
  else:
    w, ew, okw = np.ones(ch), np.zeros(ch), np.ones(ch, bool)
  tshape = (logp.shape[0],) + logp.shape[2:]
  t = np.array(step.param("target"), np.int64).reshape(tshape)
  valid = t != step.param("ignore_index")
  tc = np.where(valid, t, 0)
  pick = lambda arr: np.take_along_axis(arr, tc[:, None], 1)[:, 0]
  bw = lambda arr: arr.reshape((1, ch) + (1,) * (nd - 2))
  wt = np.where(valid, w[tc], 0.0)
  e_wt = np.where(valid, ew[tc], 0.0)
  val = np.where(valid, -wt * pick(logp), 0.0)
  e = np.where(valid, np.abs(wt) * pick(e_lp) + np.abs(pick(logp)) * e_wt + uu * np.abs(val), 0.0)
  ok = np.where(valid, pick(ok_lp) & okw[tc], True)
  denom, e_denom = np.sum(wt), np.sum(e_wt) + (wt.size + 2) * uu * np.sum(np.abs(wt))
  if not step.param("weight"):
    e_denom = 0.0                                      # a count of the targets: exact
  ls = step.param("label_smoothing")
  if not ls:
    return _loss_out(*_reduced(val, e, ok, step, dtype, denom, e_denom), xs[0], dtype)
  smooth = np.where(valid, -np.sum(logp * bw(w), axis=1), 0.0)
  e_smooth = np.where(valid, np.sum(e_lp * bw(np.abs(w)) + np.abs(logp) * bw(ew), axis=1) +
                      (ch + 2) * uu * np.sum(np.abs(logp * bw(w)), axis=1), 0.0)
  ok_smooth = np.where(valid, np.all(ok_lp, axis=1) & np.all(okw), True)
  if not step.param("weight"):
    denom = np.sum(valid)
  a, ea, oka = _reduced(val, e, ok, step, dtype, denom, e_denom)
  b, eb, okb = _reduced(smooth, e_smooth, ok_smooth, step, dtype, denom, e_denom)
  r = (1 - ls) * a + b * (ls / ch)
  err = (1 - ls) * ea + eb * (ls / ch) + 4 * uu * (np.abs(a) + np.abs(b * ls / ch))
  return _loss_out(r, err, oka & okb, xs[0], dtype)


def _prob_loss(step, xs):
  """cross_entropy with probability targets: -sum(w p' log_softmax(x)) over the classes."""
  x, p = _batched(xs[0]), _batched(xs[1])
  dtype, uu = x.dtype, _uu(x.dtype)
  logp, e_lp, ok_lp = _log_softmax(x)
  ch, nd = logp.shape[1], logp.ndim
  ls = step.param("label_smoothing")
  pv, ep = _f(p), np.broadcast_to(p.err, p.a.shape)
  pv, ep = pv * (1 - ls) + ls / ch, ep * (1 - ls) + 3 * uu * np.abs(pv) if ls else ep
  ok = ok_lp & _fine(p)
  if step.param("weight"):
    w, ew, okw = _channel(xs[2], nd)
  else:
    w, ew, okw = np.ones((1, ch) + (1,) * (nd - 2)), 0.0, True
  term = w * pv * logp
  e_term = np.abs(w * pv) * e_lp + np.abs(w * logp) * ep + np.abs(pv * logp) * ew + \
    2 * uu * np.abs(term)
  val = -np.sum(term, axis=1)
  e = np.sum(e_term, axis=1) + (ch + 2) * uu * np.sum(np.abs(term), axis=1)
  ok = np.all(ok & okw, axis=1)
  return _loss_out(*_reduced(val, e, ok, step, dtype), xs[0], dtype)


def _loss_out(val, e, ok, x, dtype: str):
  from fuzz_oracle import round_to, ulp, zero_sign
  from fuzz_oracle_ops import _out
  val = np.asarray(val, np.float64)
  if x.a.ndim == 1 and val.ndim:                       # a (C,) input: no batch dim
    val, e, ok = val.reshape(()), np.reshape(e, ()), np.reshape(ok, ())
  r = round_to(val, dtype)
  return _out(r, dtype, np.asarray(e) + ulp(r, dtype) + zero_sign(r), np.asarray(ok))


def _sdpa(step, xs):
  """torch's scaled_dot_product_attention in float64 (a fully masked row is NaN)."""
  q, k, v = xs[:3]
  mask = xs[3] if len(xs) > 3 else None
  dtype = q.dtype if mask is None or mask.dtype == "bool" else fp.result_dtype(q.dtype, mask.dtype)
  uu = _uu(q.dtype) + _uu(dtype)
  e_dim, s_len = q.a.shape[-1], k.a.shape[-2]
  scale = step.param("scale") or 1 / np.sqrt(e_dim)
  arr = lambda x: (_f(x), np.broadcast_to(x.err, x.a.shape))
  (qa, eq), (ka, ek), (va, evv) = arr(q), arr(k), arr(v)
  kt, ekt = np.swapaxes(ka, -1, -2), np.swapaxes(ek, -1, -2)
  qa, ka, va = (np.where(_fine(x), a, 0.0) for x, a in ((q, qa), (k, ka), (v, va)))
  kt = np.swapaxes(ka, -1, -2)
  s = qa @ kt * scale
  terms = np.abs(qa) @ np.abs(kt) * scale
  e_s = (eq @ np.abs(kt) + np.abs(qa) @ ekt) * scale + (e_dim + 4) * uu * terms
  n = q.a.shape[-2]
  keep = np.ones((n, s_len), bool)
  fine = [_all_fine(q, -1), _all_fine(k, None), _all_fine(v, None)]
  if step.param("causal"):
    keep = np.tril(keep)
  elif mask is not None and mask.dtype == "bool":
    keep = _f(mask) != 0
    fine.append(_all_fine(mask, None))
  elif mask is not None:
    m, em = arr(mask)
    fine.append(_all_fine(mask, None) & np.all(np.abs(s) + np.abs(m) < FMAX_HALF[dtype],
                                               axis=(-1, -2), keepdims=True))
    s, e_s = s + np.where(np.isfinite(m), m, 0.0), e_s + em + uu * np.abs(s + m)
  keep = np.broadcast_to(keep, np.broadcast_shapes(np.shape(keep), s.shape))
  s = np.where(keep, s, -np.inf)
  top = np.max(s, axis=-1, keepdims=True)
  empty = ~np.isfinite(top)
  top = np.where(empty, 0.0, top)
  ex = np.where(keep, np.exp(s - top), 0.0)
  p = ex / np.where(empty, 1.0, np.sum(ex, axis=-1, keepdims=True))
  low = np.min(np.where(keep, s, np.inf), axis=-1, keepdims=True)
  spread = np.where(empty, 0.0, top - np.where(np.isfinite(low), low, top))
  e_row = np.max(np.where(keep, e_s, 0.0), axis=-1, keepdims=True)
  e_p = p * ((6 * s_len + 16 + 4 * spread) * uu + 4 * (e_row + np.where(keep, e_s, 0)) * (1 + p))
  out = p @ va
  e_out = e_p @ np.abs(va) + p @ evv + (s_len + 4) * uu * (p @ np.abs(va)) + uu * np.abs(out)
  out = np.where(empty, np.nan, out)
  e_out = np.where(empty, 0.0, e_out)
  ok = np.ones(out.shape, bool)
  for f in fine:
    ok = ok & f
  ok = ok & np.all(terms < FMAX_HALF[q.dtype], axis=(-1, -2), keepdims=True)
  return _done(out, e_out, ok, dtype)


def _stats_dtype(dtype: str) -> str:
  """The dtype layernorm (and so group_norm, instance_norm) takes its statistics in: torch's."""
  return "float32" if dtype in ("float16", "bfloat16") else dtype


def _in_range(magnitude, dtype: str):
  """Where an intermediate of this magnitude cannot overflow the dtype it is computed in."""
  return magnitude < FMAX_HALF[dtype]


def _all_fine(x, axis):
  """Every value of each matrix (axis None) or row (axis -1) finite and defined."""
  f = _fine(x) & np.ones(x.a.shape, bool)
  if f.ndim < 2:
    f = f.reshape((1,) * (2 - f.ndim) + f.shape)
  return np.all(f, axis=(-1, -2) if axis is None else -1, keepdims=True)


FMAX_HALF = {"float16": 65504.0 / 4, "bfloat16": 3.39e38 / 4, "float32": 3.4e38 / 4,
             "float64": 1.79e308 / 4}

ORACLE = {"meshgrid": _meshgrid, "batchnorm": _batchnorm, "group_norm": _group_norm,
          "instance_norm": _group_norm, "nll_loss": _class_loss, "cross_entropy": _class_loss,
          "cross_entropy_prob": _prob_loss, "sdpa": _sdpa}


# ---- kernelgen -------------------------------------------------------------------------------

def _params(step, xs, start: int):
  """(weight, bias) Tensors of a norm step (None where the step has none)."""
  rest = list(xs[start:])
  w = rest.pop(0) if step.param("weight") else None
  bias = rest.pop(0) if step.param("bias") else None
  return w, bias


def _build_norm(step, xs):
  eps = step.param("eps")
  if step.op == "batchnorm":
    return xs[0].batchnorm(xs[1], xs[2], *_params(step, xs, 3), eps=eps)
  w, bias = _params(step, xs, 1)
  if step.op == "instance_norm":
    return xs[0].instance_norm(w, bias, eps=eps)
  return xs[0].group_norm(step.param("groups"), w, bias, eps=eps)


def _build_loss(step, xs):
  from kernelgen import Tensor
  x = xs[0]
  kw = dict(reduction=step.param("reduction"))
  if step.op == "cross_entropy_prob":
    w = xs[2] if step.param("weight") else None
    return x.cross_entropy(xs[1], w, label_smoothing=step.param("label_smoothing"), **kw)
  w = xs[1] if step.param("weight") else None
  target = Tensor(list(step.param("target")), dtype=step.param("target_dtype"),
                  device=x.device).reshape(step.param("target_shape"))
  kw["ignore_index"] = step.param("ignore_index")
  if step.op == "nll_loss":
    return x.nll_loss(target, w, **kw)
  return x.cross_entropy(target, w, label_smoothing=step.param("label_smoothing"), **kw)


def _build_sdpa(step, xs):
  import kernelgen as kg
  from kernelgen import Tensor
  q, k, v = xs[:3]
  if step.param("split"):            # a leaf that requires grad: the differentiable split form
    q = Tensor(q.node, requires_grad=True)
  mask = xs[3] if len(xs) > 3 else None
  out = kg.scaled_dot_product_attention(q, k, v, mask, is_causal=step.param("causal"),
                                        scale=step.param("scale"))
  return out.detach()


def _build_meshgrid(step, xs):
  import kernelgen as kg
  return kg.meshgrid(*xs, indexing=step.param("indexing"))[step.param("part")]


BUILD = {"meshgrid": _build_meshgrid, "batchnorm": _build_norm, "group_norm": _build_norm,
         "instance_norm": _build_norm, "nll_loss": _build_loss, "cross_entropy": _build_loss,
         "cross_entropy_prob": _build_loss, "sdpa": _build_sdpa}


def fused(step, xs) -> bool:
  """Whether an sdpa step built from Tensors xs is the fused ATTENTION node."""
  return _build_sdpa(step, xs).node.op.name == "ATTENTION"
