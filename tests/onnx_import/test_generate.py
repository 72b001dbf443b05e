"""kg.generate: greedy tokens of random-weight causal LMs in the Optimum layout
(bench/lm_models.py: GroupQueryAttention, RotaryEmbedding, SkipSimplifiedLayerNormalization,
MatMulNBits) identical to onnxruntime's greedy loop on WEBGPU (fp32, q4, and fp16 with f16
storage emulated, as on an adapter without shader-f16), decode steps compiling nothing after
the second (symbolic cache dims); sampling on the device (seeded,
top-k, top-p), stop tokens and streaming with a kg.nn-style model."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import kernelgen as kg
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from tools import device_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lm_models  # noqa: E402

PROMPT = [1, 5, 9, 2, 7, 3, 4, 8]


def ort_greedy(model, prompt: list, steps: int) -> list:
  """onnxruntime's greedy tokens: a prompt step, then one decode step per token."""
  pytest.importorskip("onnxruntime")
  return lm_models.ort_greedy(model, prompt, steps)


@pytest.fixture(scope="module")
def webgpu():
  device_runtime("WEBGPU")
  return "WEBGPU"


@pytest.mark.parametrize("config,dtype,rotary", [("tiny", "fp32", "op"), ("tiny", "q4", "op"),
                                                 ("tiny-qwen", "q4", "gqa")])
def test_greedy_tokens_equal_onnxruntime_on_webgpu(webgpu, config, dtype, rotary):
  model = lm_models.build(lm_models.CONFIGS[config], dtype, rotary=rotary)
  want = ort_greedy(model, PROMPT, 16)
  streamed = []
  got = kg.generate(kg.onnx.load(model.SerializeToString()), PROMPT, max_new_tokens=16,
                    device=webgpu, on_token=streamed.append)
  assert got == want and streamed == got


@pytest.mark.parametrize("config,rotary", [("tiny", "op"), ("tiny-qwen", "gqa")])
def test_decode_steps_compile_nothing_and_build_no_pipeline_after_the_second(webgpu, config,
                                                                             rotary, monkeypatch):
  """kg.generate makes the growing dims (past length, mask width) symbolic: the prompt step and
  the first decode step compile, the next 14 steps replay them; a second generation from other
  token ids (same prompt length) compiles nothing but the prompt's kernels capped for a one-off
  run growing for more runs (cache_info's grown). Tokens as onnxruntime's."""
  model = lm_models.build(lm_models.CONFIGS[config], "q4", rotary=rotary)
  loaded, runtime = kg.onnx.load(model.SerializeToString()), kg.Device[webgpu]
  kg.clear_cache()
  counts = []
  got = kg.generate(loaded, PROMPT, max_new_tokens=16, device=webgpu, on_token=lambda t:
                    counts.append((kg.cache_info()["misses"], len(runtime.pipelines))))
  assert got == ort_greedy(model, PROMPT, 16)
  assert counts[2:] == [counts[1]] * 14, counts
  other, entries = [9, 9, 4, 1, 0, 2, 6, 5], []
  build = runtime._build
  monkeypatch.setattr(runtime, "_build", lambda launch: entries.append(launch.entry_point) or
                      build(launch))
  assert kg.generate(loaded, other, max_new_tokens=4, device=webgpu) == \
    ort_greedy(model, other, 4)
  info, grown = kg.cache_info(), kg.cache_info()["grown"]
  assert info["misses"] - grown == counts[-1][0]
  # the pipelines built are the grown kernels' (each with its variants for small bound values,
  # under the kernel's entry point)
  assert len(set(entries)) == grown


def test_fp16_model_without_shader_f16_gives_the_fp32_tokens(webgpu, monkeypatch):
  """f16 weights, activations and caches with f16 storage emulated (the adapter's shader-f16
  hidden, as on SwiftShader): the greedy tokens of the fp32 model with the same weights."""
  rt = kg.Device[webgpu]
  monkeypatch.setattr(rt, "features", [f for f in rt.features if f != "shader-f16"])
  assert rt.render_options()["f16"] is False
  cfg = lm_models.CONFIGS["tiny"]
  want = ort_greedy(lm_models.build(cfg, "fp32"), PROMPT, 8)
  fp16 = lm_models.build(cfg, "fp16")
  assert ort_greedy(fp16, PROMPT, 8) == want
  got = kg.generate(kg.onnx.load(fp16.SerializeToString()), PROMPT, max_new_tokens=8,
                    device=webgpu)
  assert got == want


# ---- sampling, stop tokens, kg.nn models (a bigram table: logits of the last token) ----------

def _bigram(vocab: int = 40, seed: int = 0):
  table = np.random.default_rng(seed).standard_normal((vocab, vocab)).astype(np.float32) * 3
  t = kg.Tensor(table, device="PYTHON")
  return (lambda ids: t[ids]), table


def test_module_greedy_and_stop_token():
  model, table = _bigram()
  want, tok = [], PROMPT[-1]
  for _ in range(6):
    tok = int(table[tok].argmax())
    want.append(tok)
  assert kg.generate(model, PROMPT, max_new_tokens=6, device="PYTHON") == want
  stop = want[2]
  assert kg.generate(model, [PROMPT], max_new_tokens=6, device="PYTHON", stop=[stop]) == \
    want[:want.index(stop) + 1]


def test_sampling_is_seeded_and_top_k_one_is_greedy():
  model, _ = _bigram()
  greedy = kg.generate(model, PROMPT, max_new_tokens=5, device="PYTHON")
  assert kg.generate(model, PROMPT, max_new_tokens=5, temperature=0.8, top_k=1,
                     device="PYTHON") == greedy
  a = kg.generate(model, PROMPT, max_new_tokens=8, temperature=1.5, seed=3, device="PYTHON")
  b = kg.generate(model, PROMPT, max_new_tokens=8, temperature=1.5, seed=3, device="PYTHON")
  c = kg.generate(model, PROMPT, max_new_tokens=8, temperature=1.5, seed=4, device="PYTHON")
  assert a == b and a != c


def test_top_k_and_top_p_keep_sampling_inside_their_sets():
  logits = np.array([2.0, 1.9, 1.8, -1.0, -1.2, 0.5, -3.0, 1.0], np.float32)
  probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
  order = np.argsort(-probs)
  nucleus = set(order[:np.searchsorted(np.cumsum(probs[order]), 0.6) + 1].tolist())
  top3 = set(order[:3].tolist())
  seen_k, seen_p = set(), set()
  for seed in range(24):
    x = kg.Tensor(logits, device="PYTHON")
    seen_k.add(int(kg.onnx.generate.sample(x, 2.0, top_k=3, seed=seed).item()))
    seen_p.add(int(kg.onnx.generate.sample(x, 1.0, top_p=0.6, seed=seed).item()))
  assert seen_k <= top3 and len(seen_k) > 1
  assert seen_p <= nucleus and len(seen_p) > 1


def test_bad_arguments_are_typed_errors():
  model, _ = _bigram()
  with pytest.raises(kg.ShapeError, match="top_p"):
    kg.generate(model, PROMPT, top_p=0.0, device="PYTHON")
  with pytest.raises(kg.ShapeError, match="batch 1"):
    kg.generate(model, [PROMPT, PROMPT], device="PYTHON")
  lm = lm_models.build(lm_models.CONFIGS["tiny"], "fp32")
  lm.graph.input[0].name = "tokens"
  lm.graph.node[0].input[1] = "tokens"
  with pytest.raises(kg.ModelError, match="input_ids"):
    kg.generate(kg.onnx.load(lm.SerializeToString()), PROMPT, device="PYTHON")


def test_kg_nn_model_greedy_matches_numpy():
  """A kg.nn model (ids -> logits, no cache) is run over the whole sequence each step."""
  model = kg.nn.Sequential(kg.nn.Embedding(30, 8), kg.nn.Linear(8, 30)).to("PYTHON")
  emb, lin = model[0], model[1]
  table, w, b = emb.weight.numpy(), lin.weight.numpy(), lin.bias.numpy()
  want, tok = [], PROMPT[-1]
  for _ in range(5):
    tok = int((table[tok] @ w.T + b).argmax())
    want.append(tok)
  assert kg.generate(model, PROMPT, max_new_tokens=5, device="PYTHON") == want


def _merged_decoder():
  """A toy decoder in Optimum's merged layout: its If on use_cache_branch adds one bias to the
  logits on the prompt step (no past) and another on the decode steps."""
  from onnx import TensorProto, helper, numpy_helper
  rng = np.random.default_rng(3)
  vocab = 24
  consts = {"E": rng.standard_normal((vocab, 2)).astype(np.float32),
            "W": rng.standard_normal((2, vocab)).astype(np.float32) * 3,
            "axis1": np.array([1], np.int64)}
  branch = {}
  for name, seed in (("then", 4), ("else", 5)):
    bias = numpy_helper.from_array(
      np.random.default_rng(seed).standard_normal(vocab).astype(np.float32) * 5, f"b_{name}")
    branch[name] = helper.make_graph(
      [helper.make_node("Constant", [], [f"out_{name}"], value=bias)], name, [],
      [helper.make_tensor_value_info(f"out_{name}", TensorProto.FLOAT, [vocab])])
  nodes = [helper.make_node("Gather", ["E", "input_ids"], ["emb"]),
           helper.make_node("MatMul", ["emb", "W"], ["raw"]),
           helper.make_node("Squeeze", ["use_cache_branch"], ["cond"]),
           helper.make_node("If", ["cond"], ["bias"], then_branch=branch["then"],
                            else_branch=branch["else"]),
           helper.make_node("Add", ["raw", "bias"], ["logits"]),
           helper.make_node("Unsqueeze", ["emb", "axis1"], ["kv"])]
  for w in ("key", "value"):
    nodes.append(helper.make_node("Concat", [f"past_key_values.0.{w}", "kv"],
                                  [f"present.0.{w}"], axis=2))
  ints = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, n[:4]])
          for n in ("input_ids", "attention_mask")]
  flag = [helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])]
  past = [helper.make_tensor_value_info(f"past_key_values.0.{w}", TensorProto.FLOAT,
                                        [1, 1, "past", 2]) for w in ("key", "value")]
  outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "seq", vocab])] + \
    [helper.make_tensor_value_info(f"present.0.{w}", TensorProto.FLOAT, [1, 1, "total", 2])
     for w in ("key", "value")]
  graph = helper.make_graph(nodes, "merged", ints + flag + past, outs,
                            [numpy_helper.from_array(v, k) for k, v in consts.items()])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_merged_decoder_gets_use_cache_branch():
  model = _merged_decoder()
  ort = pytest.importorskip("onnxruntime")
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  past = {f"past_key_values.0.{w}": np.zeros((1, 1, 0, 2), np.float32) for w in ("key", "value")}
  new, total, want = PROMPT, 0, []
  for _ in range(4):
    total += len(new)
    logits, k, v = sess.run(None, {"input_ids": np.array([new], np.int64),
                                   "attention_mask": np.ones((1, total), np.int64),
                                   "use_cache_branch": np.array([total > len(new)]), **past})
    past = {"past_key_values.0.key": k, "past_key_values.0.value": v}
    want.append(int(logits[0, -1].argmax()))
    new = [want[-1]]
  got = kg.generate(kg.onnx.load(model.SerializeToString()), PROMPT, max_new_tokens=4,
                    device="PYTHON")
  assert got == want


def test_page_entry_point_generates_and_streams():
  """web_api.generate_model (what the page's worker calls): JSON options, tokens streamed to
  the callback, a typed error in the result when no model was given."""
  import json
  from kernelgen import web_api
  web_api.models._MODEL.clear()
  missing = web_api.generate_model(None, json.dumps({"prompt": PROMPT}))
  assert missing["ok"] is False and missing["error"]["type"] == "ModelError"
  model = _merged_decoder().SerializeToString()
  streamed = []
  options = json.dumps({"prompt": PROMPT, "max_new_tokens": 3, "device": "PYTHON"})
  result = web_api.generate_model(model, options, streamed.append)
  want = kg.generate(kg.onnx.load(model), PROMPT, max_new_tokens=3, device="PYTHON")
  assert result["ok"] and result["tokens"] == want == streamed
  again = web_api.generate_model(None, options)       # the model given last
  assert again["tokens"] == want
  web_api.models._MODEL.clear()
