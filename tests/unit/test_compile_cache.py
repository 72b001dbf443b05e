"""The compile cache (kernelgen/cache.py): realizing a kernel compiled before reuses its code.

A hit needs the same target, options, fused graph (ops, dtypes, shapes, constants) and input
layout; the data the buffers hold may differ. Each change of dtype, shape, a constant, an option
or the target misses; hits give numpy's values; the cache is bounded; a training step of the
digits MLP compiles nothing after its warm-up steps and is a fixed, small number of kernels.
(conftest.py clears the cache before every test.)"""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor

from tools import wgpu_adapter
from train_util import python_default  # noqa: F401 (autouse: PYTHON is the default device)


def _counts():
  info = kg.cache_info()
  return info["hits"], info["misses"]


def _affine(x: np.ndarray, device="PYTHON", scale=2.0, shift=1.0) -> np.ndarray:
  """One fused kernel: (x * scale + shift), reduced over the last axis."""
  return ((Tensor(x, device=device) * scale + shift).sum(-1)).numpy()


def _data(shape, dtype=np.float32, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_same_program_other_data_hits_with_correct_values():
  first = _affine(_data((3, 5)))
  assert _counts() == (0, 1)
  for seed in (1, 2):
    x = _data((3, 5), seed=seed)
    np.testing.assert_allclose(_affine(x), (x * 2 + 1).sum(-1), rtol=1e-6)
  assert _counts() == (2, 1)
  np.testing.assert_allclose(first, (_data((3, 5)) * 2 + 1).sum(-1), rtol=1e-6)


@pytest.mark.parametrize("change", ["dtype", "shape", "constant", "signed zero"])
def test_each_change_of_the_program_misses(change):
  x = _data((3, 5))
  _affine(x)
  before = _counts()
  if change == "dtype":
    got, want = _affine(x.astype(np.float64)), (x.astype(np.float64) * 2 + 1).sum(-1)
  elif change == "shape":
    x = _data((3, 6))
    got, want = _affine(x), (x * 2 + 1).sum(-1)
  elif change == "constant":
    got, want = _affine(x, shift=1.5), (x * 2 + 1.5).sum(-1)
  else:                               # 1 * 0.0 is +0.0, 1 * -0.0 is -0.0
    ones = np.ones(4, np.float32)
    plus = (Tensor(ones, device="PYTHON") * 0.0).numpy()
    before = _counts()
    got = (Tensor(ones, device="PYTHON") * -0.0).numpy()
    assert not np.signbit(plus).any() and np.signbit(got).all(), (plus, got)
    want = -0.0 * ones
  assert _counts() == (before[0], before[1] + 1), change
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_an_option_misses():
  """PYTHON with subgroups on renders with other options: the kernel compiles again."""
  x = _data((3, 5))
  _affine(x)
  runtime = kg.Device["PYTHON"]
  runtime.subgroups = True
  try:
    np.testing.assert_allclose(_affine(x), (x * 2 + 1).sum(-1), rtol=1e-6)
  finally:
    runtime.subgroups = False
  assert _counts() == (0, 2)
  _affine(x)
  assert _counts() == (1, 2)


def test_the_target_misses_and_ptx_hits():
  x = _data((3, 5))
  _affine(x)
  got = _affine(x, device="PTXSIM")          # same program rendered to PTX: compiled again
  assert _counts() == (0, 2)
  np.testing.assert_allclose(got, (x * 2 + 1).sum(-1), rtol=1e-6)
  x = _data((3, 5), seed=3)
  np.testing.assert_allclose(_affine(x, device="PTXSIM"), (x * 2 + 1).sum(-1), rtol=1e-6)
  assert _counts() == (1, 2)


def test_webgpu_hits_with_correct_values():
  wgpu_adapter()
  for seed in range(3):
    x = _data((4, 33), seed=seed)
    np.testing.assert_allclose(_affine(x, device="WEBGPU"), (x * 2 + 1).sum(-1), rtol=1e-5)
  assert _counts() == (2, 1)


def test_bounded_and_off():
  kg.set_cache_size(2)
  try:
    for shift in (1.0, 2.0, 3.0):
      _affine(_data((2, 2)), shift=shift)
    assert kg.cache_info()["size"] == 2
    _affine(_data((2, 2)), shift=1.0)     # the oldest was dropped: compiled again
    assert _counts() == (0, 4)
    _affine(_data((2, 2)), shift=3.0)
    assert _counts() == (1, 4)
    kg.set_cache_size(0)
    _affine(_data((2, 2)), shift=3.0)
    assert _counts() == (1, 4) and kg.cache_info()["uncached"] == 1
    with pytest.raises(kg.KernelgenError, match="cache size"):
      kg.set_cache_size(-1)
  finally:
    kg.set_cache_size(1024)


def _digits_step(model, opt, x, onehot):
  opt.zero_grad()
  loss = -(model(Tensor(x)).log_softmax(-1) * Tensor(onehot)).sum(-1).mean()
  loss.backward()
  opt.step(loss)
  return loss


# kernels one training step (forward, backward, update) of the digits MLP runs, with SGD: the two
# forward matmuls; the log-softmax gradient (64 x 10) as one row kernel; the hidden layer's
# gradient; b2's, W2's and b1's gradients each in a kernel of its own (schedule.py
# PADDED_WASTE_RATIO: padded into the flat gradient, every thread would loop over them); the flat
# gradient (W1's, and copies of the others); the update; the loss's row and mean: 11. Adam adds
# its two moment vectors and its 2-element bias-correction state (optim.py, for kg.jit): 14.
DIGITS_STEP_KERNELS = {"SGD": 11, "Adam": 14}


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_digits_mlp_step_compiles_once_and_is_few_kernels(optimizer):
  """64-32-10 MLP, batch 64: the third step compiles nothing (the first two differ: parameters
  become views of the flat buffer, the optimizer's state appears), and the losses equal those
  of the same steps compiled afresh."""
  rng = np.random.default_rng(0)
  x = rng.random((64, 64), dtype=np.float32)
  onehot = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]

  def run(steps):
    kg.nn.manual_seed(0)
    model = kg.nn.Sequential(kg.nn.Linear(64, 32), kg.nn.ReLU(), kg.nn.Linear(32, 10))
    opt = getattr(kg.optim, optimizer)(model.parameters(), lr=3e-3)
    list(model.parameters())[0].numpy()
    losses, kernels = [], []
    for _ in range(steps):
      before = sum(_counts())
      losses.append(_digits_step(model, opt, x, onehot).item())
      kernels.append((sum(_counts()) - before, kg.cache_info()["misses"]))
    return losses, kernels

  losses, kernels = run(3)
  assert kernels[2][1] == kernels[1][1], kernels   # the third step compiles nothing
  assert all(n <= DIGITS_STEP_KERNELS[optimizer] for n, _ in kernels), kernels
  kg.set_cache_size(0)
  try:
    fresh, _ = run(3)
  finally:
    kg.set_cache_size(1024)
  assert losses == fresh and losses[-1] < losses[0], (losses, fresh)


@pytest.mark.parametrize("target", ["python", "wgsl", "ptx"])
def test_same_structure_under_other_names_is_rendered_as_compiled(target):
  """Kernels of one structure under other names (a kernel name's `_n2`, other buffer names) are
  rendered from the first one's linearized form, by the compile cache and by kg.compile: the
  same source, launch and buffers as compiling each."""
  from kernelgen.cache import _CACHE, cached_compile
  from kernelgen.compiler import compile_item
  from kernelgen.graph.schedule import schedule
  from kernelgen.render.targets import get_target
  x, y = (Tensor.empty(3, 5, name=n) for n in ("xa", "yb"))
  img, w1, w2 = Tensor.empty(1, 8, 16, 16), Tensor.empty(8, 8, 3, 3), Tensor.empty(8, 8, 3, 3)
  roots = [(x * 2).sum(-1), (y * 2).sum(-1), x.exp(), y.exp(),
           img.conv2d(w1, padding=1).relu(), img.conv2d(w2, padding=1).relu()]
  items = [i for i in schedule([r.node for r in roots]) if i.out.size]
  options = {"arch": "sm_80"} if target == "ptx" else {}
  want = [compile_item(i, target, options) for i in items]
  kg.clear_cache()
  got = [cached_compile(i, get_target(target), options) for i in items]
  assert len(_CACHE.shapes) == 3 and len({i.name for i in items}) == 6
  assert kg.cache_info()["misses"] == 6
  for w, g in zip(want, got):
    assert (g.name, g.source, g.launch, g.buffers, g.global_size, g.local_size, g.capped) == \
      (w.name, w.source, w.launch, w.buffers, w.global_size, w.local_size, w.capped)
  assert {b.name for b in got[1].buffers} == {"out", "yb"}
  again = kg.compile(roots, target, **options)      # (compile_plan shares them the same way)
  assert [(k.name, k.source, k.launch) for k in again] == [(k.name, k.source, k.launch)
                                                           for k in want]
