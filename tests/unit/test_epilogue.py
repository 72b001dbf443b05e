"""A reduction that is a kernel of its own computes its elementwise tail (graph/epilogue.py): the
bias and residual of a projection read by a layernorm or by the next matmul."""
from __future__ import annotations

import os

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.graph.schedule import schedule
from tools import default_device


@pytest.fixture(autouse=True)
def python_device(monkeypatch):
  with default_device(monkeypatch, os.environ.get("KERNELGEN_TEST_DEVICE", "PYTHON")):
    yield


def _data(*shape, seed=0):
  return np.random.default_rng(seed + len(shape)).standard_normal(shape).astype(np.float32)


def _layernorm(x):
  return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


def test_a_residual_projection_read_by_a_layernorm_is_computed_by_the_matmul_kernel():
  """The projection's kernel writes x + h @ w + b; the layernorm's row kernel reads only it."""
  x, h, w, b = _data(2, 16), _data(2, 32, seed=1), _data(32, 16, seed=2), _data(16, seed=3)
  y = Tensor(x) + Tensor(h) @ Tensor(w) + Tensor(b)
  out = y.layernorm()
  items = schedule([out.node])
  assert len(items) == 2
  assert items[0].out is y.node                  # the residual sum, not the bare matmul
  assert len(items[0].inputs) == 4               # x, h, w, b
  assert len(items[1].inputs) == 1               # the layernorm reads the sum only
  np.testing.assert_allclose(out.numpy(), _layernorm(x + h @ w + b), rtol=1e-4, atol=1e-4)


def test_a_hidden_layer_is_computed_once_not_per_read_of_the_next_matmul():
  x, w1, b1, w2 = _data(4, 8), _data(8, 16, seed=1), _data(16, seed=2), _data(16, 3, seed=3)
  hidden = (Tensor(x) @ Tensor(w1) + Tensor(b1)).relu()
  out = hidden @ Tensor(w2)
  items = schedule([out.node])
  assert [it.out for it in items][0] is hidden.node
  np.testing.assert_allclose(out.numpy(), np.maximum(x @ w1 + b1, 0) @ w2, rtol=1e-4, atol=1e-4)


def test_two_reductions_are_not_joined_into_one_kernel():
  """x @ a + y @ b read by a layernorm: the sum would put both matmuls in one kernel (no tiles),
  so only one of them takes the tail."""
  x, a, y, b = _data(2, 8), _data(8, 16, seed=1), _data(2, 4, seed=2), _data(4, 16, seed=3)
  s = Tensor(x) @ Tensor(a) + Tensor(y) @ Tensor(b)
  out = s.layernorm()
  items = schedule([out.node])
  for item in items:
    reduces = [n for n in _nodes(item) if n.op.name == "REDUCE" and _is_matmul(n)]
    assert len(reduces) <= 1, item.name
  np.testing.assert_allclose(out.numpy(), _layernorm(x @ a + y @ b), rtol=1e-4, atol=1e-4)


def _is_matmul(node) -> bool:
  return len(node.src[0].shape) == 3


def _nodes(item):
  """The nodes computed inside `item`'s kernel."""
  stop, stack, seen, out = {id(i) for i in item.inputs}, [item.out], set(), []
  while stack:
    n = stack.pop()
    if id(n) in seen or (id(n) in stop and n is not item.out) or n.realized:
      continue
    seen.add(id(n))
    out.append(n)
    stack.extend(n.src)
  return out


def test_a_split_kernel_keeps_within_the_buffer_limit():
  """A tail whose kernel would bind more than max_buffers stays with its readers."""
  parts = [Tensor(_data(1, 16, seed=i)) for i in range(8)]
  h, w = Tensor(_data(1, 32, seed=9)), Tensor(_data(32, 16, seed=10))
  y = h @ w
  for p in parts:
    y = y + p
  out = y.layernorm()
  for item in schedule([out.node], max_buffers=8):
    assert len(item.inputs) + 1 <= 8, item.name
  want = _data(1, 32, seed=9) @ _data(32, 16, seed=10) + sum(_data(1, 16, seed=i)
                                                             for i in range(8))
  np.testing.assert_allclose(out.numpy(), _layernorm(want), rtol=1e-4, atol=1e-4)
