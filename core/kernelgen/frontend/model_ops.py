"""The nn operations models need, with torch's definitions (torch.nn.functional): interpolate,
batchnorm (inference form), group_norm, instance_norm, dropout, nll_loss, cross_entropy and
scaled_dot_product_attention, built from Tensor primitives (broadcasts, reductions, where, views).

Differences from torch, on purpose:
- `dropout(p, seed=)` draws its mask from the counter-based hash behind `Tensor.rand` (so the
  same seed gives the same mask on every device), not from torch's generator.
- class-index targets may be any integer dtype (torch: int64); indices out of 0..C-1 that are
  not `ignore_index` contribute 0 (torch raises on the device).
- `scaled_dot_product_attention` is one fused kernel (no L x S scores in memory) where it fits,
  else matmul -> softmax -> matmul (see its docstring).
"""
from __future__ import annotations

import math
import struct

from ..dtype import dtypes
from ..errors import DTypeError, ShapeError
from ..graph.lazy import L, LazyOp
from .autograd import is_grad_enabled
from .combine import where
from .indexing_ops import take_static
from .operands import TensorOps
from .tensor_data import broadcast_shape

INTERPOLATE_MODES = ("nearest", "linear", "bilinear")


def f32(v: float) -> float:
  """v rounded to float32 (torch computes interpolation coordinates in float32)."""
  return struct.unpack("<f", struct.pack("<f", v))[0]


# ---- interpolate -----------------------------------------------------------------------------

def _out_sizes(x, size, scale_factor) -> tuple[list, list]:
  spatial = x.shape[2:]
  n = len(spatial)
  if (size is None) == (scale_factor is None):
    raise ShapeError("interpolate needs exactly one of size= and scale_factor=")
  if size is not None:
    sizes = [size] * n if isinstance(size, int) else list(size)
    if len(sizes) != n or any(s <= 0 for s in sizes):
      raise ShapeError(f"interpolate size {size} needs {n} positive sizes for the spatial dims "
                       f"of {x.shape}")
    return sizes, [None] * n
  scales = [float(scale_factor)] * n if isinstance(scale_factor, (int, float)) \
    else [float(s) for s in scale_factor]
  if len(scales) != n or any(s <= 0 for s in scales):
    raise ShapeError(f"interpolate scale_factor {scale_factor} needs {n} positive factors")
  return [int(math.floor(i * s)) for i, s in zip(spatial, scales)], scales


def nearest_sources(n_in: int, n_out: int, scale) -> list:
  """torch's nearest: src = min(floor(dst * scale), in - 1), scale = 1/scale_factor or in/out
  (float32)."""
  if n_out == n_in:
    return list(range(n_out))
  if n_out == 2 * n_in:
    return [d >> 1 for d in range(n_out)]
  s = f32(1.0 / scale) if scale else f32(n_in / n_out)
  return [min(int(math.floor(f32(d * s))), n_in - 1) for d in range(n_out)]


def linear_sources(n_in: int, n_out: int, scale, align_corners: bool) -> tuple:
  """torch's linear interpolation along one axis: per output, the two source positions and
  their weights (i0, i1, 1 - lambda, lambda). Half-pixel centres (src = (dst + 0.5) * scale -
  0.5, clamped at 0) or, with align_corners, corners onto corners (src = dst * (in - 1) / (out -
  1)); float32 arithmetic, as torch."""
  if align_corners:
    s = f32((n_in - 1) / (n_out - 1)) if n_out > 1 else 0.0
  else:
    s = f32(1.0 / scale) if scale else f32(n_in / n_out)
  i0s, i1s, w0s, w1s = [], [], [], []
  for d in range(n_out):
    src = f32(s * d) if align_corners else max(f32(f32(s * f32(d + 0.5)) - 0.5), 0.0)
    i0 = int(src)
    lam = f32(src - i0)
    i0s.append(i0)
    i1s.append(i0 + 1 if i0 < n_in - 1 else i0)
    w0s.append(f32(1.0 - lam))
    w1s.append(lam)
  return i0s, i1s, w0s, w1s


def _lerp_axis(x, axis: int, sources: tuple):
  """x along `axis` as x[i0] * w0 + x[i1] * w1 (two gathers of host-known positions: only the
  two neighbours are read, so an inf elsewhere stays out, as in torch)."""
  i0, i1, w0, w1 = sources
  shape = [1] * x.ndim
  shape[axis] = len(i0)
  weight = lambda w: type(x)(w, dtype=dtypes.float32, device=x.device).reshape(tuple(shape))
  return take_static(x, axis, i0) * weight(w0) + take_static(x, axis, i1) * weight(w1)


def interpolate(x, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
  """torch.nn.functional.interpolate of an (N, C, *spatial) tensor: "nearest" (torch's legacy
  nearest: src = floor(dst * in / out), views where the pattern allows, else a gather),
  "linear" (1 spatial dim) or "bilinear" (2): per axis (the last first, as torch) the two
  neighbours, gathered, weighted and added; half-pixel centres unless align_corners=True."""
  if mode not in INTERPOLATE_MODES:
    raise ShapeError(f"interpolate mode {mode!r} is not one of {', '.join(INTERPOLATE_MODES)}")
  if x.ndim < 3:
    raise ShapeError(f"interpolate needs (N, C, *spatial), got shape {x.shape}")
  want = {"linear": 1, "bilinear": 2}.get(mode)
  if want is not None and x.ndim - 2 != want:
    raise ShapeError(f"interpolate mode {mode!r} needs {want} spatial dims, got {x.shape}")
  if mode == "nearest" and align_corners is not None:
    raise ShapeError("align_corners only applies to linear and bilinear modes")
  sizes, scales = _out_sizes(x, size, scale_factor)
  out = x if mode == "nearest" or x.dtype.is_float() else x.cast(dtypes.float32)
  for axis in range(x.ndim - 1, 1, -1):                 # the last axis first, as torch
    n_in, n_out, scale = x.shape[axis], sizes[axis - 2], scales[axis - 2]
    if mode == "nearest":
      out = take_static(out, axis, nearest_sources(n_in, n_out, scale))
    else:
      out = _lerp_axis(out, axis, linear_sources(n_in, n_out, scale, bool(align_corners)))
  return out.cast(x.dtype) if mode == "nearest" or x.dtype.is_float() else out


# ---- normalization and dropout ---------------------------------------------------------------

def _per_channel(x, p, what: str):
  """A per-channel (C,) parameter shaped to broadcast over (N, C, *spatial)."""
  if not hasattr(p, "shape"):
    p = type(x)(p, device=x.device)
  if p.shape != (x.shape[1],):
    raise ShapeError(f"{what} needs shape ({x.shape[1]},) (one value per channel), got {p.shape}")
  return p.reshape((1, x.shape[1]) + (1,) * (x.ndim - 2))


def _affine(x, out, weight, bias, what: str):
  if weight is not None:
    out = out * _per_channel(x, weight, f"{what} weight")
  if bias is not None:
    out = out + _per_channel(x, bias, f"{what} bias")
  return out


def batchnorm(x, mean, var, weight=None, bias=None, eps: float = 1e-5):
  """Inference batch norm over channel axis 1: (x - mean) / sqrt(var + eps) * weight + bias."""
  if x.ndim < 2:
    raise ShapeError(f"batchnorm needs (N, C, ...), got shape {x.shape}")
  m, v = _per_channel(x, mean, "batchnorm mean"), _per_channel(x, var, "batchnorm var")
  return _affine(x, (x - m) * (v + eps).rsqrt(), weight, bias, "batchnorm")


def group_norm(x, groups: int, weight=None, bias=None, eps: float = 1e-5):
  """torch's group_norm: (N, C, *) normalized over each group of C/groups channels (and the
  spatial dims), biased variance, then a per-channel affine."""
  if x.ndim < 2 or groups <= 0 or x.shape[1] % groups:
    raise ShapeError(f"group_norm: {groups} groups must divide the channels of {x.shape}")
  flat = x.reshape(x.shape[0], groups, -1)
  out = flat.layernorm(axis=-1, eps=eps)
  # the affine in the grouped shape, reshaped back last: one row kernel (graph/schedule.py)
  per_group = (1, groups, x.shape[1] // groups, math.prod(x.shape[2:]))
  for p, what in ((weight, "weight"), (bias, "bias")):
    if p is not None:
      p = _per_channel(x, p, f"group_norm {what}").reshape(per_group[:3] + (1,))
      p = p.expand(per_group).reshape((1,) + flat.shape[1:])
      out = out * p if what == "weight" else out + p
  return out.reshape(x.shape)


def instance_norm(x, weight=None, bias=None, eps: float = 1e-5):
  """torch's instance_norm without running statistics: each (n, c) plane normalized."""
  if x.ndim < 3:
    raise ShapeError(f"instance_norm needs (N, C, *spatial), got shape {x.shape}")
  return group_norm(x, x.shape[1], weight, bias, eps)


def dropout(x, p: float = 0.5, seed: int = 0, training: bool = True):
  """Zero each element with probability p, scale the rest by 1 / (1 - p); the mask comes from
  Tensor.rand(seed=seed), so it is deterministic. Not training: x itself."""
  if not 0 <= p <= 1:
    raise ShapeError(f"dropout probability must be in [0, 1], got {p}")
  if not training or p == 0:
    return x
  if p == 1:
    return x * 0
  keep = type(x).rand(*x.shape, seed=seed, device=x.device) >= p
  return where(keep, x * (1.0 / (1.0 - p)), 0)


# ---- losses ----------------------------------------------------------------------------------

def _batched(x, target):
  """(N, C, *d) input and (N, *d) or (N, C, *d) target; a (C,) input gets N = 1."""
  if x.ndim == 1:
    x = x.unsqueeze(0)
    target = target.reshape((1,) + target.shape)
  if x.ndim < 2:
    raise ShapeError(f"a loss needs (N, C, ...) or (C,) input, got {x.shape}")
  return x, target


def _class_axis(x, values):
  return values.reshape((1, x.shape[1]) + (1,) * (x.ndim - 2))


def reduce_loss(loss, reduction: str, denominator=None):
  if reduction == "none":
    return loss
  if reduction == "sum":
    return loss.sum()
  if reduction == "mean":
    return loss.sum() / denominator if denominator is not None else loss.mean()
  raise ShapeError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _pick(x, target, weight, ignore_index: int):
  """(-x[target] * w[target], w[target]) per element, 0 where target == ignore_index."""
  if target.dtype.is_float() or target.dtype == dtypes.bool:
    raise DTypeError(f"class-index targets need an integer dtype, got {target.dtype}")
  if target.shape != (x.shape[0],) + x.shape[2:]:
    raise ShapeError(f"target shape {target.shape} does not fit input {x.shape}: class indices "
                     f"need shape {(x.shape[0],) + x.shape[2:]}")
  c = x.shape[1]
  work = dtypes.int32 if target.dtype.itemsize < 4 else target.dtype   # (no int64 promotion)
  target = target.cast(work)
  classes = _class_axis(x, type(x).arange(c, dtype=work, device=x.device))
  hit = (target.unsqueeze(1) == classes) & (target != ignore_index).unsqueeze(1)
  w = _class_axis(x, weight.cast(x.dtype)) if weight is not None else x._const(1.0)
  w_t = where(hit, w, 0.0).sum(1)
  picked = where(hit, x * w, 0.0).sum(1)
  return -picked, w_t


def nll_loss(x, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):
  """torch's nll_loss of log-probabilities x (N, C, *d) and class indices (N, *d): -x[target]
  weighted by weight[target]; "mean" divides by the summed weights of the targets counted."""
  squeeze = x.ndim == 1
  x, target = _batched(x.cast(dtypes.float32) if not x.dtype.is_float() else x, target)
  loss, w_t = _pick(x, target, weight, ignore_index)
  out = reduce_loss(loss, reduction, w_t.sum())
  return out.squeeze(0) if squeeze and reduction == "none" else out


def cross_entropy(x, target, weight=None, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0):
  """torch's cross_entropy of logits x (N, C, *d): log_softmax over C, then nll_loss against
  class indices (an integer target) or, for a float target of x's shape, -sum(p * log_softmax)
  per element ("mean" then divides by N * prod(d)). label_smoothing mixes in the uniform
  distribution, as torch."""
  squeeze = x.ndim == 1
  x, target = _batched(x, target)
  logp = x.log_softmax(axis=1)
  c = x.shape[1]
  w = _class_axis(x, weight.cast(logp.dtype)) if weight is not None else None
  if target.dtype.is_float():
    if target.shape != x.shape:
      raise ShapeError(f"probability targets need the input's shape {x.shape}, got "
                       f"{target.shape}")
    p = target * (1 - label_smoothing) + label_smoothing / c if label_smoothing else target
    terms = logp * p * w if w is not None else logp * p
    loss = -terms.sum(1)
    count = loss.numel() if loss.node.sym is None else None   # (symbolic: mean over values)
    out = reduce_loss(loss, reduction, count if reduction == "mean" else None)
    return out.squeeze(0) if squeeze and reduction == "none" else out
  nll, w_t = _pick(logp, target, weight, ignore_index)
  out = reduce_loss(nll, reduction, w_t.sum())
  if label_smoothing:
    smooth = -(logp * w).sum(1) if w is not None else -logp.sum(1)
    valid = target != ignore_index
    smooth = where(valid, smooth, 0.0)
    count = w_t.sum() if w is not None else valid.sum().cast(logp.dtype)
    out = (1 - label_smoothing) * out + reduce_loss(smooth, reduction, count) * (label_smoothing / c)
  return out.squeeze(0) if squeeze and reduction == "none" else out


# ---- attention -------------------------------------------------------------------------------

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
  keys = None
  if offset is not None or any(t.node.sym is not None for t in (q, k, v)):
    from .symbolic import attention_operands, key_count
    keys = key_count(k)
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
  sym = srcs[0].node.logical[:-1] + (v.shape[-1],) if srcs[0].node.sym is not None else None
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


class ModelOps(TensorOps):
  """Tensor methods: interpolate, batchnorm, group_norm, instance_norm, dropout, nll_loss,
  cross_entropy, scaled_dot_product_attention (q.scaled_dot_product_attention(k, v))."""
  __slots__ = ()

  def interpolate(self, size=None, scale_factor=None, mode: str = "nearest",
                  align_corners=None):
    return interpolate(self, size, scale_factor, mode, align_corners)

  def batchnorm(self, mean, var, weight=None, bias=None, eps: float = 1e-5):
    return batchnorm(self, mean, var, weight, bias, eps)

  def group_norm(self, groups: int, weight=None, bias=None, eps: float = 1e-5):
    return group_norm(self, groups, weight, bias, eps)

  def instance_norm(self, weight=None, bias=None, eps: float = 1e-5):
    return instance_norm(self, weight, bias, eps)

  def dropout(self, p: float = 0.5, seed: int = 0, training: bool = True):
    return dropout(self, p, seed, training)

  def nll_loss(self, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):
    return nll_loss(self, target, weight, ignore_index, reduction)

  def cross_entropy(self, target, weight=None, ignore_index: int = -100,
                    reduction: str = "mean", label_smoothing: float = 0.0):
    return cross_entropy(self, target, weight, ignore_index, reduction, label_smoothing)

  def scaled_dot_product_attention(self, k, v, mask=None, is_causal: bool = False, scale=None,
                                   offset=None):
    return scaled_dot_product_attention(self, k, v, mask, is_causal, scale, offset=offset)
