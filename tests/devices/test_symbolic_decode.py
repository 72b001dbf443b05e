"""Decoding with an in-place KV cache and a symbolic position (kg.Dim): a small kg.nn decoder
under kg.jit greedy-decodes the same tokens as numpy, and after its second step compiles no
kernel and builds no pipeline (structure, not time); the cache is written in place (one small
kernel per step writing both caches, binding their own buffers)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import nn
from tools import device_fixture

webgpu = device_fixture(("WEBGPU",))

VOCAB, D, HEADS, LAYERS, MAX = 24, 16, 2, 2, 80


class Block(nn.Module):
  """Pre-norm attention over the cache, then an MLP; writes this step's key and value into the
  cache at position `pos` (a bound kg.Dim)."""

  def __init__(self):
    super().__init__()
    self.hd = D // HEADS
    self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
    self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
    self.ff1, self.ff2 = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
    self.k_cache = kg.Tensor.zeros(1, HEADS, MAX, self.hd).realize()
    self.v_cache = kg.Tensor.zeros(1, HEADS, MAX, self.hd).realize()

  def forward(self, x, pos):
    qkv = self.qkv(self.ln1(x)).reshape(3, HEADS, 1, self.hd)
    q, k, v = qkv[0:1], qkv[1:2], qkv[2:3]
    self.k_cache[:, :, pos:pos + 1] = k
    self.v_cache[:, :, pos:pos + 1] = v
    att = kg.scaled_dot_product_attention(q, self.k_cache[:, :, :pos + 1],
                                          self.v_cache[:, :, :pos + 1])
    x = x + self.out(att.reshape(1, D))
    return x + self.ff2(self.ff1(self.ln2(x)).relu())


class Decoder(nn.Module):
  def __init__(self):
    super().__init__()
    self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(MAX, D)
    self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
    self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB)

  def forward(self, token, pos):
    """token: (1,) int32 tensor; pos: the bound position dim. The next token, (1,) int32."""
    x = self.tok(token) + self.pos.weight[pos:pos + 1]
    for block in self.blocks:
      x = block(x, pos)
    return self.head(self.norm(x)).argmax(-1)


def _weights(model):
  return {name: p.numpy().astype(np.float64) for name, p in model.named_parameters()}


def _layernorm(x, w, b):
  mu = x.mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b


def _reference(model, first: int, steps: int) -> list[int]:
  """Greedy decoding in numpy (float64), recomputing attention over the whole prefix."""
  w = _weights(model)
  tokens, out = [first], []
  for t in range(steps):
    x = w["tok.weight"][tokens] + w["pos.weight"][:len(tokens)]
    for i in range(LAYERS):
      p = f"blocks.{i}."
      h = _layernorm(x, w[p + "ln1.weight"], w[p + "ln1.bias"])
      qkv = h @ w[p + "qkv.weight"].T + w[p + "qkv.bias"]
      q, k, v = (qkv[:, j * D:(j + 1) * D].reshape(-1, HEADS, D // HEADS).transpose(1, 0, 2)
                 for j in range(3))
      s = q @ k.transpose(0, 2, 1) / math.sqrt(D // HEADS)
      s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
      e = np.exp(s - s.max(-1, keepdims=True))
      att = ((e / e.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(-1, D)
      x = x + att @ w[p + "out.weight"].T + w[p + "out.bias"]
      h = _layernorm(x, w[p + "ln2.weight"], w[p + "ln2.bias"])
      h = np.maximum(h @ w[p + "ff1.weight"].T + w[p + "ff1.bias"], 0)
      x = x + h @ w[p + "ff2.weight"].T + w[p + "ff2.bias"]
    logits = _layernorm(x[-1], w["norm.weight"], w["norm.bias"]) @ w["head.weight"].T + \
      w["head.bias"]
    tokens.append(int(logits.argmax()))
    out.append(tokens[-1])
  return out


def _decode(model, step, first: int, steps: int, on_step=None) -> list[int]:
  pos = kg.Dim("pos", 0, MAX - 1)
  token, out = kg.Tensor(np.array([first], np.int32)), []
  for t in range(steps):
    token = step(token, pos.bind(t))
    out.append(token.item())
    if on_step is not None:
      on_step(t)
  return out


def test_greedy_decode_matches_numpy_and_compiles_once(device):
  """Without gradients sdpa is the fused kernel (its key loop stops at pos + 1); the 64-step
  test below records gradients' split path (matmul, softmax, matmul over the cache)."""
  steps = 12 if device == "PTXSIM" else 20
  model = Decoder()
  kg.clear_cache()
  misses, step = [], kg.jit(model)
  with kg.no_grad():
    kernels = kg.compile(model(kg.Tensor(np.array([1], np.int32)),
                               kg.Dim("pos", 0, MAX - 1).bind(0)))
    # the fused attention (a kernel, or computed by the output projection: named attn* both
    # ways), not the split path's matmul, softmax and matmul
    assert sum(c.name.startswith("attn") for c in kernels) == LAYERS
    got = _decode(model, step, 3, steps, lambda t: misses.append(kg.cache_info()["misses"]))
  assert step.replaying
  assert got == _reference(model, 3, steps)
  assert misses[1:] == [misses[1]] * (steps - 1), misses


def test_64_decode_steps_compile_nothing_and_build_no_pipeline_after_the_second(webgpu):
  runtime = kg.Device["WEBGPU"]
  model = Decoder()
  kg.clear_cache()
  counts = []
  got = _decode(model, kg.jit(model), 5, 64,
                lambda t: counts.append((kg.cache_info()["misses"], len(runtime.pipelines))))
  assert counts[2:] == [counts[1]] * 62, counts
  assert got == _reference(model, 5, 64)


def test_the_cache_is_written_in_place_by_one_small_kernel():
  block = Block()
  pos = kg.Dim("pos", 0, MAX - 1)
  buffer = block.k_cache.node.buffer
  k = kg.Tensor(np.ones((1, HEADS, 1, D // HEADS), np.float32))
  block.k_cache[:, :, pos.bind(7):pos.bind(7) + 1] = k
  kernels = kg.compile(block.k_cache, target="wgsl")
  assert [c.name for c in kernels] == ["write_1_2_1_8"]
  assert kernels[0].global_size[0] * kernels[0].local_size[0] < 64   # value's elements only
  assert [b.name for b in kernels[0].buffers if b.slot in
          [x.slot for x in kernels[0].launch.bindings]][:1] == ["out"]
  got = block.k_cache.numpy()
  assert block.k_cache.node.buffer is buffer        # the same buffer, written in place
  want = np.zeros((1, HEADS, MAX, D // HEADS), np.float32)
  want[:, :, 7] = 1
  np.testing.assert_array_equal(got, want)


def test_token_ids_stay_run_time_inputs():
  """A replayed step fed other token ids gives their results: the ids are not constants."""
  model = Decoder()
  step = kg.jit(model)
  pos = kg.Dim("pos", 0, MAX - 1)
  outs = [step(kg.Tensor(np.array([t], np.int32)), pos.bind(0)).item() for t in range(8)]
  assert step.replaying
  assert outs == [_reference(model, t, 1)[0] for t in range(8)]


# kernels a replayed decode step launches: per layer the QKV projection (ln1 its prologue,
# graph/prologue.py; its bias the epilogue), the key and value cache writes, the output
# projection computing the fused attention (lowering/staged.py) with the residual as its
# epilogue (graph/epilogue.py), the MLP up projection (ln2 its prologue) with its activation and
# the down projection with the residual; then the head (the final norm its prologue) and the
# argmax (the embeddings fused into the first layer's kernels). Here the projection is read by
# three kernels (two writes, attention), so it is a kernel of its own; the two writes, whose
# values are runs of its output, join it (graph/join.py: each thread stores its projection
# element into the key or value cache too; 5 a layer before, 6 before the writes joined): 4 per
# layer, as with one cache buffer holding the query, key and value, written whole, where the
# write computes the projection (graph/schedule.py's write fusion; test_decode_dispatches.py).
KERNELS_PER_LAYER, KERNELS_AFTER = 4, 2
KERNELS = KERNELS_PER_LAYER * LAYERS + KERNELS_AFTER


def test_a_decode_step_is_a_known_number_of_dispatches_and_one_submit(webgpu):
  """Structure, not time: the replayed step launches KERNELS_PER_LAYER kernels per layer and
  KERNELS_AFTER more (KERNELS), natively in one submit, and reads back only the sampled token."""
  runtime = kg.Device["WEBGPU"]
  model = Decoder()
  step, pos = kg.jit(model), kg.Dim("pos", 0, MAX - 1)
  token = kg.Tensor(np.array([2], np.int32))
  with kg.no_grad():        # inference: the fused attention kernel
    for t in range(3):
      token = step(token, pos.bind(t))
      token.item()
    dispatches, submits = runtime.dispatches, runtime.submits
    token = step(token, pos.bind(3))
    read = token.numpy()
  assert step.replaying and read.shape == (1,)
  program = next(s.program for s in step.signatures.values() if s.program is not None)
  assert len(program.steps) == KERNELS, \
    [kernel.name for _, kernel, _ in program.steps]
  assert runtime.dispatches - dispatches == len(program.steps)
  assert runtime.submits - submits == 1


def test_at_webgpus_default_8_storage_buffers_a_step_is_as_many_kernels():
  """At WebGPU's default 8 storage buffers per stage the first layer's output projection, which
  computes the attention and adds the residual (the embeddings: 9 buffers), keeps its attention,
  its small read-only inputs (bias, norm weights) bound as uniform buffers (render/wgsl/target.py
  uniform_slots): KERNELS, as with no limit. Before, its attention was a kernel of its own (11)."""
  model = Decoder()
  with kg.no_grad():
    out = model(kg.Tensor(np.array([1], np.int32)), kg.Dim("pos", 0, MAX - 1).bind(3))
    kernels = kg.compile(out, target="wgsl", max_storage_buffers=8)
  assert len(kernels) == KERNELS, [k.name for k in kernels]
  assert all(sum(b.kind == "storage" for b in k.launch.bindings) <= 8 for k in kernels)
  assert any(b.kind == "uniform" for k in kernels for b in k.launch.bindings)


def test_greedy_decode_at_8_storage_buffers_matches_numpy(monkeypatch):
  """The same step on WEBGPU natively with the adapter's storage buffers forced to WebGPU's
  default 8 (lavapipe gives more): its uniform-bound inputs read as numpy's."""
  from tools import default_device, forced_options
  forced_options("WEBGPU", monkeypatch, max_storage_buffers=8)
  with default_device(monkeypatch, "WEBGPU"), kg.no_grad():
    model = Decoder()
    step = kg.jit(model)
    kernels = kg.compile(model(kg.Tensor(np.array([1], np.int32)),
                               kg.Dim("pos", 0, MAX - 1).bind(0)),
                         **kg.Device["WEBGPU"].render_options())
    got = _decode(model, step, 3, 6)
  assert any(b.kind == "uniform" for k in kernels for b in k.launch.bindings)
  assert got == _reference(model, 3, 6)
