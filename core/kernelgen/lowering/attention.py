"""Lowering fused attention (lazy `L.ATTENTION`, made by tensor/ops/attention.py): softmax(q k^T *
scale + mask) v in ONE kernel that walks the keys once per query row; the L x S scores are never
stored.

The node's sources are q (..., L, E), k (..., S, E), v (..., S, Ev) and optionally a mask
(..., L, S) (bool: keep where True; float: added), all broadcast to the output's batch axes;
arg = (scale, causal). A workgroup takes a block of consecutive query rows of one batch entry,
each of its threads `Opts.upcast` consecutive rows of the block (they share each key's k and v
loads: on CPU adapters those loads cost more than the arithmetic, see render/wgsl/adapters.py).
Each row's q (E values, times scale) and Ev accumulators are registers, and the thread walks the
keys once with the online softmax: per key j the score s = q.k[j] (+ mask), then with the
running max m and sum l of each row

    m' = max(m, s)    c = exp(m - m')    p = exp(s - m')    l' = l c + p    acc' = acc c + p v[j]

and stores acc / l. Scores are kept in log2 units (exp2, log2(e) folded into the scale); where
m' is still -inf (every key so far masked) the exponents are taken against 0 instead, so a fully
masked row ends as 0 / 0 = NaN (as softmax over -inf scores, and torch), and a NaN or +inf score
makes its row NaN (MAX propagates NaN). Causal (keep j <= i): a thread's loop stops at its last
row's diagonal, its other rows mask the keys past theirs. Over a run-time number of keys (a
symbolic key length) the keys are walked in whole blocks, then one by one (_split_key_loops):
none past the end is read, so none is masked. Loops longer than MAX_TRIPS are
unrolled (lowerer.py). float16 / bfloat16 are computed in float32 (float64 in float64), the
output cast back.

The updates of l and of the accumulators read m before this key's update of m: the loop's
ENDRANGE lists m's ASSIGN last, so the linearizer (graph order within a loop body) places every
read of the old m before it.
"""
from __future__ import annotations

import math
from .. import limits
from . import compile_cost
from .pinned import PIN
from ..dtype import dtypes
from ..graph.lazy import L
from ..graph.schedule import ScheduleItem
from ..graph.view import contiguous_strides, prod
from ..render.target import Target
from ..uop.ops import Ops, UOp
from .index_math import I32, gate_and, int_const, linear_index, unravel
from .lowerer import MAX_TRIPS
from .opts import Opts
from .tile_grid import grid_axis
from .vector import vector_loads, vector_stores

# threads per workgroup by default (option local=) and query rows per thread (option upcast=:
# they share each key's k and v loads; each row holds E + Ev + 2 values in registers, so GPUs
# take 1 and CPU adapters more: render/wgsl/adapters.py); at most ATTENTION_REGS such values
# per thread whatever upcast asks
ATTENTION_LOCAL, ATTENTION_ROWS, ATTENTION_REGS = 64, 1, 1 << 13
# keys per trip of the key loop (the accumulators are rescaled once per block of them), fewer
# where rows per thread x keys would pass ATTENTION_UNROLL (the kernel's size grows with both:
# 32 rows x 4 keys did not compile in minutes)
ATTENTION_KEYS, ATTENTION_UNROLL = 4, 32
# keys per trip where a one-off run's kernel is over the compile budget even at one row per
# thread (compile_cost.py): lavapipe natively, Mesa's cache off, sdpa L=512 d=64 (2 runs each
# interleaved, load 13-16, CPU s of the process): 4 keys per trip 2229 lines of WGSL, first
# result 2.37-2.38 (kernelgen 0.13, pipelines 0.18-0.19, first dispatch 2.05), second run
# 0.29-0.33 | 1 key 924 lines, 0.97-1.01 (0.08-0.09, 0.16-0.17, 0.72-0.74), 0.22-0.25
ONE_OFF_KEYS = 1
# a symbolic query count's variants (_query_variants): up to this many rows, one row per thread
# in a workgroup of that many threads under the run-time grid. The page bundle's one-token
# decode step (SmolLM2 widths, fp32, 2 layers, lavapipe natively, GPU timestamps) ran each
# layer's attention in 18 workgroups of 64 threads: 23-25 ms per layer at 132 keys
QUERY_VARIANTS = (1, 8)
LOG2E = 1.0 / math.log(2.0)


def _keys_per_trip(rows: int) -> int:
  """Keys per trip of the key loop for `rows` query rows per thread (ATTENTION_UNROLL)."""
  return max(1, min(ATTENTION_KEYS, ATTENTION_UNROLL // rows))


def attention_opts(item: ScheduleItem, target: Target, options: dict) -> Opts:
  """Opts for the attention kernel `item`: option upcast= query rows per thread (else
  ATTENTION_ROWS; halved while they hold more than ATTENTION_REGS values or are twice L), option
  local= threads per workgroup (else ATTENTION_LOCAL, fewer for fewer threads)."""
  out = item.out
  n_q = out.shape[-2]
  rows = int(options.get("upcast", 0) or 0) or ATTENTION_ROWS
  forced = "upcast" in options and "upcast" not in options.get("adapter_chose", ())
  width = out.src[0].shape[-1] + out.shape[-1] + 2
  least = least_queries(out, options) or rows    # (a symbolic count: its least served value)
  while rows > 1 and (rows * width > ATTENTION_REGS or rows >= 2 * n_q or rows > least):
    rows //= 2
  wanted, capped = rows, not forced and compile_cost.capped(options)
  while rows > 1 and capped and not compile_cost.affordable(options, estimated_uops(out, rows)):
    rows //= 2                       # a one-off run on a software adapter: compile cost caps
  # one row still over the budget: a key per trip (ONE_OFF_KEYS)
  keys = ONE_OFF_KEYS if rows == 1 and capped and \
    not compile_cost.affordable(options, estimated_uops(out, 1)) else 0
  threads = -(-n_q // rows)          # threads per batch entry (a workgroup takes one entry)
  local = int(options.get("local", 0) or 0) or min(ATTENTION_LOCAL, target.max_local,
                                                  1 << (threads - 1).bit_length())
  keys = int(options.get("attention_keys", 0) or 0) or keys
  return Opts(local=max(1, min(local, target.max_local)), upcast=rows, keys=keys,
              capped=rows < wanted or (keys > 0 and "attention_keys" not in options))


def key_block(opts: Opts, rows: int) -> int:
  """Keys per trip of a thread's key loop with `rows` query rows: Opts.keys (option
  attention_keys, or ONE_OFF_KEYS), else _keys_per_trip."""
  return opts.keys or _keys_per_trip(rows)


def attention_variants(item: ScheduleItem, options: dict, opts: Opts | None) -> list:
  """[(dim, most, options)]: an attention kernel whose key count is a symbolic dim (plus a
  constant: a cache read to pos + 1) takes a variant of one key per trip for the counts below
  its keys per trip (_split_key_loops), and one more for the range's low end with the dim read
  as a constant (lowering/pinned.py: SwiftShader ran the key loop at n = 1 1.4x the static
  kernel, idle, best of 7-9)."""
  out = item.out
  queries = _query_variants(out, options, opts)
  dim = _dim_plus(out.src[-1]) if len(out.arg) > 2 else None
  if dim is None or opts is None or "attention_keys" in options:
    return queries
  name, lo, hi, const = dim
  most = key_block(opts, max(opts.upcast, 1)) - 1 - const     # the dim's values below a block
  if not lo <= most < hi:
    return queries
  pinned = [(name, lo, {"attention_keys": 1, PIN: lo})] if lo < most else []   # (pinned.py)
  return queries + pinned + [(name, most, {"attention_keys": 1})]


def query_grid(out) -> bool:
  """Whether ATTENTION node `out`'s query count is its only symbolic output axis, a plain
  affine size (the page bundle's `seq` new tokens: export/onnx_lm.py): its workgroups then take
  the blocks of query rows outermost (_threads) and a run-time grid launches only those the
  bound count needs (compiler.with_grid), and small counts take fewer rows per workgroup
  (_query_variants)."""
  sym = out.sym
  return sym is not None and grid_axis(out) == len(out.shape) - 2 and \
    getattr(sym[-2], "div", 1) == 1


def least_queries(out, options: dict) -> int | None:
  """The least query count the kernel of ATTENTION node `out` runs at where that count is
  symbolic (query_grid; None where static): past the largest QUERY_VARIANTS value below the
  range's top (the counts up to it take a variant: _query_variants), else the range's low end.
  attention_opts halves the rows per thread while they pass it, so no thread computes padding
  rows at that count and the rows of the range's top spread over threads: the tiny LM's decode
  step (seq 1..31, lavapipe's 32 rows, a recording's kernel for RUNS_MANY) had one thread per
  head walk all 31 rows, 9,756 lines of WGSL: 33 s CPU cold (Mesa cache off, load 15), 17 s
  with 8 rows, 6,425 lines, 0.1 s at one row (the one-off kernel again; issue 37)."""
  sym = out.sym[-2] if query_grid(out) else None
  if sym is None or not sym.is_dim:
    return None
  (name, _), = sym.terms
  lo, hi = sym.ranges[name]
  taken = [most for most in QUERY_VARIANTS if lo <= most < hi and "local" not in options]
  return max([lo] + [most + 1 for most in taken])


def _query_variants(out, options: dict, opts: Opts | None) -> list:
  """[(dim, most, options)]: where the query count is a plain symbolic dim (query_grid), a
  variant of one query row per thread in workgroups of QUERY_VARIANTS[i] threads for the counts
  up to that many, each below the kernel's rows per workgroup. The kernel's workgroup (64 rows
  on the CPU adapters) computed 63 padding rows of a one-token decode step, each walking every
  key (see QUERY_VARIANTS)."""
  sym = out.sym[-2] if query_grid(out) else None
  if opts is None or sym is None or not sym.is_dim or "local" in options:
    return []
  (name, _), = sym.terms
  lo, hi = sym.ranges[name]
  per = max(opts.local, 1) * max(opts.upcast, 1)
  return [(name, most, {"local": most, "upcast": 1}) for most in QUERY_VARIANTS
          if lo <= most < min(hi, per)]


def _dim_plus(count) -> tuple | None:
  """(name, lo, hi, c) where the lazy int scalar `count` is the dim's value + c; else None."""
  if count.op is L.VAR:
    return (*count.arg, 0)
  if count.op is L.ALU and count.arg is Ops.ADD and len(count.src) == 2:
    var, const = sorted(count.src, key=lambda x: x.op is not L.VAR)
    if var.op is L.VAR and const.op is L.CONST and isinstance(const.arg, int):
      return (*var.arg, const.arg)
  return None


def estimated_uops(out, rows: int, keys: int = 0) -> int:
  """The UOps the attention kernel `out` lowers to with `rows` query rows per thread, without
  lowering it: about E' (12 + 8.5 rows + 4 rows keys), E' the mean of q's and v's widths, keys
  per trip `keys` or as _key_loop takes them (counted for d = 32 and 64, rows 1..32: within
  3 %, e.g. L=512 d=64: 2370 UOps at 1 row, 13498 at 8, 26332 at 32)."""
  keys = keys or _keys_per_trip(rows)
  width = (out.src[0].shape[-1] + out.shape[-1]) / 2
  return int(width * (12 + 8.5 * rows + 4 * rows * keys))


def _threads(lead: tuple, n_q: int, per: int, local: int,
             blocks_first: bool = False) -> tuple[list, list]:
  """(batch indices, [(row index, valid or None)] for this thread's `per` consecutive rows):
  each workgroup takes `local * per` consecutive query rows of one batch entry, so the batch
  index depends on the workgroup id only (the threads of a workgroup read the same keys). A row
  past L computes at L - 1 and is not stored. With `blocks_first` (a symbolic query count:
  query_grid) the blocks of rows are the workgroups' outermost index, so a run-time grid
  (compiler.with_grid) launches only the blocks the bound count needs."""
  blocks = -(-n_q // (local * per))
  groups = max(prod(lead) * blocks, 1)
  gid = UOp(Ops.SPECIAL, I32, (), ("gid", 0, groups))
  if blocks_first:
    batch = unravel([(gid, 1, groups)], 0, (blocks,) + lead)
    block = batch.pop(0)
  else:
    batch = unravel([(gid, 1, groups)], 0, lead + (blocks,))
    block = batch.pop()
  lid = UOp(Ops.SPECIAL, I32, (), ("lid", 0, local)) if local > 1 else None
  first = linear_index([(block, local * per, blocks)] + ([(lid, per, local)] if lid is not None
                                                          else []), 0)
  rows = []
  for r in range(per):
    i = first + int_const(r) if r else first
    if blocks * local * per > n_q:
      ok = i.lt(int_const(n_q))
      rows.append((ok.where(i, int_const(n_q - 1)), ok))
    else:
      rows.append((i, None))
  return batch, rows


def _row_values(lw, node, at: tuple, n: int, gate, dtype) -> list[UOp]:
  """node[at + (e,)] for e < n, as `dtype` (consecutive ungated 32-bit loads as vectors)."""
  bodies = [(lw.value(node, at + (int_const(e),), gate), None) for e in range(n)]
  if gate is None:
    bodies = vector_loads(bodies, n)
  return [b if b.dtype == dtype else b.cast(dtype) for b, _ in bodies]


def _clamped_keys(lw, k, v, batch: tuple, keys: list, end: UOp, dtype) -> tuple[list, list]:
  """The k and v rows of `keys` under a run-time key count `end` (a symbolic key length): a key
  of the last trip past the end reads key end-1 instead (in bounds: the padded layout), so the
  loads stay whole vectors, not per-element gated loads; its score is masked (attention_stores)
  and its values are zero, so it adds nothing."""
  last = (end - int_const(1)).maximum(int_const(0))
  ks, vs = [], []
  for j, valid in keys:
    at = batch + (j.minimum(last) if valid is not None else j,)
    ks.append(_row_values(lw, k, at, k.shape[-1], None, dtype))
    row = _row_values(lw, v, at, v.shape[-1], None, dtype)
    vs.append([valid.where(x, x.const_like(0.0)) for x in row] if valid is not None else row)
  return ks, vs


def _dot(xs: list[UOp], ys: list[UOp]) -> UOp:
  """sum(x * y), added pairwise (independent chains for the SIMD lanes and pipelines)."""
  terms = [x * y for x, y in zip(xs, ys)]
  while len(terms) > 1:
    terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
             for i in range(0, len(terms), 2)]
  return terms[0]


def _key_unroll(n_keys: int, block: int) -> int:
  """Keys per trip of the key loop: `block` (at most n_keys), more where the loop would run more
  than MAX_TRIPS times."""
  unroll = max(1, min(block, n_keys))
  while -(-n_keys // unroll) > MAX_TRIPS:
    unroll *= 2
  limits.check("unrolled_copies", unroll, f"attention over {n_keys} keys: the copies of its key "
               f"loop's body unrolled to keep it under {MAX_TRIPS} trips")
  return unroll


def _key_loop(lw, n_keys: int, end: UOp | None, block: int) -> tuple[UOp, list]:
  """(RANGE, [(key index, valid or None)]) of the loop over keys 0..end-1 (end: a per-thread
  UOp, or None for all n_keys), `block` keys per trip (_key_unroll); valid gates the keys past
  the end."""
  unroll = _key_unroll(n_keys, block)
  if end is None:
    trips = int_const(-(-n_keys // unroll))
  else:
    trips = (end + int_const(unroll - 1)) // int_const(unroll) if unroll > 1 else end
  rng = UOp(Ops.RANGE, I32, (trips,), lw._id())
  limit = end if end is not None else int_const(n_keys)
  ragged = unroll > 1 and (end is not None or n_keys % unroll)
  keys = []
  for t in range(unroll):
    j = rng * int_const(unroll) + int_const(t) if unroll > 1 else rng
    keys.append((j, j.lt(limit) if ragged else None))
  return rng, keys


class _Row:
  """One query row's online-softmax state while the key loop is built: its DEFINE_ACCs (running
  max m, sum l, Ev accumulators), their values so far in this trip, its scaled q and index i."""

  def __init__(self, lw, qs: list, i: UOp, ev_dim: int, dtype):
    neg_inf, zero = UOp.const(dtype, -math.inf), UOp.const(dtype, 0.0)
    self.qs, self.i = qs, i
    self.m = UOp(Ops.DEFINE_ACC, dtype, (neg_inf,), lw._id())
    self.accs = [UOp(Ops.DEFINE_ACC, dtype, (zero,), lw._id()) for _ in range(1 + ev_dim)]
    self.cur_m, self.cur = self.m, list(self.accs)     # cur[0]: l, cur[1:]: the accumulators

  def reopen(self, lw, loop: UOp) -> None:
    """New accumulators for a next key loop, starting from this state after `loop` (ENDRANGE)."""
    self.m, *self.accs = [UOp(Ops.DEFINE_ACC, a.dtype, (UOp(Ops.AFTER, a.dtype, (a, loop)),),
                              lw._id()) for a in [self.m, *self.accs]]
    self.cur_m, self.cur = self.m, list(self.accs)

  def step(self, scores: list, values: list) -> None:
    """Take a block of keys with `scores` (log2 units) and value rows `values`: one rescale of
    the accumulators per block."""
    neg_inf, zero = scores[0].const_like(-math.inf), scores[0].const_like(0.0)
    new_m = self.cur_m
    for s in scores:
      new_m = new_m.maximum(s)
    base = new_m.eq(neg_inf).where(zero, new_m)
    corr = UOp(Ops.EXP2, zero.dtype, (self.cur_m - base,))
    ps = [UOp(Ops.EXP2, zero.dtype, (s - base,)) for s in scores]
    weights = [corr] + ps
    self.cur = [_dot(weights, [a] + [UOp.const(zero.dtype, 1.0)] * len(ps)) if e < 0 else
                _dot(weights, [a] + [vs[e] for vs in values])
                for e, a in enumerate(self.cur, -1)]
    self.cur_m = new_m


def attention_stores(lw, opts: Opts) -> list[UOp]:
  """The stores of the ATTENTION kernel `lw.item` (see the module docstring): each thread takes
  `opts.upcast` consecutive query rows, which share each key's k and v loads."""
  out = lw.item.out
  batch, places = _threads(out.shape[:-2], out.src[0].shape[-2], max(opts.upcast, 1),
                           max(opts.local, 1), query_grid(out))
  stores = []
  block = key_block(opts, len(places))
  for (i, ok), values in zip(places, attention_values(lw, out, tuple(batch), places,
                                                      block=block, split=True)):
    terms = zip(tuple(batch) + (i,), contiguous_strides(out.shape), out.shape)
    flat = linear_index([t for t in terms if t[2] > 1], 0)
    run = [lw.params[0].store(flat + int_const(e) if e else flat, value, ok)
           for e, value in enumerate(values)]
    stores += vector_stores(run, len(values)) if ok is None else run
  return stores


def attention_values(lw, out, batch: tuple, places: list, active: UOp | None = None,
                     block: int = 0, split: bool = False) -> list:
  """The output rows of ATTENTION node `out` at batch indices `batch` and query rows `places`
  ([(row index, valid or None)], consecutive rows of one thread: they share each key's k and v
  loads): a list of Ev values (out's dtype) per row. Where `active` is false the thread walks no
  key (its values are not to be used: staged.py's threads past the rows). `block`: keys per
  trip (0: key_block's default). With `split` (the attention kernel's own, which carries
  attention_variants) a run-time key count walks _split_key_loops, else clamped keys."""
  q, k, v = out.src[:3]
  scale, causal = out.arg[:2]
  limit = out.src[-1] if len(out.arg) > 2 else None     # a run-time number of keys
  n_k, e_dim, ev_dim = k.shape[-2], q.shape[-1], v.shape[-1]
  acc_dt = dtypes.float64 if out.dtype == dtypes.float64 else dtypes.float32
  rows = []
  for i, _ in places:
    qs = _row_values(lw, q, batch + (i,), e_dim, None, acc_dt)
    rows.append(_Row(lw, [x * UOp.const(acc_dt, scale * LOG2E) for x in qs], i, ev_dim, acc_dt))
  end = _key_end(lw, out, rows[-1].i, limit, q.shape[-2], causal)
  if active is not None:
    end = active.where(end if end is not None else int_const(n_k), int_const(0))
  block = block or _keys_per_trip(len(places))
  walk = (lw, out, batch, rows, acc_dt)
  if limit is not None and active is None and split:
    loop = _split_key_loops(walk, end, _key_unroll(n_k, block))
  else:
    rng, keys = _key_loop(lw, n_k, end, block)
    if limit is not None or active is not None:
      ks, vs = _clamped_keys(lw, k, v, batch, keys, end, acc_dt)
    else:
      ks = [_row_values(lw, k, batch + (j,), e_dim, valid, acc_dt) for j, valid in keys]
      vs = [_row_values(lw, v, batch + (j,), ev_dim, valid, acc_dt) for j, valid in keys]
    loop = _walk_keys(walk, rng, keys, ks, vs)
  out_rows = []
  for row in rows:
    total = UOp(Ops.AFTER, acc_dt, (row.accs[0], loop))
    values = [UOp(Ops.AFTER, acc_dt, (acc, loop)) / total for acc in row.accs[1:]]
    out_rows.append([x if x.dtype == out.dtype else x.cast(out.dtype) for x in values])
  return out_rows


def _walk_keys(walk: tuple, rng: UOp, keys: list, ks: list, vs: list) -> UOp:
  """One trip of the key loop `rng` over `keys` ([(key index, valid or None)]) whose k and v rows
  are `ks` and `vs`: each row's scores (masked where the mask or causal rule drops a key, or it
  is not valid) and online-softmax step; returns the loop's ENDRANGE."""
  lw, out, batch, rows, acc_dt = walk
  causal, mask = out.arg[1], _mask(out)
  neg_inf = UOp.const(acc_dt, -math.inf)
  for row in rows:
    scores = []
    for (j, valid), kj in zip(keys, ks):
      s = _dot(row.qs, kj)
      if mask is not None:
        mv = lw.value(mask, batch + (row.i, j), valid)
        s = mv.where(s, neg_inf) if mask.dtype == dtypes.bool else \
          s + mv.cast(acc_dt) * UOp.const(acc_dt, LOG2E)
      # (the last row's keys end at the loop's end: valid, or the loop bound)
      keep = gate_and(j.lt(row.i + int_const(1)) if causal and row is not rows[-1] else None,
                      valid)
      scores.append(keep.where(s, neg_inf) if keep is not None else s)
    row.step(scores, vs)
  # the m ASSIGNs last: the other updates read m's old value (module docstring)
  assigns = [UOp(Ops.ASSIGN, acc_dt, (a, c)) for row in rows for a, c in zip(row.accs, row.cur)]
  assigns += [UOp(Ops.ASSIGN, acc_dt, (row.m, row.cur_m)) for row in rows]
  return UOp(Ops.ENDRANGE, None, (rng, *assigns))


def _split_key_loops(walk: tuple, end: UOp, unroll: int) -> UOp:
  """The keys 0..end-1 under a run-time key count `end` (a symbolic key length) in two loops:
  end // unroll trips of `unroll` keys, then the rest one key per trip, the second loop's
  accumulators starting where the first left them. No key past the end is read, so nothing is
  masked or clamped (where one loop of ceil(end / unroll) trips masked every k and v value of
  its keys: lavapipe and SwiftShader ran 1.3-1.4x the static kernel's GPU time, 2.3x at end =
  1). lavapipe runs the first loop 1000x slower where it makes no trip (end < unroll: 4-110 ms
  against 0.05; the second loop making none is as fast), so a kernel with a bare symbolic key
  count takes a variant of one key per trip below `unroll` (attention_variants). Returns the
  last loop's ENDRANGE."""
  lw, out, batch, rows, acc_dt = walk
  k, v = out.src[1], out.src[2]

  def loop(trips: UOp, indices) -> UOp:       # indices(rng): the keys of a trip
    rng = UOp(Ops.RANGE, I32, (trips,), lw._id())
    keys = [(j, None) for j in indices(rng)]
    ks = [_row_values(lw, k, batch + (j,), k.shape[-1], None, acc_dt) for j, _ in keys]
    vs = [_row_values(lw, v, batch + (j,), v.shape[-1], None, acc_dt) for j, _ in keys]
    return _walk_keys(walk, rng, keys, ks, vs)
  if unroll == 1:
    return loop(end, lambda rng: [rng])
  step = int_const(unroll)
  first = loop(end // step, lambda rng: [rng * step + int_const(t) for t in range(unroll)])
  for row in rows:
    row.reopen(lw, first)
  done = end // step * step
  return loop(end - done, lambda rng: [done + rng])


def _mask(out) -> object | None:
  """The ATTENTION node's mask source, or None."""
  srcs = out.src[:-1] if len(out.arg) > 2 else out.src
  return srcs[3] if len(srcs) > 3 else None


def _key_end(lw, out, last: UOp, limit, n_q: int, causal: bool) -> UOp | None:
  """How many keys a thread whose last query row is `last` walks, as a UOp (None: all of
  them): up to that row's diagonal where causal, at most the run-time key count `limit`."""
  n_k = out.src[1].shape[-2]
  end = None
  if causal and n_q > 1:              # up to the thread's last row's diagonal
    end = (last + int_const(1)).minimum(int_const(n_k))
  elif causal:
    end = int_const(1)
  if limit is not None:               # a symbolic key length: the keys past it are padding
    keys_n = lw.value(limit, (), None).minimum(int_const(n_k)).maximum(int_const(0))
    end = keys_n if end is None else end.minimum(keys_n)
  return end
