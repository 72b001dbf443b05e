"""ONNX operators of recent language-model layers: RotaryEmbedding (opset 23), LinearAttention
and CausalConvWithState (opset 27), SwiGLU, and the preview domain's FlexAttention (its score_mod
and prob_mod subgraphs run on the whole score tensors), as Tensor code following the operator
documentation.

LinearAttention's recurrence is built step by step (one small state update per token, unrolled
into the lazy graph, as its definition reads); the state and arithmetic are float32, the outputs
cast back to the query's dtype.
"""
from __future__ import annotations

import math

from ...dtype import dtypes
from ...errors import ShapeError, UnsupportedError
from ...tensor.tensor import Tensor, cat, stack
from ...tensor.ops.advanced_indexing import take
from ..registry import op


# ---- RotaryEmbedding -----------------------------------------------------------------------

def _halves(x, interleaved: bool):
  d = x.shape[-1]
  if interleaved:
    pairs = x.reshape(x.shape[:-1] + (d // 2, 2))
    return pairs[..., 0], pairs[..., 1]
  bounds = [(0, n) for n in x.shape]
  lo, hi = list(bounds), list(bounds)
  lo[-1], hi[-1] = (0, d // 2), (d // 2, d)
  return x.shrink(lo), x.shrink(hi)


@op("RotaryEmbedding")
def _rotary(ins, at):
  x, cos, sin = ins[0], ins[1], ins[2]
  shape = x.shape
  if x.ndim == 4:                      # (B, H, S, D) -> (B, S, H, D)
    x = x.permute(0, 2, 1, 3)
  elif x.ndim == 3:
    heads = at.int("num_heads", 0)
    if not heads:
      raise ShapeError("RotaryEmbedding on a 3-D input needs the num_heads attribute")
    x = x.reshape(shape[0], shape[1], heads, shape[2] // heads)
  else:
    raise ShapeError(f"RotaryEmbedding input must be 3-D or 4-D, got {shape}")
  rd = at.int("rotary_embedding_dim", 0) or x.shape[3]
  if ins.has(3):
    pos = ins[3].cast(dtypes.int32)
    cos, sin = take(cos, pos, axis=0), take(sin, pos, axis=0)
  if cos.shape[-1] != rd // 2:
    raise ShapeError(f"RotaryEmbedding: the cos cache's last dim {cos.shape[-1]} is not "
                     f"rotary_embedding_dim/2 = {rd // 2}")
  cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
  head = x.shape[3]
  rot = x.shrink(((0, x.shape[0]), (0, x.shape[1]), (0, x.shape[2]), (0, rd)))
  interleaved = bool(at.int("interleaved", 0))
  x1, x2 = _halves(rot, interleaved)
  real = cos * x1 - sin * x2
  imag = sin * x1 + cos * x2
  if interleaved:
    rot = stack([real, imag], -1).reshape(rot.shape)
  else:
    rot = cat([real, imag], -1)
  if rd < head:
    rest = x.shrink(((0, x.shape[0]), (0, x.shape[1]), (0, x.shape[2]), (rd, head)))
    rot = cat([rot, rest], -1)
  out = rot.cast(ins[0].dtype)
  return out.reshape(shape) if len(shape) == 3 else out.permute(0, 2, 1, 3)


# ---- LinearAttention -----------------------------------------------------------------------

_RULES = ("linear", "gated", "delta", "gated_delta")


def _heads(x, heads: int):
  """(B, T, H*D) -> (B, T, H, D) in float32."""
  b, t, hd = x.shape
  return x.cast(dtypes.float32).reshape(b, t, heads, hd // heads)


def _at(x, t: int):
  """Step t of a (B, T, ...) tensor: (B, ...)."""
  bounds = [(0, n) for n in x.shape]
  bounds[1] = (t, t + 1)
  return x.shrink(bounds).squeeze(1)


@op("LinearAttention")
def _linear_attention(ins, at):
  rule = at.str("update_rule", "gated_delta")
  if rule not in _RULES:
    raise UnsupportedError(f"LinearAttention update_rule {rule!r}: ONNX defines {_RULES}")
  hq, hkv = at.int("q_num_heads"), at.int("kv_num_heads")
  if not hq or not hkv or hq % hkv:
    raise ShapeError(f"LinearAttention: q_num_heads {hq} must be a positive multiple of "
                     f"kv_num_heads {hkv}")
  q, k, v = _heads(ins[0], hq), _heads(ins[1], hkv), _heads(ins[2], hkv)
  b, steps, _, dk = q.shape
  dv, g = v.shape[3], hq // hkv
  gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
  decay = ins[4].cast(dtypes.float32).reshape(b, steps, hkv, -1) if gated else None
  beta = ins[5].cast(dtypes.float32).reshape(b, steps, -1, 1) if delta else None
  if (gated and decay is None) or (delta and beta is None):
    raise ShapeError(f"LinearAttention update_rule {rule!r} needs its decay/beta inputs")
  state = ins[3].cast(dtypes.float32) if ins.has(3) else \
    Tensor.zeros(b, hkv, dk, dv, dtype=dtypes.float32, device=q.device)
  scale = at.float("scale", 0.0) or 1 / math.sqrt(dk)
  outs = []
  for t in range(steps):
    kt, vt = _at(k, t), _at(v, t)                              # (B, Hkv, dk), (B, Hkv, dv)
    if gated:
      state = state * _at(decay, t).exp().unsqueeze(-1)
    if delta:
      read = (state * kt.unsqueeze(-1)).sum(-2)                # S^T k: (B, Hkv, dv)
      vt = _at(beta, t) * (vt - read)
    state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
    qt = _at(q, t).reshape(b, hkv, g, dk, 1)
    outs.append((qt * state.unsqueeze(2)).sum(-2).reshape(b, hq * dv) * scale)
  out = stack(outs, 1).cast(ins[0].dtype)
  return [out, state.cast(ins[0].dtype)]


# ---- CausalConvWithState -------------------------------------------------------------------

@op("CausalConvWithState")
def _causal_conv(ins, at):
  x, w = ins[0], ins[1]
  b, c, n = x.shape
  k = w.shape[2]
  act = at.str("activation", "none")
  if act not in ("none", "silu", "swish"):
    raise UnsupportedError(f"CausalConvWithState activation {act!r}: none, silu or swish")
  past = ins[3] if ins.has(3) else Tensor.zeros(b, c, k - 1, dtype=x.dtype, device=x.device)
  xp = cat([past.cast(x.dtype), x], 2) if k > 1 else x
  wf = w.cast(dtypes.float32).reshape(c, k)
  y = None
  for j in range(k):
    tap = xp.shrink(((0, b), (0, c), (j, j + n))).cast(dtypes.float32)
    part = tap * wf[:, j].reshape(1, c, 1)
    y = part if y is None else y + part
  if ins.has(2):
    y = y + ins[2].cast(dtypes.float32).reshape(1, c, 1)
  if act != "none":
    y = y * y.sigmoid()
  total = xp.shape[2]
  state = xp.shrink(((0, b), (0, c), (total - (k - 1), total)))
  return [y.cast(x.dtype), state]


@op("SwiGLU")
def _swiglu(ins, at):
  a, b = ins[0], ins[1]
  if a.shape != b.shape:
    raise ShapeError(f"SwiGLU inputs must have one shape (no broadcasting): {a.shape}, {b.shape}")
  alpha = at.float("alpha", 1.0)
  return a * (a * alpha).sigmoid() * b


# ---- FlexAttention (ai.onnx.preview) -------------------------------------------------------

def _modded(ins, name: str, x):
  """x through the node's `name` modifier subgraph, when it has one."""
  graph = ins.node.subgraphs.get(name)
  if graph is None:
    return x
  out = ins.runner.run_graph(graph, {graph.input_names[0]: x})[0]
  return ins.runner.upload(out, ins.node.describe()) if not isinstance(out, Tensor) else out


@op("FlexAttention")
def _flex_attention(ins, at):
  """Scaled dot-product attention with score_mod / prob_mod subgraphs (run on the whole score
  and probability tensors), GQA by contiguous query-head groups."""
  q, k, v = ins[0], ins[1], ins[2]
  b, hq, lq, d = q.shape
  hkv = k.shape[1]
  if hq % hkv:
    raise ShapeError(f"FlexAttention: {hq} query heads is not a multiple of {hkv} kv heads")
  wide = dtypes.float64 if q.dtype == dtypes.float64 else dtypes.float32
  code = at.int("softmax_precision")
  if code is not None:
    wide = ins.dtype(code)
  g = hq // hkv
  if g > 1:
    k = k.unsqueeze(2).expand(b, hkv, g, *k.shape[2:]).reshape(b, hq, *k.shape[2:])
    v = v.unsqueeze(2).expand(b, hkv, g, *v.shape[2:]).reshape(b, hq, *v.shape[2:])
  scale = at.float("scale", 0.0) or 1 / math.sqrt(d)
  scores = (q.cast(wide) @ k.cast(wide).permute(0, 1, 3, 2)) * scale
  scores = _modded(ins, "score_mod", scores)
  probs = _modded(ins, "prob_mod", scores.softmax(-1))
  return (probs @ v.cast(wide)).cast(q.dtype)
