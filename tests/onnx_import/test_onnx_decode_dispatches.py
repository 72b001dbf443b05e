"""Dispatches per decode layer of kg.generate on an ONNX causal LM (bench/lm_models.py's tiny
config, the Optimum layout): a replayed decode step's compute dispatches (the WEBGPU device's
counter, replays included) with 2 layers minus those with 1 layer is what one layer costs.
Structure, not time: fp32 and q4 (MatMulNBits), each with greedy tokens identical to
onnxruntime's; the q4 bound is lavapipe's (row_input realizes the norms on CPU adapters)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

import kernelgen as kg
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from tools import device_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lm_models  # noqa: E402

PROMPT = [1, 5, 9, 2, 7, 3, 4, 8]
TOKENS = 8
# the most dispatches one decode layer may take. fp32: its projections, q, k and v joined into
# one (onnx/siblings.py; gate and up, which meet in silu(gate) * up, are not joined), the output
# projection in the attention's kernel, gate, up (the product in its epilogue), down, and 2 KV
# cache writes;
# the step's KV write mask, attention mask and key counts are shared by all layers
# (onnx/operators/gqa_step.py). q4: each (joined) MatMulNBits one kernel (its zero-point term
# in the dot's reduction; the output projection too), the attention, the 2 KV writes and, on
# CPU adapters, the 2 norms in kernels of their own (weights.row_input). main before: 15 at fp32, 27 at q4; before
# the joined siblings 9 at fp32, 11 at q4.
MOST_PER_LAYER = {"fp32": 7, "q4": 9}


def step_dispatches(dtype: str, layers: int) -> int:
  """Compute dispatches per replayed decode step (the sampling kernel included) of the tiny LM
  with `layers` layers; its greedy tokens checked against onnxruntime's."""
  pytest.importorskip("onnxruntime")
  runtime = device_runtime("WEBGPU")
  cfg = dataclasses.replace(lm_models.CONFIGS["tiny"], layers=layers)
  model = lm_models.build(cfg, dtype)
  marks = []
  got = kg.generate(kg.onnx.load(model.SerializeToString()), PROMPT, max_new_tokens=TOKENS,
                    device="WEBGPU", on_token=lambda t: marks.append(runtime.dispatches))
  assert got == lm_models.ort_greedy(model, PROMPT, TOKENS)
  steps = {b - a for a, b in zip(marks[3:], marks[4:])}   # from the fourth step on: replays
  assert len(steps) == 1, marks
  return steps.pop()


@pytest.mark.parametrize("dtype", ["q4", "fp32"])
def test_dispatches_per_decode_layer(dtype):
  one, two = step_dispatches(dtype, 1), step_dispatches(dtype, 2)
  per_layer = two - one
  assert 0 < per_layer <= MOST_PER_LAYER[dtype], (dtype, one, two)
  assert one - per_layer <= 8, (dtype, one, two)     # the step's own: sampling, LM head ...
