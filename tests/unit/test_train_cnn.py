"""The small CNN's training step (bench/training.py's model: conv 1->8 3x3 pad 1, ReLU, conv 8->16
3x3 stride 2 pad 1, ReLU, linear) compiles to few, small kernels:

- the conv weight gradients are kernels of their own (conv2d's backward rule, tensor/ops/conv.py:
  partial sums, then their sum), never reductions padded into the optimizer's flat gradient
  (every parameter's gradient concatenated); that one fuses a reduction (the first conv's bias
  gradient) only while the iterations it wastes on the other parameters' outputs stay under
  schedule.PADDED_REDUCE_WASTE: at 1x16x16 inputs, batch 4, not; at 1x8x8, batch 1, it does;
- the strided conv's input gradient is one small reduction per stride phase, each under 2 KB of
  WGSL (it was a 65 KB sum of 9 pieces, then 347 KB register-tiled, then a spread grid and a
  reduction over the kernel offsets);
- the flat gradient equals the gradients realized one by one (PYTHON), and one SGD step of the
  model on WEBGPU (wgpu) has numpy's (float64) loss and updated weights (the bench compares whole runs with
  tinygrad and TF.js; tests/unit/test_autograd.py's "conv2d stack" gradcheck checks the gradients).
"""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor

from tools import wgpu_adapter
from train_util import python_default  # noqa: F401 (autouse: PYTHON is the default device)


def _model(batch: int, side: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  shapes = {"k1": (8, 1, 3, 3), "c1": (8,), "k2": (16, 8, 3, 3), "c2": (16,),
            "w3": (16 * (side // 2) ** 2, 10), "b3": (10,)}
  params = {k: (rng.standard_normal(s) * 0.3).astype(np.float32) for k, s in shapes.items()}
  x = rng.random((batch, 1, side, side), dtype=np.float32)
  onehot = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
  return params, x, onehot


def _loss(p, x, onehot):
  h = x.conv2d(p["k1"], p["c1"], padding=1).relu()
  h = h.conv2d(p["k2"], p["c2"], stride=2, padding=1).relu()
  logits = h.reshape(h.shape[0], -1) @ p["w3"] + p["b3"]
  return -(logits.log_softmax(-1) * onehot).sum(-1).mean()


def _flat_gradient(batch: int, side: int):
  params, x, onehot = _model(batch, side)
  p = {k: Tensor(v, requires_grad=True) for k, v in params.items()}
  _loss(p, Tensor(x), Tensor(onehot)).backward()
  return p, kg.cat([t.grad.reshape(-1) for t in p.values()])


# conv1's bias gradient padded into the flat gradient (schedule.py _little_waste): (1, 8) wastes
# (3818 - 8) * 64 = 243,840 iterations, past PADDED_WASTE_FLOOR and 476 times its own 512: a
# kernel of its own; (1, 4) wastes (1898 - 8) * 16 = 30,240, under the floor: fused
@pytest.mark.parametrize("batch, side, fused", [(4, 16, False), (1, 8, False), (1, 4, True)])
def test_flat_gradient_fuses_a_bias_reduction_only_when_cheap(batch, side, fused):
  p, flat = _flat_gradient(batch, side)
  kernels = kg.compile([flat], target="wgsl")
  names = [k.name for k in kernels]
  n, half = flat.shape[0], side // 2
  weight_partials = [f"r_{batch}_1_1_8_1_1_1_1_3_3__1_{side}_{side}",
                     f"r_{batch}_1_1_16_8_1_1_1_3_3__1_{half}_{half}"]
  if half * half <= 4:     # conv2's partials reduce 2x2 pixels: recomputed in the batch's sum
    weight_partials.pop()  # (schedule.py RECOMPUTE_LENGTH)
  if batch == 1:           # a sum over a batch of 1 is its element (tensor/ops/reduce.py): each
    # weight's gradient is one reduction over the pixels, with no partials to sum
    assert f"r_8_1_3_3__1_{side}_{side}" in names, names
    assert f"r_16_8_3_3__1_{half}_{half}" in names, names
  else:
    assert all(name in names for name in weight_partials), names
    assert f"r_8_1_3_3__{batch}_1" in names and f"r_16_8_3_3__{batch}_1" in names, names
  conv1_bias = f"r_1_8_1_1__{batch}_{side}_{side}"        # its own kernel, or in the flat one
  flat_reduces_pixels = [name for name in names if name.startswith(f"r_{n}__") and
                         name.endswith(f"{side}_{side}")]
  if fused:
    assert flat_reduces_pixels and conv1_bias not in names, names
  else:
    assert conv1_bias in names and not flat_reduces_pixels, names
  assert all(len(k.source) < 40_000 for k in kernels), [(k.name, len(k.source)) for k in kernels]
  if fused:    # values on the PYTHON interpreter: at the small size only (CI time)
    want = np.concatenate([t.grad.numpy().ravel() for t in p.values()])
    np.testing.assert_allclose(flat.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows, alone", [(64, True), (63, False)])
def test_flat_gradient_keeps_a_matmul_weight_gradient_alone_from_4096_outputs(rows, alone):
  """schedule.TILED_REDUCE_MIN: a linear layer's weight gradient (rows x 64, over a batch of 8)
  with 4096 outputs is a kernel of its own, which the optimizer register-tiles, then copied into
  the flat gradient; with 4032 it fuses into the flat kernel (PADDED_REDUCE_WASTE: the bias's 64
  outputs waste 8 iterations each). The values match numpy either way."""
  rng = np.random.default_rng(3)
  wn, xn = rng.standard_normal((rows, 64)), rng.standard_normal((8, rows))
  w = Tensor(wn.astype(np.float32), requires_grad=True)
  b = Tensor(np.zeros(64, np.float32), requires_grad=True)
  ((Tensor(xn.astype(np.float32)) @ w + b).relu() ** 2).sum().backward()
  flat = kg.cat([w.grad.reshape(-1), b.grad])
  names = [k.name for k in kg.compile([flat], target="wgsl")]
  assert (f"r_1_{rows}_64__8" in names) == alone, names
  assert names[-1] == f"r_{rows * 64 + 64}__8", names     # the flat one (the bias fuses in)
  dz = 2 * np.maximum(xn.astype(np.float32) @ wn.astype(np.float32), 0)
  want = np.concatenate([(xn.T @ dz).ravel(), dz.sum(0)])
  np.testing.assert_allclose(flat.numpy(), want, rtol=1e-5, atol=1e-5)


def test_strided_conv_input_gradient_is_one_small_reduction_per_phase():
  rng = np.random.default_rng(1)
  x = Tensor(rng.random((4, 8, 16, 16), dtype=np.float32), requires_grad=True)
  w = Tensor(rng.random((16, 8, 3, 3), dtype=np.float32))
  x.conv2d(w, stride=2, padding=1).sum().backward()
  kernels = kg.compile([x.grad], target="wgsl")
  names = [k.name for k in kernels]
  phases = [f"r_4_1_8_8_8_1_1_1__16_{a}_{b}" for a, b in ((2, 2), (2, 1), (1, 2), (1, 1))]
  assert names == ["E_4_16_8_8"] + phases + ["E_4_8_16_16"], names  # g, phases, interleave
  assert all(len(k.source) < 2_000 for k in kernels), [(k.name, len(k.source)) for k in kernels]


def _numpy_sgd_step(params, x, onehot, lr):
  """One SGD step of the model in float64 numpy: (loss, updated parameters)."""
  p = {k: v.astype(np.float64) for k, v in params.items()}

  def conv(a, k, stride):
    n, c, h, w = a.shape
    o = k.shape[0]
    ap = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    cols = np.stack([ap[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                     for i in range(3) for j in range(3)], 2)       # n, c, 9, oh, ow
    return np.einsum("ncqhw,ocq->nohw", cols, k.reshape(o, c, 9)), cols

  z1, cols1 = conv(x.astype(np.float64), p["k1"], 1)
  a1 = np.maximum(z1 + p["c1"].reshape(1, -1, 1, 1), 0)
  z2, cols2 = conv(a1, p["k2"], 2)
  a2 = np.maximum(z2 + p["c2"].reshape(1, -1, 1, 1), 0)
  flat = a2.reshape(len(x), -1)
  logits = flat @ p["w3"] + p["b3"]
  e = np.exp(logits - logits.max(-1, keepdims=True))
  soft = e / e.sum(-1, keepdims=True)
  loss = -(np.log(soft) * onehot).sum(-1).mean()
  dlogits = (soft - onehot) / len(x)
  g = {"w3": flat.T @ dlogits, "b3": dlogits.sum(0)}
  d2 = (dlogits @ p["w3"].T).reshape(a2.shape) * (a2 > 0)
  g["c2"] = d2.sum((0, 2, 3))
  g["k2"] = np.einsum("nohw,ncqhw->ocq", d2, cols2).reshape(p["k2"].shape)
  dcols2 = np.einsum("nohw,ocq->ncqhw", d2, p["k2"].reshape(16, 8, 9))
  da1 = np.zeros((a1.shape[0], 8, a1.shape[2] + 2, a1.shape[3] + 2))
  oh, ow = d2.shape[2:]
  for q in range(9):
    i, j = divmod(q, 3)
    da1[:, :, i:i + 2 * oh:2, j:j + 2 * ow:2] += dcols2[:, :, q]
  d1 = da1[:, :, 1:-1, 1:-1] * (a1 > 0)
  g["c1"] = d1.sum((0, 2, 3))
  g["k1"] = np.einsum("nohw,ncqhw->ocq", d1, cols1).reshape(p["k1"].shape)
  return loss, {k: p[k] - lr * g[k] for k in p}


def test_one_sgd_step_matches_numpy():
  """On the native WEBGPU device (wgpu), the bench's device."""
  wgpu_adapter()
  params, x, onehot = _model(2, 8, seed=2)
  p = {k: Tensor(v, requires_grad=True, device="WEBGPU") for k, v in params.items()}
  opt = kg.optim.SGD(list(p.values()), lr=0.1)
  loss = _loss(p, Tensor(x, device="WEBGPU"), Tensor(onehot, device="WEBGPU"))
  loss.backward()
  opt.step(loss)
  want_loss, want = _numpy_sgd_step(params, x, onehot, 0.1)
  assert abs(loss.item() - want_loss) <= 1e-5 * abs(want_loss)
  for k, t in p.items():
    np.testing.assert_allclose(t.numpy(), want[k], rtol=1e-4, atol=1e-6, err_msg=k)
