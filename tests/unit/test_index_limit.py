"""GPU targets index with int32 (issue 41): a kernel that reads, computes or reduces over 2**31
elements or more is refused with a LimitError naming `index_elements` and the way out (split the
tensor, or the PYTHON device), on every path: compile to WGSL and PTX, realize on PTXSIM, huge
virtual inputs, expands, outputs, symbolic axes at their largest; under the limit it compiles."""
from __future__ import annotations

import pytest

import kernelgen as kg

HUGE = {
  "rand(2**40).sum()": lambda: kg.Tensor.rand(2 ** 40).sum(),
  "ones(1).expand(2**33).sum()": lambda: kg.Tensor.ones(1).expand(2 ** 33).sum(),
  "a 2**32-element output": lambda: kg.Tensor.ones(1, 1).expand(2 ** 16, 2 ** 16) * 2,
  "2**31 elements exactly": lambda: kg.Tensor.empty(2 ** 16, 2 ** 15, name="x").sum(1),
  "a symbolic axis up to 2**30, times 4": lambda: kg.Tensor.empty(
    kg.Dim("n", 1, 2 ** 30), 4, name="x") * 2,
  "a matmul reading 2**32 elements": lambda: kg.Tensor.empty(2 ** 16, 2 ** 16, name="a") @
    kg.Tensor.empty(2 ** 16, 4, name="b"),
}


@pytest.mark.parametrize("target", ["wgsl", "ptx"])
@pytest.mark.parametrize("name", list(HUGE))
def test_gpu_targets_refuse_2_to_the_31_elements(name, target):
  with pytest.raises(kg.LimitError) as error:
    kg.compile(HUGE[name](), target=target)
  assert error.value.limit == "index_elements"
  message = str(error.value)
  assert "int32" in message and "split the tensor" in message and "PYTHON" in message


def test_realize_on_ptxsim_refuses_before_running():
  with pytest.raises(kg.LimitError) as error:
    kg.Tensor.rand(2 ** 40, device="PTXSIM").sum().numpy()
  assert error.value.limit == "index_elements"


def test_under_the_limit_compiles():
  assert len(kg.compile(kg.Tensor.rand(2 ** 30).sum(), target="wgsl")) >= 1
  assert len(kg.compile(kg.Tensor.empty(2 ** 15, 2 ** 15, name="x").sum(1), target="ptx")) >= 1
  assert len(kg.compile(kg.Tensor.empty(kg.Dim("n", 1, 2 ** 20), 4, name="x") * 2,
                        target="ptx")) == 1


@pytest.mark.parametrize("target", ["wgsl", "ptx"])
def test_a_product_that_is_only_reduced_is_not_refused(target):
  """A 4096**3 matmul broadcasts a 2**36-element product that no index ever spans: its buffers,
  axes and reduced part are all under the limit."""
  a, b = (kg.Tensor.empty(4096, 4096, name=n) for n in "ab")
  assert len(kg.compile(a @ b, target=target)) >= 1


def test_python_is_not_bound_by_int32_indices():
  """The interpreter's indices are Python ints: its own work limit applies instead."""
  with pytest.raises(kg.LimitError) as error:
    kg.Tensor.ones(2 ** 40, device="PYTHON").sum().numpy()
  assert error.value.limit != "index_elements"
