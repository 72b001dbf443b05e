"""Creation functions make gradient leaves as torch's do: `kg.Tensor.zeros(..., requires_grad=True)`
(full, zeros, ones, empty, arange, eye, rand, randn, linspace, zeros_like, ones_like); the
gradients of a loss built on them checked against the formula on PYTHON; integer leaves are the
typed DTypeError that `requires_grad_()` gives."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

T = kg.Tensor
D = "PYTHON"

LEAVES = {
  "full": lambda: T.full((2, 3), 0.5, device=D, requires_grad=True),
  "zeros": lambda: T.zeros(2, 3, device=D, requires_grad=True),
  "ones": lambda: T.ones(2, 3, device=D, requires_grad=True),
  "arange": lambda: T.arange(0.0, 6.0, device=D, requires_grad=True),
  "eye": lambda: T.eye(2, 3, device=D, requires_grad=True),
  "rand": lambda: T.rand(2, 3, seed=1, device=D, requires_grad=True),
  "randn": lambda: T.randn(2, 3, seed=2, device=D, requires_grad=True),
  "linspace": lambda: T.linspace(-1, 1, 6, device=D, requires_grad=True),
  "zeros_like": lambda: T.zeros_like(T.ones(2, 3, device=D), requires_grad=True),
  "ones_like": lambda: T.ones_like(T.ones(2, 3, device=D), requires_grad=True),
}


@pytest.mark.parametrize("name", LEAVES)
def test_created_leaf_gets_the_gradient_of_a_loss(name):
  x = LEAVES[name]()
  assert x.requires_grad and x.is_leaf
  (x * x * 3.0).sum().backward()        # d/dx = 6 x
  np.testing.assert_allclose(x.grad.numpy(), 6 * x.numpy(), rtol=1e-6)


def test_created_leaves_default_to_no_gradient():
  for make in (T.zeros, T.ones, T.rand, T.randn):
    assert not make(2, device=D).requires_grad
  assert not T.arange(3, device=D).requires_grad


def test_empty_leaf_is_an_input_that_can_require_gradients():
  w = T.empty(3, device=D, requires_grad=True)
  assert w.requires_grad and w.is_leaf


def test_integer_leaves_are_a_typed_error():
  with pytest.raises(kg.DTypeError, match="only float tensors can require gradients"):
    T.arange(3, device=D, requires_grad=True)
  with pytest.raises(kg.DTypeError, match="only float tensors"):
    T.zeros(2, dtype="int32", device=D, requires_grad=True)
