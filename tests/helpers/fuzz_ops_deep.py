"""Deeper fuzz draws of issue 18's operations: the forms the other generators never reach.

A generator of its own (`generate_deep`; fuzz_runner.program_for gives it one seed in DEEP_EVERY),
so the streams of fuzz_programs.generate, generate_model and generate_nn stay as they were. Its
steps (ORACLE merged into fuzz_oracle_ops.OPS, BUILD into fuzz_runner.BUILD):

    take_fn(v, [idx], axis, ...)          kg.take / Tensor.take by name: axis None or an int; the
                                          index a host list, a numpy array, a Tensor of any int
                                          dtype (out of range reads 0; uint32 values from 2^31
                                          on included) or a computed value (an argmax, minus 2)
    take_multi(v, entries)                t[...] with two or three index arrays broadcast
                                          together, mixed with slices, ints, None and `...`
    take_mask(v, [m], at, ...)            t[:, mask] with a bool mask that is data: a numpy
                                          array, or a computed mask (0 < input) realized first
    nll_loss_t / cross_entropy_t(x, t)    class-index targets computed on the device (an argmax
                                          of another tensor, or arange % C), cast to a target dtype
    setitem_tensor(v, value, ...)         t[index] = a Tensor value (broadcast), index a slice, a
                                          host list or a device Tensor (duplicates: the last wins)
    scatter_add_f(v, src, ...)            float scatter_add by name (torch: hit elements += src)
    interp(v, mode, size | scale)         interpolate: nearest (1 to 3 spatial dims), linear,
                                          bilinear; size= or scale_factor=; align_corners
    pad_constant(v, pads, value)          pad(mode="constant", value=v)
    pad_rg / pad_grad(v, [g], pads, mode) a mode pad of a leaf that requires grad (the cat of
                                          views form) and its gradient
    shape_more(v, form, ...)              roll of the flattened tensor (axis None) or over several
                                          axes, split into a list of sizes, repeat_interleave of
                                          the flattened tensor
and, through the existing steps with operands they never had: cross_entropy_prob with probability
targets computed on the device (a softmax, a one_hot of an argmax); sdpa with head dims E or Ev on
both sides of model_ops.ATTENTION_MAX_DIM (128: fused up to it, the split form above); scans
(cumsum, cumprod, cummax) along axes on both sides of scan.SCAN_BLOCK (32) and of SCAN_BLOCK^2
(three levels); sorts along axes on both sides of 2^sort.SORT_BITS (16 pairs a thread: one kernel
up to it, several above).
"""
from __future__ import annotations

from math import prod

import numpy as np

import fuzz_programs as fp   # (a module: the fuzzer's modules import each other)

DEEP_OPS = ("take_fn", "take_multi", "take_mask", "loss_device", "prob_device", "sdpa_wide",
            "scan_long", "sort_long", "setitem_tensor", "scatter_add_f", "interp", "pad_constant",
            "pad_rg", "pad_grad", "shape_more")
STEP_OPS = ("take_fn", "take_multi", "take_mask", "nll_loss_t", "cross_entropy_t",
            "setitem_tensor", "scatter_add_f", "interp", "pad_constant", "pad_rg", "pad_grad",
            "shape_more")
# (64-bit ones, which WEBGPU lacks, drawn less often)
INDEX_DTYPES = ("int32", "uint32", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                "uint64")
DTYPES = ("float32", "int32", "float16", "uint8") + fp.DTYPES
# later steps read the value before them (the deep step stays the program's output's source)
LATER = ("unary", "binary", "cast", "movement", "reduce", "compare")
LATER_DEEP = ("take_fn", "take_multi", "setitem_tensor", "pad_constant")
IMAX = {"int8": 127, "int16": 32767, "int32": 2 ** 31 - 1, "int64": 2 ** 63 - 1, "uint8": 255,
        "uint16": 65535, "uint32": 2 ** 32 - 1, "uint64": 2 ** 64 - 1}
HEAD_DIMS = (1, 3, 8, 127, 128, 129, 136)
SCAN_LENGTHS = (31, 32, 33, 63, 64, 65, 100, 1023, 1024, 1025, 1100)
SORT_LENGTHS = (15, 16, 17, 31, 32, 33, 64, 100, 257)
SCALES = (0.5, 1.5, 2.0, 0.75, 3.0, 1.0)
PAD_MODES = ("edge", "reflect", "symmetric", "wrap")


# ---- the generator ---------------------------------------------------------------------------

def generate_deep(c, first: str | None = None, max_steps: int = 2):
  """A program whose steps are mostly deep draws, the first one `first` (when given)."""
  b = fp._Builder(c)
  b.new_input(fp.random_shape(c, 3), c.choice(DTYPES))
  for i in range(c.integer(1, max_steps)):
    src = len(b.values) - 1
    if i == 0:
      grow_deep(b, src, first)
    elif c.chance(0.5):
      grow_deep(b, src, c.choice(LATER_DEEP))
    else:
      fp.GROW[c.choice(LATER)](b, src)
  return b.program()


def grow_deep(b, src: int, op: str | None = None):
  op = op or b.c.choice(DEEP_OPS)
  GROWERS[op](b, src)


def _fit(b, src: int, ok, make) -> int:
  """`src` when `ok(shape, dtype)` accepts it (no zero dims), else a new input `make()`."""
  shape, dtype = b.values[src]
  if shape and 0 not in shape and ok(shape, dtype):
    return src
  return b.new_input(*make())


def _plain_input(b, shape, dtype: str) -> int:
  """A numpy input without edge values (NaN, inf, the largest floats): where a result reads a
  whole row of 129 values, one of them would leave it undefined."""
  return b.push("input", [], shape, dtype, shape=tuple(shape), dtype=dtype,
                seed=b.c.integer(0, 9999), special=0.0)


def _idx_values(c, n: int, count: int, device: bool, dtype: str = "int32") -> tuple:
  """`count` indices for an axis of n: host ones in range (negative too); device ones also
  just out of range, and for unsigned dtypes now and then the dtype's largest value."""
  lo, hi = (-n, n - 1) if not device else (-n - 2, n + 1)
  if dtype.startswith("u"):
    lo = 0
  out = []
  for _ in range(count):
    v = IMAX[dtype] if device and dtype.startswith("u") and c.chance(0.1) else c.integer(lo, hi)
    out.append(max(min(v, IMAX[dtype]), -IMAX[dtype] - 1))
  return tuple(out)


def _index_shape(c) -> tuple:
  return c.choice(((c.integer(1, 4),), (), (c.integer(1, 3), c.integer(1, 3))))


def _grow_take_fn(b, src: int):
  c = b.c
  x = _fit(b, src, lambda s, d: True, lambda: (fp.random_shape(c, 3) or (4,), c.choice(DTYPES)))
  shape, dtype = b.values[x]
  if 0 in shape or not shape:
    return
  axis = None if c.chance(0.3) else c.integer(-len(shape), len(shape) - 1)
  n = prod(shape) if axis is None else shape[axis]
  kind = c.choice(("list", "numpy", "tensor", "ref"))
  refs, params = [x], dict(axis=axis, kind=kind, method=c.chance(0.5))
  if kind == "ref":               # argmax of a (k, m) input minus 2: -2 .. m-3, m up to n + 2
    k, m = c.integer(1, 4), c.integer(1, n + 2)
    am = b.push("argmax", [b.new_input((k, m), c.choice(("float32", "int32", "int8")))], (k,),
                "int32", axes=(1,), keepdim=False)
    refs.append(b.push("sub", [am], (k,), "int32", scalar=2, reverse=False))
    ishape = (k,)
  else:
    ishape = _index_shape(c)
    idtype = c.choice(INDEX_DTYPES) if kind == "tensor" else "int64"
    params.update(index=_idx_values(c, n, prod(ishape), kind == "tensor", idtype),
                  index_shape=ishape)
    if kind == "tensor":
      params["index_dtype"] = idtype
  out = ishape if axis is None else shape[:axis % len(shape)] + ishape + \
    shape[axis % len(shape) + 1:]
  if prod(out) <= fp.MAX_ELEMENTS:
    b.push("take_fn", refs, out, dtype, **params)


def _grow_take_multi(b, src: int):
  """2 or 3 index arrays (host or device, broadcast together) among slices, ints and None."""
  c = b.c
  x = _fit(b, src, lambda s, d: len(s) >= 2,
           lambda: (tuple(c.integer(1, 5) for _ in range(c.integer(2, 4))), c.choice(DTYPES)))
  shape, dtype = b.values[x]
  if len(shape) < 2:
    return
  common = c.choice(((c.integer(1, 3),), (c.integer(1, 3), c.integer(1, 3))))
  arrays = set(range(len(shape)))
  while len(arrays) > 3 or len(arrays) > 2 and c.chance(0.5):
    arrays.discard(c.integer(0, len(shape) - 1))
  while len(arrays) > 2 and c.chance(0.3):
    arrays.discard(max(arrays))
  entries = []
  for axis, n in enumerate(shape):
    if axis in arrays:
      own = tuple(1 if c.chance(0.3) else s for s in common)[c.integer(0, len(common)):] \
        if c.chance(0.3) else common
      device = c.chance(0.5)
      idtype = c.choice(INDEX_DTYPES) if device else "int64"
      entries.append(("a", _idx_values(c, n, prod(own), device, idtype), own, device, idtype))
    elif c.chance(0.3):
      entries.append(("i", c.integer(-n, n - 1)))
    else:
      entries.append(("s", c.integer(0, n - 1) if c.chance(0.4) else None, None,
                      c.choice((1, 2, -1))))
    if c.chance(0.1):
      entries.append(("n",))
  if c.chance(0.2) and entries[-1][0] == "s":
    entries[-1] = ("e",)
  out = _multi_shape(shape, entries)
  if 0 < prod(out) <= fp.MAX_ELEMENTS:
    dts = {e[4] for e in entries if e[0] == "a" and e[3]}
    extra = {"index_dtype": "int64"} if dts & {"int64", "uint64"} else {}
    b.push("take_multi", [x], out, dtype, entries=tuple(entries), **extra)


def _grow_take_mask(b, src: int):
  """A boolean mask over 1 or 2 dims from axis `at` on: host data, or 0 < an input, realized."""
  from fuzz_oracle import input_oval
  c = b.c
  x = _fit(b, src, lambda s, d: True, lambda: (fp.random_shape(c, 3) or (5,), c.choice(DTYPES)))
  shape, dtype = b.values[x]
  if not shape or 0 in shape:
    return
  at = c.integer(0, len(shape) - 1)
  dims = shape[at:at + c.integer(1, min(2, len(shape) - at))]
  if c.chance(0.5):
    mask = tuple(c.chance(0.5) for _ in range(prod(dims)))
    refs, params = [x], dict(mask=mask)
  else:                    # (the input's values are known here: the result's shape needs them)
    other = b.new_input(dims, c.choice(("float32", "int8")), "numpy")
    mask = tuple(bool(v) for v in (input_oval(b.steps[other]).a > 0).ravel())
    refs, params = [x, b.push("lt", [other], dims, "bool", scalar=0, reverse=True)], {}
  out = shape[:at] + (sum(mask),) + shape[at + len(dims):]
  b.push("take_mask", refs, out, dtype, at=at, mask_shape=dims, **params)


def _multi_shape(shape, entries) -> tuple:
  return np.zeros(shape)[_np_index(entries, shape, lambda e, n: np.zeros(e[2], np.int64))].shape


def _grow_loss_device(b, src: int):
  """nll_loss / cross_entropy of (N, C[, d]) logits with a target computed on the device."""
  c = b.c
  x = _fit(b, src, lambda s, d: d in fp.FLOATS and 2 <= len(s) <= 3,
           lambda: ((c.integer(1, 4), c.integer(1, 6)) + ((c.integer(1, 3),) if c.chance(0.4)
                                                         else ()), c.choice(fp.FLOATS)))
  shape, dtype = b.values[x]
  ch, tshape = shape[1], (shape[0],) + shape[2:]
  if c.chance(0.5):               # argmax over axis 1 of another (N, C2[, d]) tensor, C2 <= C
    other = b.new_input((shape[0], c.integer(1, ch)) + shape[2:], c.choice(("float32", "int16")))
    target = b.push("argmax", [other], tshape, "int32", axes=(1,), keepdim=False)
  else:                           # arange (any start and step) % C
    ramp = b.new_input(tshape, "int32", "arange")
    target = b.push("mod", [ramp], tshape, "int32", scalar=ch, reverse=False)
  tdtype = c.choice(("int32", "int64", "int8", "uint8", "int16"))
  if tdtype != "int32":
    target = b.push("cast", [target], tshape, tdtype, dtype=tdtype)
  op = c.choice(("nll_loss_t", "cross_entropy_t"))
  reduction = c.choice(("mean", "sum", "none"))
  refs = [x, target]
  w = c.chance(0.5)
  if w:
    refs.append(b.push("abs", [b.new_input((ch,), dtype)], (ch,), dtype))
  b.push(op, refs, tshape if reduction == "none" else (), dtype, weight=w, reduction=reduction,
         ignore_index=c.integer(0, ch - 1) if c.chance(0.3) else -100,
         label_smoothing=c.choice((0.0, 0.25)) if op == "cross_entropy_t" else 0.0)


def _grow_prob_device(b, src: int):
  """cross_entropy_prob with p a softmax of another tensor or a one_hot of an argmax."""
  c = b.c
  x = _fit(b, src, lambda s, d: d in fp.FLOATS and 2 <= len(s) <= 3,
           lambda: ((c.integer(1, 4), c.integer(1, 6)) + ((c.integer(1, 3),) if c.chance(0.4)
                                                         else ()), c.choice(fp.FLOATS)))
  shape, dtype = b.values[x]
  ch = shape[1]
  if c.chance(0.5):
    p = b.push("softmax", [b.new_input(shape, dtype)], shape, dtype, axis=1)
  else:
    lead = (shape[0],) + shape[2:]
    am = b.push("argmax", [b.new_input(lead + (ch,), "float32")], lead, "int32",
                axes=(len(lead),), keepdim=False)
    hot = b.push("one_hot", [am], lead + (ch,), "int32", classes=ch)
    if len(shape) == 3:
      hot = b.push("permute", [hot], shape, "int32", order=(0, 2, 1))
    p = b.push("cast", [hot], shape, dtype, dtype=dtype)
  refs = [x, p]
  w = c.chance(0.5)
  if w:
    refs.append(b.push("abs", [b.new_input((ch,), dtype)], (ch,), dtype))
  reduction = c.choice(("mean", "sum", "none"))
  b.push("cross_entropy_prob", refs, (shape[0],) + shape[2:] if reduction == "none" else (),
         dtype, weight=w, reduction=reduction, label_smoothing=c.choice((0.0, 0.25)))


def _grow_sdpa_wide(b, src: int):
  """sdpa with head dims on both sides of ATTENTION_MAX_DIM (L, S tiny)."""
  c = b.c
  dtype = c.choice(fp.FLOATS)
  lead = () if c.chance(0.6) else (2,)
  n, s = c.integer(1, 3), c.integer(1, 3)
  e, ev = c.choice(HEAD_DIMS), c.choice(HEAD_DIMS)
  make = b.new_input if c.chance(0.2) else lambda shape, dt: _plain_input(b, shape, dt)
  q = make(lead + (n, e), dtype)
  k = make(tuple(1 if c.chance(0.3) else d for d in lead) + (s, e), dtype)
  v = make(lead + (s, ev), dtype)
  refs, out_dtype = [q, k, v], dtype
  kind = c.choice(("none", "bool", "float", "causal"))
  if kind in ("bool", "float"):
    mdtype = "bool" if kind == "bool" else dtype if c.chance(0.6) else c.choice(fp.FLOATS)
    refs.append(b.new_input(c.choice(((n, s), (s,), (n, 1))), mdtype))
    out_dtype = dtype if kind == "bool" else fp.result_dtype(dtype, mdtype)
  params = dict(causal=kind == "causal")
  if c.chance(0.3):
    params["split"] = True
  if c.chance(0.3):
    params["scale"] = c.choice((0.5, 0.125))
  b.push("sdpa", refs, lead + (n, ev), out_dtype, **params)


def _grow_scan_long(b, src: int):
  """A scan along an axis on either side of SCAN_BLOCK (or of SCAN_BLOCK^2)."""
  c = b.c
  n = c.choice(SCAN_LENGTHS)
  lead = tuple(c.integer(1, 3) for _ in range(c.integer(0, 2))) if n < 256 else ()
  at = c.integer(0, len(lead))
  shape = lead[:at] + (n,) + lead[at:]
  dtype = c.choice(DTYPES)
  x = b.new_input(shape, dtype)
  op = c.choice(("cumsum", "cumprod", "cummax", "cummax_index"))
  axis = at - len(shape) if c.chance(0.5) else at
  out = fp.acc_dtype(dtype) if op in ("cumsum", "cumprod") else \
    dtype if op == "cummax" else "int32"
  b.push(op, [x], shape, out, axis=axis)


def _grow_sort_long(b, src: int):
  """A sort along an axis on either side of 2^SORT_BITS."""
  c = b.c
  n = c.choice(SORT_LENGTHS)
  lead = (c.integer(1, 3),) if c.chance(0.4) else ()
  shape = lead + (n,) if c.chance(0.5) else (n,) + lead
  axis = shape.index(n)               # (the lead dims are shorter)
  dtype = c.choice(DTYPES)
  x = b.new_input(shape, dtype)
  op = c.choice(("sort", "argsort", "topk", "topk_index"))
  if op in ("sort", "argsort"):
    b.push(op, [x], shape, dtype if op == "sort" else "int32", axis=axis,
           descending=c.chance(0.5))
  else:
    k = c.choice((1, n // 2, n, c.integer(0, n)))
    new = tuple(k if i == axis else s for i, s in enumerate(shape))
    b.push(op, [x], new, dtype if op == "topk" else "int32", axis=axis, k=k,
           largest=c.chance(0.6))


def _grow_setitem_tensor(b, src: int):
  c = b.c
  x = _fit(b, src, lambda s, d: True, lambda: (fp.random_shape(c, 3) or (5,), c.choice(DTYPES)))
  shape, dtype = b.values[x]
  if not shape or 0 in shape:
    return
  axis = c.integer(0, len(shape) - 1)
  n = shape[axis]
  kind = c.choice(("slice", "list", "tensor"))
  params = dict(axis=axis, kind=kind)
  if kind == "slice":
    params["slice"] = (c.integer(0, n - 1), None, c.choice((1, 2, -1)))
    count = len(range(*slice(*params["slice"]).indices(n)))
  else:
    count = c.integer(1, 4)
    idtype = c.choice(INDEX_DTYPES) if kind == "tensor" else "int64"
    params["index"] = _idx_values(c, n, count, kind == "tensor", idtype)
    if kind == "tensor":
      params["index_dtype"] = idtype
    params.update(_form(c))
  sel = shape[:axis] + (count,) + shape[axis + 1:]
  vshape = tuple(1 if c.chance(0.3) else s for s in sel)[c.integer(0, len(sel)) if c.chance(0.3)
                                                          else 0:]
  value = b.new_input(vshape, dtype)
  b.push("setitem_tensor", [x, value], shape, dtype, **params)


def _form(c) -> dict:
  return {"form": "sorted"} if c.chance(0.5) else {}


def _grow_scatter_add_f(b, src: int):
  c = b.c
  x = _fit(b, src, lambda s, d: d in fp.FLOATS,
           lambda: (fp.random_shape(c, 3) or (5,), c.choice(fp.FLOATS)))
  shape, dtype = b.values[x]
  if not shape or 0 in shape:
    return
  axis = c.integer(0, len(shape) - 1)
  form = _form(c)
  ishape = tuple(c.integer(1, s) for s in shape[:axis]) + (c.integer(1, 40 if form else 4),) + \
    tuple(c.integer(1, s) for s in shape[axis + 1:])
  if prod(ishape) > fp.MAX_ELEMENTS:
    return
  idx = tuple(c.integer(0, shape[axis] - 1) for _ in range(prod(ishape)))
  srcv = b.new_input(tuple(s + (1 if c.chance(0.2) else 0) for s in ishape), dtype)
  b.push("scatter_add_f", [x, srcv], shape, dtype, axis=axis, index=idx, index_shape=ishape,
         **form)


def _grow_interp(b, src: int):
  c = b.c
  mode = c.choice(("nearest", "linear", "bilinear", "nearest"))
  spatial = {"linear": 1, "bilinear": 2}.get(mode) or c.integer(1, 3)
  shape = (c.integer(1, 2), c.integer(1, 2)) + tuple(c.integer(1, 5) for _ in range(spatial))
  dtype = c.choice(fp.FLOATS) if mode != "nearest" else c.choice(DTYPES)
  x = b.new_input(shape, dtype)
  params = dict(mode=mode)
  if c.chance(0.5):
    scale = tuple(c.choice(SCALES) for _ in range(spatial))
    size = tuple(int(np.floor(i * s)) for i, s in zip(shape[2:], scale))
    if 0 in size:
      return
    params["scale"] = scale
  else:
    size = tuple(c.integer(1, 7) for _ in range(spatial))
    params["size"] = size
  if mode != "nearest":
    params["align_corners"] = c.chance(0.5)
  out = shape[:2] + size
  if prod(out) <= fp.MAX_ELEMENTS:
    b.push("interp", [x], out, dtype, **params)


def _grow_pad(b, src: int, op: str):
  c = b.c
  x = _fit(b, src, lambda s, d: d in fp.FLOATS or op == "pad_constant",
           lambda: (fp.random_shape(c, 3) or (3,), c.choice(fp.FLOATS)))
  shape, dtype = b.values[x]
  if not shape or 0 in shape or (op != "pad_constant" and dtype not in fp.FLOATS):
    return
  pads = tuple((c.integer(0, 3), c.integer(0, 3)) for _ in shape)
  new = tuple(s + p + q for s, (p, q) in zip(shape, pads))
  if prod(new) > fp.MAX_ELEMENTS:
    return
  if op == "pad_constant":
    b.push(op, [x], new, dtype, pads=pads, value=fp._scalar_for(c, dtype))
  elif op == "pad_rg":
    b.push(op, [x], new, dtype, pads=pads, mode=c.choice(PAD_MODES))
  else:
    g = b.new_input(new, dtype)
    b.push(op, [x, g], shape, dtype, pads=pads, mode=c.choice(PAD_MODES))


def _grow_shape_more(b, src: int):
  c = b.c
  x = _fit(b, src, lambda s, d: True, lambda: (fp.random_shape(c, 3) or (4,), c.choice(DTYPES)))
  shape, dtype = b.values[x]
  if not shape or 0 in shape:
    return
  form = c.choice(("roll_none", "roll_axes", "split_sizes", "repeat_none"))
  if form == "roll_none":
    b.push("shape_more", [x], shape, dtype, form=form, shift=c.integer(-9, 9))
  elif form == "roll_axes":
    axes = tuple(c.integer(-len(shape), len(shape) - 1) for _ in range(c.integer(1, 3)))
    b.push("shape_more", [x], shape, dtype, form=form, axes=axes,
           shift=tuple(c.integer(-7, 7) for _ in axes))
  elif form == "split_sizes":
    axis = c.integer(0, len(shape) - 1)
    cuts = sorted(c.integer(0, shape[axis]) for _ in range(c.integer(0, 3)))
    sizes = tuple(e - s for s, e in zip([0] + cuts, cuts + [shape[axis]]))
    part = c.integer(0, len(sizes) - 1)
    out = shape[:axis] + (sizes[part],) + shape[axis + 1:]
    b.push("shape_more", [x], out, dtype, form=form, axis=axis, sizes=sizes, part=part)
  else:
    n = prod(shape)
    reps = c.integer(0, 2) if c.chance(0.5) else tuple(c.integer(0, 2) for _ in range(n))
    total = n * reps if isinstance(reps, int) else sum(reps)
    if total <= fp.MAX_ELEMENTS:
      b.push("shape_more", [x], (total,), dtype, form=form, repeats=reps)


GROWERS = {"take_fn": _grow_take_fn, "take_multi": _grow_take_multi,
           "loss_device": _grow_loss_device, "prob_device": _grow_prob_device,
           "take_mask": _grow_take_mask, "sdpa_wide": _grow_sdpa_wide, "scan_long": _grow_scan_long,
           "sort_long": _grow_sort_long, "setitem_tensor": _grow_setitem_tensor,
           "scatter_add_f": _grow_scatter_add_f, "interp": _grow_interp,
           "pad_constant": lambda b, s: _grow_pad(b, s, "pad_constant"),
           "pad_rg": lambda b, s: _grow_pad(b, s, "pad_rg"),
           "pad_grad": lambda b, s: _grow_pad(b, s, "pad_grad"),
           "shape_more": _grow_shape_more}


# ---- the oracle ------------------------------------------------------------------------------

def _arrays(x):
  return [x.a, np.broadcast_to(x.err, x.a.shape), np.broadcast_to(x.ok, x.a.shape)]


def _oval(parts, dtype):
  from fuzz_oracle import OVal
  a, err, ok = (np.asarray(p) for p in parts)
  return OVal(a.copy(), dtype, err.astype(np.float64), ok.astype(bool))


def _device_wrap(idx: np.ndarray, n: int) -> tuple:
  """Device indices: a negative one counts from the end once; (clamped, valid)."""
  w = np.where(idx < 0, idx + n, idx)
  valid = (w >= 0) & (w < n)
  return np.where(valid, w, 0), valid


def _index_of(step, xs):
  """(index values as int64 (object ints for uint64), whether they are device ones, its ok)."""
  if step.param("kind") == "ref":
    return xs[1].a.astype(np.int64), True, np.broadcast_to(xs[1].ok, xs[1].a.shape)
  values = [int(v) for v in step.param("index")]
  idx = np.array(values, dtype=object if max(values, default=0) >= 2 ** 63 else np.int64)
  return idx.reshape(step.param("index_shape")), step.param("kind") == "tensor", True


def _take_fn(step, xs):
  x, axis = xs[0], step.param("axis")
  parts = _arrays(x)
  if axis is None:
    parts, axis = [p.ravel() for p in parts], 0
  axis %= parts[0].ndim
  n = parts[0].shape[axis]
  idx, device, iok = _index_of(step, xs)
  if not device:
    return _oval([np.take(p, idx.astype(np.int64), axis) for p in parts], x.dtype)
  clamped, valid = _device_wrap(idx, n)
  out = [np.take(p, clamped.astype(np.int64), axis) for p in parts]
  along = (1,) * axis + idx.shape + (1,) * (parts[0].ndim - axis - 1)
  valid = valid.astype(bool).reshape(along)
  iok = np.broadcast_to(iok, idx.shape).reshape(along)
  a = np.where(valid, out[0], np.zeros((), out[0].dtype))
  return _oval([a, np.where(valid, out[1], 0.0), np.where(valid, out[2], True) & iok], x.dtype)


def _np_index(entries, shape, array):
  """numpy's index tuple for the entries (`array(entry, n)` makes each index array)."""
  out, axis = [], 0
  used = sum(1 for e in entries if e[0] in "ais")
  for e in entries:
    if e[0] == "n":
      out.append(None)
      continue
    if e[0] == "e":
      out.append(Ellipsis)
      axis += len(shape) - used
      continue
    n = shape[axis]
    out.append(array(e, n) if e[0] == "a" else e[1] if e[0] == "i" else slice(*e[1:]))
    axis += 1
  return tuple(out)


def _take_multi(step, xs):
  """numpy fancy indexing; device arrays: wrapped, and an out-of-range one reads 0 (the table
  padded with one zero element per such axis, the invalid index pointing there)."""
  x = xs[0]
  entries = step.param("entries")
  parts = _arrays(x)
  pads, axis = [(0, 0)] * x.a.ndim, 0
  used = sum(1 for e in entries if e[0] in "ais")
  for e in entries:
    if e[0] == "e":
      axis += x.a.ndim - used
    elif e[0] != "n":
      if e[0] == "a" and e[3]:
        pads[axis] = (0, 1)
      axis += 1

  def array(e, n):
    idx = np.array([int(v) for v in e[1]], dtype=object).reshape(e[2])
    if not e[3]:
      return idx.astype(np.int64)
    clamped, valid = _device_wrap(idx, n)
    return np.where(valid, clamped, n).astype(np.int64)

  index = _np_index(entries, x.a.shape, array)
  fills = (np.zeros((), parts[0].dtype), 0.0, True)
  out = [np.pad(p, pads, constant_values=f)[index] for p, f in zip(parts, fills)]
  return _oval(out, x.dtype)


def _take_mask(step, xs):
  x = xs[0]
  mask = np.array(step.param("mask"), bool) if step.param("mask") is not None else \
    xs[1].a.astype(bool)
  index = (slice(None),) * step.param("at") + (mask.reshape(step.param("mask_shape")),)
  return _oval([p[index] for p in _arrays(x)], x.dtype)


def _class_loss_t(step, xs):
  """nll_loss / cross_entropy with the computed target's values (fuzz_nn_ops' oracle), defined
  where the target is."""
  from fuzz_nn_ops import _class_loss
  from fuzz_programs import Step
  x, t, rest = xs[0], xs[1], xs[2:]
  params = dict(step.params)
  params.update(target=tuple(int(v) for v in t.a.ravel()), target_shape=t.a.shape)
  op = {"nll_loss_t": "nll_loss", "cross_entropy_t": "cross_entropy"}[step.op]
  out = _class_loss(Step(op, step.refs, tuple(params.items())), [x] + list(rest))
  tok = np.broadcast_to(t.ok, t.a.shape)
  out.ok = out.ok & (tok if step.param("reduction") == "none" else np.all(tok))
  return out


def _setitem_tensor(step, xs):
  from fuzz_oracle import round_to
  x, v = xs[0], xs[1]
  axis = step.param("axis")
  parts = [p.copy() for p in _arrays(x)]
  vparts = [round_to(v.a, x.dtype), np.broadcast_to(v.err, v.a.shape),
            np.broadcast_to(v.ok, v.a.shape)]
  lead = (slice(None),) * axis
  if step.param("kind") == "slice":
    index = lead + (slice(*step.param("slice")),)
    for p, q in zip(parts, vparts):
      p[index] = q
    return _oval(parts, x.dtype)
  n = x.a.shape[axis]
  idx = [int(i) for i in step.param("index")]
  sel = x.a.shape[:axis] + (len(idx),) + x.a.shape[axis + 1:]
  vparts = [np.broadcast_to(q, sel) for q in vparts]
  for j, i in enumerate(idx):            # in order: the last duplicate wins
    if step.param("kind") == "tensor":
      i = i + n if i < 0 else i
      if not 0 <= i < n:
        continue
    for p, q in zip(parts, vparts):
      p[lead + (i,)] = q[lead + (j,)]
  return _oval(parts, x.dtype)


def _scatter_add_f(step, xs):
  """torch's scatter_add: each hit element + the sum of its sources (the sum's bound as the
  gather gradient's); elements no index hits stay as they are."""
  from fuzz_ops_models import _gather_grad
  from fuzz_oracle import FMAX, OVal, round_to, ulp
  x, s = xs[0], xs[1]
  ishape = step.param("index_shape")
  cut = tuple(slice(0, k) for k in ishape)
  g = OVal(s.a[cut], s.dtype, np.broadcast_to(s.err, s.a.shape)[cut],
           np.broadcast_to(s.ok, s.a.shape)[cut])
  total = _gather_grad(x, g, step)
  hit = np.zeros(x.a.shape, bool)
  coords = list(np.indices(ishape))
  coords[step.param("axis")] = np.array(step.param("index")).reshape(ishape)
  hit[tuple(coords)] = True
  xa = round_to(x.a, x.dtype).astype(np.float64)
  with np.errstate(all="ignore"):
    r = round_to(xa + total.a.astype(np.float64), x.dtype)
  err = np.broadcast_to(x.err, x.a.shape) + total.err + ulp(r, x.dtype)
  fine = np.isfinite(xa) & (np.abs(xa) + np.abs(total.a.astype(np.float64)) < FMAX[x.dtype] / 2)
  ok = np.broadcast_to(x.ok, x.a.shape) & np.where(hit, total.ok & fine, True)
  return _oval([np.where(hit, r, x.a), np.where(hit, err, np.broadcast_to(x.err, x.a.shape)), ok],
               x.dtype)


def _scale_of(n_in, n_out, scale, align):
  if align:
    return np.float32((n_in - 1) / (n_out - 1)) if n_out > 1 else np.float32(0)
  return np.float32(1.0 / scale) if scale else np.float32(n_in) / np.float32(n_out)


def _nearest_sources(n_in, n_out, scale):
  """torch's legacy nearest: src = min(floor(dst * s), in - 1), s in float32."""
  s = _scale_of(n_in, n_out, scale, False)
  d = np.arange(n_out, dtype=np.float32)
  return np.minimum(np.floor(d * s).astype(np.int64), n_in - 1)


def _linear_weights(n_in, n_out, scale, align):
  """torch's linear weights (float32 coordinates) as an (out, in) matrix, and the two
  neighbours each output reads."""
  s = _scale_of(n_in, n_out, scale, align)
  d = np.arange(n_out, dtype=np.float32)
  src = s * d if align else np.maximum(s * (d + np.float32(0.5)) - np.float32(0.5),
                                       np.float32(0))
  i0 = src.astype(np.int64)
  i1 = np.where(i0 < n_in - 1, i0 + 1, i0)
  lam = src - i0.astype(np.float32)
  m, reads = np.zeros((n_out, n_in)), np.zeros((n_out, n_in), np.int64)
  np.add.at(m, (np.arange(n_out), i0), (np.float32(1) - lam).astype(np.float64))
  np.add.at(m, (np.arange(n_out), i1), lam.astype(np.float64))
  reads[np.arange(n_out), i0] = reads[np.arange(n_out), i1] = 1
  return m, reads


def _interp(step, xs):
  from fuzz_oracle import U, round_to, ulp, work_dtype
  from fuzz_oracle_ops import _out
  x = xs[0]
  mode, spatial = step.param("mode"), x.a.ndim - 2
  scale = step.param("scale") or (None,) * spatial
  size = step.param("size") or tuple(int(np.floor(i * s)) for i, s in zip(x.a.shape[2:], scale))
  if mode == "nearest":
    parts = _arrays(x)
    for k in range(spatial - 1, -1, -1):
      src = _nearest_sources(x.a.shape[2 + k], size[k], scale[k])
      parts = [np.take(p, src, 2 + k) for p in parts]
    return _oval(parts, x.dtype)
  u = U[work_dtype(x.dtype)]
  a = round_to(x.a, x.dtype).astype(np.float64)
  finite = np.isfinite(a)
  y, e = np.where(finite, a, 0.0), np.broadcast_to(x.err, a.shape).astype(np.float64)
  bad = (~(np.broadcast_to(x.ok, a.shape) & finite)).astype(np.int64)
  for k in range(spatial - 1, -1, -1):
    ax = 2 + k
    m, reads = _linear_weights(x.a.shape[ax], size[k], scale[k], step.param("align_corners"))
    mv = lambda arr, mat: np.moveaxis(np.moveaxis(arr, ax, -1) @ mat.T, -1, ax)
    t = mv(np.abs(y), m)
    y, e = mv(y, m), mv(e, m) + (m.shape[1] + 1) * u * t
    bad = mv(bad, reads)
  r = round_to(y, x.dtype)
  return _out(r, x.dtype, e + ulp(r, x.dtype), bad == 0)


def _pad_constant(step, xs):
  from fuzz_oracle import round_to
  x = xs[0]
  a, err, ok = _arrays(x)
  value = round_to(np.asarray(step.param("value")), x.dtype)
  pads = step.param("pads")
  return _oval([np.pad(a, pads, constant_values=value), np.pad(err, pads),
                np.pad(ok, pads, constant_values=True)], x.dtype)


def _pad_rg(step, xs):
  x = xs[0]
  return _oval([np.pad(p, step.param("pads"), mode=step.param("mode")) for p in _arrays(x)],
               x.dtype)


def _pad_grad(step, xs):
  """The gradient of a mode pad: each input element gets the sum of g over the positions that
  read it (numpy.pad of the positions says which). The pad of a leaf is a cat of views, whose
  gradients autograd adds up in the dtype (as torch accumulates): each add rounds in it (fuzz
  seed 327: bfloat16 1.4375 + 0.0898 - 1.5 is 0.03125, not 0.02734)."""
  from fuzz_oracle import FMAX, U, round_to, ulp, zero_sign
  from fuzz_oracle_ops import _out
  x, g = xs[0], xs[1]
  sources = [np.pad(np.arange(n), pq, mode=step.param("mode"))
             for n, pq in zip(x.a.shape, step.param("pads"))]
  where = np.ix_(*sources)
  gv = round_to(g.a, g.dtype).astype(np.float64)
  finite = np.where(np.isfinite(gv), np.abs(gv), 0.0)
  total, mag, err, count = (np.zeros(x.a.shape) for _ in range(4))
  bad = np.zeros(x.a.shape, bool)
  for arr, part in ((total, gv), (mag, finite), (err, np.broadcast_to(g.err, gv.shape)),
                    (count, np.ones(gv.shape)), (bad, ~np.broadcast_to(g.ok, gv.shape))):
    np.add.at(arr, where, part)
  r = round_to(total, x.dtype)
  err = err + count * U[x.dtype] * mag
  return _out(r, x.dtype, err + ulp(r, x.dtype) + zero_sign(r), ~bad & (mag < FMAX[x.dtype] / 2))


def _shape_more(step, xs):
  form = step.param("form")
  if form == "roll_none":
    fn = lambda a: np.roll(a, step.param("shift"))
  elif form == "roll_axes":
    fn = lambda a: np.roll(a, step.param("shift"), step.param("axes"))
  elif form == "split_sizes":
    cuts = np.cumsum(step.param("sizes"))[:-1]
    fn = lambda a: np.split(a, cuts, step.param("axis"))[step.param("part")]
  else:
    fn = lambda a: np.repeat(a, step.param("repeats"))
  return _oval([fn(p) for p in _arrays(xs[0])], xs[0].dtype)


ORACLE = {"take_fn": _take_fn, "take_multi": _take_multi, "take_mask": _take_mask,
          "nll_loss_t": _class_loss_t,
          "cross_entropy_t": _class_loss_t, "setitem_tensor": _setitem_tensor,
          "scatter_add_f": _scatter_add_f, "interp": _interp, "pad_constant": _pad_constant,
          "pad_rg": _pad_rg, "pad_grad": _pad_grad, "shape_more": _shape_more}


# ---- kernelgen -------------------------------------------------------------------------------

def _host_or_device(step, like, values, shape, device: bool, dtype: str):
  from kernelgen import Tensor
  if not device:
    if step.param("kind") == "numpy":
      return np.array(values, np.int64).reshape(shape)
    return int(values[0]) if shape == () else np.array(values).reshape(shape).tolist()
  return Tensor(np.array([int(v) for v in values], dtype).reshape(shape), device=like.device)


def _build_take_fn(step, xs):
  import kernelgen as kg
  x = xs[0]
  if step.param("kind") == "ref":
    idx = xs[1]
  else:
    idx = _host_or_device(step, x, step.param("index"), step.param("index_shape"),
                          step.param("kind") == "tensor", step.param("index_dtype", "int64"))
  if step.param("method"):
    return x.take(idx, axis=step.param("axis"))
  return kg.take(x, idx, axis=step.param("axis"))


def _build_take_multi(step, xs):
  from kernelgen import Tensor
  x = xs[0]
  index = []
  for e in step.param("entries"):
    if e[0] == "a":
      values = np.array([int(v) for v in e[1]], e[4] if e[3] else np.int64).reshape(e[2])
      index.append(Tensor(values, device=x.device) if e[3] else values.tolist()
                   if len(e[2]) == 1 else values)
    else:
      index.append({"n": None, "e": Ellipsis}.get(e[0]) if e[0] in "ne" else
                   e[1] if e[0] == "i" else slice(*e[1:]))
  return x[tuple(index)]


def _build_take_mask(step, xs):
  from kernelgen import Tensor
  x = xs[0]
  if step.param("mask") is not None:
    mask = np.array(step.param("mask"), bool).reshape(step.param("mask_shape"))
    mask = Tensor(mask, device=x.device) if step.param("at") % 2 else mask
  else:
    mask = xs[1].realize()
  return x[(slice(None),) * step.param("at") + (mask,)]


def _build_loss_t(step, xs):
  x, t = xs[0], xs[1]
  w = xs[2] if step.param("weight") else None
  kw = dict(reduction=step.param("reduction"), ignore_index=step.param("ignore_index"))
  if step.op == "nll_loss_t":
    return x.nll_loss(t, w, **kw)
  return x.cross_entropy(t, w, label_smoothing=step.param("label_smoothing"), **kw)


def _build_setitem_tensor(step, xs):
  from kernelgen import Tensor
  from kernelgen.tensor.ops.sorted_scatter import forced_form
  x = xs[0]
  y = Tensor(x.node)            # a new Tensor object: setitem must not change x itself
  axis = step.param("axis")
  lead = (slice(None),) * axis
  if step.param("kind") == "slice":
    index = slice(*step.param("slice"))
  else:
    index = _host_or_device(step, x, step.param("index"), (len(step.param("index")),),
                            step.param("kind") == "tensor", step.param("index_dtype", "int64"))
  with forced_form(step.param("form")):
    y[lead + (index,)] = xs[1]
  return y


def _build_scatter_add_f(step, xs):
  from kernelgen import Tensor
  from kernelgen.tensor.ops.sorted_scatter import forced_form
  idx = Tensor(list(step.param("index")), dtype="int32", device=xs[0].device)
  with forced_form(step.param("form")):
    return xs[0].scatter_add(step.param("axis"), idx.reshape(step.param("index_shape")), xs[1])


def _build_interp(step, xs):
  scale, size = step.param("scale"), step.param("size")
  if scale:             # one spatial dim: a number, as torch users write it
    kw = dict(scale_factor=scale[0] if len(scale) == 1 else scale)
  else:
    kw = dict(size=size[0] if len(size) == 1 else size)
  return xs[0].interpolate(mode=step.param("mode"), align_corners=step.param("align_corners"),
                           **kw)


def _build_pad(step, xs):
  from kernelgen import Tensor
  if step.op == "pad_constant":
    return xs[0].pad(step.param("pads"), value=step.param("value"), mode="constant")
  leaf = Tensor(xs[0].node, requires_grad=True)
  out = leaf.pad(step.param("pads"), mode=step.param("mode"))
  if step.op == "pad_rg":
    return out.detach()
  out.backward(xs[1])
  return leaf.grad


def _build_shape_more(step, xs):
  x, form = xs[0], step.param("form")
  if form == "roll_none":
    return x.roll(step.param("shift"))
  if form == "roll_axes":
    return x.roll(step.param("shift"), step.param("axes"))
  if form == "split_sizes":
    return x.split(list(step.param("sizes")), step.param("axis"))[step.param("part")]
  reps = step.param("repeats")
  return x.repeat_interleave(reps if isinstance(reps, int) else list(reps))


BUILD = {"take_fn": _build_take_fn, "take_multi": _build_take_multi,
         "take_mask": _build_take_mask,
         "nll_loss_t": _build_loss_t, "cross_entropy_t": _build_loss_t,
         "setitem_tensor": _build_setitem_tensor, "scatter_add_f": _build_scatter_add_f,
         "interp": _build_interp, "pad_constant": _build_pad, "pad_rg": _build_pad,
         "pad_grad": _build_pad, "shape_more": _build_shape_more}
