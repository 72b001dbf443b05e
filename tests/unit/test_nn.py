"""kg.nn: Module mechanics (registration, state_dict, train/eval), each layer against numpy, and
whole models (MLP, small CNN, a 2-layer transformer) whose gradients are checked against jax's
autodiff (an independent implementation) to 1e-5 relative in float32.

Relative error is per tensor: max |ours - jax| / max |jax| (near-zero entries of a gradient
cannot carry a per-element relative bound in float32).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import kernelgen as kg

from train_util import jax, jnp, need_jax, python_default, rel_err  # noqa: F401  (the fixture)

nn = kg.nn


# ---- Module mechanics -----------------------------------------------------------------------

class Net(nn.Module):
  def __init__(self):
    super().__init__()
    self.fc = nn.Linear(3, 4)
    self.blocks = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 2, bias=False))
    self.norm = nn.BatchNorm2d(2)
    self.scale = 2.0

  def forward(self, x):
    return self.blocks(self.fc(x).relu()) * self.scale


def test_registration_and_names():
  net = Net()
  names = [n for n, _ in net.named_parameters()]
  assert names == ["fc.weight", "fc.bias", "blocks.0.weight", "blocks.0.bias",
                   "blocks.2.weight", "norm.weight", "norm.bias"]
  assert len(net.parameters()) == 7 and all(p.requires_grad for p in net.parameters())
  sd = net.state_dict()
  assert list(sd) == names + ["norm.running_mean", "norm.running_var"]
  assert not sd["norm.running_mean"].requires_grad
  assert net.scale == 2.0 and isinstance(net.blocks[1], nn.GELU) and len(net.blocks) == 3
  assert "Linear(3, 4" in repr(net)


def test_train_eval_propagates():
  net = Net()
  assert net.training and net.blocks[0].training
  net.eval()
  assert not net.training and not net.blocks[0].training and not net.norm.training
  net.train()
  assert net.norm.training


def test_load_state_dict_copies_and_checks():
  a, b = Net(), Net()
  b.load_state_dict({k: v.numpy() for k, v in a.state_dict().items()})
  for k, v in a.state_dict().items():
    np.testing.assert_array_equal(b.state_dict()[k].numpy(), v.numpy())
  with pytest.raises(nn.StateDictError, match="missing"):
    b.load_state_dict({"fc.weight": a.fc.weight})
  with pytest.raises(kg.ShapeError, match="fc.bias"):
    b.load_state_dict({**a.state_dict(), "fc.bias": np.zeros(5, np.float32)})
  b.load_state_dict({"fc.bias": np.ones(4, np.float32)}, strict=False)
  assert b.fc.bias.tolist() == [1.0] * 4


def test_module_needs_super_init():
  class Bad(nn.Module):
    def __init__(self):
      self.x = 1
  with pytest.raises(kg.KernelgenError, match="super"):
    Bad()


# ---- layers against numpy -------------------------------------------------------------------

def test_linear_matches_numpy():
  layer = nn.Linear(5, 3)
  x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
  w, b = layer.weight.numpy(), layer.bias.numpy()
  assert np.abs(w).max() <= 1 / math.sqrt(5)
  np.testing.assert_allclose(layer(kg.Tensor(x)).numpy(), x @ w.T + b, rtol=1e-5, atol=1e-6)


def test_conv2d_layer_matches_numpy():
  layer = nn.Conv2d(2, 4, 3, stride=2, padding=1, groups=2)
  x = np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32)
  w, b = layer.weight.numpy(), layer.bias.numpy()
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  ref = np.zeros((1, 4, 3, 3), np.float32)
  for o in range(4):
    g = o // 2
    for i in range(3):
      for j in range(3):
        ref[0, o, i, j] = (xp[0, g:g + 1, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w[o]).sum() + b[o]
  np.testing.assert_allclose(layer(kg.Tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-5)


def test_layernorm_layer():
  layer = nn.LayerNorm((2, 3))
  x = np.random.default_rng(2).standard_normal((4, 2, 3)).astype(np.float32)
  mu = x.mean((1, 2), keepdims=True)
  ref = (x - mu) / np.sqrt(((x - mu) ** 2).mean((1, 2), keepdims=True) + 1e-5)
  np.testing.assert_allclose(layer(kg.Tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-5)
  with pytest.raises(kg.ShapeError):
    layer(kg.Tensor(np.zeros((2, 3, 2), np.float32)))


def test_batchnorm_train_eval_and_running_stats():
  bn = nn.BatchNorm2d(3, momentum=0.2)
  rng = np.random.default_rng(3)
  x = (rng.standard_normal((4, 3, 2, 2)) * 2 + 1).astype(np.float32)
  mu, var = x.mean((0, 2, 3), keepdims=True), x.var((0, 2, 3), keepdims=True)
  out = bn(kg.Tensor(x)).numpy()
  np.testing.assert_allclose(out, (x - mu) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
  unbiased = x.var((0, 2, 3), ddof=1)
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.8 * 0 + 0.2 * mu.ravel(), rtol=1e-5)
  np.testing.assert_allclose(bn.running_var.numpy(), 0.8 * 1 + 0.2 * unbiased, rtol=1e-5)
  bn.eval()
  rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
  ref = (x - rm.reshape(1, 3, 1, 1)) / np.sqrt(rv.reshape(1, 3, 1, 1) + 1e-5)
  np.testing.assert_allclose(bn(kg.Tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(bn.running_mean.numpy(), rm)   # eval does not update
  with pytest.raises(kg.ShapeError):
    bn(kg.Tensor(np.zeros((1, 2, 2, 2), np.float32)))


def test_embedding_rows_and_grad():
  emb = nn.Embedding(5, 3)
  idx = kg.Tensor([[0, 4], [4, 2]])
  w = emb.weight.numpy()
  out = emb(idx)
  np.testing.assert_array_equal(out.numpy(), w[[[0, 4], [4, 2]]])
  out.sum().backward()
  np.testing.assert_array_equal(emb.weight.grad.numpy()[:, 0], [1, 0, 1, 0, 2])
  with pytest.raises(kg.ShapeError):
    emb(kg.Tensor([0.5]))


def test_dropout():
  drop = nn.Dropout(0.25)
  x = kg.Tensor.ones(64, 64)
  y = drop(x).numpy()
  kept = y != 0
  assert 0.7 < kept.mean() < 0.8
  np.testing.assert_allclose(y[kept], 1 / 0.75)
  assert not np.array_equal(drop(x).numpy(), y)   # a new mask per call
  drop.eval()
  np.testing.assert_array_equal(drop(x).numpy(), np.ones((64, 64)))
  with pytest.raises(kg.ShapeError):
    nn.Dropout(1.5)


def test_activations():
  x = np.linspace(-3, 3, 7).astype(np.float32)
  t = kg.Tensor(x)
  np.testing.assert_allclose(nn.ReLU()(t).numpy(), np.maximum(x, 0))
  gelu = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
  np.testing.assert_allclose(nn.GELU("tanh")(t).numpy(), gelu, rtol=1e-5, atol=1e-6)
  exact = np.array(jax.nn.gelu(x.astype(np.float64), approximate=False))   # torch's default
  np.testing.assert_allclose(nn.GELU()(t).numpy(), exact, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(nn.Tanh()(t).numpy(), np.tanh(x), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(nn.Sigmoid()(t).numpy(), 1 / (1 + np.exp(-x)), rtol=1e-5)


# ---- whole models against jax ---------------------------------------------------------------

def _check_model(model, forward_jax, x, target_onehot):
  """Cross-entropy gradients of every parameter, ours vs jax's, to 1e-5 relative."""
  need_jax()
  names = [n for n, _ in model.named_parameters()]
  params = {n: p.numpy() for n, p in model.named_parameters()}
  logits = model(kg.Tensor(x))
  loss = -(logits.log_softmax(-1) * kg.Tensor(target_onehot)).sum(-1).mean()
  loss.backward()

  def jloss(ps):
    out = forward_jax(ps, jnp.asarray(x))
    return -(jax.nn.log_softmax(out, -1) * target_onehot).sum(-1).mean()

  ref_loss, ref_grads = jax.value_and_grad(jloss)({n: jnp.asarray(v) for n, v in params.items()})
  assert rel_err(loss.numpy(), ref_loss) < 1e-5
  for n in names:
    p = dict(model.named_parameters())[n]
    err = rel_err(p.grad.numpy(), ref_grads[n])
    assert err < 1e-5, f"{n}: relative error {err:.3g}"


def _onehot(rng, n, k):
  return np.eye(k, dtype=np.float32)[rng.integers(0, k, n)]


def test_mlp_grads_match_jax():
  model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16), nn.GELU("tanh"),
                        nn.Linear(16, 5))
  rng = np.random.default_rng(0)
  x = rng.standard_normal((8, 12)).astype(np.float32)

  def fwd(p, x):
    h = jax.nn.relu(x @ p["0.weight"].T + p["0.bias"])
    h = jax.nn.gelu(h @ p["2.weight"].T + p["2.bias"], approximate=True)
    return h @ p["4.weight"].T + p["4.bias"]
  _check_model(model, fwd, x, _onehot(rng, 8, 5))


def _jconv(x, w, b, stride=1, padding=0):
  out = jax.lax.conv_general_dilated(x, w, (stride, stride), [(padding, padding)] * 2,
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                     precision=jax.lax.Precision.HIGHEST)
  return out + b.reshape(1, -1, 1, 1)


def test_small_cnn_grads_match_jax():
  model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(4, 6, 3, stride=2, bias=False),
                        nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 3 * 3, 4))
  rng = np.random.default_rng(1)
  x = rng.standard_normal((3, 1, 8, 8)).astype(np.float32)

  def fwd(p, x):
    h = jax.nn.relu(_jconv(x, p["0.weight"], p["0.bias"], padding=1))
    h = _jconv(h, p["2.weight"], jnp.zeros(6), stride=2)   # no bias: BatchNorm follows
    mu = h.mean((0, 2, 3), keepdims=True)
    var = ((h - mu) ** 2).mean((0, 2, 3), keepdims=True)
    h = (h - mu) / jnp.sqrt(var + 1e-5) * p["3.weight"].reshape(1, -1, 1, 1) + \
      p["3.bias"].reshape(1, -1, 1, 1)
    h = jax.nn.relu(h).reshape(3, -1)
    return jnp.matmul(h, p["6.weight"].T, precision="highest") + p["6.bias"]
  _check_model(model, fwd, x, _onehot(rng, 3, 4))


def test_pooling_cnn_grads_match_jax():
  model = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU())
  rng = np.random.default_rng(2)
  x = rng.standard_normal((2, 2, 6, 6)).astype(np.float32)
  head = nn.Linear(3 * 3 * 3 + 3 * 2 * 2, 3)

  class Net(nn.Module):
    def __init__(self):
      super().__init__()
      self.body, self.head = model, head

    def forward(self, x):
      h = self.body(x)
      a = h.max_pool2d(2).reshape(2, -1)
      b = h.avg_pool2d(3).reshape(2, -1)
      return self.head(kg.cat([a, b], 1))

  def fwd(p, x):
    h = jax.nn.relu(_jconv(x, p["body.0.weight"], p["body.0.bias"], padding=1))
    a = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    b = jax.lax.reduce_window(h, 0.0, jax.lax.add, (1, 1, 3, 3), (1, 1, 3, 3), "VALID") / 9
    feats = jnp.concatenate([a.reshape(2, -1), b.reshape(2, -1)], 1)
    return jnp.matmul(feats, p["head.weight"].T, precision="highest") + p["head.bias"]
  _check_model(Net(), fwd, x, _onehot(rng, 2, 3))


class Block(nn.Module):
  """Pre-norm transformer block: causal multi-head attention (matmul/softmax) and a GELU MLP."""

  def __init__(self, dim, heads):
    super().__init__()
    self.heads = heads
    self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
    self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
    self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

  def forward(self, x):
    b, t, d = x.shape
    hd = d // self.heads
    qkv = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    scores = (q @ k.swapaxes(-1, -2)) * (1 / math.sqrt(hd))
    causal = kg.Tensor.arange(t).reshape(t, 1) >= kg.Tensor.arange(t).reshape(1, t)
    att = kg.where(causal, scores, -1e9).softmax(-1)
    y = (att @ v).permute(0, 2, 1, 3).reshape(b, t, d)
    x = x + self.proj(y)
    return x + self.fc2(self.fc1(self.ln2(x)).gelu())


def _jblock(p, pre, x, heads):
  def ln(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + 1e-5) * w + b

  def lin(x, name):
    return jnp.matmul(x, p[f"{pre}{name}.weight"].T, precision="highest") + p[f"{pre}{name}.bias"]
  b, t, d = x.shape
  hd = d // heads
  qkv = lin(ln(x, p[f"{pre}ln1.weight"], p[f"{pre}ln1.bias"]), "qkv")
  qkv = qkv.reshape(b, t, 3, heads, hd).transpose(2, 0, 3, 1, 4)
  q, k, v = qkv[0], qkv[1], qkv[2]
  scores = jnp.matmul(q, k.swapaxes(-1, -2), precision="highest") / math.sqrt(hd)
  causal = np.tril(np.ones((t, t), bool))
  att = jax.nn.softmax(jnp.where(causal, scores, -1e9), -1)
  y = jnp.matmul(att, v, precision="highest").transpose(0, 2, 1, 3).reshape(b, t, d)
  x = x + lin(y, "proj")
  h = jax.nn.gelu(lin(ln(x, p[f"{pre}ln2.weight"], p[f"{pre}ln2.bias"]), "fc1"), approximate=True)
  return x + lin(h, "fc2")


def test_transformer_grads_match_jax():
  dim, heads, vocab, t = 8, 2, 6, 5

  class Tiny(nn.Module):
    def __init__(self):
      super().__init__()
      self.emb = nn.Embedding(vocab, dim)
      self.b0, self.b1 = Block(dim, heads), Block(dim, heads)
      self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
      return self.head(self.b1(self.b0(self.emb(idx))))

  rng = np.random.default_rng(3)
  idx = rng.integers(0, vocab, (2, t)).astype(np.int32)
  target = _onehot(rng, 2 * t, vocab).reshape(2, t, vocab)

  def fwd(p, idx):
    x = p["emb.weight"][idx]
    x = _jblock(p, "b1.", _jblock(p, "b0.", x, heads), heads)
    return jnp.matmul(x, p["head.weight"].T, precision="highest") + p["head.bias"]
  _check_model(Tiny(), fwd, idx, target)


def test_module_to_device():
  net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm2d(2))
  net.to("PTXSIM")
  assert {t.device for t in net.state_dict().values()} == {"PTXSIM"}
  out = net[0](kg.Tensor(np.ones((1, 3), np.float32), device="PTXSIM"))
  assert out.device == "PTXSIM"


def test_batchnorm_stats_are_realized_with_the_optimizer_step():
  bn = nn.BatchNorm2d(2)
  opt = kg.optim.SGD(bn.parameters(), lr=0.1)
  x = kg.Tensor(np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2))
  bn(x).sum().backward()
  assert not bn.running_mean.node.realized
  opt.step()
  assert bn.running_mean.node.realized and bn.running_var.node.realized
  np.testing.assert_allclose(bn.running_mean.numpy(), [0.1 * 5.5, 0.1 * 9.5], rtol=1e-6)
