"""A batch of sequences of different lengths writes its GroupQueryAttention KV caches in place
(onnx/operators/kv_write.py, issue 34): each decode step writes each row's new key and value at
that row's own past length (seqlens_k) into the past's own preallocated buffer, by one small
kernel per cache (L.WRITE with a start per row), never a kernel over the whole cache; logits and
each row's present cache as onnxruntime's (CPU), step by step (bench/lm_models.py's tiny LM,
1 layer; a right-padded prompt, then decode steps)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import realize as realizing
from kernelgen.onnx.generate import with_cache_dims
from kernelgen.tensor.symbolic import with_sym
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from tools import device_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lm_models  # noqa: E402

CFG = dataclasses.replace(lm_models.CONFIGS["tiny"], layers=1, hidden=32, mlp=32, vocab=41)
CONTEXT = 32
PROMPTS = [[1, 5, 9, 2, 7], [3, 4], [8, 6, 2, 1]]     # batch B: the first B, right-padded
PAST = ["past_key_values.0.key", "past_key_values.0.value"]


def _feeds(ids: list, lens: list, positions: list) -> dict:
  """input_ids (B, S) right-padded with 0, each row's mask of lens[b] ones, positions (B, S)."""
  s, total = max(map(len, ids)), max(lens)
  return {"input_ids": np.array([r + [0] * (s - len(r)) for r in ids], np.int64),
          "attention_mask": np.array([[1] * n + [0] * (total - n) for n in lens], np.int64),
          "position_ids": np.array(positions, np.int64)}


def _steps(batch: int, steps: int):
  """Each step's feeds and each row's count of keys: the prompt, then one token per row (the
  tokens fixed, so both runtimes see the same inputs)."""
  prompts = PROMPTS[:batch]
  s = max(map(len, prompts))
  lens = [len(p) for p in prompts]
  out = [(_feeds(prompts, lens, [list(range(s))] * batch), list(lens))]
  for k in range(steps):
    ids = [[(7 * k + 3 * b + 1) % CFG.vocab] for b in range(batch)]
    positions = [[n] for n in lens]
    lens = [n + 1 for n in lens]
    out.append((_feeds(ids, lens, positions), list(lens)))
  return out


def _last_rows(logits: np.ndarray, ids: np.ndarray, lens: list) -> np.ndarray:
  """Each row's logits at its last real token (the prompt's rows are right-padded)."""
  s = ids.shape[1]
  return np.stack([logits[b, (n - 1) if s > 1 else 0] for b, n in enumerate(lens)])


def _ort(model, steps: list) -> list:
  """onnxruntime's (logits at each row's last token, presents) per step."""
  ort = pytest.importorskip("onnxruntime")
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  names = [o.name for o in sess.get_outputs()]
  b = len(steps[0][1])
  past = {n: np.zeros((b, CFG.kv_heads, 0, CFG.head_dim), np.float32) for n in PAST}
  out = []
  for feeds, lens in steps:
    r = dict(zip(names, sess.run(None, {**feeds, **past})))
    past = {n: r[n.replace("past_key_values.", "present.")] for n in PAST}
    out.append((_last_rows(r["logits"], feeds["input_ids"], lens), list(past.values())))
  return out


def _kg(model, steps: list, device: str) -> tuple:
  """kernelgen's (logits, presents) per step, each step's launches (replay off: every kernel
  recorded as it runs) and the caches' preallocated buffers."""
  b = len(steps[0][1])
  lm = with_cache_dims(kg.onnx.load(model.SerializeToString()), CONTEXT, batch=b)
  dim = kg.Dim("past", *lm.dims["past"])
  bufs = [kg.Tensor.zeros(b, CFG.kv_heads, CONTEXT, CFG.head_dim, device=device)
          .contiguous().realize() for _ in PAST]
  cache = {n: with_sym(t, (b, CFG.kv_heads, dim.bind(0), CFG.head_dim))
           for n, t in zip(PAST, bufs)}
  out, launches = [], []
  for feeds, lens in steps:
    given = {k: kg.Tensor(v.astype(np.int32), device=device) for k, v in feeds.items()}
    r = lm.run({**given, **cache}, device=device, replay=False)
    realizing.recording = []
    try:
      realizing.realize([t.node for t in r.values()])
      launches.append(realizing.recording)
    finally:
      realizing.recording = None
    cache = {n: r[n.replace("past_key_values.", "present.")] for n in PAST}
    presents = [t.numpy() for t in cache.values()]
    out.append((_last_rows(r["logits"].numpy(), feeds["input_ids"], lens), presents))
  return out, launches, [t.node.buffer for t in bufs]


def _compare(got: list, want: list, steps: list) -> None:
  for k, ((gl, gp), (wl, wp), (_, lens)) in enumerate(zip(got, want, steps)):
    np.testing.assert_allclose(gl, wl, rtol=1e-4, atol=1e-4, err_msg=f"logits, step {k}")
    for g, w in zip(gp, wp):          # each row's cache beyond its own length is unspecified
      for b, n in enumerate(lens):
        np.testing.assert_allclose(g[b, :, :n], w[b, :, :n], rtol=1e-5, atol=1e-5,
                                   err_msg=f"present row {b}, step {k}")


@pytest.mark.parametrize("batch", [2, 3])
def test_batch_caches_are_written_in_place_at_each_rows_length(batch):
  model = lm_models.build(CFG, "fp32")
  steps = _steps(batch, 3)
  got, launches, bufs = _kg(model, steps, "PYTHON")
  _compare(got, _ort(model, steps), steps)
  whole = batch * CFG.kv_heads * CONTEXT * CFG.head_dim
  write = f"write_{batch}_{CFG.kv_heads}_1_{CFG.head_dim}"
  for k, step in enumerate(launches[1:], 1):
    # a launch's outputs are a tuple (a joined kernel's several: graph/join.py)
    into = [kernel.name for _, kernel, outs, _ in step for buf in outs
            if any(buf is c for c in bufs)]
    # each cache: its new rows, once, by one kernel: the k and v writes of a layer, or the QKV
    # projection they joined (the rotated key exchanged in it: graph/join.py read_member)
    assert len(into) == 2 and len(set(into)) == 1, (k, into)
    assert into[0].startswith((write, f"r_{batch}_1_")), (k, into)
    big = [kernel.name for _, kernel, outs, _ in step for buf in outs
           if buf.size >= whole and not any(buf is c for c in bufs)]
    assert not big, (k, big)                      # no kernel computes a whole cache


def test_batch_caches_in_place_on_webgpu():
  device_runtime("WEBGPU")
  model = lm_models.build(CFG, "fp32")
  steps = _steps(2, 2)
  got, launches, bufs = _kg(model, steps, "WEBGPU")
  _compare(got, _ort(model, steps), steps)
  assert all(sum(any(buf is c for c in bufs) for _, _, outs, _ in s for buf in outs) == 2
             for s in launches)
