"""nn.Dropout draws its mask from a seed on the device (a per-module counter that each call
advances): a training step with dropout compiles no new kernels after its first steps, a kg.jit
replay draws a new mask each step exactly as eager steps do, and Tensor.rand / randn with a
one-element seed Tensor give the bits of the same int seed (PYTHON, PTXSIM, WEBGPU)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from tools import DEVICES, device_runtime

T, nn = kg.Tensor, kg.nn


@pytest.mark.parametrize("device", DEVICES)
def test_a_seed_tensor_gives_the_bits_of_the_int_seed(device):
  device_runtime(device)
  for seed in (0, 5, 2**31 + 7):
    on_device = T([seed], dtype="uint32", device=device)
    np.testing.assert_array_equal(T.rand(3, 5, seed=seed, device=device).numpy(),
                                  T.rand(3, 5, seed=on_device, device=device).numpy())
  np.testing.assert_allclose(T.randn(9, seed=4, device=device).numpy(),
                             T.randn(9, seed=T([4], device=device), device=device).numpy(),
                             rtol=1e-6, atol=1e-6)


def _model(device):
  nn.manual_seed(0)
  model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
  return model.to(device), kg.optim.SGD(model.parameters(), lr=0.1)


def _step(model, opt, x, y):
  opt.zero_grad()
  loss = model(x).cross_entropy(y)
  loss.backward()
  opt.step(loss)
  return loss


def _data(device, n=8):
  rng = np.random.default_rng(1)
  return T(rng.standard_normal((n, 6)).astype(np.float32), device=device), \
    T(rng.integers(0, 3, n).astype(np.int32), device=device)


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_training_with_dropout_stops_compiling(device):
  device_runtime(device)
  model, opt = _model(device)
  x, y = _data(device)
  masks, compiled = set(), []
  for _ in range(6):
    _step(model, opt, x, y).item()
    masks.add(model[2](T.ones(64, device=device)).numpy().tobytes())   # the layer's next mask
    compiled.append(kg.cache_info()["misses"])
  assert compiled[2:] == [compiled[2]] * 4      # the same kernels every step from the third
  assert len(masks) == 6                          # a new mask every call


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_jit_replays_draw_new_masks_as_eager_steps(device):
  device_runtime(device)
  x, y = _data(device)
  model, opt = _model(device)
  eager = [_step(model, opt, x, y).item() for _ in range(6)]
  model, opt = _model(device)
  step = kg.jit(lambda a, b: _step(model, opt, a, b))
  jitted = [step(x, y).item() for _ in range(6)]
  assert step.replaying
  assert len(set(eager)) == 6 and jitted == eager


def test_state_dict_has_no_rng_state():
  model, _ = _model("PYTHON")
  model(T.ones(2, 6, device="PYTHON"))
  assert sorted(model.state_dict()) == ["0.bias", "0.weight", "3.bias", "3.weight"]


def test_calls_without_an_optimizer_step_keep_the_queue_short():
  from kernelgen.nn.module import take_pending     # (the queue is internal: its size)
  take_pending()                                          # (what earlier tests left queued)
  drop = nn.Dropout(0.5)
  x = T.ones(16, device="PYTHON")
  masks = {drop(x).numpy().tobytes() for _ in range(5)}
  assert len(masks) == 5 and len(take_pending()) == 1
