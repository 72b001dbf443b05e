"""Reverse-mode automatic differentiation, recorded at the Tensor-primitive level.

Every Tensor made by a primitive (an elementwise ALU op, cast, where, a reduction node, a movement,
the sliding-window view, contiguous, `to`) is passed through `record`: when grad mode is on, a
parent requires a gradient and the result is a float tensor, the result remembers its parents and
the rule that maps its gradient to theirs (`Tensor.ctx`). Composite operations (matmul,
pooling, softmax, layernorm, ...) are built from these primitives, so they are differentiated for
free; conv2d is recorded as one operation whose rule builds reductions that tile well
(tensor/ops/conv.py). `backward()` walks the recorded graph in reverse topological order and
builds each parent's gradient from ordinary Tensor operations: gradients are lazy tensors, so
the backward pass fuses into kernels like any other program, and an optimizer can realize the
whole step at once.

Semantics (as torch unless noted):
- Only float tensors take part: `requires_grad_()` on an integer or bool tensor raises
  DTypeError; operations whose result is not float (comparisons, argmax, casts to int, bitwise
  ops) are not recorded, so gradients do not flow through them (a zero gradient, as torch).
- Ties: `max`/`min` reductions split the gradient evenly among the tied elements (torch's
  `amax`/`max()` over all); `maximum`/`minimum` (and so `relu` at exactly 0) give each side half.
- `trunc`/`floor`/`ceil`/`round` have a zero gradient.
- `log2`, `sqrt` and `exp2` pass a zero upstream gradient as zero even where their own
  derivative (or value) is infinite, so the branch a `where` did not take cannot turn the gradient
  into NaN (`where` over a `0 ** y`, softplus' `log1p(exp(x))` past its threshold; torch gives
  NaN for such composites).
- Leaf tensors accumulate `.grad` across `backward()` calls (clear it with `t.grad = None` or an
  optimizer's `zero_grad()`); gradients of intermediate tensors are not kept. The graph is kept
  after `backward()` (torch's retain_graph=True).
"""
from __future__ import annotations

import math

from ..errors import DTypeError, KernelgenError, ShapeError
from ..graph.lazy import L, LazyOp
from ..graph.view import View, prod
from ..uop.ops import Ops
from .operands import TensorOps

LN_2 = math.log(2)


class AutogradError(KernelgenError):
  """backward() on a tensor that does not require a gradient (nothing to differentiate)."""


class _GradMode:
  enabled = True


def is_grad_enabled() -> bool:
  """Whether operations now record gradient history (False inside `kg.no_grad()`, True by default
  and inside `kg.enable_grad()`)."""
  return _GradMode.enabled


class no_grad:
  """`with kg.no_grad():` (or `@kg.no_grad()`): operations inside record no gradient graph."""

  def __enter__(self):
    self.prev, _GradMode.enabled = _GradMode.enabled, False
    return self

  def __exit__(self, *exc):
    _GradMode.enabled = self.prev
    return False

  def __call__(self, fn):
    def wrapped(*args, **kwargs):
      with no_grad():
        return fn(*args, **kwargs)
    wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
    return wrapped


class enable_grad(no_grad):
  """`with kg.enable_grad():` turns recording back on inside a no_grad block."""

  def __enter__(self):
    self.prev, _GradMode.enabled = _GradMode.enabled, True
    return self


def record(out, parents: tuple, rule, arg=None):
  """Remember how `out` was made from `parents` when a gradient will be needed; returns `out`.
  `rule`: a name in RULES, or a function (out, grad, parents, arg) -> the parents' gradients
  (operations with a rule of their own, e.g. tensor/ops/sorted_scatter.py's)."""
  if not _GradMode.enabled:
    return out
  for p in parents:            # a loop, not any(): this runs for every primitive op
    if p.requires_grad:
      if out.dtype.is_float():
        out.requires_grad, out.ctx = True, (parents, rule, arg)
      return out
  return out


# ---- the Tensor methods ----------------------------------------------------------------------

class AutogradMixin(TensorOps):
  """requires_grad_, detach and backward (Tensor lists this class among its bases)."""
  __slots__ = ()

  def requires_grad_(self, requires_grad: bool = True):
    """Mark the tensor (in place) as one whose gradient `backward()` computes into `.grad`
    (requires_grad=True), or unmark a leaf. Returns the tensor itself.

    Raises DTypeError for a non-float tensor, AutogradError for requires_grad_(False) on a tensor
    computed from others (use `detach()`)."""
    if requires_grad and not self.dtype.is_float():
      raise DTypeError(f"only float tensors can require gradients, this one is {self.dtype}: "
                       f"cast it to a float dtype first")
    if not requires_grad and self.ctx is not None:
      raise AutogradError("requires_grad_(False) on a computed tensor: use .detach() instead")
    self.requires_grad = bool(requires_grad)
    return self

  @property
  def is_leaf(self) -> bool:
    """True for a tensor not computed from a tensor that requires gradients (made by the user, or
    detached); `backward()` keeps `.grad` only on leaves."""
    return self.ctx is None

  def detach(self):
    """The same values with no gradient history (shares the lazy node, copies nothing)."""
    return type(self)(self.node)

  def backward(self, gradient=None) -> None:
    """Accumulate d(self)/d(leaf) * gradient into `.grad` of every leaf that requires grad
    (lazily: the gradients are computed when read or by the optimizer's step). `gradient`
    (a Tensor or values of self's shape) defaults to 1 for a one-element result.

    Raises AutogradError when self does not require grad, ShapeError when `gradient` is
    missing for a result of more than one element or has another shape."""
    if not self.requires_grad:
      raise AutogradError("backward() on a tensor that does not require grad: make an input "
                          "require it (Tensor(..., requires_grad=True) or .requires_grad_())")
    if gradient is None:
      if self._elements() != 1:
        raise ShapeError(f"backward() without a gradient needs a one-element (scalar) result, "
                         f"this one has shape {self.shape}: pass backward(gradient)")
      gradient = self._const(1.0)
    elif not isinstance(gradient, type(self)):
      gradient = type(self)(gradient, dtype=self.dtype, device=self.device)
    if gradient.shape != self.shape:
      raise ShapeError(f"backward gradient has shape {gradient.shape}, the tensor "
                       f"{self.shape}: they must match")
    with no_grad():
      _backward(self, gradient.cast(self.dtype).detach())


def _toposort(root) -> list:
  order, seen, stack = [], set(), [(root, False)]
  while stack:
    t, done = stack.pop()
    if done:
      order.append(t)
      continue
    if id(t) in seen:
      continue
    seen.add(id(t))
    stack.append((t, True))
    if t.ctx is not None:
      stack.extend((p, False) for p in t.ctx[0] if p.requires_grad and id(p) not in seen)
  return order


def _backward(root, gradient) -> None:
  grads = {id(root): gradient}
  for t in reversed(_toposort(root)):
    g = grads.pop(id(t), None)
    if g is None:
      continue
    if t.ctx is None:
      t.grad = g if t.grad is None else t.grad + g
      continue
    parents, rule, arg = t.ctx
    rule = RULES[rule] if isinstance(rule, str) else rule     # a name here, or a function
    for p, pg in zip(parents, rule(t, g, parents, arg)):
      if pg is None or not p.requires_grad:
        continue
      grads[id(p)] = pg if id(p) not in grads else grads[id(p)] + pg


# ---- the rules: (out, grad of out, parents, arg) -> grads of the parents ----------------------

def _where(c, x, y):
  return c.where(x, y)


def _zero_safe(g, value):
  """`value` where the upstream gradient is nonzero, 0 where it is 0 (see the docstring)."""
  return _where(g == 0, g._const(0), value)


def _split_tie(g, a, b, a_wins):
  """maximum/minimum: all of g to the winner, half to each side on a tie."""
  tie = (a == b).cast(g.dtype) * 0.5
  wa = a_wins.cast(g.dtype) + tie
  return g * wa, g * (1 - wa)


ALU_RULES = {
  Ops.ADD: lambda o, g, p: (g, g),
  Ops.SUB: lambda o, g, p: (g, -g),
  Ops.MUL: lambda o, g, p: (g * p[1], g * p[0]),
  Ops.FDIV: lambda o, g, p: (g / p[1], -g * p[0] / (p[1] * p[1])),
  Ops.MAX: lambda o, g, p: _split_tie(g, p[0], p[1], p[0] > p[1]),
  Ops.MIN: lambda o, g, p: _split_tie(g, p[0], p[1], p[0] < p[1]),
  Ops.NEG: lambda o, g, p: (-g,),
  Ops.EXP2: lambda o, g, p: (_zero_safe(g, g * o * LN_2),),
  Ops.LOG2: lambda o, g, p: (_zero_safe(g, g / (p[0] * LN_2)),),
  Ops.SIN: lambda o, g, p: (g * p[0].cos(),),
  Ops.COS: lambda o, g, p: (-g * p[0].sin(),),
  Ops.SQRT: lambda o, g, p: (_zero_safe(g, g / (2 * o)),),
  Ops.RECIP: lambda o, g, p: (-g * o * o,),
  Ops.TRUNC: lambda o, g, p: (None,),
  Ops.WHERE: lambda o, g, p: (None, _where(p[0], g, 0.0), _where(p[0], 0.0, g)),
}


def _alu(out, g, parents, op):
  rule = ALU_RULES.get(op)
  if rule is None:
    raise AutogradError(f"no gradient rule for the elementwise op {op.name}")
  return rule(out, g, parents)


def _cast(out, g, parents, _):
  (x,) = parents
  return (g.cast(x.dtype),)


def _reduce(out, g, parents, arg):
  (x,), (op, axes) = parents, arg
  if op is Ops.ADD:
    return (g.expand(x.shape),)
  if op in (Ops.MAX, Ops.MIN):
    hit = (x == out.expand(x.shape)).cast(g.dtype)
    return (hit * (g / hit.sum(axes, keepdim=True)).expand(x.shape),)
  if op is Ops.MUL:
    zero = x == 0
    others = _where(zero, x._const(1), x).prod(axes, keepdim=True)   # product of the nonzeros
    zeros = zero.cast(g.dtype).sum(axes, keepdim=True)
    at_nonzero = _where(zeros == 0, others.expand(x.shape) / _where(zero, x._const(1), x), 0.0)
    at_zero = _where(zeros == 1, others, 0.0).expand(x.shape)
    return (g.expand(x.shape) * _where(zero, at_zero, at_nonzero),)
  raise AutogradError(f"no gradient rule for the reduction {op.name}")


def _move(out, g, parents, arg):
  (x,), (move, args) = parents, arg
  if move == "reshape":
    return (g.reshape(x.shape),)
  if move == "permute":
    inverse = [0] * len(args[0])
    for i, a in enumerate(args[0]):
      inverse[a] = i
    return (g.permute(*inverse),)
  if move == "expand":
    axes = tuple(i for i, (a, b) in enumerate(zip(x.shape, out.shape)) if a != b)
    return (g.sum(axes, keepdim=True) if axes else g,)
  if move == "pad":
    return (g.shrink(tuple((b, b + n) for (b, _), n in zip(args[0], x.shape))),)
  if move == "shrink":
    return (g.pad(tuple((b, n - e) for (b, e), n in zip(args[0], x.shape))),)
  if move == "flip":
    return (g.flip(args[0]),)
  if move == "step":
    return (_unstep(g, args[0], x.shape),)
  raise AutogradError(f"no gradient rule for the movement {move}")


def _unstep(g, steps, shape):
  """The inverse of x._step(steps) for gradients: g's values at every steps[d]-th place, 0 else."""
  for d, k in enumerate(steps):
    if k == 1:
      continue
    m = g.shape[d]
    lead, rest = g.shape[:d], g.shape[d + 1:]
    spread = g.reshape(lead + (m, 1) + rest)
    spread = spread.pad(((0, 0),) * len(lead) + ((0, 0), (0, k - 1)) + ((0, 0),) * len(rest))
    g = spread.reshape(lead + (m * k,) + rest)
    g = g.shrink(tuple((0, shape[d]) if i == d else None for i in range(g.ndim)))
  return g


def _scatter_axis(g, axis: int, start: int, step: int, size: int):
  """g along `axis` placed at start, start + step, ... of a zero axis of `size`."""
  m = g.shape[axis]
  g = _unstep(g, tuple(step if i == axis else 1 for i in range(g.ndim)),
              tuple(m * step if i == axis else n for i, n in enumerate(g.shape)))
  keep = min(g.shape[axis], size - start)
  g = g.shrink(tuple((0, keep) if i == axis else None for i in range(g.ndim)))
  return g.pad(tuple((start, size - start - keep) if i == axis else (0, 0)
                     for i in range(g.ndim)))


def _windows(out, g, parents, arg):
  """Sliding windows (..., OH, OW, kh, kw) of (..., H, W): each input gets its windows' sum, as
  one reduction over the kernel offsets of one strided read per offset (a transposed
  convolution): g is spread onto a zero grid where output position o sits at o*stride + shift
  (_scatter_axis), and input position y reads, for flipped offset i' = kh-1-i, the grid at
  y + i'*dilation with kernel index kh-1-i', a diagonal the view below walks."""
  (x,), ((kh, kw), (sh, sw), (dh, dw)) = parents, arg
  *lead, h, w = x.shape
  nl = len(lead)
  gh, gw = h + (kh - 1) * dh, w + (kw - 1) * dw    # grid sizes: y + i'*dh stays inside
  grid = _scatter_axis(g, nl, (kh - 1) * dh, sh, gh)
  grid = _scatter_axis(grid, nl + 1, (kw - 1) * dw, sw, gw)
  if sh > 1 or sw > 1:   # spread with a stride: the grid once in a buffer, so that the reduction
    grid = grid.contiguous()   # (register-tiled, unrolled) reads it without a div/mod per load
  cell, row = kh * kw, gw * kh * kw
  lead_strides = [prod(lead[i + 1:]) * gh * row for i in range(nl)]
  view = View.contiguous(tuple(lead) + (h, w, kh, kw))._with(
    tuple(lead) + (h, w, kh, kw),
    tuple(lead_strides) + (row, cell, dh * row - kw, dw * cell - 1),
    (kh - 1) * kw + (kw - 1), None)
  diagonal = type(g)(LazyOp(L.VIEW, g.dtype, view.shape, (grid.node,), view))
  # a kernel of its own: its consumers (e.g. a pool's input's producers) may reduce it again
  return (diagonal.sum((-2, -1)).contiguous(),)


def _gather(out, g, parents, arg):
  """A small gather's gradient: a scatter_add of g into x's shape at the same indices, as a
  one-hot reduction over the gathered positions (deterministic, no atomics); indices outside
  0..n-1 (which read 0) add nothing. Larger ones sort (tensor/ops/sorted_scatter.py gather_grad)."""
  (x,), (axis, index) = parents, arg
  n = x.shape[axis]
  order = [d for d in range(x.ndim) if d != axis] + [axis]
  back = list(range(x.ndim - 1))
  back.insert(axis, x.ndim - 1)
  hit = index.permute(*order).unsqueeze(-1) == type(g).arange(n, device=g.device)
  total = _where(hit, g.permute(*order).unsqueeze(-1), 0.0).sum(-2)
  return (total.permute(*back),)


RULES = {
  "alu": _alu, "gather": _gather, "cast": _cast, "reduce": _reduce, "move": _move, "windows": _windows,
  "contiguous": lambda out, g, parents, _: (g,),
  "to": lambda out, g, parents, _: (g.to(parents[0].device),),
}
