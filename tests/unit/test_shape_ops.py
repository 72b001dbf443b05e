"""tensor/ops/shape.py: triu/tril, one_hot, linspace, meshgrid, split/chunk, tile, roll,
repeat_interleave and numpy.pad's modes, against numpy on PYTHON, PTXSIM and WEBGPU."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from ops_util import check_compiles, same

A = np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5 - 4


def source():
  return Tensor.arange(12, dtype="float32").reshape(3, 4) * 1.5 - 4


@pytest.mark.parametrize("k", [0, 1, -1, 5])
def test_triu_tril(device, k):
  same(source().triu(k), np.triu(A, k))
  same(source().tril(k), np.tril(A, k))


def test_triu_batched_and_causal_mask(device):
  x = Tensor.ones(2, 3, 3, dtype="int32")
  same(x.tril(), np.tril(np.ones((2, 3, 3), np.int32)))
  same(Tensor.ones(4, 4, dtype="bool").tril(), np.tril(np.ones((4, 4), bool)))


def test_one_hot_is_int32(device):
  labels = Tensor([[0, 2], [4, 1]])
  same(labels.one_hot(5), np.eye(5, dtype=np.int32)[[[0, 2], [4, 1]]])
  same(Tensor([1, 7, -1]).one_hot(3), np.array([[0, 1, 0], [0, 0, 0], [0, 0, 0]], np.int32))
  for dtype in ("uint32", "uint8", "int16"):          # compared without promotion to int64
    same(Tensor([1, 7, 0], dtype=dtype).one_hot(3),
         np.array([[0, 1, 0], [0, 0, 0], [1, 0, 0]], np.int32))


@pytest.mark.parametrize("start,stop,num,endpoint", [(0, 1, 5, True), (-2.5, 7, 9, True),
                                                     (3, -1, 4, False), (1, 2, 1, True),
                                                     (0, 1, 0, True)])
def test_linspace(device, start, stop, num, endpoint):
  expected = np.linspace(start, stop, num, endpoint=endpoint).astype(np.float32)
  same(Tensor.linspace(start, stop, num, endpoint=endpoint), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid(device, indexing):
  xs = [np.array([1, 2, 3], np.int32), np.array([4.5, 5.5], np.float32),
        np.arange(4, dtype=np.int32)]
  got = kg.meshgrid(*(Tensor(x) for x in xs), indexing=indexing)
  for g, e in zip(got, np.meshgrid(*xs, indexing=indexing)):
    same(g, e)


def test_split_and_chunk(device):
  for got, exp in zip(source().split(2, axis=1), np.split(A, 2, axis=1)):
    same(got, exp)
  for got, exp in zip(source().split([1, 0, 3], axis=-1), np.split(A, [1, 1], axis=-1)):
    same(got, exp)
  parts = Tensor.arange(10).chunk(4)
  assert [p.shape for p in parts] == [(3,), (3,), (3,), (1,)]
  same(parts[3], np.array([9], np.int32))
  with pytest.raises(kg.ShapeError, match="must be a multiple of 2"):
    Tensor.zeros(3).split(2)


@pytest.mark.parametrize("reps", [2, (2, 1), (1, 3, 2)])
def test_tile(device, reps):
  same(source().tile(reps), np.tile(A, reps))


@pytest.mark.parametrize("shift,axis", [(5, None), (-1, 0), (3, 1), ((1, -2), (0, 1)), (14, 1)])
def test_roll(device, shift, axis):
  same(source().roll(shift, axis), np.roll(A, shift, axis))


def test_repeat_interleave(device):
  same(source().repeat_interleave(2, axis=1), np.repeat(A, 2, axis=1))
  same(source().repeat_interleave(3), np.repeat(A, 3))
  same(source().repeat_interleave([0, 2, 1], axis=0), np.repeat(A, [0, 2, 1], axis=0))
  many = [1, 0, 2, 1, 3, 0, 1, 2, 2, 1, 0, 1]       # more runs than MAX_RUNS: a one-hot gather
  same(source().flatten().repeat_interleave(many), np.repeat(A.flatten(), many))


PADS = [1, ((1, 2), (0, 3)), ((0, 0), (4, 1)), ((7, 0), (9, 10))]   # the last wider than the axes


@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric", "wrap", "constant"])
@pytest.mark.parametrize("width", PADS, ids=[str(i) for i in range(len(PADS))])
def test_pad_modes_match_numpy(device, mode, width):
  same(source().pad(width, mode=mode), np.pad(A, width, mode=mode))


def test_pad_modes_on_a_single_element_axis(device):
  x = Tensor([[2.0, 3.0, 5.0]])
  for mode in ("edge", "reflect", "symmetric", "wrap"):
    same(x.pad(((2, 3), (1, 1)), mode=mode),
         np.pad(np.array([[2, 3, 5]], np.float32), ((2, 3), (1, 1)), mode=mode))


def test_pad_errors():
  with pytest.raises(kg.ShapeError, match="is not one of constant, edge"):
    Tensor.zeros(3).pad(1, mode="mirror")
  with pytest.raises(kg.ShapeError, match="empty axis"):
    Tensor.zeros(0).pad(1, mode="edge")


@pytest.mark.parametrize("dtype,value", [("bool", 2), ("int8", -2.5), ("uint8", -1),
                                         ("int32", 3.0), ("float16", 2)])
def test_constant_pad_value_keeps_the_dtype(device, dtype, value):
  """Found by the fuzzer (fuzz_ops_deep pad_constant): numpy.pad casts the value to the array's
  dtype; a bool tensor padded with 2 came back int32 and an int one padded with 3.0 float32."""
  a = np.array([[1, 0, 3], [0, 5, 1]]).astype(dtype)
  x = Tensor.arange(6, dtype="int32").reshape(2, 3)
  x = x.cast(dtype) * 0 + Tensor(a) if dtype != "bool" else Tensor(a) | (x < 0)
  same(x.pad(((1, 0), (0, 2)), value=value), np.pad(a, ((1, 0), (0, 2)), constant_values=value))


def test_constant_pad_kernel_is_unchanged():
  """mode="constant" takes the former code path: the same kernel as pad(widths, value). (Its
  kernels were also compared byte for byte with main's when the modes were added.)"""
  x = Tensor.arange(12, dtype="float32").reshape(3, 4)
  a = kg.compile(x.pad(((1, 0), (2, 2)), 3.0), target="wgsl")
  b = kg.compile(x.pad(((1, 0), (2, 2)), value=3.0, mode="constant"), target="wgsl")
  assert [k.source for k in a] == [k.source for k in b]


def test_edge_pad_is_one_fused_kernel_and_compiles():
  x = Tensor.randn(2, 5, 6, seed=3)
  y = x.pad(((0, 0), (2, 2), (2, 2)), mode="edge").sum(axis=0)
  assert len(kg.compile(y)) == 1
  check_compiles(y)


@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric", "wrap"])
def test_pad_modes_read_each_element_once(mode):
  """A padded axis is a gather of computed source positions: one load per output element,
  whatever the mode (a cat of pieces would load, mask and select each piece)."""
  (kernel,) = kg.compile(Tensor.empty(1000, name="x").pad(((2, 3),), mode=mode), target="wgsl")
  assert kernel.source.count("b1_x[") == 1


def test_pad_modes_of_a_recorded_tensor_differentiate(device):
  """While autograd records the input, pad modes are views (their gradient sums the repeats)."""
  a = np.arange(5, dtype=np.float32)
  x = Tensor(a, device=device, requires_grad=True)
  (x.pad(((2, 3),), mode="edge") * Tensor(np.arange(10, dtype=np.float32))).sum().backward()
  w = np.arange(10, dtype=np.float32)
  np.testing.assert_array_equal(x.grad.numpy(), [w[0] + w[1] + w[2], w[3], w[4], w[5],
                                                 w[6] + w[7] + w[8] + w[9]])


ERRORS = [
  (lambda: Tensor.zeros(3).triu(), kg.ShapeError, "at least 2 dims"),
  (lambda: Tensor.zeros(3).one_hot(4), kg.DTypeError, "integer tensor of class indices"),
  (lambda: Tensor.zeros(4).split([1, 2]), kg.ShapeError, "sum to the axis size 4"),
  (lambda: Tensor.zeros(4).chunk(0), kg.ShapeError, "n >= 1"),
  (lambda: Tensor.zeros(2, 2).roll((1, 2), 0), kg.ShapeError, "one per axis"),
  (lambda: Tensor.zeros(3).repeat_interleave([1, 2]), kg.ShapeError, "needs 3 ints"),
  (lambda: Tensor.zeros(3).repeat_interleave(Tensor([1, 1, 1])), kg.ShapeError,
   "depends on the data"),
  (lambda: kg.meshgrid(Tensor.zeros(2), indexing="xyz"), kg.ShapeError, "'xy' or 'ij'"),
]


@pytest.mark.parametrize("build,error,phrase", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_typed_errors_say_what_to_do(build, error, phrase):
  with pytest.raises(error) as info:
    build()
  assert phrase in str(info.value)
