"""How many kernels a program becomes, and which nodes the scheduler realizes."""
from __future__ import annotations

import os
import pytest

import kernelgen as kg
from tools import default_device
from kernelgen import Tensor
from kernelgen.schedule import schedule


@pytest.fixture(autouse=True)
def python_device(monkeypatch):
  with default_device(monkeypatch, os.environ.get("KERNELGEN_TEST_DEVICE", "PYTHON")):
    yield


def kernels(*tensors) -> list[str]:
  return [item.name for item in schedule([t.node for t in tensors])]


def ones(*shape):
  """A realized input buffer (not a lazy constant)."""
  return Tensor([[1.0] * shape[1]] * shape[0])


def test_elementwise_chain_is_one_kernel():
  a, b, c = ones(4, 8), ones(4, 8), ones(4, 8)
  assert kernels((a + b) * c) == ["E_4_8"]


def test_relu_of_matmul_plus_bias_is_one_kernel():
  x, w, b = ones(4, 8), ones(8, 3), Tensor([1.0, 2.0, 3.0])
  assert len(kernels((x @ w + b).relu())) == 1


def test_softmax_is_at_most_three_kernels():
  assert len(kernels(ones(4, 8).softmax(1))) <= 3


def test_elementwise_fuses_into_reduction_input_and_output():
  x = ones(4, 8)
  assert len(kernels(((x * 2).exp().sum(1) + 1).sqrt())) == 1


def test_broadcast_reduction_gets_its_own_kernel():
  x = ones(4, 8)
  assert len(kernels(x - x.mean(1, keepdim=True))) == 2


def test_movement_ops_do_not_make_kernels():
  x = ones(4, 8)
  assert len(kernels(x.T.pad(((1, 1), (0, 0))).flip(0)[::2] * 3)) == 1


def test_layernorm_kernels():
  assert len(kernels(ones(4, 8).layernorm())) <= 3


def test_realized_inputs_are_not_recomputed():
  x = (ones(4, 8) * 2).realize()
  assert kernels(x + 1) == ["E_4_8"]
  assert kernels(x) == []


def test_names_are_unique_and_stable():
  x = ones(4, 8)
  names = kernels(x.sum(1, keepdim=True) + x.max(1, keepdim=True) * x)
  assert len(set(names)) == len(names) == 3
  assert names == kernels(x.sum(1, keepdim=True) + x.max(1, keepdim=True) * x)


def test_compile_reports_kernel_count():
  a, b, c = ones(4, 8), ones(4, 8), ones(4, 8)
  out = kg.compile((a + b) * c, target="python")
  assert len(out) == 1
  k = out[0]
  assert k.name == "E_4_8" and [b.access for b in k.buffers] == ["write", "read", "read", "read"]
  assert k.buffers[0].size == 32 and k.buffers[0].dtype == kg.dtypes.float32
