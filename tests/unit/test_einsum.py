"""kg.einsum against numpy.einsum on the PYTHON, PTXSIM and WEBGPU devices; its lowering to the
Tensor's matmul (the same kernels as `@`) and its typed errors for bad subscripts."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from ops_util import check_compiles, device_fixture
from tools import DEVICES

RNG = np.random.default_rng(0)


device = device_fixture(DEVICES)


def operands(shapes, dtype="float32"):
  return [RNG.integers(-3, 4, shape).astype(dtype) for shape in shapes]


def agrees(subscripts, *shapes, dtype="float32"):
  arrays = operands(shapes, dtype)
  want = np.einsum(subscripts, *arrays)
  got = kg.einsum(subscripts, *(Tensor(a) for a in arrays))
  assert got.shape == want.shape, (got.shape, want.shape)
  out = got.numpy()
  assert out.dtype == want.dtype, (out.dtype, want.dtype)
  np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


CASES = [
  ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)),          # batched matmul
  ("ij,jk", (3, 4), (4, 5)),                      # implicit output: ik
  ("ij,kj->ik", (3, 4), (5, 4)),                  # a @ b.T
  ("ii", (4, 4)),                                 # trace
  ("ii->i", (4, 4)),                              # diagonal
  ("iij->ji", (3, 3, 2)),                         # diagonal of a batch, transposed
  ("iji->j", (3, 2, 3)),                          # repeated label not adjacent
  ("i,i", (5,), (5,)),                            # dot
  ("i,j->ij", (3,), (4,)),                        # outer: a broadcast multiply, no matmul
  ("ij->", (3, 4)),                               # total
  ("ji", (3, 4)),                                 # implicit transpose (sorted labels)
  ("ij,ij->ij", (3, 4), (3, 4)),                  # elementwise
  ("...ij,...jk->...ik", (2, 1, 3, 4), (5, 4, 2)),  # '...' broadcasts, size 1 against 5
  ("...i,...i", (3, 4), (4,)),
  ("i...->...", (3, 4, 5)),
  ("ij,jk,kl->il", (2, 3), (3, 4), (4, 5)),       # three operands, left to right
  ("abc,cd,b->ad", (2, 3, 4), (4, 5), (3,)),
  ("bhqd,bhkd->bhqk", (2, 3, 4, 5), (2, 3, 6, 5)),  # attention scores
  ("ab,ab,ab->", (2, 3), (2, 3), (2, 3)),
  ("i,->i", (3,), ()),
  ("", ()),
  ("ij,jk->ik", (3, 0), (0, 5)),                  # an empty contraction: zeros
  ("ii->i", (0, 0)),                              # an empty diagonal
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] or "scalar" for c in CASES])
def test_einsum_agrees_with_numpy(device, case):
  agrees(*case)


@pytest.mark.parametrize("dtype", ["int32", "int8", "float16"])
def test_einsum_dtypes(device, dtype):
  agrees("ij,jk->ik", (3, 4), (4, 2), dtype=dtype)
  agrees("ii", (3, 3), dtype=dtype)


def test_einsum_mixed_dtypes_promote():
  a, b = np.ones((2, 3), np.int8), np.ones((3,), np.float32)
  got = kg.einsum("ij,j->i", Tensor(a), Tensor(b))
  assert got.dtype.name == np.einsum("ij,j->i", a, b).dtype.name == "float32"
  assert got.tolist() == np.einsum("ij,j->i", a, b).tolist()


@pytest.mark.parametrize("target", ["wgsl", "ptx", "python"])
def test_batched_einsum_compiles_to_the_kernels_of_matmul(target):
  a, b = Tensor.rand(4, 32, 64, seed=1), Tensor.rand(4, 64, 48, seed=2)
  options = {"arch": "sm_80"} if target == "ptx" else {}
  want = [(k.name, k.source) for k in kg.compile(a @ b, target=target, **options)]
  got = [(k.name, k.source) for k in kg.compile(kg.einsum("bij,bjk->bik", a, b), target=target,
                                                **options)]
  assert got == want


def test_transposed_einsum_is_matmul_of_the_transpose():
  a, b = Tensor.rand(256, 128, seed=1), Tensor.rand(64, 128, seed=2)
  want = [k.source for k in kg.compile(a @ b.T)]
  assert [k.source for k in kg.compile(kg.einsum("ij,kj->ik", a, b))] == want


def test_large_einsum_compiles_for_wgsl_and_ptx():
  q, k = Tensor.rand(2, 4, 256, 64, seed=1), Tensor.rand(2, 4, 256, 64, seed=2)
  out = kg.einsum("bhqd,bhkd->bhqk", q, k).sum((-2, -1)) + kg.einsum("bhii->bh", q[..., :64, :])
  check_compiles(out)


@pytest.mark.parametrize("subscripts,shapes,message", [
  ("ij,jk", [(2, 3)], "name 2 operand"),
  ("ij", [(2, 3, 4)], "names 2 axes but its operand has shape"),
  ("ijk", [(2, 3)], "names 3 axes"),
  ("i1", [(2, 3)], "'1' is not a label"),
  ("i.j", [(2, 3)], "no other dots"),
  ("......", [(2,)], "one '...'"),
  ("ij->k", [(2, 3)], "output label 'k' of 'ij->k' is in no input"),
  ("ij->ii", [(2, 2)], "repeats 'i'"),
  ("ij->i->j", [(2, 3)], "'->' may appear once"),
  ("i-j", [(2, 3)], "'->' may appear once"),
  ("ij,jk->ik", [(2, 3), (4, 5)], "label 'j' has size 3 in one place and 4"),
  ("...i,...i", [(2, 3), (4, 3)], "a '...' axis has size 2 in one place and 4"),
  ("ii", [(2, 3)], "label 'i' has size 2 in one place and 3"),
])
def test_bad_subscripts_are_shape_errors(subscripts, shapes, message):
  with pytest.raises(kg.ShapeError, match=message):
    kg.einsum(subscripts, *(Tensor(np.zeros(s, np.float32)) for s in shapes))


def test_einsum_needs_a_string_and_operands():
  with pytest.raises(kg.ShapeError, match="subscripts string first"):
    kg.einsum(Tensor([1.0]), "i")
  with pytest.raises(kg.ShapeError, match="at least one operand"):
    kg.einsum("i")
