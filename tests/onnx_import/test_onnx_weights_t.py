"""MatMul weights held transposed (onnx/operators/weights.py): where the adapter asks for it
(lavapipe's weights_t), a MatMul's 2-D float initializer B (K, N) is uploaded once as (N, K)
and read through a permuted view, so a decode step's matvec reads each output's weights as one
contiguous run. Against onnxruntime with the layout forced (decode and prefill rows, a batch
axis, f16), the held tensor really (N, K), lavapipe's default, other devices and small or
non-initializer weights keep their layout, and greedy generation's tokens unchanged."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.onnx.operators import weights
from onnx_contrib_util import check, node_model
from tools import device_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lm_models  # noqa: E402


@pytest.fixture
def forced(monkeypatch):
  """Every float initializer of a MatMul held transposed, whatever its size and device."""
  monkeypatch.setattr(weights, "MIN_ELEMENTS", 0)
  monkeypatch.setattr(weights, "transposes_weights", lambda device: True)


def _model(lead: tuple, k: int, n: int, dtype=np.float32, seed: int = 0):
  rng = np.random.default_rng(seed)
  a = rng.standard_normal((*lead, k)).astype(dtype)
  w = (rng.standard_normal((k, n)) * 0.1).astype(dtype)
  return node_model("MatMul", {"a": a}, {"w": w}, ["y"], domain="", opset=17), {"a": a}, w


def _held(model, feeds, device: str):
  loaded = kg.onnx.load(model.SerializeToString())
  loaded.run(feeds, device=device)
  return [t for key, t in loaded.uploads.items() if key[1].endswith(weights.TRANSPOSED)]


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("lead,k,n", [((1, 1), 64, 96), ((1, 5), 48, 40), ((3,), 100, 7),
                                      ((2, 3), 32, 64)])
def test_transposed_weight_matmul_matches_onnxruntime(forced, device, lead, k, n):
  if device != "PYTHON":
    device_runtime(device)
  model, feeds, _ = _model(lead, k, n, seed=k + n)
  check(model, feeds, device, rtol=1e-4, atol=1e-4)


def test_f16_weight_held_transposed_matches_onnxruntime(forced):
  model, feeds, _ = _model((1, 2), 64, 48, np.float16, seed=3)
  check(model, feeds, "PYTHON", rtol=2e-3, atol=2e-3)


def test_held_weight_is_stored_n_by_k(forced):
  """The held tensor (kept per model and device) is realized as the transpose (N, K)."""
  model, feeds, w = _model((1, 1), 32, 24)
  held = _held(model, feeds, "PYTHON")
  assert len(held) == 1
  assert tuple(held[0].shape) == (24, 32) and held[0].node.realized
  assert np.array_equal(held[0].numpy(), w.T)


def test_defaults_cpu_adapters_only_and_large_initializers_only():
  """PYTHON's (no adapter) and small weights keep (K, N); the CPU adapters (lavapipe,
  SwiftShader) transpose weights of at least MIN_ELEMENTS, other classes do not; an activation B
  (not an initializer) is never copied."""
  from kernelgen.render.wgsl.adapters import defaults
  assert [bool(defaults(a, "rows").get("weights_t")) for a in ("lavapipe", "swiftshader",
          "discrete", "integrated", "unknown")] == [True, True, False, False, False]
  assert not weights.transposes_weights("PYTHON")
  model, feeds, _ = _model((1, 1), 128, 256)
  assert _held(model, feeds, "PYTHON") == []
  rt = device_runtime("WEBGPU")
  lavapipe = rt.render_options().get("adapter") in ("lavapipe", "swiftshader")
  assert weights.transposes_weights("WEBGPU") == lavapipe
  assert len(_held(model, feeds, "WEBGPU")) == (1 if lavapipe else 0)
  small, feeds_small, _ = _model((1, 1), 16, 16)
  assert _held(small, feeds_small, "WEBGPU") == []
  rng = np.random.default_rng(0)
  both = {"a": rng.standard_normal((1, 128)).astype(np.float32),
          "b": rng.standard_normal((128, 256)).astype(np.float32)}
  activations = node_model("MatMul", both, {}, ["y"], domain="", opset=17)
  assert _held(activations, both, "WEBGPU") == []
  check(activations, both, "WEBGPU", rtol=1e-4, atol=1e-4)


def test_greedy_tokens_unchanged_with_transposed_weights(forced):
  """Every projection and the LM head of the tiny fp32 LM held transposed: kg.generate's greedy
  tokens (prompt, decode steps, replays) are onnxruntime's."""
  device_runtime("WEBGPU")
  model = lm_models.build(lm_models.CONFIGS["tiny"], "fp32")
  prompt = [1, 5, 9, 2, 7, 3, 4, 8]
  want = lm_models.ort_greedy(model, prompt, 8)
  loaded = kg.onnx.load(model.SerializeToString())
  assert kg.generate(loaded, prompt, max_new_tokens=8, device="WEBGPU") == want
  assert sum(key[1].endswith(weights.TRANSPOSED) for key in loaded.uploads) >= 7
