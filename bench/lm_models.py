"""Causal language models in the transformers.js / Optimum / onnxruntime-genai ONNX layout, with
random weights, for tests and benchmarks (needs numpy and the onnx package).

Inputs `input_ids`, `attention_mask`, `position_ids` (int64, (B, S)) and
`past_key_values.{i}.key|value` ((B, kv_heads, P, head_dim)); outputs `logits` (B, S, vocab) and
`present.{i}.key|value` ((B, kv_heads, P + S, head_dim)). Each layer is the Llama/Qwen2 block as
those exports write it: SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization,
q/k/v projections (Qwen2: with bias), com.microsoft RotaryEmbedding on q and k at position_ids,
GroupQueryAttention over the KV cache (seqlens_k and total_sequence_length from the attention
mask), the output projection, a SwiGLU MLP; then the final norm and the LM head.

dtype "fp32" / "fp16" (weights, activations, cache and logits in that dtype) or "q4" (fp32
activations, every projection and the LM head a MatMulNBits of 4-bit weights in blocks of 32,
the embedding a GatherBlockQuantized).

    python bench/lm_models.py --config smollm2-135m --dtype q4 --out /tmp/smollm2-q4.onnx
"""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Config:
  """The sizes of a Llama-style decoder."""
  layers: int
  hidden: int
  heads: int
  kv_heads: int
  mlp: int
  vocab: int
  qkv_bias: bool = False         # Qwen2 has q/k/v biases
  max_positions: int = 2048
  rope_theta: float = 10000.0
  eps: float = 1e-5

  @property
  def head_dim(self) -> int:
    return self.hidden // self.heads


CONFIGS = {
  "tiny": Config(layers=2, hidden=64, heads=4, kv_heads=2, mlp=128, vocab=97, max_positions=128),
  "tiny-qwen": Config(layers=2, hidden=64, heads=4, kv_heads=1, mlp=96, vocab=101,
                      qkv_bias=True, max_positions=128, rope_theta=1e6, eps=1e-6),
  "smollm2-135m": Config(layers=30, hidden=576, heads=9, kv_heads=3, mlp=1536, vocab=49152,
                         rope_theta=100000.0),
  "qwen2.5-0.5b": Config(layers=24, hidden=896, heads=14, kv_heads=2, mlp=4864, vocab=151936,
                         qkv_bias=True, max_positions=32768, rope_theta=1e6, eps=1e-6),
}
BLOCK = 32


class _Builder:
  """Nodes and initializers of one model being written."""

  def __init__(self, cfg: Config, dtype: str, seed: int, rotary: str = "op"):
    from onnx import TensorProto
    self.cfg, self.dtype, self.rotary = cfg, dtype, rotary
    self.interleaved = 0            # RotaryEmbedding / GroupQueryAttention rotary_interleaved
    self.rng = np.random.default_rng(seed)
    self.nodes, self.inits = [], []
    self.float = np.float16 if dtype == "fp16" else np.float32
    self.float_type = TensorProto.FLOAT16 if dtype == "fp16" else TensorProto.FLOAT

  def init(self, name: str, array: np.ndarray) -> str:
    from onnx import numpy_helper
    self.inits.append(numpy_helper.from_array(array, name))
    return name

  def node(self, op: str, inputs: list, outputs: list, domain: str = "", **attrs) -> list:
    from onnx import helper
    self.nodes.append(helper.make_node(op, inputs, outputs, name=f"n{len(self.nodes)}",
                                       domain=domain, **attrs))
    return outputs

  def weight(self, rows: int, cols: int, std: float = 0.05) -> np.ndarray:
    return (self.rng.standard_normal((rows, cols)) * std).astype(np.float32)

  def linear(self, x: str, name: str, k: int, n: int, bias: bool = False, std=0.05) -> str:
    """x @ W (+ b): a MatMul (fp32/fp16) or a MatMulNBits of 4-bit blocks (q4)."""
    w = self.weight(k, n, std)
    out = f"{name}/out"
    if self.dtype == "q4":
      packed, scales, zps = quantize_q4(w.T)
      ins = [x, self.init(f"{name}.qweight", packed), self.init(f"{name}.scales", scales),
             self.init(f"{name}.zp", zps)]
      if bias:
        ins += ["", self.init(f"{name}.bias", self.weight(1, n, 0.02).reshape(n))]
      self.node("MatMulNBits", ins, [out], domain="com.microsoft", K=k, N=n, bits=4,
                block_size=BLOCK, accuracy_level=0)
      return out
    self.node("MatMul", [x, self.init(f"{name}.weight", w.astype(self.float))], [out])
    if bias:
      b = self.init(f"{name}.bias", self.weight(1, n, 0.02).reshape(n).astype(self.float))
      self.node("Add", [out, b], [f"{name}/biased"])
      return f"{name}/biased"
    return out

  def norm_weight(self, name: str) -> str:
    w = 1.0 + 0.1 * self.rng.standard_normal(self.cfg.hidden)
    return self.init(name, w.astype(self.float))


def quantize_q4(w: np.ndarray) -> tuple:
  """MatMulNBits' (packed (N, blocks, 16) uint8, scales (N*blocks,), packed zero points) of an
  (N, K) weight: asymmetric 4-bit per block of 32 along K."""
  n, k = w.shape
  blocks = -(-k // BLOCK)
  padded = np.zeros((n, blocks * BLOCK), np.float32)
  padded[:, :k] = w
  b = padded.reshape(n, blocks, BLOCK)
  lo, hi = np.minimum(b.min(-1), 0), np.maximum(b.max(-1), 0)
  scale = np.where(hi > lo, (hi - lo) / 15, 1.0).astype(np.float32)
  zp = np.clip(np.round(-lo / scale), 0, 15).astype(np.uint8)
  codes = np.clip(np.round(b / scale[..., None]) + zp[..., None], 0, 15).astype(np.uint8)
  packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
  zpad = np.zeros((n, blocks + blocks % 2), np.uint8)
  zpad[:, :blocks] = zp
  zpacked = (zpad[:, 0::2] | (zpad[:, 1::2] << 4)).reshape(-1)
  return packed.astype(np.uint8), scale.reshape(-1), zpacked


def _embedding(bld: _Builder) -> str:
  cfg = bld.cfg
  table = bld.weight(cfg.vocab, cfg.hidden, 1.0)
  if bld.dtype != "q4":
    bld.node("Gather", [bld.init("embed.weight", table.astype(bld.float)), "input_ids"],
             ["embed/out"])
    return "embed/out"
  packed, scales, zps = quantize_q4(table)
  blocks = scales.size // cfg.vocab
  bld.node("GatherBlockQuantized",
           [bld.init("embed.qweight", packed.reshape(cfg.vocab, -1)), "input_ids",
            bld.init("embed.scales", scales.reshape(cfg.vocab, blocks)),
            bld.init("embed.zp", zps.reshape(cfg.vocab, -1))],
           ["embed/out"], domain="com.microsoft", bits=4, block_size=BLOCK, gather_axis=0,
           quantize_axis=1)
  return "embed/out"


def _mask_lengths(bld: _Builder) -> None:
  """seqlens_k = sum(attention_mask) - 1 and total_sequence_length = mask width, int32."""
  from onnx import TensorProto
  bld.node("ReduceSum", ["attention_mask", bld.init("one_axis", np.array([1], np.int64))],
           ["mask/sum"], keepdims=0)
  bld.node("Sub", ["mask/sum", bld.init("one_i64", np.array(1, np.int64))], ["mask/last"])
  bld.node("Cast", ["mask/last"], ["seqlens_k"], to=TensorProto.INT32)
  bld.node("Shape", ["attention_mask"], ["mask/shape"])
  bld.node("Gather", ["mask/shape", bld.init("one_idx", np.array(1, np.int64))], ["mask/len"],
           axis=0)
  bld.node("Cast", ["mask/len"], ["total_seq_len"], to=TensorProto.INT32)


def _rotary_caches(bld: _Builder) -> tuple:
  cfg = bld.cfg
  half = cfg.head_dim // 2
  inv = 1.0 / (cfg.rope_theta ** (np.arange(half) * 2.0 / cfg.head_dim))
  ang = np.arange(cfg.max_positions)[:, None] * inv[None, :]
  return (bld.init("cos_cache", np.cos(ang).astype(bld.float)),
          bld.init("sin_cache", np.sin(ang).astype(bld.float)))


def _attention(bld: _Builder, i: int, h: str, caches: tuple) -> str:
  cfg = bld.cfg
  p = f"layers.{i}.attn"
  kv = cfg.kv_heads * cfg.head_dim
  q = bld.linear(h, f"{p}.q_proj", cfg.hidden, cfg.hidden, cfg.qkv_bias)
  k = bld.linear(h, f"{p}.k_proj", cfg.hidden, kv, cfg.qkv_bias)
  v = bld.linear(h, f"{p}.v_proj", cfg.hidden, kv, cfg.qkv_bias)
  extra = []
  if bld.rotary == "op":
    for name, heads in ((q, cfg.heads), (k, cfg.kv_heads)):
      bld.node("RotaryEmbedding", [name, "position_ids", *caches], [f"{name}/rot"],
               domain="com.microsoft", interleaved=bld.interleaved, num_heads=heads)
    q, k = f"{q}/rot", f"{k}/rot"
  else:          # GroupQueryAttention rotates q and k itself (onnxruntime-genai's builder)
    extra = list(caches)
  bld.node("GroupQueryAttention",
           [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value", "seqlens_k",
            "total_seq_len", *extra],
           [f"{p}/out", f"present.{i}.key", f"present.{i}.value"], domain="com.microsoft",
           num_heads=cfg.heads, kv_num_heads=cfg.kv_heads, do_rotary=int(bool(extra)),
           rotary_interleaved=bld.interleaved,
           scale=1.0 / float(np.sqrt(cfg.head_dim)))
  return bld.linear(f"{p}/out", f"{p}.o_proj", cfg.hidden, cfg.hidden)


def _mlp(bld: _Builder, i: int, h: str) -> str:
  cfg = bld.cfg
  p = f"layers.{i}.mlp"
  gate = bld.linear(h, f"{p}.gate_proj", cfg.hidden, cfg.mlp)
  up = bld.linear(h, f"{p}.up_proj", cfg.hidden, cfg.mlp)
  bld.node("Sigmoid", [gate], [f"{p}/sig"])
  bld.node("Mul", [gate, f"{p}/sig"], [f"{p}/silu"])
  bld.node("Mul", [f"{p}/silu", up], [f"{p}/act"])
  return bld.linear(f"{p}/act", f"{p}.down_proj", cfg.mlp, cfg.hidden)


def _skip_norm(bld: _Builder, x: str, residual: str, weight: str, name: str) -> tuple:
  """(normed, residual sum) of SkipSimplifiedLayerNormalization."""
  bld.node("SkipSimplifiedLayerNormalization", [x, residual, weight],
           [f"{name}/out", "", "", f"{name}/sum"], domain="com.microsoft",
           epsilon=bld.cfg.eps)
  return f"{name}/out", f"{name}/sum"


def build(cfg: Config, dtype: str = "fp32", seed: int = 0, rotary: str = "op",
          last_logits: bool = False, interleaved: bool = False):
  """The onnx ModelProto of a random-weight causal LM of `cfg` in `dtype` (fp32, fp16, q4);
  rotary "op" (RotaryEmbedding nodes before the attention) or "gqa" (GroupQueryAttention's
  do_rotary with the caches); last_logits: the LM head on the last position only (logits
  (B, 1, vocab), as exports with logits_to_keep = 1 compute them); interleaved: rotary pairs
  (2i, 2i + 1) of a head, not (i, i + d/2)."""
  from onnx import TensorProto, helper
  if dtype not in ("fp32", "fp16", "q4") or rotary not in ("op", "gqa"):
    raise ValueError(f"dtype {dtype!r}: fp32, fp16 or q4; rotary {rotary!r}: op or gqa")
  bld = _Builder(cfg, dtype, seed, rotary)
  bld.interleaved = int(interleaved)
  x = _embedding(bld)
  _mask_lengths(bld)
  caches = _rotary_caches(bld)
  bld.node("SimplifiedLayerNormalization", [x, bld.norm_weight("layers.0.input_norm")],
           ["layers.0.norm1/out"], epsilon=cfg.eps, axis=-1)
  h, residual = "layers.0.norm1/out", x
  for i in range(cfg.layers):
    attn = _attention(bld, i, h, caches)
    h, residual = _skip_norm(bld, attn, residual, bld.norm_weight(f"layers.{i}.post_norm"),
                             f"layers.{i}.norm2")
    mlp = _mlp(bld, i, h)
    last = i + 1 == cfg.layers
    weight = bld.norm_weight("final_norm" if last else f"layers.{i + 1}.input_norm")
    h, residual = _skip_norm(bld, mlp, residual, weight, f"layers.{i + 1}.norm1")
  bld.nodes[-1].output[3] = ""          # the last residual sum is not used
  if last_logits:
    bld.node("Gather", [h, bld.init("last_index", np.array([-1], np.int64))], ["last/out"],
             axis=1)
    h = "last/out"
  logits = bld.linear(h, "lm_head", cfg.hidden, cfg.vocab, std=0.5)
  bld.node("Identity", [logits], ["logits"])
  ft, kvd = bld.float_type, cfg.head_dim
  ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", width])
          for n, width in (("input_ids", "seq"), ("attention_mask", "total"),
                           ("position_ids", "seq"))]
  past = [helper.make_tensor_value_info(f"past_key_values.{i}.{w}", ft,
                                        ["batch", cfg.kv_heads, "past", kvd])
          for i in range(cfg.layers) for w in ("key", "value")]
  outs = [helper.make_tensor_value_info("logits", ft, ["batch", 1 if last_logits else "seq",
                                                       cfg.vocab])]
  outs += [helper.make_tensor_value_info(f"present.{i}.{w}", ft,
                                         ["batch", cfg.kv_heads, "total", kvd])
           for i in range(cfg.layers) for w in ("key", "value")]
  graph = helper.make_graph(bld.nodes, "causal_lm", ints + past, outs, bld.inits)
  return helper.make_model(graph, ir_version=10, opset_imports=[
    helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])


def ort_greedy(model, prompt: list, steps: int) -> list:
  """onnxruntime's (CPU) greedy tokens for a model of this layout (a ModelProto or a file path):
  a prompt step, then one decode step per token."""
  return ort_steps(model, prompt, steps)[0]


def ort_steps(model, prompt: list, steps: int, forced: list | None = None) -> tuple:
  """onnxruntime's (CPU) (argmax tokens, last-position float64 logits) at each of `steps`
  positions of a model of this layout: a prompt step, then one decode step per token, each fed
  the previous argmax, or `forced`'s token there where given (forced decoding)."""
  import onnxruntime as ort
  src = model if isinstance(model, str) else model.SerializeToString()
  sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
  past_inputs = [i for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
  fdt = np.float16 if "float16" in past_inputs[0].type else np.float32
  past = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), fdt) for i in past_inputs}
  new, total, tokens, logits = list(prompt), 0, [], []
  for step in range(steps):
    total += len(new)
    feeds = {"input_ids": np.array([new], np.int64),
             "attention_mask": np.ones((1, total), np.int64),
             "position_ids": np.arange(total - len(new), total, dtype=np.int64)[None], **past}
    results = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    past = {n: results[n.replace("past_key_values.", "present.")] for n in past}
    logits.append(results["logits"][0, -1].astype(np.float64))
    tokens.append(int(results["logits"][0, -1].astype(np.float32).argmax()))
    new = [forced[step] if forced is not None else tokens[-1]]
  return tokens, logits


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
  parser.add_argument("--dtype", choices=("fp32", "fp16", "q4"), default="fp32")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--rotary", choices=("op", "gqa"), default="op")
  parser.add_argument("--out", required=True)
  args = parser.parse_args()
  model = build(CONFIGS[args.config], args.dtype, args.seed, args.rotary)
  import onnx
  onnx.save_model(model, args.out, save_as_external_data=model.ByteSize() > (1 << 30),
                  location="weights.bin")
  print(f"wrote {args.out}: {args.config} {args.dtype}, {len(model.graph.node)} nodes")


if __name__ == "__main__":
  main()
