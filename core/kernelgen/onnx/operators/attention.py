"""ONNX Attention (opsets 23-25): scaled dot-product attention with masks, causal and sliding
windows, a key/value cache, grouped heads and the optional Q·K output, as the ONNX operator
defines it (the mask is an additive bias; boolean masks are 0 / -inf; rows masked entirely give
zeros)."""
from __future__ import annotations

import math

from ...dtype import dtypes
from ...errors import UnsupportedError
from ...tensor.tensor import Tensor, cat, where


def _heads(x: Tensor, n: int) -> Tensor:
  """(B, S, n*D) -> (B, n, S, D)."""
  b, s, hidden = x.shape
  return x.reshape(b, s, n, hidden // n).permute(0, 2, 1, 3)


def _repeat_heads(x: Tensor, reps: int) -> Tensor:
  """numpy.repeat(x, reps, axis=1) for (B, H, S, D)."""
  if reps == 1:
    return x
  b, h, s, d = x.shape
  return x.reshape(b, h, 1, s, d).expand(b, h, reps, s, d).reshape(b, h * reps, s, d)


def _positions(q_len: int, kv_len: int, offset, device) -> Tensor:
  """(i + offset) - j for query i and key j; offset an int or a (B,) Tensor -> (B,1,q,kv)."""
  i = Tensor.arange(q_len, device=device).reshape(q_len, 1)
  j = Tensor.arange(kv_len, device=device).reshape(1, kv_len)
  if isinstance(offset, Tensor):
    return (i + offset.cast(dtypes.int32).reshape(-1, 1, 1, 1)) - j
  return (i + offset) - j


def _bool_bias(mask: Tensor, dtype) -> Tensor:
  return where(mask, Tensor.zeros(1, dtype=dtype, device=mask.device), -math.inf)


def attention(ins, at) -> list:
  q, k, v = ins[0], ins[1], ins[2]
  mask, past_k, past_v = ins[3], ins[4], ins[5]
  nonpad = ins[6] if len(ins) > 6 else None
  three_d = q.ndim == 3
  if three_d:
    q, k, v = _heads(q, at.int("q_num_heads")), _heads(k, at.int("kv_num_heads")), \
      _heads(v, at.int("kv_num_heads"))
  dtype = q.dtype
  scale = at.float("scale")
  scale = math.sqrt(scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
  present_k = cat([past_k, k], 2) if past_k is not None else k
  present_v = cat([past_v, v], 2) if past_v is not None else v
  q_len, kv_len = q.shape[2], present_k.shape[2]
  bias = Tensor.zeros(q_len, kv_len, dtype=dtype, device=q.device)
  if mask is not None and mask.shape[-1] < kv_len:
    fill = False if mask.dtype == dtypes.bool else -math.inf
    mask = mask.pad(((0, 0),) * (mask.ndim - 1) + ((0, kv_len - mask.shape[-1]),), value=fill)
  if mask is not None:
    bias = bias + (_bool_bias(mask, dtype) if mask.dtype == dtypes.bool else mask.cast(dtype))
  if past_k is None and nonpad is not None:
    offset = nonpad.reshape(-1) - q_len
  else:
    offset = past_k.shape[2] if past_k is not None else 0
  if at.int("is_causal", 0):
    bias = bias + _bool_bias(_positions(q_len, kv_len, offset, q.device) >= 0, dtype)
  left, right = at.int("left_window_size", -1), at.int("right_window_size", -1)
  if left >= 0 or right >= 0:
    diff = _positions(q_len, kv_len, offset, q.device)
    allowed = Tensor.ones(*diff.shape, dtype=dtypes.bool, device=q.device)
    if left >= 0:
      allowed = allowed & (diff <= left)
    if right >= 0:
      allowed = allowed & (-diff <= right)
    bias = bias + _bool_bias(allowed, dtype)
  if nonpad is not None:
    j = Tensor.arange(kv_len, device=q.device).reshape(1, kv_len)
    pad_ok = (j < nonpad.cast(dtypes.int32).reshape(-1, 1)).reshape(-1, 1, 1, kv_len)
    bias = bias + _bool_bias(pad_ok, dtype)
  hq, hk = q.shape[1], present_k.shape[1]
  if hq != hk and hq % hk == 0:
    k_all, v_all = _repeat_heads(present_k, hq // hk), _repeat_heads(present_v, hq // hk)
  else:
    k_all, v_all = present_k, present_v
  qk = (q * scale) @ (k_all.swapaxes(-1, -2) * scale)
  softcap = at.float("softcap", 0.0)
  if softcap and softcap > 0:
    qk = (qk / softcap).tanh() * softcap
  with_bias = qk + bias
  mode = at.int("qk_matmul_output_mode", 0)
  if at.int("softmax_precision") not in (None, 1) and dtype != dtypes.float32:
    raise UnsupportedError("Attention softmax_precision other than float32")
  work = with_bias.float() if dtype in (dtypes.float16, dtypes.bfloat16) else with_bias
  top = work.max(-1, keepdim=True)
  all_masked = top == -math.inf
  e = (work - where(all_masked, 0, top)).exp()
  total = e.sum(-1, keepdim=True)
  soft = e / where(total == 0, 1, total)
  row_masked = bias.max(-1, keepdim=True) == -math.inf
  soft = where(row_masked, 0, soft).cast(dtype)
  qk_out = {0: qk, 1: qk, 2: with_bias, 3: soft}.get(mode, qk)
  if mode == 1 and not softcap:
    qk_out = qk
  y = soft @ v_all
  if three_d:
    y = y.permute(0, 2, 1, 3)
    y = y.reshape(y.shape[0], y.shape[1], -1)
  return [y, present_k, present_v, qk_out.cast(dtype)]
