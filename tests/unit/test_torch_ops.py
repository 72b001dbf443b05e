"""torch.nn.functional's activations, losses and layers as Tensor methods and kg.nn modules
(tensor/ops/special.py, activations.py, losses.py, tensor_nn.py, nn.py): values against numpy,
the standard library's math.erf and jax.nn on PYTHON, PTXSIM and WEBGPU (edge values: large
arguments, 0, inf, NaN), gradients against jax.grad, and the layers in a small model."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kernelgen as kg
from train_util import jax, jnp, need_jax

T, nn = kg.Tensor, kg.nn
X = np.array([-30.0, -3.0, -1.0, -0.5, -1e-6, 0.0, 1e-7, 0.3, 1.0, 2.5, 25.0], np.float32)
UNIT = np.array([-1.0, -0.999, -0.5, -1e-5, 0.0, 0.2, 0.7, 0.999, 1.0], np.float32)


def close(got, want, rtol=2e-6, atol=2e-6):
  np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                             rtol=rtol, atol=atol, equal_nan=True)


def test_special_functions(device):
  with np.errstate(all="ignore"):
    close(T(X).erf().numpy(), [math.erf(v) for v in X.astype(np.float64)], 1e-6, 2e-7)
    close(T(X).atan().numpy(), np.arctan(X.astype(np.float64)))
    close(T(UNIT).asin().numpy(), np.arcsin(UNIT.astype(np.float64)), 1e-5, 1e-6)
    close(T(UNIT).acos().numpy(), np.arccos(UNIT.astype(np.float64)), 1e-5, 1e-6)
    small = X[1:-1]
    close(T(small).sinh().numpy(), np.sinh(small.astype(np.float64)), 1e-5, 1e-6)
    close(T(small).cosh().numpy(), np.cosh(small.astype(np.float64)), 1e-5)
    close(T(X).log1p().numpy(), np.log1p(X.astype(np.float64)), 1e-6, 0)
    close(T(X[1:]).expm1().numpy(), np.expm1(X[1:].astype(np.float64)), 1e-6, 0)
    close(T([np.inf, -np.inf, np.nan, -1.0, -2.0]).log1p().numpy(),
          np.log1p(np.array([np.inf, -np.inf, np.nan, -1.0, -2.0])))
    close(T([np.inf, -np.inf, np.nan, 100.0]).expm1().numpy(),
          np.expm1(np.array([np.inf, -np.inf, np.nan, 100.0], np.float32)), 1e-6)
  y, x = np.meshgrid(np.array([-2.0, -0.0, 0.0, 1.5], np.float32),
                     np.array([-1.0, 0.0, 0.5, 3.0], np.float32))
  got = T(y).atan2(T(x)).numpy()
  want = np.arctan2(y, x)
  close(np.where(y == 0, np.abs(got), got), np.where(y == 0, np.abs(want), want), 1e-6)
  assert T([2, 3]).square().numpy().tolist() == [4, 9]


ACTIVATIONS = {   # method, kwargs, jax reference
  "leaky_relu": ({"negative_slope": 0.2}, lambda x: jax.nn.leaky_relu(x, 0.2)),
  "elu": ({"alpha": 0.7}, lambda x: jax.nn.elu(x, 0.7)),
  "selu": ({}, lambda x: jax.nn.selu(x)),
  "celu": ({"alpha": 1.3}, lambda x: jax.nn.celu(x, 1.3)),
  "softplus": ({}, lambda x: jax.nn.softplus(x)),
  "softsign": ({}, lambda x: jax.nn.soft_sign(x)),
  "hardsigmoid": ({}, lambda x: jax.nn.hard_sigmoid(x)),
  "hardswish": ({}, lambda x: jax.nn.hard_swish(x)),
  "hardtanh": ({}, lambda x: jax.nn.hard_tanh(x)),
  "relu6": ({}, lambda x: jax.nn.relu6(x)),
  "mish": ({}, lambda x: x * jnp.tanh(jax.nn.softplus(x))),
  "logsigmoid": ({}, lambda x: jax.nn.log_sigmoid(x)),
  "gelu": ({"approximate": "none"}, lambda x: jax.nn.gelu(x, approximate=False)),
}


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activations_match_jax(device, name):
  need_jax()
  kwargs, ref = ACTIVATIONS[name]
  close(getattr(T(X), name)(**kwargs).numpy(), np.asarray(ref(jnp.asarray(X, jnp.float32))),
        2e-6, 2e-6)


@pytest.mark.parametrize("name", ["softplus", "elu", "mish", "logsigmoid", "gelu", "hardswish"])
def test_activation_gradients_match_jax(name):
  need_jax()
  kwargs, ref = ACTIVATIONS[name]
  points = np.array([-2.5, -1.0, -0.5, -1e-3, 0.3, 1.0, 2.5, 3.5], np.float32)   # no kinks
  x = T(points, device="PYTHON", requires_grad=True)
  getattr(x, name)(**kwargs).sum().backward()
  want = jax.grad(lambda v: ref(v).sum())(jnp.asarray(points))
  close(x.grad.numpy(), np.asarray(want), 1e-5, 1e-6)


def test_helpers(device):
  a = np.arange(6, dtype=np.float32).reshape(2, 3)
  mask = np.array([[True, False, True]])
  close(T(a).masked_fill(T(mask), -1.0).numpy(), np.where(mask, -1.0, a))
  close(T(a).clamp(min=1).numpy(), np.maximum(a, 1))
  close(T(a).clamp(max=2).numpy(), np.minimum(a, 2))
  close(T(a).lerp(T(a * 3), 0.25).numpy(), a + 0.25 * (a * 3 - a))
  assert T(a).type_as(T([1], dtype="int32")).dtype == kg.dtypes.int32
  assert T([1.0]).expand_as(T(a)).shape == (2, 3)
  close(T([1.0, np.inf, np.nan, -np.inf]).isfinite().numpy(), [True, False, False, False])
  close(T([0, 1, 2]).logical_and(T([1, 1, 0])).numpy(), [False, True, False])
  close(T([0, 1, 0]).logical_or(1).numpy(), [True, True, True])
  close(T([0, 1, 3]).logical_xor(T([1, 1, 0])).numpy(), [True, False, True])
  close(T(np.arange(8.0, dtype=np.float32).reshape(2, 4)).glu().numpy(),
        np.array(jax.nn.glu(jnp.arange(8.0).reshape(2, 4))))
  with pytest.raises(kg.ShapeError, match="odd size"):
    T.ones(2, 3).glu()
  with pytest.raises(kg.ShapeError, match="'none' .* or 'tanh'"):
    T.ones(2).gelu("erf")


def _losses(p, t, x):
  d = p - t
  with np.errstate(all="ignore"):
    return {
      ("mse_loss", ()): (d * d).mean(),
      ("l1_loss", ()): np.abs(d).mean(),
      ("smooth_l1_loss", (("beta", 0.5),)): np.where(np.abs(d) < 0.5, 0.5 * d * d / 0.5,
                                                      np.abs(d) - 0.25).mean(),
      ("huber_loss", (("delta", 0.5),)): np.where(np.abs(d) <= 0.5, 0.5 * d * d,
                                                  0.5 * (np.abs(d) - 0.25)).mean(),
      ("binary_cross_entropy", ()): -(t * np.log(p) + (1 - t) * np.log(1 - p)).mean(),
      ("binary_cross_entropy_with_logits", ()): (np.maximum(x, 0) - x * t +
                                                 np.log1p(np.exp(-np.abs(x)))).mean(),
    }


def test_losses_against_numpy(device):
  rng = np.random.default_rng(0)
  x = rng.standard_normal((4, 5)) * 4
  p, t = 1 / (1 + np.exp(-x)), rng.random((4, 5))
  for (name, kw), want in _losses(p, t, x).items():
    src = x if name.endswith("logits") else p
    got = getattr(T(src.astype(np.float32)), name)(T(t.astype(np.float32)), **dict(kw))
    close(got.numpy(), want, 1e-5, 1e-6)
  sums = T(p.astype(np.float32)).mse_loss(T(t.astype(np.float32)), reduction="sum").numpy()
  close(sums, ((p - t) ** 2).sum(), 1e-5)
  with pytest.raises(kg.ShapeError, match="reduction"):
    T(p.astype(np.float32)).l1_loss(T(t.astype(np.float32)), reduction="avg")
  with pytest.raises(kg.ShapeError, match="target's shape"):
    T.ones(3).mse_loss(T.ones(4))


def test_bce_clamps_logs_and_pos_weight():
  p, t = T([0.0, 1.0, 0.5], device="PYTHON"), T([1.0, 0.0, 1.0], device="PYTHON")
  close(p.binary_cross_entropy(t, reduction="none").numpy(), [100.0, 100.0, math.log(2)], 1e-6)
  x = np.array([-2.0, 0.5, 3.0], np.float32)
  y = np.array([1.0, 0.0, 1.0], np.float32)
  got = T(x).binary_cross_entropy_with_logits(T(y), pos_weight=3.0, reduction="none").numpy()
  want = -(3.0 * y * np.log(1 / (1 + np.exp(-x))) + (1 - y) * np.log(1 - 1 / (1 + np.exp(-x))))
  close(got, want, 1e-6)


def test_kl_div_normalize_cosine(device):
  rng = np.random.default_rng(1)
  logq = np.log(rng.dirichlet(np.ones(5), 3)).astype(np.float32)
  p = rng.dirichlet(np.ones(5), 3).astype(np.float32)
  p[0, 2] = 0.0
  want = np.where(p > 0, p * (np.log(np.where(p > 0, p, 1)) - logq), 0)
  close(T(logq).kl_div(T(p), reduction="batchmean").numpy(), want.sum() / 3, 1e-5)
  close(T(logq).kl_div(T(np.log(p + 1e-30)), log_target=True, reduction="sum").numpy(),
        want.sum(), 1e-5, 1e-6)
  a = rng.standard_normal((3, 4)).astype(np.float32)
  b = rng.standard_normal((3, 4)).astype(np.float32)
  close(T(a).normalize().numpy(), a / np.linalg.norm(a, axis=1, keepdims=True), 1e-6)
  close(T(a).cosine_similarity(T(b)).numpy(),
        (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)), 1e-5)


def _adaptive_ref(a, oh, ow):
  h, w = a.shape[-2:]
  out = np.zeros(a.shape[:-2] + (oh, ow), np.float64)
  for i in range(oh):
    for j in range(ow):
      h0, h1 = i * h // oh, -(-(i + 1) * h // oh)
      w0, w1 = j * w // ow, -(-(j + 1) * w // ow)
      out[..., i, j] = a[..., h0:h1, w0:w1].mean((-2, -1))
  return out


@pytest.mark.parametrize("size", [1, 3, (5, 7), (None, 2), (2, 4)])
def test_adaptive_avg_pool2d(device, size):
  a = np.random.default_rng(2).standard_normal((2, 3, 10, 8)).astype(np.float32)
  oh, ow = (size, size) if isinstance(size, int) else size
  close(T(a).adaptive_avg_pool2d(size).numpy(), _adaptive_ref(a, oh or 10, ow or 8), 1e-5, 1e-6)


def test_conv1d_pools_and_rms_norm(device):
  rng = np.random.default_rng(3)
  x = rng.standard_normal((2, 4, 11)).astype(np.float32)
  w = rng.standard_normal((6, 2, 3)).astype(np.float32)
  got = T(x).conv1d(T(w), T(np.ones(6, np.float32)), stride=2, padding=1, groups=2).numpy()
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1)))
  want = np.zeros((2, 6, 6))
  for o in range(6):
    g = o // 3
    for t in range(6):
      want[:, o, t] = (xp[:, 2 * g:2 * g + 2, 2 * t:2 * t + 3] * w[o]).sum((1, 2)) + 1
  close(got, want, 1e-5, 1e-5)
  close(T(x).max_pool1d(2).numpy(), x[..., :10].reshape(2, 4, 5, 2).max(-1))
  close(T(x).avg_pool1d(3, 2).numpy(),
        np.stack([x[..., i:i + 3].mean(-1) for i in range(0, 9, 2)], -1), 1e-6)
  r = T(x).rms_norm(11, T(np.full(11, 2.0, np.float32))).numpy()
  close(r, 2 * x / np.sqrt((x * x).mean(-1, keepdims=True) + 1.1920929e-07), 1e-5)


def test_pool_and_conv1d_gradients_match_jax():
  need_jax()
  rng = np.random.default_rng(4)
  a = rng.standard_normal((1, 2, 7, 5)).astype(np.float32)
  x = T(a, device="PYTHON", requires_grad=True)
  (x.adaptive_avg_pool2d((3, 2)) ** 2).sum().backward()
  ref = jax.grad(lambda v: (jnp.asarray(_pool_matrix(7, 3)) @ v @ jnp.asarray(_pool_matrix(5, 2)).T)
                 .__pow__(2).sum())(jnp.asarray(a))
  close(x.grad.numpy(), np.asarray(ref), 1e-5, 1e-6)


def _pool_matrix(n, out):
  m = np.zeros((out, n), np.float32)
  for i in range(out):
    lo, hi = i * n // out, -(-(i + 1) * n // out)
    m[i, lo:hi] = 1 / (hi - lo)
  return m


def test_layers_in_a_model():
  x = np.random.default_rng(5).standard_normal((2, 3, 9, 9)).astype(np.float32)
  model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU(),
                        nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Identity(),
                        nn.Linear(8, 4), nn.LeakyReLU(0.1), nn.LogSoftmax(dim=-1)).to("PYTHON")
  out = model(T(x, device="PYTHON"))
  close(np.exp(out.numpy()).sum(1), [1, 1], 1e-5)
  loss = nn.NLLLoss()(out, T([1, 3], device="PYTHON"))
  close(loss.numpy(), -(out.numpy()[0, 1] + out.numpy()[1, 3]) / 2, 1e-6)
  loss.backward()
  assert all(p.grad is not None for p in model.parameters())
  blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)]).append(nn.RMSNorm(4))
  assert len(blocks) == 4 and [n for n, _ in blocks.named_parameters()][-1] == "3.weight"
  assert isinstance(nn.Conv1d(4, 6, 3, groups=2).weight, kg.Tensor)
  assert nn.Softmax(dim=0)(T([0.0, 0.0], device="PYTHON")).numpy().tolist() == [0.5, 0.5]
  close(nn.BCEWithLogitsLoss(pos_weight=2.0)(T([0.0]), T([1.0])).numpy(), 2 * math.log(2), 1e-6)
  with pytest.raises(kg.ShapeError, match="no argument"):
    nn.MSELoss(size_average=True)


@pytest.mark.parametrize("make,match", [
  (lambda: T.ones(2, 5).rms_norm(4), r"rms_norm over \(4,\): the input's trailing dims"),
  (lambda: T.ones(1, 1, 4, 4).adaptive_avg_pool2d(0), "output_size 0 must be >= 1"),
  (lambda: T.ones(3).adaptive_avg_pool2d(2), r"needs \(\.\.\., H, W\)"),
  (lambda: T.ones(2, 3).conv1d(T.ones(1, 3, 1)), "conv1d needs a 3-d NCL input and OIK weight"),
  (lambda: T.ones(2, 3).max_pool1d(2), "max_pool1d needs a 3-d NCL input"),
  (lambda: nn.GroupNorm(3, 8), "8 channels must divide into 3 groups"),
  (lambda: nn.Conv1d(4, 6, 3, groups=4), "channels 4 -> 6 must divide by groups=4"),
  (lambda: nn.GELU("fast"), "use 'none' .* or 'tanh'"),
  (lambda: nn.LeakyReLU(0.1, 0.2), "takes at most 1 arguments"),
])
def test_bad_arguments_are_typed_errors_that_say_what_to_do(make, match):
  with pytest.raises(kg.ShapeError, match=match):
    make()
