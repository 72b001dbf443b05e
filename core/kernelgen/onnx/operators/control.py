"""ONNX control flow: If, Loop and Scan, unrolled into the lazy graph while the model is built.

Shapes are static in kernelgen, so the control decisions must be known on the host:
- If: the condition is read on the host: static (a constant, a folded shape computation, a
  feed), or else computed at once from the data (the lazy graph realized up to it, as for
  Range's bounds: the branches may have different shapes). The chosen branch is built, the other
  never runs.
- Loop: the trip count M and the initial condition are read on the host (a data-dependent one is
  computed first, as Range's bounds are); each iteration's body is built in turn, so the body's
  condition output must be static (else UnsupportedError: a loop whose end depends on the data
  it computes). Scan outputs are stacked on a new first axis.
- Scan: the sequence length is a static dim; the body is built once per step (opset 8's batched
  form: once per batch element and step).
Subgraph bodies see the enclosing scope's values (runner.Scope); static values flow through
them, so shape computations inside bodies still fold.
"""
from __future__ import annotations

from ...dtype import dtypes
from ...errors import ShapeError, UnsupportedError
from ...tensor.tensor import Tensor, stack
from ..registry import axis_index, op
from ..values import Static

MAX_ITERATIONS = 4096     # a Loop unrolls at most this many iterations into the graph


def _value(ins, i: int):
  """Input i as a Static when static (so folding continues inside bodies), else its Tensor."""
  s = ins.runner.static.get(ins.names[i])
  return s if isinstance(s, Static) else ins[i]


def _tensor(ins, v) -> Tensor:
  return ins.runner.upload(v, ins.node.describe()) if isinstance(v, Static) else v


@op("If", foldable=False)
def _if(ins, at):
  cond = ins.scalar(0)      # static, or computed now from the data (the graph realized to it)
  branch = "then_branch" if cond else "else_branch"
  return ins.runner.run_graph(ins.node.subgraphs[branch], {})


def _stacked(ins, steps: list, axis: int = 0) -> Tensor:
  ts = [_tensor(ins, v) for v in steps]
  axis = axis_index(axis, ts[0].ndim + 1)
  return stack(ts, axis) if len(ts) > 1 else ts[0].unsqueeze(axis)


@op("Loop", foldable=False)
def _loop(ins, at):
  body = ins.node.subgraphs["body"]
  trips = int(ins.scalar(0)) if ins.has(0) else None
  cond = bool(ins.scalar(1)) if ins.has(1) else True
  carried = [_value(ins, i) for i in range(2, len(ins)) if ins.has(i)]
  n_scan = len(body.output_names) - 1 - len(carried)
  scans: list = [[] for _ in range(n_scan)]
  i = 0
  while cond and (trips is None or i < trips):
    if i >= MAX_ITERATIONS:
      raise UnsupportedError(f"Loop runs more than {MAX_ITERATIONS} iterations: kernelgen "
                             f"unrolls loops into the graph; give a smaller trip count")
    names = body.input_names
    bindings = {names[0]: Static(dtypes.int64, (), [i]), names[1]: Static(dtypes.bool, (), [cond])}
    bindings.update(zip(names[2:], carried))
    outs = ins.runner.run_graph(body, bindings)
    if not isinstance(outs[0], Static):
      raise UnsupportedError("Loop whose condition is computed from the data inside the body: "
                             "kernelgen unrolls loops while building a static graph, so the "
                             "condition must be known then (use the trip count M)")
    cond = bool(outs[0].values[0])
    carried = outs[1:1 + len(carried)]
    for acc, v in zip(scans, outs[1 + len(carried):]):
      acc.append(v)
    i += 1
  if any(not acc for acc in scans):
    raise UnsupportedError("Loop with scan outputs that runs zero iterations: the outputs' "
                           "shape is unknown")
  return list(carried) + [_stacked(ins, acc) for acc in scans]


def _step(x: Tensor, axis: int, t: int) -> Tensor:
  bounds = [(0, d) for d in x.shape]
  bounds[axis] = (t, t + 1)
  return x.shrink(bounds).squeeze(axis)


def _scan(ins, body, states: list, xs: list, at) -> list:
  """One Scan over xs (Tensors) from `states`: [final states..., scan outputs...]."""
  m = len(xs)
  in_axes = at.ints("scan_input_axes", [0] * m)
  in_dirs = at.ints("scan_input_directions", at.ints("directions", [0] * m))
  in_axes = [axis_index(a, x.ndim) for a, x in zip(in_axes, xs)]
  lengths = {x.shape[a] for x, a in zip(xs, in_axes)}
  if len(lengths) != 1:
    raise ShapeError(f"Scan inputs have different sequence lengths {sorted(lengths)}")
  steps = lengths.pop()
  n = len(states)
  scans: list = [[] for _ in range(len(body.output_names) - n)]
  for t in range(steps):
    slices = [_step(x, a, steps - 1 - t if d else t) for x, a, d in zip(xs, in_axes, in_dirs)]
    bindings = dict(zip(body.input_names, list(states) + slices))
    outs = ins.runner.run_graph(body, bindings)
    states = outs[:n]
    for acc, v in zip(scans, outs[n:]):
      acc.append(v)
  out_axes = at.ints("scan_output_axes", [0] * len(scans))
  out_dirs = at.ints("scan_output_directions", [0] * len(scans))
  outs = []
  for acc, a, d in zip(scans, out_axes, out_dirs):
    outs.append(_stacked(ins, acc[::-1] if d else acc, a))
  return list(states) + outs


@op("Scan", foldable=False)
def _scan_op(ins, at):
  body = ins.node.subgraphs["body"]
  m = at.int("num_scan_inputs")
  if ins.opset >= 9:
    values = [_value(ins, i) for i in range(len(ins))]
    n = len(values) - m
    return _scan(ins, body, values[:n], [_tensor(ins, v) for v in values[n:]], at)
  return _scan8(ins, body, m, at)


def _scan8(ins, body, m: int, at) -> list:
  """Opset 8's Scan: a batch axis 0 in front of every input; optional sequence_lens first."""
  values = [_tensor(ins, ins[i]) for i in range(1, len(ins))]
  n = len(values) - m
  batch = values[0].shape[0]
  if ins.has(0):
    lens = set(ins.ints(0))
    full = values[n].shape[1]
    if lens != {full}:
      raise UnsupportedError("Scan (opset 8) with sequence_lens shorter than the sequence is "
                             "not supported")
  per_batch = []
  for b in range(batch):
    states = [_step(v, 0, b) for v in values[:n]]
    xs = [_step(v, 0, b) for v in values[n:]]
    per_batch.append([_tensor(ins, v) for v in _scan(ins, body, states, xs, at)])
  return [stack([pb[k] for pb in per_batch], 0) for k in range(len(per_batch[0]))]
