"""The fuzzer's model operations (issue 18): advanced indexing with host lists and device
tensors, take_along_axis (gather), setitem, scatter, scatter_add, numpy.pad's modes, roll,
tril/triu, one_hot, repeat_interleave, tile, split, chunk, nearest and bilinear interpolate,
dropout and a gather's gradient (gather_grad: the scatter_add autograd makes).

The fuzz sizes (<= 240 elements) sit far below scatter.COMPARE_MAX, where every scatter compares
each output with each index; so about half of the scatter, scatter_add, setitem-with-index-arrays
and gather_grad steps carry `form="sorted"` and are built inside scatter.forced_form("sorted"):
the sorting network, binary search and segmented scan of tensor/ops/sorted_scatter.py, fuzzed against
the same numpy oracle on every device.

Three tables plug into the fuzzer (fuzz_programs.GROW["model"], fuzz_oracle_ops.OPS,
fuzz_runner.BUILD): how a step is grown, its numpy oracle, and how kernelgen builds it; this
module imports those modules lazily, as they import it. Most of these operations move values
without arithmetic (scatter_add on integers adds exactly, wrapping), so the oracle moves each
value's error bound and "defined" flag along with it; bilinear interpolation and dropout's
scaling carry error bounds as the oracle's matmul and mul do.
"""
from __future__ import annotations

import numpy as np

MODEL_OPS = ("take_list", "take_tensor", "gather", "setitem", "scatter", "scatter_add",
             "pad_mode", "roll", "tril", "triu", "one_hot", "repeat_interleave",
             "interpolate_nearest", "tile", "split_part", "chunk_part", "bilinear", "dropout",
             "setitem_mask", "gather_grad")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
PAD_MODES = ("edge", "reflect", "symmetric", "wrap")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


# ---- growing a step (the generator) -----------------------------------------------------------

def _form(c) -> dict:
  """`form="sorted"` (the sorted scatter forced at the fuzz sizes) for about half the steps."""
  return {"form": "sorted"} if c.chance(0.5) else {}


def grow_model(b, src: int, op: str | None = None):
  """One model operation (`op`, or a random one) on value `src` (skipped when it does not fit
  the value)."""
  from fuzz_programs import MAX_ELEMENTS, _numel, _scalar_for   # (fuzz_programs imports us)
  shape, dtype = b.values[src]
  c = b.c
  op = op or c.choice(MODEL_OPS)
  if not shape or 0 in shape:
    return
  axis = c.integer(0, len(shape) - 1)
  n = shape[axis]
  if op in ("take_list", "take_tensor"):
    hi = n if op == "take_tensor" else n - 1          # n: out of range, computed on the device
    idx = tuple(c.integer(-n, hi) for _ in range(c.integer(1, 5)))
    new = shape[:axis] + (len(idx),) + shape[axis + 1:]
    if _numel(new) <= MAX_ELEMENTS:
      b.push(op, [src], new, dtype, axis=axis, index=idx)
  elif op == "gather":
    ishape = shape[:axis] + (c.integer(1, 3),) + shape[axis + 1:]
    if _numel(ishape) <= MAX_ELEMENTS:
      idx = tuple(c.integer(-n, n - 1) for _ in range(_numel(ishape)))
      b.push(op, [src], ishape, dtype, axis=axis, index=idx, index_shape=ishape)
  elif op == "gather_grad" and dtype in FLOAT_DTYPES:     # in range: autograd's scatter_add
    ishape = shape[:axis] + (c.integer(1, 40),) + shape[axis + 1:]
    if _numel(ishape) <= MAX_ELEMENTS:
      idx = tuple(c.integer(0, n - 1) for _ in range(_numel(ishape)))
      g = b.new_input(ishape, dtype)
      b.push(op, [src, g], shape, dtype, axis=axis, index=idx, index_shape=ishape, **_form(c))
  elif op == "setitem":
    value = _scalar_for(c, dtype)
    if len(shape) >= 2 and c.chance(0.3):        # two index arrays: the general scatter
      other = (axis + 1) % len(shape)
      k = c.integer(1, 3)
      idx = tuple(c.integer(-n, n - 1) for _ in range(k))
      idx2 = tuple(c.integer(-shape[other], shape[other] - 1) for _ in range(k))
      b.push(op, [src], shape, dtype, axis=axis, index=idx, axis2=other, index2=idx2,
             value=value, **_form(c))
    elif c.chance(0.5):
      idx = tuple(c.integer(-n, n - 1) for _ in range(c.integer(1, 3)))
      extra = {"device": True, **_form(c)} if c.chance(0.5) else {}   # a Tensor index: scatter
      b.push(op, [src], shape, dtype, axis=axis, index=idx, value=value, **extra)
    else:
      sl = (c.integer(0, n - 1), None, c.choice((1, 2, -1)))
      b.push(op, [src], shape, dtype, axis=axis, slice=sl, value=value)
  elif op == "setitem_mask" and dtype != "bool":
    b.push(op, [src], shape, dtype, value=_scalar_for(c, dtype))
  elif op in ("scatter", "scatter_add"):
    if op == "scatter_add" and dtype not in INTS:
      return
    form = _form(c)            # sorted: up to 40 indices per row (blocks of SCAN_BLOCK 32)
    ishape = tuple(c.integer(1, s) for s in shape[:axis]) + \
      (c.integer(1, 40 if form else 3),) + tuple(c.integer(1, s) for s in shape[axis + 1:])
    if _numel(ishape) > MAX_ELEMENTS:
      return
    idx = tuple(c.integer(0, n - 1) for _ in range(_numel(ishape)))
    other = b.new_input(ishape, dtype)
    b.push(op, [src, other], shape, dtype, axis=axis, index=idx, index_shape=ishape, **form)
  elif op == "pad_mode":
    pads = tuple((c.integer(0, 3), c.integer(0, 3)) for _ in shape)
    new = tuple(s + p + q for s, (p, q) in zip(shape, pads))
    if _numel(new) <= MAX_ELEMENTS:
      b.push(op, [src], new, dtype, pads=pads, mode=c.choice(PAD_MODES))
  elif op == "roll":
    b.push(op, [src], shape, dtype, axis=axis, shift=c.integer(-7, 7))
  elif op in ("tril", "triu") and len(shape) >= 2:
    b.push(op, [src], shape, dtype, k=c.integer(-2, 2))
  elif op == "one_hot" and dtype in INTS:
    classes = c.integer(1, 5)
    if _numel(shape) * classes <= MAX_ELEMENTS:
      b.push(op, [src], shape + (classes,), "int32", classes=classes)
  elif op == "repeat_interleave":
    repeats = c.integer(0, 3) if c.chance(0.5) else tuple(c.integer(0, 2) for _ in range(n))
    total = n * repeats if isinstance(repeats, int) else sum(repeats)
    new = shape[:axis] + (total,) + shape[axis + 1:]
    if _numel(new) <= MAX_ELEMENTS:
      b.push(op, [src], new, dtype, axis=axis, repeats=repeats)
  elif op in ("interpolate_nearest", "bilinear") and len(shape) == 4:
    if op == "bilinear" and dtype not in FLOAT_DTYPES:
      return
    size = (c.integer(1, 6), c.integer(1, 6))
    new = shape[:2] + size
    if _numel(new) <= MAX_ELEMENTS:
      b.push(op, [src], new, dtype, size=size, align_corners=c.chance(0.5))
  elif op == "tile":
    reps = tuple(c.integer(1, 2) for _ in range(c.integer(1, len(shape) + 1)))
    new = (1,) * (len(reps) - len(shape)) + tuple(shape)
    new = tuple(s * r for s, r in zip(new, (1,) * (len(new) - len(reps)) + reps))
    if _numel(new) <= MAX_ELEMENTS:
      b.push(op, [src], new, dtype, reps=reps)
  elif op == "split_part":
    parts = c.choice([d for d in (1, 2, 3, 5) if n % d == 0])
    i = c.integer(0, parts - 1)
    b.push(op, [src], shape[:axis] + (n // parts,) + shape[axis + 1:], dtype, axis=axis,
           parts=parts, part=i)
  elif op == "chunk_part":
    chunks, step = c.integer(1, 4), None
    step = -(-n // chunks)
    starts = list(range(0, n, step))
    i = c.integer(0, len(starts) - 1)
    size = min(step, n - starts[i])
    b.push(op, [src], shape[:axis] + (size,) + shape[axis + 1:], dtype, axis=axis,
           chunks=chunks, part=i)
  elif op == "dropout" and dtype in FLOAT_DTYPES:
    b.push(op, [src], shape, dtype, p=c.choice((0.25, 0.5, 0.0)), seed=c.integer(0, 99))


SCATTER_OPS = {"float": ("scatter", "setitem", "gather_grad"),
               "int": ("scatter", "scatter_add", "setitem"), "bool": ("scatter", "setitem")}


def grow_scatter(b, src: int):
  """GROW kind "scatter": a scatter-making step that fits the value's dtype (scatter_add of ints,
  gather_grad of floats; half of them in the sorted form), so every fuzz run has some."""
  dtype = b.values[src][1]
  group = "float" if dtype in FLOAT_DTYPES else "bool" if dtype == "bool" else "int"
  grow_model(b, src, b.c.choice(SCATTER_OPS[group]))


def sized_scatter(b):
  """SIZED kind "scatter": a 1-d scatter at its real thresholds, no form forced: outputs x
  indices 256 x 256 (= scatter.COMPARE_MAX: compared) or 257 x 256 (sorted), and 32 or 33
  indices per row into 2049 outputs (COMPARE_INDICES: compared, then sorted)."""
  from fuzz_programs import _sized_input
  c = b.c
  n, m = c.choice(((256, 256), (257, 256), (2049, 32), (2049, 33)))
  dtype = c.choice(("float32", "int32", "float16", "uint8"))
  op = c.choice(("scatter", "gather_grad") if dtype in FLOAT_DTYPES else ("scatter", "scatter_add"))
  x = _sized_input(b, (n,), dtype)
  idx = tuple(c.integer(0, n - 1) for _ in range(m))
  other = _sized_input(b, (m,), dtype)
  b.push(op, [x, other], (n,), dtype, axis=0, index=idx, index_shape=(m,))


# ---- the oracle -------------------------------------------------------------------------------

def _moved(x, fn):
  """An OVal with `fn` applied to its values, error bounds and defined flags alike."""
  from fuzz_oracle import OVal
  return OVal(np.array(fn(x.a)), x.dtype, np.array(fn(x.err)), np.array(fn(x.ok)))


def _take_device(a, idx, axis, n):
  """numpy take of device indices: negatives wrap, out-of-range read 0."""
  idx = np.asarray(idx)
  wrapped = np.where(idx < 0, idx + n, idx)
  valid = (wrapped >= 0) & (wrapped < n)
  out = np.take(a, np.where(valid, wrapped, 0), axis)
  shape = [1] * out.ndim
  shape[axis] = len(idx)
  return np.where(valid.reshape(shape), out, np.zeros((), a.dtype))


def _scatter_np(a, idx, src, axis, add):
  out = a.copy()
  coords = list(np.indices(idx.shape))
  coords[axis] = idx
  if add:
    np.add.at(out, tuple(coords), src)
  else:
    for pos in np.ndindex(*idx.shape):   # in order: the last duplicate wins
      target = list(pos)
      target[axis] = idx[pos]
      out[tuple(target)] = src[pos]
  return out


def _nearest(n_in, n_out):
  if n_out == n_in:
    return np.arange(n_out)
  if n_out == 2 * n_in:
    return np.arange(n_out) >> 1
  s = np.float32(n_in) / np.float32(n_out)
  return np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * s).astype(int), n_in - 1)


def _setitem_index(step, ndim):
  index = [slice(None)] * ndim
  axis = step.param("axis")
  index[axis] = list(step.param("index")) if step.param("index") is not None \
    else slice(*step.param("slice"))
  if step.param("axis2") is not None:
    index[step.param("axis2")] = list(step.param("index2"))
  return tuple(index)


def oracle(step, xs):
  """The expected OVal of a model step."""
  from fuzz_oracle import OVal, exact, round_to
  x, op, axis = xs[0], step.op, step.param("axis")
  if op == "take_list":
    return _moved(x, lambda a: np.take(a, list(step.param("index")), axis))
  if op == "take_tensor":
    n = x.a.shape[axis]
    return _moved(x, lambda a: _take_device(a, step.param("index"), axis, n))
  if op == "gather":
    idx = np.array(step.param("index")).reshape(step.param("index_shape"))
    return _moved(x, lambda a: np.take_along_axis(a, idx, axis))
  if op == "setitem":
    index = _setitem_index(step, x.a.ndim)
    value = round_to(np.asarray(step.param("value")), x.dtype)
    a, err, ok = x.a.copy(), x.err.copy(), x.ok.copy()
    a[index], err[index], ok[index] = value, 0.0, True
    return OVal(a, x.dtype, err, ok)
  if op == "setitem_mask":                 # t[t > 0] = value
    a = round_to(x.a, x.dtype)
    hit = a.astype(np.float64) > 0 if x.dtype in FLOAT_DTYPES else a > 0
    value = round_to(np.asarray(step.param("value")), x.dtype)
    near = (x.err > 0) & (np.abs(a.astype(np.float64)) <= x.err)   # the compare may go either way
    return OVal(np.where(hit, value, a), x.dtype, np.where(hit, 0.0, x.err), x.ok & ~near)
  if op in ("scatter", "scatter_add"):
    src = xs[1]
    idx = np.array(step.param("index")).reshape(step.param("index_shape"))
    shrink = tuple(slice(0, s) for s in idx.shape)
    add = op == "scatter_add"
    a = _scatter_np(x.a, idx, src.a[shrink], axis, add)
    err = _scatter_np(x.err, idx, src.err[shrink], axis, add)
    ok = _scatter_np(x.ok, idx, src.ok[shrink], axis, False)
    return OVal(a, x.dtype, err, ok)
  if op == "gather_grad":
    return _gather_grad(x, xs[1], step)
  if op == "pad_mode":
    return _moved(x, lambda a: np.pad(a, step.param("pads"), mode=step.param("mode")))
  if op == "roll":
    return _moved(x, lambda a: np.roll(a, step.param("shift"), axis))
  if op in ("tril", "triu"):
    fn = np.tril if op == "tril" else np.triu
    keep = fn(np.ones(x.a.shape[-2:], bool), step.param("k"))
    zero = round_to(np.asarray(0), x.dtype)
    return OVal(np.where(keep, x.a, zero), x.dtype, np.where(keep, x.err, 0.0),
                np.where(keep, x.ok, True))
  if op == "one_hot":
    classes = step.param("classes")
    return exact((x.a[..., None] == np.arange(classes)).astype(np.int32), "int32")
  if op == "repeat_interleave":
    reps = step.param("repeats")
    return _moved(x, lambda a: np.repeat(a, reps, axis))
  if op == "interpolate_nearest":
    h, w = step.param("size")
    rows, cols = _nearest(x.a.shape[2], h), _nearest(x.a.shape[3], w)
    return _moved(x, lambda a: np.take(np.take(a, rows, 2), cols, 3))
  if op == "tile":
    return _moved(x, lambda a: np.tile(a, step.param("reps")))
  if op == "split_part":
    return _moved(x, lambda a: np.split(a, step.param("parts"), axis)[step.param("part")])
  if op == "chunk_part":
    n = x.a.shape[axis]
    size = -(-n // step.param("chunks"))
    lo = step.param("part") * size
    return _moved(x, lambda a: np.take(a, np.arange(lo, min(lo + size, n)), axis))
  if op == "bilinear":
    return _bilinear(x, step.param("size"), step.param("align_corners"))
  if op == "dropout":
    return _dropout(x, step.param("p"), step.param("seed"))
  raise KeyError(op)


def _gather_grad(x, g, step):
  """The gradient of x.gather(axis, idx) backward(g): zeros with g added at the indices (numpy's
  add.at in float64, rounded once); the sum's error bound (half types add in float32)."""
  from fuzz_oracle import FMAX, U, round_to, ulp, work_dtype, zero_sign
  from fuzz_oracle_ops import _out
  axis = step.param("axis")
  idx = np.array(step.param("index")).reshape(step.param("index_shape"))
  gv = round_to(g.a, g.dtype).astype(np.float64)
  finite = np.where(np.isfinite(gv), np.abs(gv), 0.0)
  total, mag, err, count = (np.zeros(x.a.shape) for _ in range(4))
  bad = np.zeros(x.a.shape, bool)
  for a, part in ((total, gv), (mag, finite), (err, g.err), (count, np.ones(idx.shape)),
                  (bad, ~g.ok)):
    coords = list(np.indices(idx.shape))
    coords[axis] = idx
    np.add.at(a, tuple(coords), part)
  r = round_to(total, x.dtype)
  err = err + count * U[work_dtype(x.dtype)] * mag
  return _out(r, x.dtype, err + ulp(r, x.dtype) + zero_sign(r), ~bad & (mag < FMAX[x.dtype] / 2))


def _linear_matrix(n_in, n_out, align_corners):
  """torch's linear interpolation weights (float32 coordinates) as an (out, in) matrix, and
  which inputs each output reads (its two neighbours, even one of weight 0: 0 * inf is NaN)."""
  d = np.arange(n_out, dtype=np.float32)
  if align_corners:
    s = np.float32((n_in - 1) / (n_out - 1)) if n_out > 1 else np.float32(0)
    src = s * d
  else:
    s = np.float32(n_in) / np.float32(n_out)
    src = np.maximum(s * (d + np.float32(0.5)) - np.float32(0.5), np.float32(0))
  i0 = src.astype(np.int64)
  i1 = np.minimum(i0 + 1, n_in - 1)
  lam = src - i0.astype(np.float32)
  m, reads = np.zeros((n_out, n_in)), np.zeros((n_out, n_in), np.int64)
  np.add.at(m, (np.arange(n_out), i0), (np.float32(1) - lam).astype(np.float64))
  np.add.at(m, (np.arange(n_out), i1), lam.astype(np.float64))
  reads[np.arange(n_out), i0] = reads[np.arange(n_out), i1] = 1
  return m, reads


def _bilinear(x, size, align_corners):
  """Rows then columns as weighted sums (float32 work for the half types), matmul's bounds."""
  from fuzz_oracle import U, round_to, ulp, work_dtype
  from fuzz_oracle_ops import _out
  wh, reads_h = _linear_matrix(x.a.shape[2], size[0], align_corners)
  ww, reads_w = _linear_matrix(x.a.shape[3], size[1], align_corners)
  u = U[work_dtype(x.dtype)]
  a = round_to(x.a, x.dtype).astype(np.float64)
  finite = np.isfinite(a)
  a0 = np.where(finite, a, 0.0)
  y1, t1 = a0 @ ww.T, np.abs(a0) @ ww.T
  e1 = x.err @ ww.T + (ww.shape[1] + 1) * u * t1
  y2, t2 = wh @ y1, wh @ np.abs(y1)
  e2 = wh @ e1 + (wh.shape[1] + 1) * u * t2
  support = reads_h @ (~(x.ok & finite)).astype(np.int64) @ reads_w.T
  r = round_to(y2, x.dtype)
  return _out(r, x.dtype, e2 + ulp(r, x.dtype), support == 0)


def _hash_u32(index, seed):
  """Tensor.rand's counter-based hash, written out: lowbias32-style mixing of index and seed."""
  x = index.astype(np.uint32) ^ np.uint32((seed * 0x9E3779B9 + 0x85EBCA6B) & 0xFFFFFFFF)
  for shift, mult in ((16, 0x7FEB352D), (15, 0x846CA68B), (16, None)):
    x = x ^ (x >> np.uint32(shift))
    if mult is not None:
      x = (x.astype(np.uint64) * mult & 0xFFFFFFFF).astype(np.uint32)
  return x


def _dropout(x, p, seed):
  """where(rand(seed) >= p, x * (1 / (1 - p)), 0): the scale rounded to x's dtype (a weak
  scalar), one rounding of the product."""
  from fuzz_oracle import round_to, times, ulp
  from fuzz_oracle_ops import _out
  if p == 0:
    return x
  unit = (_hash_u32(np.arange(x.a.size), seed) >> np.uint32(8)).astype(np.float32) * \
    np.float32(2.0 ** -24)
  keep = (unit >= np.float32(p)).reshape(x.a.shape)
  scale = float(round_to(np.asarray(1.0 / (1.0 - p)), x.dtype))
  y = round_to(x.a, x.dtype).astype(np.float64) * scale
  r = round_to(np.where(keep, y, 0.0), x.dtype)
  err = np.where(keep, times(np.asarray(scale), x.err) + ulp(r, x.dtype), 0.0)
  return _out(r, x.dtype, err, np.where(keep, x.ok, True))


ORACLE = {op: oracle for op in MODEL_OPS}


# ---- building with kernelgen -------------------------------------------------------------------

def _form_of(step):
  from kernelgen.tensor.ops.sorted_scatter import forced_form
  return forced_form(step.param("form"))


def _index_tensor(step, like):
  from kernelgen import Tensor
  idx = Tensor(list(step.param("index")), dtype="int32", device=like.device)
  return idx.reshape(step.param("index_shape")) if step.param("index_shape") else idx


def build(step, xs):
  """The kernelgen Tensor of a model step."""
  from kernelgen import Tensor
  x, op, axis = xs[0], step.op, step.param("axis")
  lead = (slice(None),) * (axis or 0)
  if op == "take_list":
    return x[lead + (list(step.param("index")),)]
  if op == "take_tensor":
    return x[lead + (_index_tensor(step, x),)]
  if op == "gather":
    return x.gather(axis, _index_tensor(step, x))
  if op == "setitem":
    y = Tensor(x.node)           # a new Tensor object: setitem must not change x itself
    index = _setitem_index(step, x.ndim)
    if step.param("device"):     # the index array as a Tensor: a scatter on the device
      index = tuple(Tensor(i, dtype="int32", device=x.device) if isinstance(i, list) else i
                    for i in index)
    with _form_of(step):
      y[index] = step.param("value")
    return y
  if op == "setitem_mask":
    y = Tensor(x.node)
    y[x > 0] = step.param("value")
    return y
  if op == "scatter":
    with _form_of(step):
      return x.scatter(axis, _index_tensor(step, x), xs[1])
  if op == "scatter_add":
    with _form_of(step):
      return x.scatter_add(axis, _index_tensor(step, x), xs[1])
  if op == "gather_grad":
    leaf = Tensor(x.node, requires_grad=True)
    with _form_of(step):
      leaf.gather(axis, _index_tensor(step, x)).backward(xs[1])
    return leaf.grad
  if op == "pad_mode":
    return x.pad(step.param("pads"), mode=step.param("mode"))
  if op == "roll":
    return x.roll(step.param("shift"), axis)
  if op in ("tril", "triu"):
    return getattr(x, op)(step.param("k"))
  if op == "one_hot":
    return x.one_hot(step.param("classes"))
  if op == "repeat_interleave":
    reps = step.param("repeats")
    return x.repeat_interleave(reps if isinstance(reps, int) else list(reps), axis)
  if op == "interpolate_nearest":
    return x.interpolate(size=step.param("size"), mode="nearest")
  if op == "bilinear":
    return x.interpolate(size=step.param("size"), mode="bilinear",
                         align_corners=step.param("align_corners"))
  if op == "tile":
    return x.tile(step.param("reps"))
  if op == "split_part":
    return x.split(step.param("parts"), axis)[step.param("part")]
  if op == "chunk_part":
    return x.chunk(step.param("chunks"), axis)[step.param("part")]
  if op == "dropout":
    return x.dropout(step.param("p"), seed=step.param("seed"))
  raise KeyError(op)


BUILD = {op: build for op in MODEL_OPS}


# ---- programs centred on the model operations --------------------------------------------------

def _input_for(c, op: str):
  """An input shape and dtype the model operation `op` applies to."""
  from fuzz_programs import DIMS, DTYPES
  dtype = c.choice(INTS) if op in ("one_hot", "scatter_add") else c.choice(("float32",) + DTYPES)
  dtype = c.choice(FLOAT_DTYPES) if op in ("bilinear", "dropout", "gather_grad") else dtype
  if op in ("interpolate_nearest", "bilinear"):
    return (c.integer(1, 2), c.integer(1, 2), c.integer(1, 5), c.integer(1, 5)), dtype
  rank = c.integer(2 if op in ("tril", "triu") else 1, 3)
  return tuple(max(c.choice(DIMS), 1) for _ in range(rank)), dtype


def generate_model(c, first: str | None = None, max_steps: int = 3):
  """A random program whose steps are mostly model operations, the first one `first` (when
  given) on an input it fits; any other kind of step may come in between."""
  from fuzz_programs import GROW, _Builder
  b = _Builder(c)
  b.new_input(*_input_for(c, first or c.choice(MODEL_OPS)))
  kinds = tuple(k for k in GROW if k != "model")
  for i in range(c.integer(1, max_steps)):
    src = len(b.values) - 1
    if i == 0 or c.chance(0.75):
      grow_model(b, src, first if i == 0 else None)
    else:
      GROW[c.choice(kinds)](b, src)
  return b.program()
