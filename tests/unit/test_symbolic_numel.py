"""Tensor.numel() with symbolic sizes (issue 34): the count is a size expression of the dims (its
.value under the binding, its .hi the padded buffer's elements), usable as a size, not the padded
count as an int; several symbolic axes raise a typed error; static tensors keep their int."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.errors import UnsupportedError


def test_a_symbolic_tensor_counts_its_values_as_a_size_expression():
  n = kg.Dim("n", 1, 64)
  rows = np.arange(15, dtype=np.float32).reshape(5, 3)
  x = kg.Tensor(rows).symbolic(n.bind(5), 3)
  count = x.numel()
  assert count == 3 * n and x.size == 3 * n
  assert (count.value, count.hi) == (15, 192) and x.shape == (64, 3)
  assert x[:, :2].numel() == 2 * n and x.T.numel() == 3 * n
  assert x.sum(1).numel() == n and x.sum().numel() == 1


def test_the_count_stands_as_a_size():
  n = kg.Dim("n", 1, 64)
  rows = np.arange(21, dtype=np.float32).reshape(7, 3)
  x = kg.Tensor(rows, device="PYTHON").symbolic(n.bind(7), 3)
  flat = x.reshape(x.numel())
  assert flat.symbolic_shape == (3 * n,)
  np.testing.assert_array_equal(np.array(flat.tolist(), np.float32), rows.reshape(-1))
  np.testing.assert_array_equal(np.array(kg.Tensor.ones(x.numel(), device="PYTHON")
                                         .sum().tolist()), np.float32(21))


def test_several_symbolic_axes_raise_a_typed_error():
  n, m = kg.Dim("n", 1, 64), kg.Dim("m", 1, 8)
  x = kg.Tensor.empty(n, m, 2, name="x")
  with pytest.raises(UnsupportedError, match="symbolic_shape"):
    x.numel()
  with pytest.raises(UnsupportedError):
    x.size
  assert x.sum(1).numel() == 2 * n


def test_static_tensors_keep_an_int():
  x = kg.Tensor.empty(4, 5, name="x")
  assert x.numel() == 20 and isinstance(x.numel(), int) and kg.Tensor(3.0).numel() == 1
