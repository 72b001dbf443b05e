"""A small GPT (decoder-only transformer) in kg.nn: the language model of examples/train_lm.py
and of the Generate demo (web/demos/lm_model.py exports its cached decode step, `cached_program`).

    model = TinyGPT(vocab=2048, dim=128, layers=4, heads=4, context=64)
    logits = model(ids)                    # ids (B, T) int32 -> (B, T, vocab) float32
    outputs, state = cached_program(model)  # one step with a KV cache, for kg.export(state=)

Pre-LayerNorm blocks (causal self-attention, a 4x GELU MLP), learned positions, the output layer
tied to the token embedding.
"""
from __future__ import annotations

import math

import kernelgen as kg
from kernelgen import nn


def gelu(x):
  """GELU (tanh form) with the tanh argument clamped to [-20, 20], where tanh is +-1 in float32:
  the same values as x.gelu(), but its gradient stays finite (kernelgen's sigmoid-based tanh
  has a NaN gradient below about -88, x.gelu()'s for x below about -10: it stopped a training
  run at step ~210)."""
  inner = (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).clip(-20.0, 20.0)
  return 0.5 * x * (1 + inner.tanh())


class Block(nn.Module):
  """x + attention(LN(x)), then + MLP(LN(x))."""

  def __init__(self, dim: int, heads: int):
    super().__init__()
    self.heads = heads
    self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
    self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
    self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

  def attention(self, x, mask):
    b, t, d = x.symbolic_shape
    h = self.heads
    qkv = self.qkv(x).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    scores = (q @ k.permute(0, 1, 3, 2)) * (1.0 / math.sqrt(d // h)) + mask
    out = scores.softmax(-1) @ v
    return self.proj(out.permute(0, 2, 1, 3).reshape(b, t, d))

  def cached(self, x, mask, past_k, past_v, in_place: bool = False):
    """The block on the new rows x (1, s, dim) with the keys and values of the rows before
    (past_k, past_v: (p, dim)); returns (x, keys (p + s, dim), values (p + s, dim)). With
    `in_place` the pasts are kg.nn.KVCache views (cache.past(p), cached_program) and the new
    rows are written into them at row p (kg.nn.kv_append, one small kernel each): the keys and
    values returned are those caches' buffers, read as their first p + s rows."""
    _, s, d = x.symbolic_shape
    h = self.heads
    qkv = self.qkv(self.ln1(x)).reshape(s, 3, d)
    if in_place:
      k, v = nn.kv_append(past_k, qkv[:, 1]), nn.kv_append(past_v, qkv[:, 2])
    else:
      k, v = kg.cat([past_k, qkv[:, 1]], axis=0), kg.cat([past_v, qkv[:, 2]], axis=0)
    t = k.symbolic_shape[0]
    q = qkv[:, 0].reshape(s, h, d // h).permute(1, 0, 2)
    keys, values = k.reshape(t, h, d // h).permute(1, 2, 0), v.reshape(t, h, d // h).permute(1, 0, 2)
    out = ((q @ keys) * (1.0 / math.sqrt(d // h)) + mask).softmax(-1) @ values   # (h, s, d/h)
    x = x + self.proj(out.permute(1, 0, 2).reshape(1, s, d))
    return x + self.down(gelu(self.up(self.ln2(x)).contiguous())), k, v

  def forward(self, x, mask):
    x = x + self.attention(self.ln1(x), mask)
    # the pre-activation gets its own buffer: without it the backward pass recomputed the up
    # projection inside GELU's gradient kernel (a naive elementwise kernel doing a matmul per
    # element), about 10x slower than the matmul kernels on lavapipe
    return x + self.down(gelu(self.up(self.ln2(x)).contiguous()))


class TinyGPT(nn.Module):
  """Token + position embeddings, `layers` blocks, a final LayerNorm, logits by the tied
  embedding."""

  def __init__(self, vocab: int, dim: int, layers: int, heads: int, context: int):
    super().__init__()
    self.context = context
    self.tokens = nn.Embedding(vocab, dim)
    self.positions = nn.Embedding(context, dim)
    self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
    self.ln = nn.LayerNorm(dim)
    self.tokens.weight = nn.Parameter(self.tokens.weight * 0.02)
    self.positions.weight = nn.Parameter(self.positions.weight * 0.02)

  def hidden(self, ids):
    """The final hidden states (B, T, dim) of ids (B, T); T may be a symbolic size (a kg.Dim
    expression up to `context`: web/demos/lm_model.py exports one program for every length)."""
    t = ids.symbolic_shape[1]
    device = self.tokens.weight.device
    positions = kg.Tensor.arange(t, device=device)
    later = positions.reshape(1, t) > positions.reshape(t, 1)      # key j after query i
    mask = later.cast(kg.dtypes.float32) * -1e9
    x = self.tokens(ids) + self.positions(positions)
    for block in self.blocks:
      x = block(x, mask)
    return self.ln(x)

  def forward(self, ids):
    return self.hidden(ids) @ self.tokens.weight.T

  def cached(self, ids, positions, pasts, in_place: bool = False):
    """One generation step with a KV cache: the logits (1, vocab) after the new tokens `ids`
    (1, s) at `positions` (1, s), given each block's (keys, values) of the tokens before, (p,
    dim) each; returns (logits, [(keys, values) (p + s, dim) per block]). `in_place`: see
    Block.cached (the pasts are kg.nn.KVCache views the step writes into)."""
    s = ids.symbolic_shape[1]
    p = pasts[0][0].symbolic_shape[0]
    keys = kg.Tensor.arange(p + s, device=self.tokens.weight.device)
    mask = (keys.reshape(1, p + s) > positions.reshape(s, 1)).cast(kg.dtypes.float32) * -1e9
    x = self.tokens(ids) + self.positions(positions)
    present = []
    for block, (past_k, past_v) in zip(self.blocks, pasts):
      x, k, v = block.cached(x, mask, past_k, past_v, in_place)
      present.append((k, v))
    return self.ln(x)[:, s - 1] @ self.tokens.weight.T, present


def cached_program(model: TinyGPT, device: str = "PYTHON", step: int = 1, in_place: bool = True):
  """(outputs, state) of one cached generation step of `model`, to export with
  kg.export(outputs, DIR, state=state): inputs `ids` and `positions` (1, s), s = `step` new
  tokens (1: a decode step, which a prompt runs token by token; more: s is a kg.Dim 1..step, but
  a symbolic s runs its row-wise kernels at their top (the compiler cuts only some kernels to
  the bound size), so each step costs `step` rows), `temperature` (1,) float32 and `seed` (1,) int32; the state `past_k{i}` /
  `past_v{i}` (past, dim) per block, past a kg.Dim 0..context - 1; outputs `logits` (1, vocab),
  `token` (1,) int32 (sampled on the device: kg.nn.sample_token) and the
  `present_k{i}` / `present_v{i}` the state keeps. `in_place` (the default): each state is a
  kg.nn.KVCache of context - 1 + step rows that the step writes its new rows into
  (kg.nn.kv_append), and its present is that buffer: a bundle copies no cache after a run; False: the present is a
  new buffer (kg.cat) copied into the state after each run."""
  context, dim = model.context, model.tokens.weight.shape[1]
  s, p = kg.Dim("s", 1, step) if step > 1 else 1, kg.Dim("past", 0, context - 1)
  ids = kg.Tensor.empty(1, s, dtype=kg.dtypes.int32, name="ids", device=device)
  positions = kg.Tensor.empty(1, s, dtype=kg.dtypes.int32, name="positions", device=device)
  temperature = kg.Tensor.empty(1, name="temperature", device=device)
  seed = kg.Tensor.empty(1, dtype=kg.dtypes.int32, name="seed", device=device)
  if in_place:
    pasts = [tuple(nn.KVCache(context - 1 + step, dim, name=f"past_{kv}{i}", device=device).past(p)
                   for kv in "kv") for i in range(len(model.blocks))]
  else:
    pasts = [tuple(kg.Tensor.empty(p, dim, name=f"past_{kv}{i}", device=device) for kv in "kv")
             for i in range(len(model.blocks))]
  with kg.no_grad():
    logits, present = model.cached(ids, positions, pasts, in_place)
    outputs = {"logits": logits, "token": nn.sample_token(logits, temperature, seed)}
  state = {}
  for i, (k, v) in enumerate(present):
    outputs[f"present_k{i}"], outputs[f"present_v{i}"] = k, v
    state[f"past_k{i}"], state[f"past_v{i}"] = f"present_k{i}", f"present_v{i}"
  return outputs, state
