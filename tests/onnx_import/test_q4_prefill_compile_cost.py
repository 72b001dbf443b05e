"""A prompt's 4-bit projections (MatMulNBits over a fused norm: a prefill bundle's kernels) on
SwiftShader, SmolLM2's widths: the adapter's long register tiles (16x16, the reduction unrolled
4 times) over the words' decoding were about 10,000 lines of WGSL each, which Chromium's
SwiftShader took 4-10 s to build per kernel (SmolLM2 at 2 layers: 148 s to create the prefill's
pipelines). A one-off run (an exported bundle's default, lowering/compile_cost.py) takes the
plain tile within the compile budget, a plan for many runs keeps the long tiles, an adapter
without a measured cost is not capped, and the capped prefill bundle still gives onnxruntime's
logits (issue 37)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.compile_cost import RUNS_MANY
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from tools import device_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lm_models  # noqa: E402

# one layer at SmolLM2-135M's widths, a small vocabulary
CFG = dataclasses.replace(lm_models.CONFIGS["smollm2-135m"], layers=1, vocab=256)
STEP, CONTEXT = 64, 80


@pytest.fixture(scope="module")
def model():
  return lm_models.build(CFG, "q4")


def _kernels(model, **options) -> list:
  from kernelgen.export.onnx_lm import causal_program
  outputs, _ = causal_program(kg.onnx.load(model.SerializeToString()), STEP, CONTEXT)
  return kg.compile(list(outputs.values()), target="wgsl", **options)


def _largest(kernels) -> int:
  return max(k.source.count("\n") for k in kernels)


def test_a_one_off_prefill_on_swiftshader_takes_smaller_tiles(model):
  one_off = _kernels(model, adapter="swiftshader")
  many = _kernels(model, adapter="swiftshader", runs=RUNS_MANY)
  assert [k.name for k in one_off] == [k.name for k in many]
  assert any(k.capped for k in one_off) and not any(k.capped for k in many)
  assert _largest(one_off) * 3 < _largest(many), (_largest(one_off), _largest(many))
  gpu = _kernels(model, adapter="discrete")     # no measured cost: never capped
  assert not any(k.capped for k in gpu)
  assert [k.source for k in gpu] == [k.source for k in _kernels(model, adapter="discrete",
                                                                 runs=RUNS_MANY)]


def test_the_capped_prefill_bundle_gives_onnxruntime_logits(model, tmp_path):
  ort = pytest.importorskip("onnxruntime")
  device_runtime("WEBGPU")
  from kernelgen.export.causal import _feeds, names
  from kernelgen.export.onnx_lm import causal_program
  prompt = [int(t) for t in np.random.default_rng(3).integers(0, CFG.vocab, STEP)]
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  past = {f"past_key_values.0.{w}": np.zeros((1, CFG.kv_heads, 0, CFG.head_dim), np.float32)
          for w in ("key", "value")}
  want = sess.run(["logits"], {"input_ids": np.array([prompt], np.int64),
                               "attention_mask": np.ones((1, STEP), np.int64),
                               "position_ids": np.arange(STEP)[None], **past})[0][0, -1]
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), STEP, CONTEXT)
  bundle = kg.export(outputs, str(tmp_path), format="webgpu", state=state, adapter="swiftshader")
  got = bundle.run(_feeds(names(bundle.manifest), prompt, 0, 0.0, 0), device="WEBGPU",
                   outputs=["logits", "token"])
  np.testing.assert_allclose(got["logits"].numpy().reshape(-1), want, rtol=1e-4, atol=1e-4)
  assert got["token"].tolist() == [int(want.argmax())]
