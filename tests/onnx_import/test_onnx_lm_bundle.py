"""An ONNX causal LM (bench/lm_models.py's Optimum layout: GroupQueryAttention, RotaryEmbedding,
MatMulNBits, GatherBlockQuantized) exported as causal LM bundles (export/onnx_lm.py): one bundle
whose step is symbolic prefills (the prompt in one run, or in runs of its top) and decodes (runs of
one token), the KV cache as bundle state, and generates onnxruntime's greedy tokens through
Bundle.generate on WEBGPU, compiling nothing per token; so does a bundle of one token a step; a
run of the whole prompt gives onnxruntime's first token and last logits; a model in another layout
and a step past the context are ModelErrors."""
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
CONTEXT = 32


@pytest.fixture(scope="module")
def webgpu():
  device_runtime("WEBGPU")
  return "WEBGPU"


def _export(model, path, step: int):
  from kernelgen.export.onnx_lm import causal_program
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), step, CONTEXT)
  return kg.export(outputs, str(path), format="webgpu", state=state)


@pytest.mark.parametrize("config,dtype,rotary", [("tiny", "fp32", "op"), ("tiny", "q4", "op"),
                                                 ("tiny-qwen", "q4", "gqa")])
def test_decode_bundle_generates_onnxruntime_greedy_tokens(webgpu, tmp_path, config, dtype,
                                                           rotary):
  pytest.importorskip("onnxruntime")
  model = lm_models.build(lm_models.CONFIGS[config], dtype, rotary=rotary)
  want = lm_models.ort_greedy(model, PROMPT, 12)
  bundle = _export(model, tmp_path, 1)
  assert {s["name"] for s in bundle.manifest["state"]} == {
    f"past_key_values.{i}.{w}" for i in range(2) for w in ("key", "value")}
  inputs = {i["name"] for i in bundle.inputs}    # position_ids only where the graph reads it
  assert inputs - {"position_ids"} == {"attention_mask", "input_ids", "seed", "temperature"}
  assert ("position_ids" in inputs) == (rotary == "op")
  got = bundle.generate(PROMPT, max_new_tokens=12, device=webgpu)
  assert got == want and len(set(want)) > 1
  assert bundle.generate(PROMPT, max_new_tokens=12, device=webgpu) == want     # after reset


@pytest.mark.parametrize("config,dtype,step", [("tiny", "fp32", 8), ("tiny", "q4", 8),
                                               ("tiny", "fp16", 8), ("tiny-qwen", "q4", 3)])
def test_one_bundle_prefills_and_decodes_onnxruntime_greedy_tokens(webgpu, tmp_path, config,
                                                                    dtype, step):
  """Step 8: the 8-token prompt in one run; step 3: in runs of 3, 3 and 2; then one token a run.
  The weights are stored once (no more bytes than the ONNX initializers)."""
  pytest.importorskip("onnxruntime")
  from onnx import numpy_helper
  model = lm_models.build(lm_models.CONFIGS[config], dtype, rotary="gqa" if step == 3 else "op")
  want = lm_models.ort_greedy(model, PROMPT, 12)
  bundle = _export(model, tmp_path, step)
  ids = next(i for i in bundle.manifest["inputs"] if i["name"] == "input_ids")
  assert ids["symbolic_shape"][1]["terms"] == [["seq", 1]]
  assert {d["name"]: d["hi"] for d in bundle.manifest["dims"]}["seq"] == step
  pipelines = kg.Device[webgpu].pipelines
  made = []
  got = bundle.generate(PROMPT, max_new_tokens=12, device=webgpu,
                        on_token=lambda t: made.append(len(pipelines)))
  assert got == want and len(set(want)) > 1
  assert made[1:] == [made[1]] * 11                    # no pipeline made per decode run
  buffers = {b["id"]: b for b in bundle.manifest["buffers"]}
  stored = sum(buffers[w["buffer"]]["nbytes"] for w in bundle.manifest["weights"])
  initial = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
  assert 0.9 * initial < stored <= initial


@pytest.mark.parametrize("dtype", ["fp32", "q4"])
def test_prefill_bundle_gives_the_first_token_and_logits(webgpu, tmp_path, dtype):
  ort = pytest.importorskip("onnxruntime")
  from kernelgen.export.causal import _feeds, names
  cfg = lm_models.CONFIGS["tiny"]
  model = lm_models.build(cfg, dtype)
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  past = {f"past_key_values.{i}.{w}": np.zeros((1, cfg.kv_heads, 0, cfg.head_dim), np.float32)
          for i in range(cfg.layers) for w in ("key", "value")}
  n = len(PROMPT)
  want = sess.run(["logits"], {"input_ids": np.array([PROMPT], np.int64),
                               "attention_mask": np.ones((1, n), np.int64),
                               "position_ids": np.arange(n)[None], **past})[0][0, -1]
  bundle = _export(model, tmp_path, n)
  bundle.reset()
  got = bundle.run(_feeds(names(bundle.manifest), PROMPT, 0, 0.0, 0), device=webgpu,
                   outputs=["logits", "token"])
  np.testing.assert_allclose(got["logits"].numpy().reshape(-1), want, rtol=1e-4, atol=1e-4)
  assert got["token"].tolist() == [int(want.argmax())]


def test_other_layouts_and_steps_are_model_errors():
  from kernelgen.export.onnx_lm import causal_program
  from onnx import TensorProto, helper
  graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
  relu = kg.onnx.load(helper.make_model(graph).SerializeToString())
  with pytest.raises(kg.ModelError, match="input_ids, past_key_values"):
    causal_program(relu)
  lm = kg.onnx.load(lm_models.build(lm_models.CONFIGS["tiny"], "fp32").SerializeToString())
  with pytest.raises(kg.ModelError, match="1 <= step < context"):
    causal_program(lm, step=8, context=8)


@pytest.mark.parametrize("device,rotary", [("PYTHON", "gqa"), ("WEBGPU", "op")])
def test_symbolic_new_tokens_over_a_symbolic_past_match_onnxruntime(device, rotary):
  """Both the new tokens (`seq`) and the past are symbolic dims, so prefill and decode steps of
  any size share the program: GroupQueryAttention places the new keys at the run-time count of
  new tokens, never at the padded size (which gave NaN logits once the past was not empty)."""
  ort = pytest.importorskip("onnxruntime")
  device_runtime(device)
  cfg = lm_models.CONFIGS["tiny"]
  model = lm_models.build(cfg, "fp32", rotary=rotary)
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  lm = kg.onnx.load(model.SerializeToString(),
                    dims={"batch": 1, "seq": (1, CONTEXT - 1), "past": (0, CONTEXT - 1),
                          "total": (1, CONTEXT)})
  past = {f"past_key_values.{i}.{w}": np.zeros((1, cfg.kv_heads, 0, cfg.head_dim), np.float32)
          for i in range(cfg.layers) for w in ("key", "value")}
  tokens, done = PROMPT + [11, 6, 10], 0
  for new in (4, 1, 3, 1, 2):
    feeds = {"input_ids": np.array([tokens[done:done + new]], np.int64),
             "attention_mask": np.ones((1, done + new), np.int64),
             "position_ids": np.arange(done, done + new)[None], **past}
    names = [o.name for o in sess.get_outputs()]
    want = dict(zip(names, sess.run(None, feeds)))
    got = lm.run(feeds, device=device)
    for name in names:
      np.testing.assert_allclose(got[name].numpy(), want[name], rtol=1e-4, atol=1e-4,
                                 err_msg=f"{name} after {done} tokens, {new} new")
    past = {n.replace("present.", "past_key_values."): want[n] for n in names if "present" in n}
    done += new
