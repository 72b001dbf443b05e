"""A small differential fuzzer for symbolic sizes: random chains of operations over a tensor with
a symbolic axis (kg.Dim), each run at random bound values (the range's ends among them) against
numpy, and compiled once for all of them. Fixed seeds; PYTHON and WEBGPU (150 seeds passed on
PYTHON when it was written)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import kernelgen as kg
from tools import device_fixture

HI = 24
SEEDS = int(os.environ.get("KERNELGEN_SYMBOLIC_SEEDS", 16))   # more: KERNELGEN_SYMBOLIC_SEEDS=500
device = device_fixture(("PYTHON", "WEBGPU"))


def _softmax(a, axis):
  e = np.exp(a - a.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


# name -> (applies to a shape?, kernelgen op, numpy op); `s` is the symbolic axis
OPS = {
  "exp_tanh": (lambda sh: True, lambda x, w: (x * 0.3).exp().tanh(),
               lambda a, w: np.tanh(np.exp(a * 0.3))),
  "add_row": (lambda sh: True, lambda x, w: x + kg.Tensor(w[0, :x.shape[-1]]),
              lambda a, w: a + w[0, :a.shape[-1]]),
  "where": (lambda sh: True, lambda x, w: kg.where(x > 0, x, x * -2.0),
            lambda a, w: np.where(a > 0, a, a * -2.0)),
  "softmax_s": (lambda sh: True, lambda x, w: x.softmax(0), lambda a, w: _softmax(a, 0)),
  "softmax_last": (lambda sh: True, lambda x, w: x.softmax(-1), lambda a, w: _softmax(a, -1)),
  "cumsum_s": (lambda sh: True, lambda x, w: x.cumsum(0) * 0.1,
               lambda a, w: np.cumsum(a, 0) * 0.1),
  "matmul": (lambda sh: True, lambda x, w: x @ kg.Tensor(w[:x.shape[-1], :6]) * 0.2,
             lambda a, w: a @ w[:a.shape[-1], :6] * 0.2),
  "pad": (lambda sh: True, lambda x, w: x.pad(((1, 2), (0, 0)), value=0.5),
          lambda a, w: np.pad(a, ((1, 2), (0, 0)), constant_values=0.5)),
  "cat_self": (lambda sh: True, lambda x, w: kg.cat([x, x * 2], 0),
               lambda a, w: np.concatenate([a, a * 2], 0)),
  "norm_s": (lambda sh: True, lambda x, w: x - x.mean(0, keepdim=True),
             lambda a, w: a - a.mean(0, keepdims=True)),
  "flip": (lambda sh: True, lambda x, w: x.flip(0), lambda a, w: a[::-1]),
}
FINAL = {"sum_s": (lambda x: x.sum(0), lambda a: a.sum(0)),
         "max_s": (lambda x: x.max(0), lambda a: a.max(0)),
         "keep": (lambda x: x, lambda a: a),
         "mean_all": (lambda x: x.mean(), lambda a: a.mean())}


def _program(seed: int):
  rng = np.random.default_rng(seed)
  steps = [str(rng.choice(sorted(OPS))) for _ in range(int(rng.integers(1, 4)))]
  final = str(rng.choice(sorted(FINAL)))
  cols = int(rng.integers(1, 9))
  values = sorted({1, HI, int(rng.integers(2, HI))})
  return steps, final, cols, values


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_program_over_a_symbolic_axis_agrees_with_numpy(device, seed):
  steps, final, cols, values = _program(seed)
  rng = np.random.default_rng(1000 + seed)
  data = rng.standard_normal((HI, cols)).astype(np.float32)
  w = rng.standard_normal((16, 16)).astype(np.float32)
  n = kg.Dim("n", 1, HI)
  kg.clear_cache()
  misses = None
  for v in values:
    x, a = kg.Tensor(data[:v]).symbolic(n.bind(v), cols), data[:v].astype(np.float64)
    for name in steps:
      x, a = OPS[name][1](x, w), OPS[name][2](a, w)
    x, a = FINAL[final][0](x), FINAL[final][1](a)
    np.testing.assert_allclose(x.numpy(), a.astype(np.float32), rtol=2e-4, atol=2e-4,
                               err_msg=f"{steps} -> {final}, n = {v}")
    info = kg.cache_info()["misses"]
    misses = info if misses is None else misses
    assert info == misses, f"{steps} -> {final}: n = {v} compiled again"
