"""The page's symbolic-step LM bundle (export/onnx_lm.py causal_program: a prompt and decode
runs in one program, `seq` new tokens a run) launches, for a decode run (seq = 1), each layer's
QKV projection and its k and v cache write as one kernel (graph/one_row.py write_joined_at: both
cut to one row, the rotated key exchanged through workgroup memory, lowering/exchange.py); a
prompt's run (seq >= 2) launches the two it had. Main before: the write had its own kernel at
every seq (the join took static projections only: kg.generate's, one-token bundles'), 8 q4
kernels a layer of a decode run, now 7. The joined kernel binds its small read-only inputs (the
position ids, the key count, the q4 zero points) as uniform buffers: at most 8 storage buffers,
WebGPU's default, in every kernel of the bundle. Greedy tokens equal onnxruntime's natively on
WEBGPU (the prompt of 5 in runs of 4 and 1, then decode runs), both rotary layouts, GQA."""
from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

import kernelgen as kg
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from tools import device_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lm_models  # noqa: E402
from spies import exchange_calls  # noqa: E402

PROMPT = [1, 5, 9, 2, 7]
STEP, CONTEXT, TOKENS = 4, 32, 6
GQA = {"hidden": 288, "heads": 9, "kv_heads": 3}   # 3 kv heads of 9, head size 32

CASES = [
  ({}, {}),                              # rotary pairs (i, i + d/2), 2 kv heads of 4
  ({"interleaved": True}, {}),           # pairs (2i, 2i + 1)
  ({}, GQA),
  ({"interleaved": True}, GQA),
  ({"rotary": "gqa"}, {}),               # GroupQueryAttention rotates q and k itself
]


def _bundle(path, build: dict, sizes: dict):
  from kernelgen.export.onnx_lm import causal_program
  cfg = dataclasses.replace(lm_models.CONFIGS["tiny"], **sizes)
  model = lm_models.build(cfg, "q4", last_logits=True, **build)
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), STEP, CONTEXT,
                                  adapter="lavapipe")
  return cfg, model, kg.export(outputs, str(path), format="webgpu", state=state,
                               adapter="lavapipe")


def _launched(kernels: list, seq: int) -> list:
  return [k for k in kernels if "runs" not in k or k["runs"]["lo"] <= seq <= k["runs"]["hi"]]


@pytest.mark.parametrize("build,sizes", CASES)
def test_decode_run_writes_the_caches_from_the_projection(tmp_path, build, sizes, monkeypatch):
  pytest.importorskip("onnxruntime")
  device_runtime("WEBGPU")
  exchanged = exchange_calls(monkeypatch)
  kg.clear_cache()
  cfg, model, bundle = _bundle(tmp_path, build, sizes)
  kernels = bundle.manifest["kernels"]
  decode = [k["name"] for k in _launched(kernels, 1)]
  prefill = [k["name"] for k in _launched(kernels, STEP)]
  # each layer's decode run: one kernel writing both caches, the projection cut to one row
  writes = [n for n in decode if n.startswith("write_")]
  assert len(writes) == cfg.layers and all(n.endswith("_seq1") for n in writes), decode
  assert not [n for n in prefill if n.endswith("_seq1")], prefill
  assert [n + "_seq1" for n in prefill if n.startswith("write_")] == writes, prefill
  joined = [k for k in kernels if k["name"] in writes]
  assert all(sum(b["access"] != "read" for b in k["bindings"]) == 3 for k in joined), joined
  width = cfg.hidden + 2 * cfg.kv_heads * cfg.head_dim      # q, k and v of one row
  assert any(width in shape and shape[0] == 1 for shape in exchanged), exchanged
  want = lm_models.ort_greedy(model, PROMPT, TOKENS)
  assert bundle.generate(PROMPT, max_new_tokens=TOKENS, device="WEBGPU") == want
  assert len(set(want)) > 1


def test_every_kernel_of_the_bundle_binds_at_most_8_storage_buffers(tmp_path):
  """WebGPU's default maxStorageBuffersPerShaderStage, which the page's device keeps: counted
  in each exported WGSL source (its var<storage> bindings), its variants' too, and in the
  manifest's bindings (a uniform binding has kind 'uniform')."""
  _, _, bundle = _bundle(tmp_path, {}, GQA)
  sources = sorted(tmp_path.rglob("*.wgsl"))
  assert sources
  for path in sources:
    assert len(re.findall(r"var<storage\b", path.read_text())) <= 8, path.name
  for k in bundle.manifest["kernels"]:
    assert sum(b.get("kind", "storage") == "storage" for b in k["bindings"]) <= 8, k["name"]
  assert any(k["name"].endswith("_seq1") and k["name"].startswith("write_")
             for k in bundle.manifest["kernels"])
