"""kg.generate writes an ONNX decoder's KV caches in place (onnx/operators/kv_write.py): a decode
step's present is its past's own preallocated buffer, the new row written at the past length by
one small kernel (L.WRITE), for GroupQueryAttention (bench/lm_models.py's tiny LM) and for
Concat(past, new); tokens as onnxruntime's. A model run by the user never has an input written."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.onnx.generate import OnnxCausalLM
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lm_models  # noqa: E402

PROMPT = [1, 5, 9, 2, 7, 3, 4, 8]


def _buffers(lm) -> list:
  """The caches' buffers (the step realized them)."""
  assert all(t.node.realized for t in lm.state())
  return [id(t.node.buffer) for t in lm.state()]


@pytest.mark.parametrize("dtype", ["fp32", "q4"])
def test_gqa_caches_are_one_buffer_across_steps_and_tokens_match(dtype):
  pytest.importorskip("onnxruntime")
  model = lm_models.build(lm_models.CONFIGS["tiny"], dtype)
  want = lm_models.ort_greedy(model, PROMPT, 6)
  lm = OnnxCausalLM(kg.onnx.load(model.SerializeToString()), "PYTHON", 64)
  total, got, seen = 0, [], []
  new = PROMPT
  for _ in range(6):
    total += len(new)
    got.append(int(lm.step(new, total).numpy().argmax()))
    seen.append(_buffers(lm))
    new = [got[-1]]
  assert got == want
  assert seen == [seen[0]] * 6      # the prompt's present, then every step's: the same buffers


def test_user_run_does_not_write_its_inputs():
  pytest.importorskip("onnxruntime")
  model = kg.onnx.load(lm_models.build(lm_models.CONFIGS["tiny"], "fp32").SerializeToString())
  assert not getattr(model, "kv_in_place", False)
  lm = OnnxCausalLM(model, "PYTHON", 64)
  assert lm.model.kv_in_place and lm.model is not model


def _concat_decoder(layers: int = 2, vocab: int = 40, d: int = 16):
  """A decoder of standard operators: per layer q, k, v projections, Concat(past, new) caches,
  softmax(q kᵀ / 4) v added to the residual; no mask (both runtimes compute the same)."""
  from onnx import TensorProto, helper, numpy_helper
  rng = np.random.default_rng(7)
  c = {"E": rng.standard_normal((vocab, d)), "Wo": rng.standard_normal((d, vocab)),
       "scale": np.array(0.25), "ax1": np.array([1], np.int64)}
  nodes = [helper.make_node("Gather", ["E", "input_ids"], ["h0"])]
  outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "seq", vocab])]
  past = []
  for i in range(layers):
    for w in "qkv":
      c[f"W{w}{i}"] = rng.standard_normal((d, d)) * 0.5
      nodes += [helper.make_node("MatMul", [f"h{i}", f"W{w}{i}"], [f"{w}{i}f"]),
                helper.make_node("Unsqueeze", [f"{w}{i}f", "ax1"], [f"{w}{i}"])]
    for w, src in (("key", "k"), ("value", "v")):
      nodes.append(helper.make_node("Concat", [f"past_key_values.{i}.{w}", f"{src}{i}"],
                                    [f"present.{i}.{w}"], axis=2))
      past.append(helper.make_tensor_value_info(f"past_key_values.{i}.{w}", TensorProto.FLOAT,
                                                [1, 1, "past", d]))
      outs.append(helper.make_tensor_value_info(f"present.{i}.{w}", TensorProto.FLOAT,
                                                [1, 1, "total", d]))
    nodes += [helper.make_node("Transpose", [f"present.{i}.key"], [f"kt{i}"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", [f"q{i}", f"kt{i}"], [f"s{i}"]),
              helper.make_node("Mul", [f"s{i}", "scale"], [f"ss{i}"]),
              helper.make_node("Softmax", [f"ss{i}"], [f"p{i}"], axis=-1),
              helper.make_node("MatMul", [f"p{i}", f"present.{i}.value"], [f"a{i}"]),
              helper.make_node("Squeeze", [f"a{i}", "ax1"], [f"a{i}s"]),
              helper.make_node("Add", [f"h{i}", f"a{i}s"], [f"h{i + 1}"])]
  nodes.append(helper.make_node("MatMul", [f"h{layers}", "Wo"], ["logits"]))
  ints = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, n[:4]])
          for n in ("input_ids", "attention_mask")]
  inits = [numpy_helper.from_array(v if v.dtype == np.int64 else v.astype(np.float32), k)
           for k, v in c.items()]
  graph = helper.make_graph(nodes, "concat_decoder", ints + past, outs, inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _ort_tokens(model, prompt: list, steps: int) -> list:
  ort = pytest.importorskip("onnxruntime")
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  names = [o.name for o in sess.get_outputs()]
  past = {n.replace("present.", "past_key_values."): np.zeros((1, 1, 0, 16), np.float32)
          for n in names[1:]}
  new, total, out = prompt, 0, []
  for _ in range(steps):
    total += len(new)
    r = sess.run(None, {"input_ids": np.array([new], np.int64),
                        "attention_mask": np.ones((1, total), np.int64), **past})
    past = {n.replace("present.", "past_key_values."): v for n, v in zip(names[1:], r[1:])}
    out.append(int(r[0][0, -1].argmax()))
    new = [out[-1]]
  return out


def test_concat_caches_are_appended_in_place():
  """Concat(past, new): tokens as onnxruntime's; from the first decode step on the caches stay
  one buffer (the prompt's present has past.hi + prompt rows, not the preallocated cache's: the
  prompt and the first decode step still select into new buffers; WIP)."""
  model = _concat_decoder()
  want = _ort_tokens(model, PROMPT, 8)
  lm = OnnxCausalLM(kg.onnx.load(model.SerializeToString()), "PYTHON", 64)
  new, total, got, seen = PROMPT, 0, [], []
  for _ in range(8):
    total += len(new)
    got.append(int(lm.step(new, total).numpy().argmax()))
    seen.append(_buffers(lm))
    new = [got[-1]]
  assert got == want
  assert seen[1:] == [seen[1]] * 7 and seen[0] != seen[1]
