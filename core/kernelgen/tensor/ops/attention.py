"""scaled_dot_product_attention with torch's definition (torch.nn.functional): one fused kernel
(no L x S scores in memory) where it fits, else matmul -> softmax -> matmul (see its docstring);
the AttentionOps mixin that `Tensor` lists among its bases (q.scaled_dot_product_attention(k, v)).
"""
from __future__ import annotations

import math

from ...dtype import dtypes
from ...errors import ShapeError
from ...graph.lazy import L, LazyOp
from ..autograd import is_grad_enabled
from ..combine import where
from ..operands import TensorOps
from ..data import broadcast_shape


def scaled_dot_product_attention(q, k, v, mask=None, is_causal: bool = False, scale=None,
                                 attn_mask=None, offset=None):
  """torch's scaled_dot_product_attention: softmax(q @ k^T * scale + bias) @ v, with q (..., L,
  E), k (..., S, E), v (..., S, Ev); scale defaults to 1/sqrt(E). `mask` (torch's attn_mask,
  either name) broadcasts to (..., L, S): a bool mask keeps the positions where it is True, a
  float mask is added; is_causal keeps j <= i (the top-left aligned lower triangle). A row whose
  every position is masked out is NaN (as torch).

  One kernel (lazy ATTENTION, lowering/attention.py: a thread per query row walks the keys once
  with an online softmax; the L x S scores are never stored) where q, k and v share a float
  dtype, the mask is bool or of that dtype, E and Ev are at most ATTENTION_MAX_DIM and no
  gradient is recorded; otherwise matmul -> softmax -> matmul (the scores a kernel of their
  own), which autograd differentiates.

  Symbolic sizes (kg.Dim) may stand for L and S (and the batch axes); `offset` (an int or a
  symbolic size, with is_causal) places query i at position i + offset, so it keeps keys
  j <= i + offset: a decode step's queries after a cache of `offset` keys."""
  mask = attn_mask if mask is None else mask
  if is_causal and mask is not None:
    raise ShapeError("give either a mask or is_causal=True, not both (as torch)")
  if offset is not None and not is_causal:
    raise ShapeError("offset places causal queries: give it with is_causal=True")
  keys = fused = None
  if offset is not None or any(t.node.sym is not None for t in (q, k, v)):
    from ..symbolic import attention_operands, key_count
    keys = key_count(k)
    if keys is not None:    # the fused kernel reads no key past `keys`: k, v as they are
      fused = (k, v, attention_operands(q, k, v, mask, is_causal, offset or 0, False)[2])
    k, v, mask = attention_operands(q, k, v, mask, is_causal, offset or 0)
    is_causal = False
  if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] != k.shape[-1] or \
          k.shape[-2] != v.shape[-2]:
    raise ShapeError(f"attention shapes q {q.shape}, k {k.shape}, v {v.shape}: need (..., L, E),"
                     f" (..., S, E) and (..., S, Ev)")
  scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
  if mask is not None and not hasattr(mask, "shape"):
    mask = type(q)(mask, device=q.device)
  if _fusable(q, k, v, mask):
    k, v, mask = fused or (k, v, mask)
    return _fused_attention(q, k, v, mask, is_causal, float(scale), keys)
  return _split_attention(q, k, v, mask, is_causal, scale)


# fused attention (lowering/attention.py) for head dims up to this: each thread holds its query
# row and Ev accumulators in registers (measured: see bench/attention_times.py)
ATTENTION_MAX_DIM = 128


def _fusable(q, k, v, mask) -> bool:
  """Whether sdpa of these operands is one fused ATTENTION kernel (see its docstring)."""
  dtype = q.dtype
  operands = (q, k, v) if mask is None else (q, k, v, mask)
  if not dtype.is_float() or k.dtype != dtype or v.dtype != dtype or \
     (mask is not None and mask.dtype not in (dtypes.bool, dtype)):
    return False
  if max(q.shape[-1], v.shape[-1]) > ATTENTION_MAX_DIM or 0 in q.shape + k.shape + v.shape:
    return False
  if mask is not None and broadcast_shape(mask.shape[-2:], (q.shape[-2], k.shape[-2])) != \
     (q.shape[-2], k.shape[-2])[2 - min(mask.ndim, 2):] and mask.ndim >= 2:
    return False
  return not (is_grad_enabled() and any(t.requires_grad for t in operands))


def _fused_attention(q, k, v, mask, is_causal: bool, scale: float, keys=None):
  """The ATTENTION node over q, k, v (and mask) broadcast to their common batch axes; `keys`
  (an int32 scalar tensor): how many keys to walk (a symbolic key length)."""
  n, m = q.shape[-2], k.shape[-2]
  shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
  if mask is not None:
    if mask.ndim < 2:
      mask = mask.reshape((1,) * (2 - mask.ndim) + mask.shape)
    broadcast_shape(mask.shape[-2:], (n, m))
    shapes.append(mask.shape[:-2])
  lead = broadcast_shape(*shapes)
  srcs = [q.expand(lead + q.shape[-2:]), k.expand(lead + k.shape[-2:]),
          v.expand(lead + v.shape[-2:])]
  if mask is not None:
    srcs.append(mask.expand(lead + (n, m)))
  sym = srcs[0].node.logical[:-1] + (v.shape[-1],)    # static queries over symbolic keys: static
  arg = (scale, bool(is_causal))
  if keys is not None:
    srcs.append(keys)
    arg += ("keys",)
  node = LazyOp(L.ATTENTION, q.dtype, lead + (n, v.shape[-1]), tuple(s.node for s in srcs),
                arg, sym=sym)
  return type(q)(node)


def _split_attention(q, k, v, mask, is_causal: bool, scale):
  """sdpa as matmul -> softmax -> matmul (differentiable; the scores a kernel of their own)."""
  scores = (q @ k.swapaxes(-1, -2)) * scale
  n, m = scores.shape[-2:]
  if is_causal:
    mask = type(q).ones(n, m, dtype=dtypes.bool, device=q.device).tril()
  if mask is not None:
    if mask.dtype == dtypes.bool:
      scores = where(mask, scores, -math.inf)
    else:
      scores = scores + mask
  return scores.softmax(-1) @ v


class AttentionOps(TensorOps):
  """Tensor methods: scaled_dot_product_attention (q.scaled_dot_product_attention(k, v))."""
  __slots__ = ()

  def scaled_dot_product_attention(self, k, v, mask=None, is_causal: bool = False, scale=None,
                                   offset=None):
    """torch's scaled_dot_product_attention with self as the queries q (..., L, E), keys k (..., S,
    E) and values v (..., S, Ev): softmax(q @ k^T * scale + mask) @ v, shape (..., L, Ev) with
    the batch dims broadcast. scale defaults to 1 / sqrt(E). `mask` broadcasts to (..., L, S): a
    bool mask keeps the positions where it is True, a float mask is added; is_causal keeps key j
    <= query i (+ offset: with `offset=p`, query i attends to keys up to i + p, as in decoding
    with a cache of p earlier positions; p may be a symbolic size). A row with every position
    masked out is NaN (as torch). The function form: `kg.scaled_dot_product_attention(q, k, v,
    ...)`.

    Raises ShapeError when the shapes do not fit, or for both a mask and is_causal=True."""
    return scaled_dot_product_attention(self, k, v, mask, is_causal, scale, offset=offset)
