"""Kernels per decode token of bench/decode.py's decoder (one cache buffer per layer holding
queries, keys and values, GELU MLP): each projection's bias and residual are its kernel's
epilogue (graph/epilogue.py), each LayerNorm its reading projection's prologue (graph/
prologue.py), and the QKV projection is computed by the kernel that writes it into the cache
(graph/schedule.py's write fusion), and attention is computed by the output projection's
kernel (lowering/staged.py), so a layer is 4 dispatches (5 with attention a kernel of its own, 6
with the cache write too, 8 with the norms as row kernels; 9 before the epilogues: the residual
stream needed a kernel of its own to stay within WebGPU's 8 storage buffers); greedy tokens match
numpy on every device; every kernel is valid WGSL (wgpu) and PTX (ptxas)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import kernelgen as kg
from tools import device_fixture, ptxas_check, wgsl_validate

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import decode  # noqa: E402

webgpu = device_fixture(("WEBGPU",))

LAYERS, D, HEADS, MAX = 2, 32, 4, 24
# per layer: the QKV projection written into the cache (ln1 its prologue, + bias), the output
# projection computing attention (+ bias + residual), the MLP up projection (ln2 its prologue,
# + bias, GELU), the down projection (+ bias + residual); then the head (the final norm its
# prologue, + bias) and the argmax
KERNELS_PER_LAYER, KERNELS_AFTER = 4, 2


def _model():
  return decode.kernelgen_model(LAYERS, D, HEADS, MAX)


def _gelu(x):
  return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _norm(x, w, b):
  mu = x.mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b


def _reference(first: int, steps: int) -> list[int]:
  """Greedy decoding in numpy (float64), attention over the whole prefix."""
  w = {k: v.astype(np.float64) for k, v in decode.weights(LAYERS, D, MAX).items()}
  tokens, hd = [first], D // HEADS
  for _ in range(steps):
    x = w["tok.weight"][tokens] + w["pos.weight"][:len(tokens)]
    for i in range(LAYERS):
      p = f"blocks.{i}."
      qkv = _norm(x, w[p + "ln1.weight"], w[p + "ln1.bias"]) @ w[p + "qkv.weight"].T + \
        w[p + "qkv.bias"]
      q, k, v = (qkv[:, j * D:(j + 1) * D].reshape(-1, HEADS, hd).transpose(1, 0, 2)
                 for j in range(3))
      s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
      s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
      e = np.exp(s - s.max(-1, keepdims=True))
      att = ((e / e.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(-1, D)
      x = x + att @ w[p + "out.weight"].T + w[p + "out.bias"]
      h = _gelu(_norm(x, w[p + "ln2.weight"], w[p + "ln2.bias"]) @ w[p + "ff1.weight"].T +
                w[p + "ff1.bias"])
      x = x + h @ w[p + "ff2.weight"].T + w[p + "ff2.bias"]
    logits = _norm(x[-1], w["norm.weight"], w["norm.bias"]) @ w["head.weight"].T + w["head.bias"]
    tokens.append(int(logits.argmax()))
  return tokens[1:]


def _step_program(step):
  return next(s.program for s in step.signatures.values() if s.program is not None)


def test_bench_decoder_matches_numpy(device):
  steps = 6 if device == "PTXSIM" else 10
  model, pos = _model(), kg.Dim("pos", 0, MAX - 1)
  step, token, got = kg.jit(model), kg.Tensor(np.array([7], np.int32)), []
  with kg.no_grad():
    for t in range(steps):
      token = step(token, pos.bind(t))
      got.append(token.item())
  assert step.replaying
  assert got == _reference(7, steps)


def test_bench_decoder_is_4_dispatches_per_layer_and_one_submit(webgpu):
  runtime = kg.Device["WEBGPU"]
  model, pos = _model(), kg.Dim("pos", 0, MAX - 1)
  step, token = kg.jit(model), kg.Tensor(np.array([3], np.int32))
  with kg.no_grad():
    for t in range(3):
      token = step(token, pos.bind(t))
      token.item()
    dispatches, submits, misses = runtime.dispatches, runtime.submits, kg.cache_info()["misses"]
    token = step(token, pos.bind(3))
    token.numpy()
  names = [kernel.name for _, kernel, _ in _step_program(step).steps]
  assert len(names) == KERNELS_PER_LAYER * LAYERS + KERNELS_AFTER, names
  assert not any(name.startswith("E_") for name in names), names   # no residual-only kernel
  assert sum(name.startswith("write_") for name in names) == LAYERS, names   # QKV + cache write
  assert sum(name.startswith("attn_r_") for name in names) == LAYERS, names  # attention + out
  assert runtime.dispatches - dispatches == len(names)
  assert runtime.submits - submits == 1
  assert kg.cache_info()["misses"] == misses


def _kernels(target: str, **options):
  model = _model()
  with kg.no_grad():
    out = model(kg.Tensor(np.array([1], np.int32)), kg.Dim("pos", 0, MAX - 1).bind(5))
    return kg.compile(out, target=target, **options)


def test_bench_decoder_kernels_are_valid_wgsl():
  kernels = _kernels("wgsl")
  assert len(kernels) == KERNELS_PER_LAYER * LAYERS + KERNELS_AFTER
  for kernel in kernels:
    assert len(kernel.buffers) <= 8, kernel.name
    wgsl_validate(kernel.source)


@pytest.mark.parametrize("arch", ["sm_80"])
def test_bench_decoder_kernels_pass_ptxas(arch):
  for kernel in _kernels("ptx", arch=arch):
    ptxas_check(kernel.source, arch)
