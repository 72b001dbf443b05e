"""A causal LM bundle (export/onnx_lm.py) of a decoder whose caches are Concat(past, new) with a
symbolic step (seq 1..step > 1) writes them in place too: the present (past + seq rows, at most
context - 1 + step) is the state's buffer, preallocated at that many rows and read as its first
`past` rows; the only kernels writing it are the writes of the run's new rows, and Bundle.run
never copies a cache (WEBGPU natively; PTXSIM). Greedy tokens as onnxruntime's fed the same
chunks (the prompt in runs of `step` tokens, then one a run: the decoder has no causal mask)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from test_onnx_kv_in_place import _concat_decoder
from tools import device_runtime
from bundle_state import state_buffers

PROMPT, CONTEXT, STEP, TOKENS = [7, 3, 12, 5, 30, 2, 8], 32, 4, 6     # runs of 4, 3, then 1


def _ort_in_chunks(model, prompt: list, step: int, tokens: int) -> list:
  """onnxruntime's greedy tokens with the prompt fed in runs of `step`, then a token a run."""
  ort = pytest.importorskip("onnxruntime")
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  names = [o.name for o in sess.get_outputs()]
  past = {n.replace("present.", "past_key_values."): np.zeros((1, 1, 0, 16), np.float32)
          for n in names[1:]}
  runs = [prompt[i:i + step] for i in range(0, len(prompt), step)]
  total, out = 0, []
  while len(out) < tokens:
    new = runs.pop(0) if runs else [out[-1]]
    total += len(new)
    r = sess.run(None, {"input_ids": np.array([new], np.int64),
                        "attention_mask": np.ones((1, total), np.int64), **past})
    past = {n.replace("present.", "past_key_values."): v for n, v in zip(names[1:], r[1:])}
    if not runs:
      out.append(int(r[0][0, -1].argmax()))
  return out


def _bundle(tmp_path, fmt: str):
  from kernelgen.export.onnx_lm import causal_program
  model = _concat_decoder()
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), STEP, CONTEXT)
  return model, kg.export(outputs, str(tmp_path / "lm"), format=fmt, state=state)



def test_concat_caches_of_a_symbolic_step_are_their_presents(tmp_path):
  _, bundle = _bundle(tmp_path, "webgpu")
  m = bundle.manifest
  caches = state_buffers(m)
  assert len(caches) == 4
  for name, (past, present) in caches.items():
    assert present["id"] == past["id"], name
    assert past["shape"] == [1, 1, CONTEXT - 1 + STEP, 16], past     # past + seq at most
    assert past["symbolic_shape"][2] == {"terms": [["past", 1]], "const": 0}, past
  for s in m["state"]:
    assert s["in_rows"] == s["out_rows"] == CONTEXT - 1 + STEP, s
  ids = {past["id"] for past, _ in caches.values()}
  writers = [k for k in m["kernels"] for b in k["bindings"]
             if b["buffer"] in ids and b["access"] != "read"]
  assert len(writers) == len(caches), [k["name"] for k in writers]
  for k in writers:
    assert k["name"].startswith("write_") and \
      k["global_size"][0] * k["global_size"][1] * k["global_size"][2] <= STEP * 16, k


@pytest.mark.parametrize("device,fmt", [("WEBGPU", "webgpu"), ("PTXSIM", "ptx")])
def test_concat_step_bundle_gives_onnxruntime_tokens_without_copying_a_cache(
    tmp_path, monkeypatch, device, fmt):
  device_runtime(device)
  model, bundle = _bundle(tmp_path, fmt)
  want = _ort_in_chunks(model, PROMPT, STEP, TOKENS)
  assert len(set(want)) > 1
  runtime, handles, _ = bundle._prepare(device)
  caches = {id(handles[bundle._storage_of(s["name"])]) for s in bundle.manifest["state"]}
  out, into = [], []
  copyout, copyin = type(runtime).copyout, type(runtime).copyin
  monkeypatch.setattr(type(runtime), "copyout", lambda self, h: out.append(id(h)) or
                      copyout(self, h))
  monkeypatch.setattr(type(runtime), "copyin", lambda self, h, *a, **k: into.append(id(h)) or
                      copyin(self, h, *a, **k))
  assert bundle.generate(PROMPT, max_new_tokens=TOKENS, device=device) == want
  assert out and not caches & set(out) and into and not caches & set(into)
  assert bundle.generate(PROMPT, max_new_tokens=TOKENS, device=device) == want   # after reset
