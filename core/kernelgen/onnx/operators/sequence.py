"""ONNX sequence and optional operators. A sequence is a Python list of Tensors while the model is
built (its length is static: known when the graph is built), an empty optional is values.NONE;
SequenceMap runs its body once per element. Lengths and has-element flags are static values,
so a Loop over a sequence's length still unrolls."""
from __future__ import annotations

from ...dtype import dtypes
from ...errors import ModelError, ShapeError
from ...tensor.tensor import cat, stack
from ..registry import axis_index, op
from ..values import NONE, Static


def _seq(ins, i: int) -> list:
  value = ins[i]
  if not isinstance(value, list):
    raise ModelError(f"input {i} ({ins.names[i]!r}) is not a sequence")
  return value


def _position(ins, i: int, n: int, default: int, insert: bool = False) -> int:
  pos = int(ins.scalar(i)) if ins.has(i) else default
  top = n if insert else n - 1
  if not -n <= pos <= top:
    raise ShapeError(f"sequence position {pos} is out of range for a sequence of {n}")
  return pos + n if pos < 0 else pos


@op("SequenceEmpty", foldable=False)
def _empty(ins, at):
  return [[]]


@op("SequenceConstruct", foldable=False)
def _construct(ins, at):
  return [ins.all()]


@op("SequenceInsert", foldable=False)
def _insert(ins, at):
  seq = list(_seq(ins, 0))
  seq.insert(_position(ins, 2, len(seq), len(seq), insert=True), ins[1])
  return [seq]


@op("SequenceAt", foldable=False)
def _at(ins, at):
  seq = _seq(ins, 0)
  return seq[_position(ins, 1, len(seq), 0)]


@op("SequenceErase", foldable=False)
def _erase(ins, at):
  seq = list(_seq(ins, 0))
  del seq[_position(ins, 1, len(seq), -1)]
  return [seq]


@op("SequenceLength", foldable=False)
def _length(ins, at):
  return Static(dtypes.int64, (), [len(_seq(ins, 0))])


@op("ConcatFromSequence", foldable=False)
def _concat(ins, at):
  seq = _seq(ins, 0)
  if not seq:
    raise ShapeError("ConcatFromSequence of an empty sequence")
  if at.int("new_axis", 0):
    return stack(seq, axis_index(at.int("axis"), seq[0].ndim + 1))
  return cat(seq, axis_index(at.int("axis"), seq[0].ndim)) if len(seq) > 1 else seq[0]


@op("SplitToSequence", foldable=False)
def _split(ins, at):
  x = ins[0]
  axis = axis_index(at.int("axis", 0), x.ndim)
  n = x.shape[axis]
  split = ins.ints(1) if ins.has(1) else None
  keep = at.int("keepdims", 1)
  if split is None:
    sizes = [1] * n
  elif len(split) == 1 and len(ins.runner.known(ins.names[1]).shape) == 0:
    sizes = [min(split[0], n - i) for i in range(0, n, split[0])]
  else:
    sizes = split
  parts, start = [], 0
  for size in sizes:
    bounds = [(0, d) for d in x.shape]
    bounds[axis] = (start, start + size)
    part = x.shrink(bounds)
    parts.append(part.squeeze(axis) if split is None and not keep else part)
    start += size
  return [parts]


@op("SequenceMap", foldable=False)
def _map(ins, at):
  body = ins.node.subgraphs["body"]
  values = [ins[i] for i in range(len(ins))]
  n = len(values[0])
  outs: list = [[] for _ in body.output_names]
  for k in range(n):
    bind = {name: v[k] if isinstance(v, list) else v for name, v in zip(body.input_names, values)}
    for acc, out in zip(outs, ins.runner.run_graph(body, bind)):
      acc.append(ins.runner.upload(out, ins.node.describe()) if isinstance(out, Static) else out)
  return outs


@op("Optional", foldable=False)
def _optional(ins, at):
  return [ins[0] if ins.has(0) else NONE]


@op("OptionalHasElement", foldable=False)
def _has(ins, at):
  return Static(dtypes.bool, (), [ins.has(0) and ins[0] is not NONE])


@op("OptionalGetElement", foldable=False)
def _get(ins, at):
  value = ins[0]
  if value is NONE:
    raise ModelError("OptionalGetElement of an empty optional")
  return [value]


@op("Identity")
def _identity(ins, at):
  """Any value passed through: a Tensor, a sequence or an optional."""
  return [ins[0]]
