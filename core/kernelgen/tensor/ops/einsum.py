"""kg.einsum: numpy's Einstein summation, lowered to the Tensor's matmul and reductions.

    kg.einsum("bij,bjk->bik", a, b)     # is a @ b: the same graph, the same kernels
    kg.einsum("ii", m)                  # trace: implicit output (labels seen once, sorted)
    kg.einsum("...ij,...j->...i", a, v) # `...` broadcasts like numpy

Lowering: each operand first takes the diagonal of any repeated label (a strided view: the two
axes flattened, padded by one row and reshaped so the diagonal is a column) and sums the labels
no one else needs. Operands then contract pairwise, left to right: labels both share and still
needed are batch axes, shared labels not needed are contracted. With a contraction the pair is
permuted and reshaped to (batch..., M, K) @ (batch..., K, N), the Tensor's matmul; without one it
is a broadcast multiply. The result is summed over what the output drops and permuted to it.
Dtype: the operands' promoted dtype (numpy), sums accumulating as `sum` does (tensor.py).
"""
from __future__ import annotations

import math
import string

from ...errors import ShapeError
from ..tensor import Tensor, result_dtype

LETTERS = set(string.ascii_letters)


def einsum(subscripts, *operands):
  """numpy.einsum(subscripts, *operands) on Tensors (lists and numbers become Tensors)."""
  if not isinstance(subscripts, str):
    raise ShapeError(f"einsum takes the subscripts string first, got {type(subscripts).__name__}"
                     f": einsum('ij,jk->ik', a, b)")
  if not operands:
    raise ShapeError("einsum needs at least one operand after the subscripts")
  device = next((t.device for t in operands if isinstance(t, Tensor)), None)
  tensors = [t if isinstance(t, Tensor) else Tensor(t, device=device) for t in operands]
  terms, output = parse(subscripts, [t.shape for t in tensors])
  dtype = result_dtype(*tensors)
  sizes = _label_sizes(subscripts, terms, tensors)
  parts = [_prepare(t.cast(dtype), list(labels), _needed(terms, i, output))
           for i, (t, labels) in enumerate(zip(tensors, terms))]
  tensor, labels = parts[0]
  for i in range(1, len(parts)):
    keep = set(output).union(*(terms[j] for j in range(i + 1, len(terms))))
    tensor, labels = _contract(tensor, labels, *parts[i], keep, sizes)
  tensor, labels = _sum_labels(tensor, labels, [x for x in labels if x not in output])
  tensor = tensor.expand(tuple(sizes[x] for x in labels)) if labels else tensor
  return tensor.permute(*[labels.index(x) for x in output]).cast(dtype) if output else \
    tensor.cast(dtype)


# ---- subscripts ------------------------------------------------------------------------------

def parse(subscripts: str, shapes) -> tuple[list[list[str]], list[str]]:
  """(labels per operand, output labels); `...` becomes labels '.0', '.1'... aligned right."""
  text = subscripts.replace(" ", "")
  if text.count("->") > 1 or ("-" in text.replace("->", "")) or (">" in text.replace("->", "")):
    raise ShapeError(f"einsum subscripts {subscripts!r}: '->' may appear once, between the "
                     f"inputs and the output")
  inputs, arrow, out = text.partition("->")
  terms = inputs.split(",")
  if len(terms) != len(shapes):
    raise ShapeError(f"einsum subscripts {subscripts!r} name {len(terms)} operand(s) but "
                     f"{len(shapes)} were given")
  split = [_split_term(term, subscripts) for term in terms]
  widths = [_ellipsis_width(labels, shape, term, subscripts)
            for labels, shape, term in zip(split, shapes, terms)]
  span = max([w for w in widths if w is not None], default=0)
  dots = [f".{k}" for k in range(span)]
  labeled = [_expand(labels, dots[span - (w or 0):]) for labels, w in zip(split, widths)]
  if arrow:
    output = _expand(_split_term(out, subscripts), dots)
    _check_output(output, labeled, subscripts)
  else:
    counts = {}
    for labels in labeled:
      for x in labels:
        counts[x] = counts.get(x, 0) + 1
    output = dots + sorted(x for x, c in counts.items() if c == 1 and not x.startswith("."))
  return labeled, output


def _split_term(term: str, subscripts: str) -> list[str]:
  if term.count("...") > 1 or term.replace("...", "").count("."):
    raise ShapeError(f"einsum subscripts {subscripts!r}: each term may hold one '...' and no "
                     f"other dots")
  labels = []
  for part_index, part in enumerate(term.split("...")):
    if part_index:
      labels.append("...")
    for ch in part:
      if ch not in LETTERS:
        raise ShapeError(f"einsum subscripts {subscripts!r}: {ch!r} is not a label; labels are "
                         f"the letters a-z and A-Z")
      labels.append(ch)
  return labels


def _ellipsis_width(labels, shape, term, subscripts):
  named = len([x for x in labels if x != "..."])
  if "..." not in labels:
    if named != len(shape):
      raise ShapeError(f"einsum term {term!r} of {subscripts!r} names {named} axes but its "
                       f"operand has shape {tuple(shape)} ({len(shape)} axes): give one label "
                       f"per axis, or '...' for the rest")
    return None
  if named > len(shape):
    raise ShapeError(f"einsum term {term!r} of {subscripts!r} names {named} axes but its "
                     f"operand has only {len(shape)} (shape {tuple(shape)})")
  return len(shape) - named


def _expand(labels, dots):
  out = []
  for x in labels:
    out.extend(dots if x == "..." else [x])
  return out


def _check_output(output, terms, subscripts):
  seen = set().union(*map(set, terms))
  for x in output:
    if output.count(x) > 1:
      raise ShapeError(f"einsum output of {subscripts!r} repeats {x!r}: an output label appears "
                       f"once")
    if x not in seen and not x.startswith("."):
      raise ShapeError(f"einsum output label {x!r} of {subscripts!r} is in no input term")


def _label_sizes(subscripts, terms, tensors) -> dict:
  """Each label's size; sizes must agree (1 broadcasts, for '...' axes as numpy does)."""
  sizes: dict = {}
  for labels, t in zip(terms, tensors):
    for x, n in zip(labels, t.shape):
      have = sizes.get(x)
      if have is None or have == 1 and x.startswith("."):
        sizes[x] = n
      elif n != have and not (n == 1 and x.startswith(".")):
        name = "a '...' axis" if x.startswith(".") else f"label {x!r}"
        raise ShapeError(f"einsum {subscripts!r}: {name} has size {have} in one place and {n} "
                         f"in another (operand shapes {[u.shape for u in tensors]})")
  return sizes


def _needed(terms, i: int, output) -> set:
  return set(output).union(*(terms[j] for j in range(len(terms)) if j != i))


# ---- lowering --------------------------------------------------------------------------------

def _prepare(t, labels: list, needed: set):
  """Diagonals of repeated labels taken, labels no one else needs summed."""
  while len(set(labels)) < len(labels):
    x = next(x for x in labels if labels.count(x) > 1)
    t, labels = _diagonal(t, labels, x)
  return _sum_labels(t, labels, [x for x in labels if x not in needed])


def _diagonal(t, labels: list, x: str):
  """The diagonal over the first two axes labeled x, as the last axis."""
  i = labels.index(x)
  j = labels.index(x, i + 1)
  rest = [k for k in range(len(labels)) if k not in (i, j)]
  lead = tuple(t.shape[k] for k in rest)
  d = t.shape[i]                   # == t.shape[j]: _label_sizes checked
  t = t.permute(*rest, i, j)
  if t._elements() == 0:
    return t.reshape(lead + (d,)), [labels[k] for k in rest] + [x]
  flat = t.reshape(lead + (d * d,)).pad(((0, 0),) * len(lead) + ((0, d),))
  diag = flat.reshape(lead + (d, d + 1)).shrink(tuple((0, n) for n in lead) + ((0, d), (0, 1)))
  return diag.reshape(lead + (d,)), [labels[k] for k in rest] + [x]


def _sum_labels(t, labels: list, drop: list):
  if not drop:
    return t, labels
  axes = tuple(labels.index(x) for x in drop)
  out = t.sum(axes) if t.dtype.is_float() else t.sum(axes).cast(t.dtype)
  return out, [x for x in labels if x not in drop]


def _contract(a, la: list, b, lb: list, keep: set, sizes: dict):
  """a (labels la) times b (labels lb), summed over the shared labels not in `keep`."""
  a, la = _sum_labels(a, la, [x for x in la if x not in lb and x not in keep])
  b, lb = _sum_labels(b, lb, [x for x in lb if x not in la and x not in keep])
  batch = [x for x in la if x in lb and x in keep]
  inner = [x for x in la if x in lb and x not in keep]
  afree = [x for x in la if x not in lb]
  bfree = [x for x in lb if x not in la]
  if not inner:
    order = batch + afree + bfree
    return _align(a, la, order) * _align(b, lb, order), order
  m = math.prod(sizes[x] for x in afree)
  k = math.prod(max(_size(a, la, x), _size(b, lb, x)) for x in inner)
  n = math.prod(sizes[x] for x in bfree)
  bshape_a = tuple(_size(a, la, x) for x in batch)
  bshape_b = tuple(_size(b, lb, x) for x in batch)
  x = a.permute(*[la.index(v) for v in batch + afree + inner])
  y = b.permute(*[lb.index(v) for v in batch + inner + bfree])
  x = _broadcast_inner(x, len(batch) + len(afree), inner, sizes).reshape(bshape_a + (m, k))
  y = _broadcast_inner(y, len(batch), inner, sizes).reshape(bshape_b + (k, n))
  out = x @ y
  shape = tuple(max(p, q) for p, q in zip(bshape_a, bshape_b))
  shape += tuple(sizes[v] for v in afree + bfree)
  return out.reshape(shape), batch + afree + bfree


def _size(t, labels, x):
  return t.shape[labels.index(x)]


def _broadcast_inner(t, start: int, inner: list, sizes: dict):
  """Size-1 '...' axes among the contracted ones broadcast to the label's size."""
  want = t.shape[:start] + tuple(sizes[x] for x in inner) + t.shape[start + len(inner):]
  return t.expand(want) if want != t.shape else t


def _align(t, labels: list, order: list):
  """t permuted to `order` (labels it lacks become size-1 axes)."""
  present = [x for x in order if x in labels]
  t = t.permute(*[labels.index(x) for x in present]) if labels else t
  return t.reshape(tuple(t.shape[present.index(x)] if x in labels else 1 for x in order))
