"""An elementwise producer read through overlapping windows (a conv's or an overlapping pool's
input) is computed once per element when it is transcendental (a sigmoid, SiLU: its own kernel),
and stays fused when it is cheap (relu, add, batchnorm): reread.REREAD_TRANSCENDENTALS. Under
a dense conv's windows (every output channel reads them), one that loads two or more buffers
that vary per element (a concat, a residual add) is its own kernel too, and one that loads one
(a bias or scale per channel beside it) stays fused: reread.REREAD_CONV_LOADS. In a tiny
kernel (fused, the producer evaluated at most reread.REREAD_SMALL times: Silero VAD's STFT
magnitude under its first conv) one transcendental per element stays fused, two do not."""
from __future__ import annotations

import numpy as np
import pytest

from kernelgen import Tensor, cat
from kernelgen.graph.reread import REREAD_SMALL
from kernelgen.graph.schedule import schedule

RNG = np.random.default_rng(42)
X = RNG.standard_normal((2, 3, 9, 9)).astype(np.float32)
W = RNG.standard_normal((5, 3, 3, 3)).astype(np.float32)
# for the structure (nothing runs): past REREAD_SMALL evaluations through the windows
XL = RNG.standard_normal((2, 8, 48, 48)).astype(np.float32)
WL = RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)


def _sigmoid(x):
  return 1 / (1 + np.exp(-x))


def _conv3x3(x, w):
  """numpy: a stride-1, padding-1 cross-correlation, NCHW / OIHW."""
  n, c, h, wd = x.shape
  p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  out = np.zeros((n, w.shape[0], h, wd), np.float64)
  for i in range(3):
    for j in range(3):
      out += np.einsum("nchw,oc->nohw", p[:, :, i:i + h, j:j + wd], w[:, :, i, j])
  return out


def _maxpool3x3(x):
  n, c, h, wd = x.shape
  return np.max([x[:, :, i:i + h - 2, j:j + wd - 2] for i in range(3) for j in range(3)], axis=0)


PRODUCERS = {      # name: (kg producer, numpy producer, computed in a kernel of its own)
  "sigmoid": (lambda t: t.sigmoid(), _sigmoid, True),
  "silu": (lambda t: t * t.sigmoid(), lambda x: x * _sigmoid(x), True),
  "tanh": (lambda t: t.tanh(), np.tanh, True),
  "relu": (lambda t: t.relu(), lambda x: np.maximum(x, 0), False),
  "add": (lambda t: t + t * 0.5, lambda x: x + x * 0.5, False),
}


def _kernels(out) -> list:
  return schedule([out.node])


@pytest.mark.parametrize("name", sorted(PRODUCERS))
def test_kernel_structure_under_a_3x3_conv(name):
  make, _, alone = PRODUCERS[name]
  assert 2 * 16 * 48 * 48 * 8 * 9 > REREAD_SMALL
  items = _kernels(make(Tensor(XL, device="PYTHON")).conv2d(Tensor(WL, device="PYTHON"),
                                                           padding=1))
  assert len(items) == (2 if alone else 1)
  if alone:     # the producer: an elementwise kernel over the input's elements, read by the conv
    assert items[0].out.shape == XL.shape and items[0].out in items[1].inputs


@pytest.mark.parametrize("name,alone", [("sigmoid", True), ("relu", False)])
def test_kernel_structure_under_an_overlapping_max_pool(name, alone):
  make = PRODUCERS[name][0]
  assert 2 * 8 * 46 * 46 * 9 > REREAD_SMALL
  assert len(_kernels(make(Tensor(XL, device="PYTHON")).max_pool2d(3, stride=1))) == \
    (2 if alone else 1)


@pytest.mark.parametrize("name,alone", [("sigmoid", False), ("silu", False), ("relu", False),
                                        ("sigmoid * tanh", True)])
def test_a_tiny_conv_recomputes_one_transcendental(name, alone):
  """2 x 5 x 9 x 9 outputs of 3 x 3 x 3 products read the producer 21,870 times fused (under
  REREAD_SMALL): one exp per read costs less than a dispatch; two (a sigmoid and a tanh) not."""
  make = PRODUCERS[name][0] if name in PRODUCERS else lambda t: t.sigmoid() * t.tanh()
  items = _kernels(make(Tensor(X, device="PYTHON")).conv2d(Tensor(W, device="PYTHON"), padding=1))
  assert len(items) == (2 if alone else 1)


def test_a_non_overlapping_pool_keeps_the_sigmoid_fused():
  """2x2 windows at stride 2 read each element once: nothing is recomputed."""
  assert len(_kernels(Tensor(X[:, :, :8, :8], device="PYTHON").sigmoid().max_pool2d(2))) == 1


def test_batchnorm_under_a_conv_stays_fused():
  """Its rsqrt is of the broadcast per-channel variance, not of a per-element value."""
  t = Tensor(X, device="PYTHON")
  mean, var = (Tensor(RNG.random(3).astype(np.float32) + 0.5, device="PYTHON") for _ in "mv")
  assert len(_kernels(t.batchnorm(mean, var).conv2d(Tensor(W, device="PYTHON"), padding=1))) == 1


def test_a_broadcast_log_stays_in_log_softmax():
  """Only overlapping windows count: log_softmax's log of the row sum is read by broadcast."""
  assert len(_kernels(Tensor(X[0, 0], device="PYTHON").log_softmax(1))) == 1


@pytest.mark.parametrize("dev", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("name", ["sigmoid", "silu", "relu"])
def test_values_under_a_conv(dev, name):
  make, ref, _ = PRODUCERS[name]
  out = make(Tensor(X, device=dev)).conv2d(Tensor(W, device=dev), padding=1)
  np.testing.assert_allclose(out.numpy(), _conv3x3(ref(X.astype(np.float64)), W),
                             rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dev", ["PYTHON", "WEBGPU"])
def test_values_under_a_max_pool(dev):
  out = Tensor(X, device=dev).sigmoid().max_pool2d(3, stride=1)
  np.testing.assert_allclose(out.numpy(), _maxpool3x3(_sigmoid(X.astype(np.float64))),
                             rtol=1e-5, atol=1e-6)


Y = RNG.standard_normal((2, 3, 9, 9)).astype(np.float32)
S = RNG.standard_normal((1, 3, 1, 1)).astype(np.float32)
TWO = {            # name: (kg producer of x, y, s; numpy producer; its own kernel under a conv)
  "residual add": (lambda x, y, s: x + y, lambda x, y, s: x + y, True),
  "concat": (lambda x, y, s: cat([x[:, :2], y[:, 2:]], axis=1),
             lambda x, y, s: np.concatenate([x[:, :2], y[:, 2:]], axis=1), True),
  "concat, one scaled": (lambda x, y, s: cat([(x + x * s)[:, :1], y[:, 1:]], axis=1),
                         lambda x, y, s: np.concatenate([(x + x * s)[:, :1], y[:, 1:]], axis=1),
                         True),
  "scale per channel": (lambda x, y, s: x + x * s, lambda x, y, s: x + x * s, False),
}


def _two(dev, name):
  make = TWO[name][0]
  return make(Tensor(X, device=dev), Tensor(Y, device=dev), Tensor(S, device=dev))


@pytest.mark.parametrize("name", sorted(TWO))
def test_varying_loads_under_a_dense_conv(name):
  items = _kernels(_two("PYTHON", name).conv2d(Tensor(W, device="PYTHON"), padding=1))
  alone = TWO[name][2]
  assert len(items) == (2 if alone else 1)
  if alone:
    assert items[0].out.shape == X.shape and items[0].out in items[1].inputs


def test_a_depthwise_conv_keeps_a_residual_add_fused():
  """Its windows are read by one output channel each: re-read 9 times, not 9 * Cout."""
  dw = Tensor(RNG.standard_normal((3, 1, 3, 3)).astype(np.float32), device="PYTHON")
  assert len(_kernels(_two("PYTHON", "residual add").conv2d(dw, padding=1, groups=3))) == 1


@pytest.mark.parametrize("dev", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("name", sorted(TWO))
def test_values_of_varying_loads_under_a_conv(dev, name):
  out = _two(dev, name).conv2d(Tensor(W, device=dev), padding=1)
  want = _conv3x3(TWO[name][1](*(a.astype(np.float64) for a in (X, Y, S))), W)
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
