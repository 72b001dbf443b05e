"""Random tensor programs for differential fuzzing: generated, printed, replayed and shrunk.

A program is data: a list of steps, each reading earlier values by index and producing one
new value; the output is the last step that is not an input.

    v0 = input(shape=(3, 1), dtype='float32', seed=7, special=0.3)
    v1 = input(shape=(5,), dtype='int8', seed=2, special=0.0)
    v2 = add(v0, v1)
    v3 = sum(v2, axes=(1,), keepdim=False)

The generator is written against a tiny `Chooser` (integer / choice / chance), so one function
makes programs from a seeded random stream (`./build.sh fuzz`: every failure has a seed), from
hypothesis draws (hypothesis shrinks them), or from a recorded choice list (our own shrinker in
fuzz_runner.py replays shortened lists). Choice 0 is always the simplest option.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64")
FLOATS = ("float16", "bfloat16", "float32", "float64")
ITEMSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2,
            "bfloat16": 2, "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8,
            "float64": 8}
DIMS = (1, 3, 2, 5, 4, 7, 1, 6)      # sizes a dim is drawn from (0 -> 1: simplest first)
MAX_ELEMENTS = 240                   # keeps the reference interpreter quick

# ---- op groups (the generator's vocabulary) ---------------------------------------------------
UNARY_FLOAT = ("neg", "abs", "relu", "sqrt", "exp", "exp2", "log", "log2", "sin", "cos",
               "reciprocal", "sigmoid", "tanh")
UNARY_INT = ("neg", "abs", "invert")
BINARY_NUMERIC = ("add", "sub", "mul", "maximum", "minimum", "truediv")
BINARY_INT = ("floordiv", "mod", "and", "or", "xor", "lshift", "rshift")
BINARY_BOOL = ("and", "or", "xor")
COMPARE = ("lt", "eq", "ne")
REDUCE = ("sum", "max", "min", "mean", "argmax", "argmin", "prod", "var")
ARG_REDUCE = ("argmax", "argmin")
EMPTY_OK = ("sum", "prod")           # reductions defined over an axis of size 0
MOVEMENT = ("reshape", "permute", "pad", "shrink", "flip", "slice", "expand")
JOIN = ("cat", "stack")
# where an input's values come from: a numpy array (the default), a Python list, or a creation
# function (`empty`: unwritten, its values are not compared; `rand`/`randn`: kernelgen's hash)
SOURCES = ("numpy", "list", "zeros", "ones", "full", "eye", "arange", "rand", "randn", "empty",
           "linspace")
ARANGE_STARTS, ARANGE_STEPS = (0, -3, 5), (1, 2, -1)
ARANGE_FLOAT_STEPS = (1.0, 0.5, -1.0, 0.25)
LINSPACE_STARTS, LINSPACE_STOPS = (0.0, -1.5, 2.0, 0.1), (1.0, 5.0, -3.25, 0.3)


@dataclass(frozen=True)
class Step:
  op: str                   # "input" (params shape, dtype, seed, special) or an op name
  refs: tuple[int, ...]     # indices of the earlier values it reads
  params: tuple = ()        # op parameters as (name, value) pairs

  def param(self, name: str, default=None):
    return dict(self.params).get(name, default)

  def __str__(self) -> str:
    args = [f"v{r}" for r in self.refs] + [f"{k}={v!r}" for k, v in self.params]
    return f"{self.op}({', '.join(args)})"


@dataclass(frozen=True)
class Program:
  """Steps in order; value i is the result of step i; the last value is the output. An input
  step's values come from numpy's RNG(seed), with a `special` fraction of edge values (0, -0.0,
  NaN, +-inf, denormals, integer extremes)."""
  steps: tuple[Step, ...]

  def __str__(self) -> str:
    return "\n".join(f"v{i} = {s}" for i, s in enumerate(self.steps))

  @property
  def output(self) -> int:
    computed = [i for i, s in enumerate(self.steps) if s.op != "input"]
    return computed[-1] if computed else len(self.steps) - 1

  def pruned(self) -> Program:
    """The same program without the steps the output does not depend on."""
    live = {self.output}
    for i in range(self.output, -1, -1):
      if i in live:
        live.update(self.steps[i].refs)
    keep = sorted(live)
    index = {old: new for new, old in enumerate(keep)}
    return Program(tuple(Step(self.steps[i].op, tuple(index[r] for r in self.steps[i].refs),
                              self.steps[i].params) for i in keep))

  def ops(self) -> set[str]:
    return {s.op for s in self.steps}

  def dtypes(self) -> set[str]:
    keys = ("dtype", "target_dtype", "index_dtype")
    return {s.param(k) for s in self.steps for k in keys} - {None}


# ---- choosers ---------------------------------------------------------------------------------

class Chooser:
  """The source of every decision; subclasses give `integer(lo, hi)` (inclusive)."""

  def integer(self, lo: int, hi: int) -> int:
    raise NotImplementedError

  def choice(self, options):
    return options[self.integer(0, len(options) - 1)]

  def chance(self, p: float) -> bool:
    return self.integer(0, 999) >= 1000 - int(p * 1000)


class RandomChooser(Chooser):
  """Seeded decisions, recorded in `.choices` so the shrinker can replay and shorten them."""

  def __init__(self, seed: int):
    self.rng, self.choices = random.Random(seed), []

  def integer(self, lo: int, hi: int) -> int:
    value = self.rng.randint(lo, hi)
    self.choices.append(value - lo)
    return value


class ReplayChooser(Chooser):
  """Replays recorded choices (clamped to the range asked); 0 (simplest) once they run out."""

  def __init__(self, choices: list[int]):
    self.choices, self.at = list(choices), 0

  def integer(self, lo: int, hi: int) -> int:
    offset = self.choices[self.at] if self.at < len(self.choices) else 0
    self.at += 1
    return lo + min(max(offset, 0), hi - lo)


class HypothesisChooser(Chooser):
  """Decisions drawn from hypothesis, which then shrinks failing programs itself."""

  def __init__(self, draw):
    self.draw = draw

  def integer(self, lo: int, hi: int) -> int:
    from hypothesis import strategies as st
    return self.draw(st.integers(lo, hi))


# ---- shapes -------------------------------------------------------------------------------------

def _numel(shape) -> int:
  n = 1
  for s in shape:
    n *= s
  return n


def random_shape(c: Chooser, max_rank: int = 4) -> tuple[int, ...]:
  rank = c.integer(0, max_rank)
  shape = []
  for _ in range(rank):
    dim = c.choice(DIMS)
    dim = 0 if c.chance(0.02) else dim            # zero-size dims, now and then
    if _numel(shape) * dim <= MAX_ELEMENTS:
      shape.append(dim)
  return tuple(shape)


def broadcast_partner(c: Chooser, shape) -> tuple[int, ...]:
  """A shape that broadcasts with `shape`: some dims become 1, some leading dims dropped."""
  drop = c.integer(0, len(shape)) if c.chance(0.3) else 0
  out = [1 if c.chance(0.3) else s for s in shape[drop:]]
  if c.chance(0.15) and _numel(shape) * 3 <= MAX_ELEMENTS:
    out = [3] + ([1] * len(shape) if shape and c.chance(0.5) else list(shape))
  return tuple(out)


def _factorize(c: Chooser, n: int) -> tuple[int, ...]:
  """A random shape with n elements (for reshape)."""
  if n == 0:
    return c.choice(((0,), (2, 0), (0, 3), (1, 0, 2)))
  dims, left = [], n
  for p in (2, 3, 5, 7):
    while left % p == 0 and c.chance(0.7):
      dims.append(p)
      left //= p
  dims.append(left)
  out: list[int] = []
  for d in dims:
    if out and c.chance(0.4):
      out[-1] *= d
    else:
      out.append(d)
  if c.chance(0.3):
    out.insert(c.integer(0, len(out)), 1)
  return tuple(out) if n != 1 or c.chance(0.5) else ()


# ---- the generator ------------------------------------------------------------------------------

class _Builder:
  """Grows a program: `values` holds each value's (shape, dtype); `push` appends a step."""

  def __init__(self, c: Chooser):
    self.c, self.steps, self.values = c, [], []

  def new_input(self, shape, dtype, source: str | None = None) -> int:
    c = self.c
    special = c.choice((0.0, 0.1, 0.3, 1.0)) if c.chance(0.7) else 0.0
    params = dict(shape=tuple(shape), dtype=dtype, seed=c.integer(0, 9999), special=special)
    source = source or (c.choice(SOURCES) if c.chance(0.4) else "numpy")
    if source == "arange":
      params["start"] = c.choice(ARANGE_STARTS)
      params["step"] = c.choice(ARANGE_FLOAT_STEPS if dtype in FLOATS else ARANGE_STEPS)
    if source == "linspace":
      params.update(_linspace_params(c, _numel(shape), dtype))
    if source != "numpy":     # (a numpy input prints as before: old programs replay unchanged)
      params["source"] = source
    return self.push("input", [], shape, dtype, **params)

  def push(self, op: str, refs, out_shape, out_dtype, **params) -> int:
    self.steps.append(Step(op, tuple(refs), tuple(params.items())))
    self.values.append((tuple(out_shape), out_dtype))
    return len(self.values) - 1

  def program(self) -> Program:
    return Program(tuple(self.steps))


def _linspace_params(c: Chooser, n: int, dtype: str) -> dict:
  """start, stop and endpoint of a linspace input of n values: for int and bool dtypes an
  integer step (the values exact), for floats any of a few."""
  endpoint = c.chance(0.7)
  if dtype in FLOATS:
    return dict(start=c.choice(LINSPACE_STARTS), stop=c.choice(LINSPACE_STOPS), endpoint=endpoint)
  start, by = c.choice(ARANGE_STARTS), c.choice(ARANGE_STEPS + (0,))
  return dict(start=start, stop=start + by * ((n - 1) if endpoint else n), endpoint=endpoint)


def generate(c: Chooser, max_steps: int = 6) -> Program:
  """A random valid program (every shape and dtype checked while it is built)."""
  b = _Builder(c)
  b.new_input(random_shape(c), c.choice(("float32",) + DTYPES))
  for _ in range(c.integer(1, max_steps)):
    src = len(b.values) - 1 if c.chance(0.75) else c.integer(0, len(b.values) - 1)
    kind = c.choice(("unary", "binary", "binary", "cast", "movement", "movement", "reduce",
                     "compare", "where", "matmul", "bitcast", "join", "pow", "softmax",
                     "conv2d", "zero", "scan_sort", "model", "nn", "scatter"))
    GROW[kind](b, src)
  return b.program()


def _operand(b: _Builder, src: int, want: str | None = None):
  """Another operand for a binary op on `src`: an old value, a new input, or a Python scalar."""
  c = b.c
  shape, dtype = b.values[src]
  if c.chance(0.2) and want != "int_only":
    return ("scalar", _scalar_for(c, dtype))
  candidates = [i for i, (s, _) in enumerate(b.values) if i != src and _broadcasts(s, shape)]
  if candidates and c.chance(0.3):
    return ("ref", c.choice(candidates))
  other = dtype if c.chance(0.6) else c.choice(DTYPES)
  if want == "int_only" and other not in DTYPES[1:9]:
    other = dtype
  return ("ref", b.new_input(broadcast_partner(c, shape), other))


def _scalar_for(c: Chooser, dtype: str):
  if dtype in FLOATS and c.chance(0.5):
    return c.choice((2.0, 0.5, -1.5, 3.0))
  return c.choice((2, 1, 3, 0)) if dtype != "bool" else c.choice((1, 2))


def _broadcasts(a, b) -> bool:
  return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a), reversed(b)))


def _shape_of_binary(a, b) -> tuple[int, ...]:
  n = max(len(a), len(b))
  a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
  return tuple(x if y == 1 else y for x, y in zip(a, b))     # 1 broadcasts, even against 0


def _grow_unary(b: _Builder, src: int):
  shape, dtype = b.values[src]
  if dtype == "bool":
    b.push("invert", [src], shape, dtype)
  elif dtype in FLOATS or b.c.chance(0.4):
    op = b.c.choice(UNARY_FLOAT)
    out = dtype if op in ("neg", "abs", "relu") else float_of(dtype)
    b.push(op, [src], shape, out)
  else:
    b.push(b.c.choice(UNARY_INT), [src], shape, dtype)


def _grow_binary(b: _Builder, src: int, ops=None):
  shape, dtype = b.values[src]
  c = b.c
  if dtype == "bool":
    ops = ops or BINARY_BOOL
  int_op = ops is None and dtype not in FLOATS and c.chance(0.4)
  ops = ops or (BINARY_INT if int_op else BINARY_NUMERIC)
  op = c.choice(ops)
  kind, other = _operand(b, src, "int_only" if int_op else None)
  if kind == "scalar":
    out = result_dtype(dtype, other)
    out = float_of(out) if op == "truediv" else out
    if out == "bool" and op not in BINARY_BOOL + COMPARE:
      return
    reverse = c.chance(0.3)
    b.push(op, [src], shape, "bool" if op in COMPARE else out, scalar=other, reverse=reverse)
    return
  oshape, odtype = b.values[other]
  out = result_dtype(dtype, odtype)
  if op in BINARY_INT and out not in DTYPES[:9] or out == "bool" and op not in BINARY_BOOL + \
     COMPARE or op in BINARY_INT and "bool" in (dtype, odtype) and op not in BINARY_BOOL:
    return
  out = float_of(out) if op == "truediv" else out
  b.push(op, [src, other], _shape_of_binary(shape, oshape), "bool" if op in COMPARE else out)


def _grow_compare(b: _Builder, src: int):
  _grow_binary(b, src, COMPARE)


def _grow_where(b: _Builder, src: int):
  shape, dtype = b.values[src]
  c = b.c
  conds = [i for i, (s, d) in enumerate(b.values) if d == "bool" and _broadcasts(s, shape)]
  cond = c.choice(conds) if conds and c.chance(0.6) else \
    b.new_input(broadcast_partner(c, shape), "bool")
  kind, other = _operand(b, src)
  if kind == "scalar":
    out = result_dtype(dtype, other)
    cshape = _shape_of_binary(b.values[cond][0], shape)
    b.push("where", [cond, src], cshape, out, scalar=other)
    return
  (cs, _), (os_, od) = b.values[cond], b.values[other]
  if not _broadcasts(cs, os_) or not _broadcasts(_shape_of_binary(cs, shape), os_):
    return
  out_shape = _shape_of_binary(_shape_of_binary(cs, shape), os_)
  b.push("where", [cond, src, other], out_shape, result_dtype(dtype, od))


def _grow_cast(b: _Builder, src: int):
  shape, _ = b.values[src]
  to = b.c.choice(DTYPES)
  b.push("cast", [src], shape, to, dtype=to)


def _grow_bitcast(b: _Builder, src: int):
  shape, dtype = b.values[src]
  same = [d for d in DTYPES if ITEMSIZE[d] == ITEMSIZE[dtype] and d not in (dtype, "bool")]
  if dtype == "bool" or not same:
    return
  to = b.c.choice(same)
  b.push("bitcast", [src], shape, to, dtype=to)


def _grow_movement(b: _Builder, src: int):
  shape, dtype = b.values[src]
  c = b.c
  op = c.choice(MOVEMENT)
  if op == "reshape":
    new = _factorize(c, _numel(shape))
    b.push("reshape", [src], new, dtype, shape=new)
  elif op == "permute" and len(shape) > 1:
    order = list(range(len(shape)))
    _shuffle(c, order)
    b.push("permute", [src], tuple(shape[i] for i in order), dtype, order=tuple(order))
  elif op == "pad" and shape:
    pads = tuple((c.integer(0, 2), c.integer(0, 2)) if c.chance(0.6) else (0, 0) for _ in shape)
    new = tuple(s + p + q for s, (p, q) in zip(shape, pads))
    if _numel(new) <= MAX_ELEMENTS:
      b.push("pad", [src], new, dtype, pads=pads)
  elif op == "expand":
    _grow_expand(b, src)
  elif op in ("shrink", "slice") and 0 in shape:
    return
  elif op == "shrink" and shape:
    bounds = tuple(_bounds(c, s) for s in shape)
    b.push("shrink", [src], tuple(e - s for s, e in bounds), dtype, bounds=bounds)
  elif op == "flip" and shape:
    axes = tuple(i for i in range(len(shape)) if c.chance(0.5)) or (0,)
    b.push("flip", [src], shape, dtype, axes=axes)
  elif op == "slice" and shape:
    axis = c.integer(0, len(shape) - 1)
    start, stop, step = c.integer(0, shape[axis] - 1), None, c.choice((2, -1, 3, -2, 1))
    sl = (start, stop, step) if step > 0 else (None, None, step)
    new = list(shape)
    new[axis] = len(range(*slice(*sl).indices(shape[axis])))
    b.push("slice", [src], tuple(new), dtype, axis=axis, slice=sl)


def _grow_expand(b: _Builder, src: int):
  shape, dtype = b.values[src]
  c = b.c
  new = tuple(c.choice((2, 3, 4)) if s == 1 and c.chance(0.6) else s for s in shape)
  new = ((c.choice((2, 3)),) if c.chance(0.3) else ()) + new
  if new != tuple(shape) and _numel(new) <= MAX_ELEMENTS:
    b.push("expand", [src], new, dtype, shape=new)


def _grow_join(b: _Builder, src: int):
  """cat with a value that differs in one dim, or stack with one of the same shape."""
  shape, dtype = b.values[src]
  c = b.c
  op = c.choice(JOIN)
  other_dtype = dtype if c.chance(0.7) else c.choice(DTYPES)
  out_dtype = result_dtype(dtype, other_dtype)
  if op == "cat" and shape:
    axis = c.integer(0, len(shape) - 1)
    other_shape = list(shape)
    other_shape[axis] = c.choice((1, 2, 3, 0))
    new = list(shape)
    new[axis] += other_shape[axis]
    other = b.new_input(tuple(other_shape), other_dtype)
    if _numel(new) <= MAX_ELEMENTS:
      b.push("cat", [src, other], tuple(new), out_dtype, axis=axis)
  elif op == "stack" and _numel(shape) * 2 <= MAX_ELEMENTS:
    axis = c.integer(0, len(shape))
    other = b.new_input(tuple(shape), other_dtype)
    new = tuple(shape[:axis]) + (2,) + tuple(shape[axis:])
    b.push("stack", [src, other], new, out_dtype, axis=axis)


def _grow_pow(b: _Builder, src: int):
  """x ** scalar (ints: a small non-negative int, exact), or float x ** float tensor."""
  shape, dtype = b.values[src]
  c = b.c
  if dtype == "bool":
    return
  if dtype not in FLOATS:
    b.push("pow", [src], shape, dtype, scalar=c.choice((2, 0, 1, 3)), reverse=False)
  elif c.chance(0.6):
    b.push("pow", [src], shape, dtype, scalar=c.choice((2.0, 0.5, 3.0, -1.0, -1.5, 0.0)),
           reverse=False)
  else:
    other = b.new_input(broadcast_partner(c, shape), dtype)
    b.push("pow", [src, other], _shape_of_binary(shape, b.values[other][0]), dtype)


def _grow_softmax(b: _Builder, src: int):
  shape, dtype = b.values[src]
  if shape and dtype in FLOATS and 0 not in shape:
    b.push("softmax", [src], shape, dtype, axis=b.c.integer(0, len(shape) - 1))


def _grow_zero(b: _Builder, src: int):
  """x - x, x * 0 or x + -x of a float value, often then divided by: zeros a shader compiler may
  fold to 0 (IEEE gives NaN for inf and NaN x), and a division by a zero it knows of."""
  shape, dtype = b.values[src]
  c = b.c
  if dtype not in FLOATS:
    return
  form = c.choice(("sub", "mul", "add"))
  if form == "sub":
    zero = b.push("sub", [src, src], shape, dtype)
  elif form == "mul":
    zero = b.push("mul", [src], shape, dtype, scalar=c.choice((0.0, -0.0)), reverse=c.chance(0.5))
  else:
    zero = b.push("add", [src, b.push("neg", [src], shape, dtype)], shape, dtype)
  if c.chance(0.7):
    b.push("truediv", [src, zero], shape, dtype)


def _grow_conv2d(b: _Builder, src: int):
  """conv2d of a 4-d float value (NCHW) with a new OIHW weight of its dtype."""
  shape, dtype = b.values[src]
  c = b.c
  if len(shape) != 4 or dtype not in FLOATS or 0 in shape:
    shape, dtype = (c.choice((1, 2)), c.choice((1, 3, 2)), c.choice((5, 4, 3)), c.choice((5, 6, 3))), \
      c.choice(FLOATS)
    src = b.new_input(shape, dtype)
  n, ch, h, w = shape
  stride, padding = c.choice((1, 2)), c.choice((0, 1))
  kh, kw = c.integer(1, min(3, h + 2 * padding)), c.integer(1, min(3, w + 2 * padding))
  o = c.choice((1, 2, 3))
  oh, ow = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
  weight = b.new_input((o, ch, kh, kw), dtype)
  if n * o * oh * ow <= MAX_ELEMENTS:
    b.push("conv2d", [src, weight], (n, o, oh, ow), dtype, stride=stride, padding=padding)


def _shuffle(c: Chooser, order: list):
  for i in range(len(order) - 1, 0, -1):
    j = c.integer(0, i)
    order[i], order[j] = order[j], order[i]


def _bounds(c: Chooser, size: int) -> tuple[int, int]:
  start = c.integer(0, size - 1) if c.chance(0.5) else 0
  return start, c.integer(start + 1, size)


def _grow_reduce(b: _Builder, src: int):
  shape, dtype = b.values[src]
  c = b.c
  if not shape:
    return
  op = c.choice(REDUCE)
  if op in ARG_REDUCE:
    axes = (c.integer(0, len(shape) - 1),)
  else:
    axes = tuple(i for i in range(len(shape)) if c.chance(0.5)) or (len(shape) - 1,)
  if op not in EMPTY_OK and any(shape[a] == 0 for a in axes):
    op = "sum"
  keep = c.chance(0.5)
  new = tuple(1 if i in axes else s for i, s in enumerate(shape) if keep or i not in axes)
  out = {"sum": acc_dtype(dtype), "prod": acc_dtype(dtype), "mean": mean_dtype(dtype),
         "var": mean_dtype(dtype), "argmax": "int32", "argmin": "int32"}.get(op, dtype)
  extra = {"ddof": c.choice((0, 1))} if op == "var" else {}
  b.push(op, [src], new, out, axes=axes, keepdim=keep, **extra)


def _grow_matmul(b: _Builder, src: int):
  shape, dtype = b.values[src]
  c = b.c
  if not shape or dtype == "bool":
    return
  k, m = shape[-1], c.choice((1, 3, 2, 5, 4))
  rhs_shape = (k, m) if len(shape) == 1 or c.chance(0.6) else (k,)
  other = b.new_input(rhs_shape, dtype if c.chance(0.7) else c.choice(DTYPES[1:]))
  out_dtype = result_dtype(dtype, b.values[other][1])
  out_shape = tuple(shape[:-1]) + tuple(rhs_shape[1:])
  if _numel(out_shape) * k <= MAX_ELEMENTS * 8 and out_dtype != "bool":
    b.push("matmul", [src, other], out_shape, out_dtype)


GROW = {"unary": _grow_unary, "binary": _grow_binary, "compare": _grow_compare,
        "where": _grow_where, "cast": _grow_cast, "bitcast": _grow_bitcast,
        "movement": _grow_movement, "reduce": _grow_reduce, "matmul": _grow_matmul,
        "join": _grow_join, "pow": _grow_pow, "softmax": _grow_softmax, "conv2d": _grow_conv2d,
        "zero": _grow_zero}


# ---- programs at the optimizer's and the lowering's size thresholds -----------------------------
#
# Each threshold with sizes on both sides of it (the random programs above stay below 240
# elements, where none of them applies):
#   grouped reduction   optimize.GROUP_MIN_REDUCE 256 reduced elements, GROUP_MAX_OUTPUTS 65536
#   split reduction     reduce.SPLIT_MIN_REDUCE 65536 reduced, SPLIT_MAX_OUTPUTS 256 outputs
#   register tiles      tile_shape.TILE_MIN_SIZE 4096 outputs, TILE_MIN_REDUCE 8, TILES 8x8 / 4x4
#                       dividing the two output axes, TILE_MIN_THREADS 256
#   workgroup tiles     (PTX default; WGSL stage=True) the same kernels, 16x16 threads, steps of 8
#   tensor cores        (PTX) float16 / bfloat16 matmuls, blocks of 16 rows x 8 columns, k 16 / 8
#   upcast              optimize.UPCAST_MIN_SIZE 65536 elements; workgroups of 256/128/64/32
#                       dividing the output (MIN_GATED_LOCAL 64)
#   loop trips          lower.MAX_TRIPS 16384: WGSL tiles a matmul over its grouped reduction
#                       only up to that many reduced elements
#   65,535 workgroups   dispatches folded (WGSL: every dimension; PTX: y and z)
#   buffer limit        WGSL max_storage_buffers 8: a kernel reading 8 or more inputs is split
#   sorted scatter      scatter.COMPARE_MAX 65536 outputs x indices, COMPARE_INDICES 32 per row
#                       (fuzz_ops_models.sized_scatter)
# Programs over LARGE elements are compiled only (WGSL, PTX and ptxas), never run or evaluated.
LARGE = 1 << 22
SIZED_KINDS = ("rows", "split", "matmul", "conv", "elementwise", "wide", "outputs", "trips",
               "fold", "batched", "scatter")
SMALL_SOURCES = SOURCES
LARGE_SOURCES = ("empty", "zeros", "rand", "arange", "ones", "full", "eye")


def generate_sized(c: Chooser) -> Program:
  """A program whose kernels sit just below or above one of the thresholds listed above."""
  b = _Builder(c)
  SIZED[c.choice(SIZED_KINDS)](b)
  return b.program()


def _sized_input(b: _Builder, shape, dtype) -> int:
  sources = LARGE_SOURCES if _numel(shape) > LARGE else SMALL_SOURCES
  return b.new_input(shape, dtype, b.c.choice(sources))


def _sized_rows(b: _Builder):
  c = b.c
  rows, reduce = c.choice((1, 3, 64, 2)), c.choice((255, 256, 257, 1024, 4097))
  dtype = c.choice(("float32", "int32", "float16", "uint8", "bfloat16"))
  x = _sized_input(b, (rows, reduce), dtype)
  _sized_reduce(b, x, 1)


def _sized_reduce(b: _Builder, x: int, axis: int, ops=("sum", "max", "mean", "argmax", "min")):
  shape, dtype = b.values[x]
  op = b.c.choice(ops)
  keep = b.c.chance(0.5)
  new = tuple(1 if i == axis else s for i, s in enumerate(shape) if keep or i != axis)
  out = {"sum": acc_dtype(dtype), "mean": mean_dtype(dtype), "argmax": "int32"}.get(op, dtype)
  b.push(op, [x], new, out, axes=(axis,), keepdim=keep)


def _sized_split(b: _Builder):
  c = b.c
  rows, reduce = c.choice((1, 2, 255, 256)), c.choice((65535, 65536, 70001))
  x = _sized_input(b, (rows, reduce), c.choice(("float32", "int32", "float16")))
  _sized_reduce(b, x, 1, ("sum", "max", "mean"))


def _sized_outputs(b: _Builder):
  """Grouped reductions up to GROUP_MAX_OUTPUTS outputs (compiled only)."""
  c = b.c
  x = _sized_input(b, (c.choice((65535, 65536)), 256), c.choice(("float32", "int32")))
  _sized_reduce(b, x, 1, ("sum", "max"))


def _sized_trips(b: _Builder):
  """A matmul reducing MAX_TRIPS elements or one more (WGSL: register tiles over the grouped
  reduction only up to MAX_TRIPS, optimize._shares_loads)."""
  c = b.c
  k = c.choice((16384, 16385))
  _sized_matmul_of(b, (64, k), (k, 64), "float32")


def _sized_matmul(b: _Builder):
  c = b.c
  m, n = c.choice((63, 64, 65, 16, 17, 128, 8)), c.choice((64, 63, 65, 16, 17, 8, 128))
  k = c.choice((8, 7, 9, 16, 17, 64, 3))
  dtype = c.choice(("float32", "float16", "bfloat16", "int32"))
  batch = (c.choice((2, 3)),) if c.chance(0.25) else ()
  _sized_matmul_of(b, batch + (m, k), (k, n), dtype)


def _sized_matmul_of(b: _Builder, a_shape, b_shape, dtype):
  c = b.c
  lhs, rhs = _sized_input(b, a_shape, dtype), _sized_input(b, b_shape, dtype)
  out = tuple(a_shape[:-1]) + (b_shape[-1],)
  y = b.push("matmul", [lhs, rhs], out, dtype)
  if c.chance(0.5) and dtype in FLOATS:   # an elementwise epilogue fused after the reduction
    y = b.push("relu", [y], out, dtype) if c.chance(0.5) else \
      b.push("add", [y], out, dtype, scalar=1.5, reverse=False)


def _sized_conv(b: _Builder):
  c = b.c
  ch, size, o = c.choice((3, 4, 8)), c.choice((18, 17, 34, 10)), c.choice((8, 16, 4))
  dtype = c.choice(("float32", "float16"))
  x = _sized_input(b, (1, ch, size, size), dtype)
  w = _sized_input(b, (o, ch, 3, 3), dtype)
  padding = c.choice((0, 1))
  out = size + 2 * padding - 2
  b.push("conv2d", [x, w], (1, o, out, out), dtype, stride=1, padding=padding)


def _sized_elementwise(b: _Builder):
  c = b.c
  n = c.choice((65535, 65536, 65537, 1000, 1024, 4097, 96, 64))
  dtype = c.choice(("float32", "int8", "float16", "int32", "bool"))
  x = _sized_input(b, (n,), dtype)
  other = _sized_input(b, (n,), dtype)
  op = "and" if dtype == "bool" else c.choice(("add", "mul", "maximum"))
  b.push(op, [x, other], (n,), dtype)


def _sized_wide(b: _Builder):
  """A sum of 6 to 9 distinct inputs: 7 and up bind more than WGSL's 8 storage buffers."""
  c = b.c
  shape, dtype = (c.choice((5, 64, 3)),), c.choice(("float32", "int32"))
  y = _sized_input(b, shape, dtype)
  for _ in range(c.choice((6, 7, 8, 9)) - 1):
    y = b.push("add", [y, _sized_input(b, shape, dtype)], shape, dtype)


def _sized_fold(b: _Builder):
  """An elementwise kernel of 65535 or 65536 workgroups of 1024 outputs (WGSL folds the
  dispatch above 65535; compiled only)."""
  c = b.c
  n = c.choice((65535 * 1024, 65536 * 1024, 65536 * 1024 + 8))
  dtype = c.choice(("uint8", "int8"))   # (float32 would pass WebGPU's 128 MiB per buffer)
  x = _sized_input(b, (n,), dtype)
  b.push("mul", [x], (n,), dtype, scalar=2, reverse=False)


def _sized_batched(b: _Builder):
  """A batched tiled matmul with 65535 or 65536 row blocks in grid y (PTX folds above 65535;
  compiled only)."""
  batch = b.c.choice((65535, 65536))
  _sized_matmul_of(b, (batch, 16, 16), (16, 16), "float32")


SIZED = {"rows": _sized_rows, "split": _sized_split, "matmul": _sized_matmul,
         "conv": _sized_conv, "elementwise": _sized_elementwise, "wide": _sized_wide,
         "outputs": _sized_outputs, "trips": _sized_trips, "fold": _sized_fold,
         "batched": _sized_batched}


def largest(program: Program) -> int:
  """The most elements any value of `program` has (LARGE and above: compile only)."""
  return max(_numel(s.param("shape")) if s.op == "input" else 0 for s in program.steps) if \
    program.steps else 0


# ---- dtype rules (kernelgen's documented semantics, written out independently) -----------------

def result_dtype(a: str, b) -> str:
  """numpy promotion of two dtypes, or of a dtype with a weak Python scalar (kernelgen rules:
  a float scalar makes an int tensor float32, float64 for 64-bit ints; bfloat16 as ml_dtypes)."""
  import numpy as np
  if not isinstance(b, str):
    if isinstance(b, float) and a not in FLOATS:
      return "float64" if ITEMSIZE[a] == 8 else "float32"
    return "int32" if a == "bool" and not isinstance(b, bool) else a
  if "bfloat16" in (a, b):
    other = b if a == "bfloat16" else a
    if other in ("bfloat16", "bool", "int8", "uint8"):
      return "bfloat16"
    if other == "float16":
      return "float32"
    return result_dtype("float16", other)
  return str(np.result_type(np.dtype(a), np.dtype(b)))


def float_of(dtype: str) -> str:
  """The float dtype true division and sqrt/exp/... give (kernelgen: int32 -> float32)."""
  if dtype in FLOATS:
    return dtype
  return {1: "float16", 2: "float32", 4: "float32"}.get(ITEMSIZE[dtype], "float64")


def acc_dtype(dtype: str) -> str:
  """The dtype sum returns: bool and ints narrower than 32 bits widen to int32/uint32."""
  if dtype == "bool" or dtype in ("int8", "int16"):
    return "int32"
  return "uint32" if dtype in ("uint8", "uint16") else dtype


def mean_dtype(dtype: str) -> str:
  return dtype if dtype in FLOATS else "float32"


from fuzz_scan_sort import grow_scan_sort  # noqa: E402  (scans, sorts, einsum: issue 18)
GROW["scan_sort"] = grow_scan_sort
from fuzz_ops_models import grow_model, grow_scatter, sized_scatter  # noqa: E402  (issue 18's
GROW["model"], GROW["scatter"] = grow_model, grow_scatter     # operations: gather, pad modes...)
SIZED["scatter"] = sized_scatter
from fuzz_nn_ops import grow_nn  # noqa: E402  (issue 18's norms, losses, attention, meshgrid)
GROW["nn"] = grow_nn
