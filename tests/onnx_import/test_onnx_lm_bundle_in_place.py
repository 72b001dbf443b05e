"""A causal LM bundle (export/onnx_lm.py) writes its KV caches in place (onnx/operators/kv_write.py):
each cache state's buffer is preallocated at the context's rows, its present output IS that buffer,
and the only kernels writing it are the per-layer writes of the run's new rows; after a run the
bundle only counts the rows (no copy of the cache, on the device or through the host). Greedy tokens
as onnxruntime's (CPU) on WEBGPU, for one-token steps and for a symbolic step that prefills the
prompt in two runs (the second writes at a past length > 0); on PTXSIM (a ptx bundle); and for
a decoder whose caches are Concat(past, new)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

import kernelgen as kg
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from tools import device_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lm_models  # noqa: E402
from bundle_state import state_buffers  # noqa: E402

PROMPT = [1, 5, 9, 2, 7, 3, 4, 8]
CONTEXT = 32
CASES = [("tiny", "fp32", "op", 1), ("tiny", "q4", "op", 4), ("tiny-qwen", "q4", "gqa", 1)]


def _bundle(tmp_path, config: str, dtype: str, rotary: str, step: int):
  from kernelgen.export.onnx_lm import causal_program
  model = lm_models.build(lm_models.CONFIGS[config], dtype, rotary=rotary)
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), step, CONTEXT)
  return model, kg.export(outputs, str(tmp_path / "lm"), format="webgpu", state=state)



@pytest.mark.parametrize("config,dtype,rotary,step", CASES)
def test_each_cache_is_written_in_place_by_its_new_rows_only(tmp_path, config, dtype, rotary,
                                                            step):
  pytest.importorskip("onnxruntime")
  _, bundle = _bundle(tmp_path, config, dtype, rotary, step)
  m = bundle.manifest
  cfg = lm_models.CONFIGS[config]
  head_dim = cfg.hidden // cfg.heads
  caches = state_buffers(m)
  assert len(caches) == 2 * cfg.layers
  for name, (past, present) in caches.items():
    assert present["id"] == past["id"], name               # the present is the state's buffer
    assert past["shape"] == [1, cfg.kv_heads, CONTEXT, head_dim], past   # preallocated
    assert past["symbolic_shape"][2] == {"terms": [["past", 1]], "const": 0}, past
  for s in m["state"]:
    assert s["in_rows"] == s["out_rows"] == CONTEXT, s
  ids = {past["id"] for past, _ in caches.values()}
  for seq in {1, step}:             # the kernels a run of seq new tokens launches
    writers = [k for k in m["kernels"] for b in k["bindings"]
               if b["buffer"] in ids and b["access"] != "read" and
               ("runs" not in k or k["runs"]["lo"] <= seq <= k["runs"]["hi"])]
    assert len(writers) == len(caches), seq                 # one write per cache per run
    for k in writers:               # over the run's new rows (step of them), never the context
      most = step * cfg.kv_heads * head_dim     # (a decode run's projection and writes cut to
      if k.get("runs", {}).get("hi") == 1:      # one row: a thread per output of q, k and v,
        most = cfg.hidden + 2 * cfg.kv_heads * head_dim     # graph/one_row.py write_joined_at)
      assert math.prod(k["global_size"]) <= most, k


@pytest.mark.parametrize("config,dtype,rotary,step", CASES)
def test_in_place_bundle_generates_onnxruntime_greedy_tokens_without_copying_a_cache(
    tmp_path, monkeypatch, config, dtype, rotary, step):
  pytest.importorskip("onnxruntime")
  device_runtime("WEBGPU")
  model, bundle = _bundle(tmp_path, config, dtype, rotary, step)
  want = lm_models.ort_greedy(model, PROMPT, 10)
  runtime, handles, _ = bundle._prepare("WEBGPU")
  caches = {id(handles[bundle._storage_of(s["name"])]) for s in bundle.manifest["state"]}
  read = []
  copyout = type(runtime).copyout
  monkeypatch.setattr(type(runtime), "copyout", lambda self, h: read.append(id(h)) or
                      copyout(self, h))
  assert bundle.generate(PROMPT, max_new_tokens=10, device="WEBGPU") == want
  assert len(set(want)) > 1
  assert read and not caches & set(read)          # the outputs read back, never a cache
  assert bundle.generate(PROMPT, max_new_tokens=10, device="WEBGPU") == want    # after reset


def test_ptx_bundle_writes_in_place_and_generates_onnxruntime_greedy_tokens(tmp_path):
  """The same on the ptx side (Bundle.run on PTXSIM): the caches in place, the tokens ort's."""
  pytest.importorskip("onnxruntime")
  from kernelgen.export.onnx_lm import causal_program
  model = lm_models.build(lm_models.CONFIGS["tiny"], "fp32")
  want = lm_models.ort_greedy(model, PROMPT, 4)
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), 4, CONTEXT)
  bundle = kg.export(outputs, str(tmp_path / "lm"), format="ptx", state=state)
  assert all(past["id"] == present["id"] for past, present in state_buffers(bundle.manifest).values())
  assert bundle.generate(PROMPT, max_new_tokens=4, device="PTXSIM") == want



def _ort_one_at_a_time(model, prompt: list, steps: int) -> list:
  """onnxruntime's greedy tokens with the prompt fed a token a run, as a one-token-step bundle
  prefills (the decoder has no causal mask: a whole-prompt run would differ)."""
  import numpy as np
  ort = pytest.importorskip("onnxruntime")
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  names = [o.name for o in sess.get_outputs()]
  past = {n.replace("present.", "past_key_values."): np.zeros((1, 1, 0, 16), np.float32)
          for n in names[1:]}
  feed, out = list(prompt), []
  for total in range(1, len(prompt) + steps):
    r = sess.run(None, {"input_ids": np.array([[feed[total - 1]]], np.int64),
                        "attention_mask": np.ones((1, total), np.int64), **past})
    past = {n.replace("present.", "past_key_values."): v for n, v in zip(names[1:], r[1:])}
    if total >= len(prompt):
      out.append(int(r[0][0, -1].argmax()))
      feed.append(out[-1])
  return out


def test_concat_decoder_bundle_appends_in_place(tmp_path):
  """Concat(past, new) caches (a decoder of standard operators) in a one-token-step bundle: the
  present (past + 1 rows) is the state's buffer too; tokens as onnxruntime's."""
  from kernelgen.export.onnx_lm import causal_program
  from test_onnx_kv_in_place import _concat_decoder
  device_runtime("WEBGPU")
  model = _concat_decoder()
  want = _ort_one_at_a_time(model, PROMPT, 6)
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), 1, CONTEXT)
  bundle = kg.export(outputs, str(tmp_path / "lm"), format="webgpu", state=state)
  assert all(past["id"] == present["id"] for past, present in state_buffers(bundle.manifest).values())
  assert bundle.generate(PROMPT, max_new_tokens=6, device="WEBGPU") == want
  assert len(set(want)) > 1


def test_a_q4_bundle_whose_step_is_wider_than_the_hidden_size_exports_and_generates(tmp_path):
  """A symbolic step of 64 rows over a hidden size of 64 (the tiny config): the packed matvec's
  check whether its input reads a product compared a 64-output reduction with the input's
  64*seq elements, which depends on seq, and the export failed with an UnsupportedError."""
  pytest.importorskip("onnxruntime")
  device_runtime("WEBGPU")
  from kernelgen.export.onnx_lm import causal_program
  model = lm_models.build(lm_models.CONFIGS["tiny"], "q4", rotary="op")
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), 64, 128)
  bundle = kg.export(outputs, str(tmp_path / "lm"), format="webgpu", state=state)
  assert bundle.generate(PROMPT, max_new_tokens=6, device="WEBGPU") == \
    lm_models.ort_greedy(model, PROMPT, 6)
