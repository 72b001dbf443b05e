"""The rotated key's KV cache write in the QKV projection's kernel (graph/join.py read_member,
lowering/exchange.py): kg.generate's decode step of an ONNX causal LM (bench/lm_models.py) has
no cache-write kernel of its own; the projection's threads exchange the key through workgroup
memory (k[i] with k[i + d/2], or k[i ^ 1] interleaved) and store the rotated key and the value
into their caches; greedy tokens equal onnxruntime's. Main before: a write kernel per layer
(q4 tiny: 19 launches a 2-layer decode step, 17 joined; fp32 14 -> 12)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

import kernelgen as kg
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lm_decode_kernels  # noqa: E402
import lm_models  # noqa: E402
from spies import exchange_calls  # noqa: E402

PROMPT = [1, 5, 9, 2, 7]
TOKENS = 6
GQA = {"hidden": 288, "heads": 9, "kv_heads": 3}   # 3 kv heads of 9, head size 32

CASES = [
  ("q4", {}, {}),                              # rotary pairs (i, i + d/2), 2 kv heads of 4
  ("q4", {"interleaved": True}, {}),           # pairs (2i, 2i + 1)
  ("q4", {}, GQA),
  ("q4", {"interleaved": True}, GQA),
  ("fp32", {}, GQA),
  ("q4", {"rotary": "gqa"}, {}),               # GroupQueryAttention rotates q and k itself
]


@pytest.mark.parametrize("dtype,build,sizes", CASES)
def test_decode_step_writes_the_rotated_key_from_the_projection(dtype, build, sizes, monkeypatch):
  pytest.importorskip("onnxruntime")
  cfg = dataclasses.replace(lm_models.CONFIGS["tiny"], **sizes)
  model = lm_models.build(cfg, dtype, **build)
  exchanged = exchange_calls(monkeypatch)
  kg.clear_cache()
  loaded = kg.onnx.load(model.SerializeToString())
  got = kg.generate(loaded, PROMPT, max_new_tokens=TOKENS, device="WEBGPU")
  assert list(got) == lm_models.ort_greedy(model, PROMPT, TOKENS)
  names = [k.name for _, k, _ in lm_decode_kernels.decode_program(loaded).steps]
  assert not [n for n in names if n.startswith("write_")], names
  width = cfg.hidden + 2 * cfg.kv_heads * cfg.head_dim      # q, k and v joined (siblings.py)
  # the decode step's projection (one row) exchanged its key, not recomputed it
  assert any(width in shape and shape[0] == 1 for shape in exchanged), exchanged
