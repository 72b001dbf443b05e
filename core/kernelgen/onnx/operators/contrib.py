"""onnxruntime's com.microsoft operators that language-model exports (Optimum, transformers.js,
onnxruntime-genai) and onnxruntime's dynamic quantizer write, as Tensor code following
onnxruntime's operator documentation: the fused norms (SimplifiedLayerNormalization, its Skip
forms, SkipLayerNormalization), the GELUs (Gelu, FastGelu, BiasGelu, QuickGelu),
RotaryEmbedding, GroupQueryAttention, MultiHeadAttention, DynamicQuantizeMatMul and
MatMulIntegerToFloat. MatMulNBits and GatherBlockQuantized are in quant_nbits.py.

A present key/value cache is the past one with the new keys written after each batch row's
past length (write_cache; `seqlens_k + 1 - sequence_length` in GroupQueryAttention).
"""
from __future__ import annotations

import math

from ...dtype import dtypes
from ...errors import ShapeError, UnsupportedError
from ...graph.dims import Sym
from ...tensor.operands import result_dtype
from ...tensor.ops.attention import scaled_dot_product_attention
from ...tensor.tensor import Tensor, cat, stack, where
from ..registry import axis_index, domain_op, narrowed, op, widened
from . import kv_write
from .gqa_step import step_shared

MS = "com.microsoft"


# ---- norms -----------------------------------------------------------------------------------
# Each computes on widened (float32) inputs and rounds its outputs once (registry.widened).

def rms_norm(x: Tensor, scale: Tensor, axis: int, eps: float, dtype=None) -> tuple:
  """(x / rms(x) * scale in `dtype` (default: x's and scale's promoted), 1 / rms in float32) over
  the axes from `axis` on; x and scale widened to float32 first, the product rounded once."""
  axes = tuple(range(axis, x.ndim))
  xf = widened(x)
  inv = ((xf * xf).mean(axes, keepdim=True) + eps).rsqrt()
  return (xf * inv * widened(scale)).cast(dtype or result_dtype(x, scale)), inv


@op("SimplifiedLayerNormalization")      # onnxruntime registers it in the default domain
def _simplified_layer_norm(ins, at):
  x = ins[0]
  y, inv = rms_norm(x, ins[1], axis_index(at.int("axis", -1), x.ndim),
                    at.float("epsilon", 1e-5))
  return [y, inv]


def _skip_sum(ins, bias_at: int) -> Tensor:
  """input + skip (+ bias) in float32 where they are 16-bit: SkipLayerNormalization's
  input_skip_bias_sum as onnxruntime's CPU kernel computes it; the norm reads it unrounded, the
  sum output is it rounded once. (The norm reading the rounded sum, to keep that buffer 16-bit:
  4-layer SmolLM2 fp16 logits 1.26x as far from the float32-computed ones as onnxruntime's,
  against 1.15x.)"""
  total = widened(ins[0]) + widened(ins[1])
  if ins.has(bias_at):
    total = total + widened(ins[bias_at])
  return total


@domain_op(MS, "SkipSimplifiedLayerNormalization")
def _skip_simplified(ins, at):
  total = _skip_sum(ins, 3)
  y, inv = rms_norm(total, ins[2], total.ndim - 1, at.float("epsilon", 1e-5),
                    result_dtype(ins[0], ins[2]))
  return [y, None, inv, total.cast(result_dtype(ins[0], ins[1]))]


@domain_op(MS, "SkipLayerNormalization")
def _skip_layer_norm(ins, at):
  total = _skip_sum(ins, 4)
  mean = total.mean(-1, keepdim=True)
  inv = (((total - mean) * (total - mean)).mean(-1, keepdim=True) +
         at.float("epsilon", 1e-12)).rsqrt()
  y = (total - mean) * inv * widened(ins[2])
  if ins.has(3):
    y = y + widened(ins[3])
  return [y.cast(result_dtype(ins[0], ins[2])), mean, inv,
          total.cast(result_dtype(ins[0], ins[1]))]


# ---- GELUs -----------------------------------------------------------------------------------

@domain_op(MS, "Gelu")
def _gelu(ins, at):
  return narrowed(widened(ins[0]).gelu("none"), ins[0])


@domain_op(MS, "BiasGelu")
def _bias_gelu(ins, at):
  return narrowed((widened(ins[0]) + widened(ins[1])).gelu("none"), ins[0])


@domain_op(MS, "FastGelu")
def _fast_gelu(ins, at):
  x = widened(ins[0]) + widened(ins[1]) if ins.has(1) else widened(ins[0])
  return narrowed(x.gelu("tanh"), ins[0])


@domain_op(MS, "QuickGelu")
def _quick_gelu(ins, at):
  x = widened(ins[0])
  return narrowed(x * (x * at.float("alpha", 1.702)).sigmoid(), ins[0])


# ---- rotary embeddings -----------------------------------------------------------------------

def rotate(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
  """Rotary embedding of x (B, S, H, D) with cos/sin (B, S, R/2) per position: the first R
  dims rotated (as pairs (2i, 2i+1) when interleaved, else halves), the rest kept."""
  b, s, h, d = x.shape
  r = 2 * cos.shape[-1]
  rot = x.shrink(((0, b), (0, s), (0, h), (0, r))).cast(dtypes.float32)
  if interleaved:
    pairs = rot.reshape(b, s, h, r // 2, 2)
    x1, x2 = pairs[..., 0], pairs[..., 1]
  else:
    x1 = rot.shrink(((0, b), (0, s), (0, h), (0, r // 2)))
    x2 = rot.shrink(((0, b), (0, s), (0, h), (r // 2, r)))
  c, si = cos.cast(dtypes.float32).unsqueeze(2), sin.cast(dtypes.float32).unsqueeze(2)
  real, imag = c * x1 - si * x2, si * x1 + c * x2
  out = stack([real, imag], -1).reshape(b, s, h, r) if interleaved else cat([real, imag], -1)
  out = out.cast(x.dtype)
  if r < d:
    out = cat([out, x.shrink(((0, b), (0, s), (0, h), (r, d)))], -1)
  return out


def cos_sin_at(cos: Tensor, sin: Tensor, pos: Tensor) -> tuple:
  """The cache rows at int positions `pos` (B, S): two (B, S, R/2) Tensors."""
  rows = cos.shape[0]
  pos = pos.cast(dtypes.int32).maximum(0).minimum(rows - 1)
  return cos[pos], sin[pos]


@domain_op(MS, "RotaryEmbedding")
def _rotary(ins, at):
  """input (B, S, H*D) or (B, H, S, D), position_ids (B, S) or one offset, caches (P, R/2)."""
  x, pos, cos, sin = ins[0], ins[1], ins[2], ins[3]
  four = x.ndim == 4
  if four:
    x4 = x.permute(0, 2, 1, 3)
  elif x.ndim == 3:
    heads = at.int("num_heads", 0) or x.shape[2] // (2 * cos.shape[-1])
    x4 = x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads)
  else:
    raise ShapeError(f"RotaryEmbedding of domain {MS!r}: the input must be 3-D or 4-D, got "
                     f"{x.shape}")
  b, s = x4.shape[:2]
  if pos._elements() == 1:
    pos = Tensor.arange(s, device=x.device).reshape(1, s).expand(b, s) + \
      pos.cast(dtypes.int32).reshape(1, 1)
  c, si = cos_sin_at(cos, sin, pos.reshape(b, s) if pos._elements() != 1 else pos)
  y = rotate(x4, c, si, bool(at.int("interleaved", 0)))
  return y.permute(0, 2, 1, 3) if four else y.reshape(x.shape)


# ---- attention -------------------------------------------------------------------------------

def _split_heads(x: Tensor, heads: int) -> Tensor:
  """(B, S, H*D) -> (B, S, H, D)."""
  b, s, hd = x.shape
  return x.reshape(b, s, heads, hd // heads)


def _repeat_kv(x: Tensor, groups: int) -> Tensor:
  """(B, Hkv, T, D) -> (B, Hkv*groups, T, D), each kv head serving `groups` query heads."""
  if groups == 1:
    return x
  b, h, t, d = x.shape
  return x.reshape(b, h, 1, t, d).expand(b, h, groups, t, d).reshape(b, h * groups, t, d)


def write_cache(past: Tensor | None, new: Tensor, start: Tensor, length: int,
                shared: dict | None = None) -> Tensor:
  """present (B, H, length, D): past's rows before each batch row's `start` (B,) int32, then
  `new` (B, H, S, D) (later rows: past's, or zeros); writes given one `shared` share its mask."""
  b, h, s, d = new.shape
  if isinstance(length, Sym) or past is not None and past.node.sym is not None:
    return _write_symbolic(past, new, start, length, {} if shared is None else shared)
  if past is None:
    past = Tensor.zeros(b, h, length, d, dtype=new.dtype, device=new.device)
  elif past.shape[2] < length:
    past = past.pad(((0, 0), (0, 0), (0, length - past.shape[2]), (0, 0)))
  elif past.shape[2] > length:
    past = past.shrink(((0, b), (0, h), (0, length), (0, d)))
  return _written(past, new, start, length, {} if shared is None else shared)


def _written(past: Tensor, new: Tensor, start: Tensor, rows: int, shared: dict) -> Tensor:
  """past (B, H, rows, D), `new` (B, H, S, D) written from each row's `start` on (mask: shared)."""
  b, h, s, d = new.shape
  if (b, s, rows) not in shared:
    j = Tensor.arange(rows, device=new.device).reshape(1, 1, rows, 1)
    rel = j - start.cast(dtypes.int32).reshape(b, 1, 1, 1)
    shared[b, s, rows] = ((rel >= 0) & (rel < s), rel.maximum(0).minimum(s - 1))
  fresh, idx = shared[b, s, rows]
  return where(fresh, new.gather(2, idx.expand(b, h, rows, d)), past.cast(new.dtype))


def _write_symbolic(past: Tensor | None, new: Tensor, start: Tensor, length, shared) -> Tensor:
  """write_cache where the cache length is symbolic (a Sym, symbolic dims): the present holds
  length.hi rows (the padded layout), past's buffer cut or extended to them (a view), the
  rows after `length` unspecified; one program for every length."""
  from ...graph.lazy import chain_view
  from ...tensor.symbolic import with_sym
  b, h, _, d = new.shape
  rows = length.hi if isinstance(length, Sym) else length
  if past is not None and shared.get("in_place"):     # kg.generate: kv_write.py
    written = kv_write.append(past, new, 2, start, (b, h, length, d))
    if written is not None:
      return written
  if past is None:
    past = Tensor.zeros(b, h, rows, d, dtype=new.dtype, device=new.device)
  else:
    node, have = past.node, past.shape[2]
    if have > rows:
      node = chain_view(node, "shrink", ((0, b), (0, h), (0, rows), (0, d)), sym=(b, h, rows, d))
    elif have < rows:
      node = chain_view(node, "pad", ((0, 0), (0, 0), (0, rows - have), (0, 0)),
                        sym=(b, h, rows, d))
    past = Tensor(node) if node is not past.node else with_sym(past, past.shape)
  return with_sym(_written(past, new, start, rows, shared), (b, h, length, d))


def _bias_from_allowed(allowed: Tensor, dtype) -> Tensor:
  return where(allowed, Tensor.zeros(1, dtype=dtype, device=allowed.device), -math.inf)


def _gqa_bias(past_len: Tensor, lens: Tensor, s: int, t: int, window: int, device) -> Tensor:
  """(B, 1, S, T) additive mask: key j seen by query i (at past_len + i) when j <= its position
  and j < its row's `lens` keys, and within the local window when there is one."""
  i = Tensor.arange(s, device=device).reshape(1, 1, s, 1)
  j = Tensor.arange(t, device=device).reshape(1, 1, 1, t)
  pos = i + past_len.cast(dtypes.int32).reshape(-1, 1, 1, 1)
  allowed = (j <= pos) & (j < lens.reshape(-1, 1, 1, 1))
  if window > 0:
    allowed = allowed & (j > pos - window)
  return _bias_from_allowed(allowed, dtypes.float32)


def _qkv(ins, hq: int, hkv: int) -> tuple:
  """query, key, value as (B, S, H, D), split from a packed query when key is absent."""
  q = ins[0]
  if ins.has(1):
    return _split_heads(q, hq), _split_heads(ins[1], hkv), _split_heads(ins[2], hkv)
  b, s, width = q.shape
  d = width // (hq + 2 * hkv)
  parts = [(0, hq * d), (hq * d, (hq + hkv) * d), ((hq + hkv) * d, width)]
  q, k, v = [q.shrink(((0, b), (0, s), part)) for part in parts]
  return _split_heads(q, hq), _split_heads(k, hkv), _split_heads(v, hkv)


def _attend(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float, softcap: float,
            sink: Tensor | None = None):
  """softmax(q k^T * scale (soft-capped) + bias) v in float32; q (B,H,S,D), k/v (B,H,T,D).
  `sink` (H,): one more logit per head in the softmax's sum (it takes no value)."""
  q, k, v = q.cast(dtypes.float32), k.cast(dtypes.float32), v.cast(dtypes.float32)
  if not (softcap and softcap > 0) and sink is None:
    return scaled_dot_product_attention(q, k, v, bias.cast(dtypes.float32), scale=scale)
  scores = (q @ k.permute(0, 1, 3, 2)) * scale
  if softcap and softcap > 0:
    scores = (scores / softcap).tanh() * softcap
  scores = scores + bias
  if sink is None:
    return scores.softmax(-1) @ v
  top = scores.max(-1, keepdim=True).maximum(sink.reshape(1, -1, 1, 1))
  e = (scores - top).exp()
  total = e.sum(-1, keepdim=True) + (sink.reshape(1, -1, 1, 1) - top).exp()
  return (e / total) @ v


def _gqa_checks(ins, at, hq: int, hkv: int) -> None:
  if not hq or not hkv or hq % hkv:
    raise ShapeError(f"GroupQueryAttention: num_heads {hq} must be a positive multiple of "
                     f"kv_num_heads {hkv}")
  if at.int("qk_output", 0):
    raise UnsupportedError(f"GroupQueryAttention of domain {MS!r}: qk_output is not "
                           f"supported")


def _sink(ins, at, heads: int, device) -> Tensor | None:
  """GroupQueryAttention's extra softmax logit per head: head_sink, or 0 (smooth_softmax)."""
  if ins.has(11):
    return ins[11].cast(dtypes.float32)
  if at.int("smooth_softmax", 0):
    return Tensor.zeros(heads, dtype=dtypes.float32, device=device)
  return None


def _present_length(total, past_k: Tensor | None):
  """The present caches' length: max(total_sequence_length, past length); a symbolic total
  (symbolic dims) itself (a present is the past and the new keys: never shorter)."""
  past = past_k.symbolic_shape[2] if past_k is not None else 0
  if isinstance(total, Sym):
    return total
  if isinstance(past, Sym):
    raise UnsupportedError(f"GroupQueryAttention of domain {MS!r}: a symbolic past length "
                           f"({past}) needs a symbolic total_sequence_length (the attention "
                           f"mask's width as a dim)")
  return max(total, past)


@domain_op(MS, "GroupQueryAttention")
def _group_query_attention(ins, at):
  """Grouped-query attention over a past + present KV cache, causal per batch row at
  seqlens_k + 1 total keys, optional rotary embedding, local window and soft cap."""
  hq, hkv = at.int("num_heads", 0), at.int("kv_num_heads", 0)
  _gqa_checks(ins, at, hq, hkv)
  q, k, v = _qkv(ins, hq, hkv)
  b, s, _, d = q.shape
  past_k, past_v = ins[3], ins[4]
  total = ins.scalar(6)
  total = total if isinstance(total, Sym) else int(total)
  step = step_shared(ins, b, q.symbolic_shape[1], past_k)   # gqa_step.py: alike in every layer
  lens, past_len = step["lens"], step["past_len"]
  if at.int("do_rotary", 0):
    pos = ins[9].cast(dtypes.int32) if ins.has(9) else \
      Tensor.arange(s, device=q.device).reshape(1, s) + past_len.reshape(b, 1)
    c, si = cos_sin_at(ins[7], ins[8], pos.reshape(-1, s).expand(b, s))
    inter = bool(at.int("rotary_interleaved", 0))
    q, k = rotate(q, c, si, inter), rotate(k, c, si, inter)
  length = _present_length(total, past_k)
  present_k = write_cache(past_k, k.permute(0, 2, 1, 3), past_len, length, step)
  present_v = write_cache(past_v, v.permute(0, 2, 1, 3), past_len, length, step)
  window = at.int("local_window_size", -1)
  if ("bias", window) not in step:
    step["bias", window] = _gqa_bias(past_len, lens, s, length, window, q.device)
  bias = step["bias", window]
  if ins.has(10):
    bias = bias + ins[10].cast(dtypes.float32)
  scale = at.float("scale", 0.0) or 1 / math.sqrt(d)
  g = hq // hkv
  y = _attend(q.permute(0, 2, 1, 3), _repeat_kv(present_k, g), _repeat_kv(present_v, g), bias,
              scale, at.float("softcap", 0.0), _sink(ins, at, hq, q.device))
  out = y.permute(0, 2, 1, 3).reshape(b, s, hq * d).cast(ins[0].dtype)
  return [out, present_k, present_v]


def _mha_kv(x: Tensor, heads: int, bias: Tensor | None) -> Tensor:
  """A key or value input (B, L, H*D) (with its bias) or already (B, H, L, D)."""
  if x.ndim == 4:
    return x
  if bias is not None:
    x = x + bias
  return _split_heads(x, heads).permute(0, 2, 1, 3)


def _mha_mask(ins, at, b: int, s: int, t: int, past: int, device) -> Tensor:
  """MultiHeadAttention's additive mask (B or 1, H or 1, S, T) from its mask inputs."""
  bias = Tensor.zeros(1, 1, s, t, dtype=dtypes.float32, device=device)
  fill = at.float("mask_filter_value", -10000.0)
  if ins.has(4):
    pad = ins[4]
    j = Tensor.arange(t, device=device)
    keep = j.reshape(1, t) < pad.cast(dtypes.int32).reshape(b, 1) if pad.ndim == 1 else pad != 0
    bias = bias + where(keep.reshape(b, 1, 1, t), 0.0, fill)
  if ins.has(5):
    bias = bias + ins[5].cast(dtypes.float32)
  if at.int("unidirectional", 0):
    i = Tensor.arange(s, device=device).reshape(s, 1)
    j = Tensor.arange(t, device=device).reshape(1, t)
    bias = bias + _bias_from_allowed(j <= i + past, dtypes.float32)
  return bias


@domain_op(MS, "MultiHeadAttention")
def _multi_head_attention(ins, at):
  """Multi-head attention with projected q/k/v (bias added), key padding mask, attention bias,
  past key/value (concatenated: present = past + new) and causal masking."""
  heads = at.int("num_heads", 0)
  q, k, v = ins[0], ins[1], ins[2]
  if k is None or v is None or q.ndim != 3:
    raise UnsupportedError(f"MultiHeadAttention of domain {MS!r}: packed query/key/value "
                           f"inputs are not supported (give query, key and value)")
  if ins.has(8) or ins.has(9):
    raise UnsupportedError(f"MultiHeadAttention of domain {MS!r}: past_sequence_length and "
                           f"cache_indirection (beam search) are not supported")
  bias = ins[3]
  hd = q.shape[2]
  qb, kb, vb = (None, None, None) if bias is None else \
    [bias.shrink(((i * hd, (i + 1) * hd),)) for i in range(3)]
  qh = _mha_kv(q, heads, qb)
  kh, vh = _mha_kv(k, heads, kb), _mha_kv(v, heads, vb if v.ndim == 3 else None)
  past = 0
  if ins.has(6):
    past = ins[6].shape[2]
    kh, vh = cat([ins[6], kh], 2), cat([ins[7], vh], 2)
  b, _, s, d = qh.shape
  mask = _mha_mask(ins, at, b, s, kh.shape[2], past, q.device)
  scale = at.float("scale", 0.0) or 1 / math.sqrt(d)
  y = _attend(qh, kh, vh, mask, scale, 0.0)
  out = y.permute(0, 2, 1, 3).reshape(b, s, heads * vh.shape[3]).cast(q.dtype)
  return [out, kh, vh]


# ---- dynamic quantization (onnxruntime's quantizer) ------------------------------------------

def _scaled_int_matmul(a_int: Tensor, b_int: Tensor, scale: Tensor, bias) -> Tensor:
  """(a_int @ b_int) exactly in int32, times `scale`, plus bias, in float32."""
  y = (a_int @ b_int).cast(dtypes.float32) * scale
  return y + bias.cast(dtypes.float32) if bias is not None else y


def _column_param(p: Tensor | None, n: int, as_int: bool):
  """A scalar or per-column (N,) scale / zero point shaped to broadcast over (.., N)."""
  if p is None:
    return None
  p = p.cast(dtypes.int32 if as_int else dtypes.float32)
  return p.reshape(()) if p._elements() == 1 else p.reshape(n)


def _centered(x: Tensor, zp) -> Tensor:
  x = x.cast(dtypes.int32)
  return x if zp is None else x - zp


@domain_op(MS, "MatMulIntegerToFloat")
def _matmul_integer_to_float(ins, at):
  """(A - a_zero_point) @ (B - b_zero_point) * a_scale * b_scale + bias, in float."""
  a, b = ins[0], ins[1]
  n = b.shape[-1]
  a_zp = ins[4].cast(dtypes.int32).reshape(()) if ins.has(4) else None
  b_zp = _column_param(ins[5], n, True)
  scale = ins[2].cast(dtypes.float32).reshape(()) * _column_param(ins[3], n, False)
  return _scaled_int_matmul(_centered(a, a_zp), _centered(b, b_zp), scale,
                            ins[6]).cast(ins[2].dtype)


def dynamic_quantize(x: Tensor, axis: int | None = None) -> tuple:
  """DynamicQuantizeLinear of x: (uint8 codes as int32, scale, zero point as int32); one scale
  and zero point over all of x, or (axis given) one per slice along that axis (kept as size 1).
  The range always holds 0; codes are round-half-to-even of x / scale plus the zero point (itself
  rounded half to even from -min / scale), saturated to [0, 255]."""
  xf = x.cast(dtypes.float32)
  keep = axis is not None
  hi = xf.max(axis, keepdim=keep).maximum(0.0)
  lo = xf.min(axis, keepdim=keep).minimum(0.0)
  span = hi - lo
  scale = (span + (span == 0).cast(dtypes.float32)) / 255.0
  zp = (0.0 - lo / scale).clip(0, 255).round()
  q = ((xf / scale).round() + zp).clip(0, 255)
  return q.cast(dtypes.int32), scale, zp.cast(dtypes.int32)


def fake_quantized(x: Tensor, axis: int | None = None) -> Tensor:
  """x as onnxruntime's quantized kernels see it: dynamic_quantize(x, axis) dequantized to
  float32 ((code - zero point) * scale, exact in float32)."""
  q, scale, zp = dynamic_quantize(x, axis)
  return (q - zp).cast(dtypes.float32) * scale


@domain_op(MS, "DynamicQuantizeMatMul")
def _dynamic_quantize_matmul(ins, at):
  """A quantized to uint8 on the fly (DynamicQuantizeLinear), then MatMulIntegerToFloat with
  the int8/uint8 B and its scale (and zero point) and the bias."""
  a, b = ins[0], ins[1]
  n = b.shape[-1]
  qa, a_scale, a_zp = dynamic_quantize(a)
  b_zp = _column_param(ins[3], n, True)
  scale = a_scale * _column_param(ins[2], n, False)
  return _scaled_int_matmul(qa - a_zp, _centered(b, b_zp), scale, ins[4]).cast(a.dtype)


# ---- DynamicQuantizeLSTM ---------------------------------------------------------------------

class _Replaced:
  """An operator's inputs with some positions replaced (to run another operator's code)."""

  def __init__(self, ins, values: dict):
    self._ins, self._values = ins, values

  def __len__(self) -> int:
    return len(self._ins)

  def __getitem__(self, i: int):
    return self._values[i] if i in self._values else self._ins[i]


def _dequantized_gates(q: Tensor, scale: Tensor, zp: Tensor | None) -> Tensor:
  """A quantized (D, in, 4H) LSTM weight with per-direction or per-column (D, 4H) scale and
  zero point, as the float (D, 4H, in) weight ONNX LSTM takes."""
  dirs, _, cols = q.shape
  shape = (dirs, 1, cols) if scale._elements() == dirs * cols else (dirs, 1, 1)
  w = q.cast(dtypes.int32)
  if zp is not None:
    w = w - zp.cast(dtypes.int32).reshape(shape)
  return (w.cast(dtypes.float32) * scale.cast(dtypes.float32).reshape(shape)).permute(0, 2, 1)


@domain_op(MS, "DynamicQuantizeLSTM")
def _dynamic_quantize_lstm(ins, at):
  """ONNX LSTM with int8/uint8 weights W (D, in, 4H) and R (D, H, 4H) dequantized by their
  scales and zero points, and the activations quantized to uint8 as onnxruntime's kernel does:
  all of X with one scale and zero point (shared by both directions), and each step's h_{t-1}
  with one per batch row (onnxruntime quantizes h over a group of ceil(batch / its threads) rows,
  so its own result depends on its thread count unless batch is 1 or it has >= batch threads)."""
  from .rnn import recurrent
  w = _dequantized_gates(ins[1], ins[8], ins[9])
  r = _dequantized_gates(ins[2], ins[10], ins[11])
  return recurrent("LSTM", _Replaced(ins, {1: w, 2: r}), at, quantize=fake_quantized)
