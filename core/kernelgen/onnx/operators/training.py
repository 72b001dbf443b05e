"""The optimizer operators of the ai.onnx.preview.training domain: Adagrad, Adam and Momentum, one
update step each, following the operator documentation's pseudo code. Their inputs are R (the
learning rate) and T (the update count), both read on the host, then the optimized tensors and
their state in groups (X..., G..., H... for Adagrad; X..., G..., V..., H... for Adam; X..., G...,
V... for Momentum); the outputs are the new tensors and states, group by group."""
from __future__ import annotations

import math

from ...errors import ShapeError
from ..registry import op


def _groups(ins, k: int) -> list:
  """The inputs after R and T in k equal groups."""
  rest = [ins[i] for i in range(2, len(ins))]
  if len(rest) % k:
    raise ShapeError(f"{ins.node.op} takes R, T and {k} equal groups of tensors, got "
                     f"{len(rest)} tensors")
  n = len(rest) // k
  return [rest[j * n:(j + 1) * n] for j in range(k)]


@op("Adagrad")
def _adagrad(ins, at):
  r, t = float(ins.scalar(0)), float(ins.scalar(1))
  xs, gs, hs = _groups(ins, 3)
  norm, decay = at.float("norm_coefficient", 0.0), at.float("decay_factor", 0.0)
  eps = at.float("epsilon", 1e-6)
  rate = r / (1 + t * decay)
  new_x, new_h = [], []
  for x, g, h in zip(xs, gs, hs):
    g = g + x * norm
    h = h + g * g
    new_x.append((x - g * rate / (h.sqrt() + eps)).cast(x.dtype))
    new_h.append(h.cast(x.dtype))
  return new_x + new_h


@op("Adam")
def _adam(ins, at):
  r, t = float(ins.scalar(0)), float(ins.scalar(1))
  xs, gs, vs, hs = _groups(ins, 4)
  alpha, beta = at.float("alpha", 0.9), at.float("beta", 0.999)
  norm, post = at.float("norm_coefficient", 0.0), at.float("norm_coefficient_post", 0.0)
  eps = at.float("epsilon", 1e-6)
  rate = r * math.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else r
  new_x, new_v, new_h = [], [], []
  for x, g, v, h in zip(xs, gs, vs, hs):
    g = g + x * norm
    v = v * alpha + g * (1 - alpha)
    h = h * beta + g * g * (1 - beta)
    x_new = (x - v * rate / (h.sqrt() + eps)) * (1 - post)
    new_x.append(x_new.cast(x.dtype))
    new_v.append(v.cast(x.dtype))
    new_h.append(h.cast(x.dtype))
  return new_x + new_v + new_h


@op("Momentum")
def _momentum(ins, at):
  r, t = float(ins.scalar(0)), float(ins.scalar(1))
  xs, gs, vs = _groups(ins, 3)
  alpha, beta = at.float("alpha"), at.float("beta")
  norm = at.float("norm_coefficient")
  nesterov = at.str("mode") == "nesterov"
  b = beta if t > 0 else 1.0
  new_x, new_v = [], []
  for x, g, v in zip(xs, gs, vs):
    g = g + x * norm
    v = v * alpha + g * b
    step = g + v * alpha if nesterov else v
    new_x.append((x - step * r).cast(x.dtype))
    new_v.append(v.cast(x.dtype))
  return new_x + new_v
