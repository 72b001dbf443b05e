"""tensor/ops/advanced_indexing.py: integer-array (advanced) indexing, take, gather (take_along_axis),
scatter, scatter_add and `t[index] = value`, against numpy on PYTHON, PTXSIM and WEBGPU; WGSL
and PTX of a gather checked by naga and ptxas."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor, dtypes
from ops_util import check_compiles, same

A = np.arange(60, dtype=np.float32).reshape(3, 4, 5) - 20.5


def source():
  """A (3, 4, 5) float32 operand built by creation functions, lazily (not a data buffer)."""
  return Tensor.arange(60, dtype="float32").reshape(3, 4, 5) - 20.5


GETITEM = [
  ([2, 0],),                                 # one list on the first axis
  (np.array([[1, -1], [0, 2]]),),            # a 2-d numpy array, negative from the end
  (slice(None), [3, 1]),                     # after a slice
  ([0, 2], slice(1, 3), [1, 4]),             # separated by a slice: advanced dims go first
  ([0, 2], [1, 3]),                          # adjacent: broadcast together, in place
  (0, slice(None), [1, 2]),                  # an int counts as advanced (separated)
  (Ellipsis, [4, 0, 4]),                     # with ..., repeats
  (None, [1], 2),                            # None ahead
  ([True, False, True],),                    # a boolean mask given as data
  (slice(None), slice(None), [0, 1, 3, 0, 2, 4, 1, 2, 3, 4]),   # > MAX_RUNS runs: one-hot
  ([[0], [2]], [[1, 2]]),                    # broadcast (2,1) with (1,2)
  (1, [0, 3], slice(None, None, -2)),        # with a reversed, strided slice
  ([],),                                     # an empty index
]


@pytest.mark.parametrize("index", GETITEM, ids=[str(i) for i in range(len(GETITEM))])
def test_getitem_with_host_indices(device, index):
  same(source()[index], A[index])


def test_getitem_with_device_indices(device):
  idx = (Tensor.arange(4) * 3 - 5) // 2       # [-3, -1, 0, 2]: computed on the device
  same(source()[:, idx], A[:, [-3, -1, 0, 2]])
  same(source()[Tensor([2, 0]), 1:3, Tensor([[4], [0]])], A[[2, 0], 1:3, [[4], [0]]])


def test_device_indices_out_of_range_read_zero(device):
  idx = Tensor.arange(4) * 2 - 1              # [-1, 1, 3, 5] on an axis of 4: 5 is out
  expected = A[:, [3, 1, 3, 0]]
  expected[:, 3] = 0
  same(source()[:, idx], expected)


def test_uint32_device_indices_from_2_31_on_are_out_of_range(device):
  """Found by the fuzzer (fuzz_ops_deep take_fn): a uint32 index of 2^32 - 1 was cast to int32
  (-1) and read from the end; every unsigned index past the end reads 0 and writes nothing."""
  big = np.array([4294967295, 3, 2147483648, 0], np.uint32)
  expected = A[:, [0, 3, 0, 0]]
  expected[:, [0, 2]] = 0
  same(source()[:, Tensor(big)], expected)
  same(kg.take(source(), Tensor(big), axis=1), expected)
  x = Tensor.arange(5, dtype="float32")
  x[Tensor(big)] = Tensor([10.0, 11.0, 12.0, 13.0])
  same(x, np.array([13.0, 1.0, 2.0, 11.0, 4.0], np.float32))


def test_embedding_lookup_int_table(device):
  table = Tensor.arange(20, dtype="int32").reshape(10, 2) * 7
  tokens = Tensor([[3, 9, 0], [3, 3, 1]])
  same(table[tokens], (np.arange(20, dtype=np.int32).reshape(10, 2) * 7)[[[3, 9, 0], [3, 3, 1]]])


def test_host_index_errors():
  t = Tensor.zeros(3, 4)
  with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
    t[[0, 3]]
  with pytest.raises(kg.IndexOutOfRangeError, match="index -5 is out of bounds for axis 1"):
    t[:, [-5]]
  with pytest.raises(kg.IndexOutOfRangeError):
    t[5]
  with pytest.raises(kg.DTypeError, match="integer dtype"):
    t[Tensor([0.5])]
  with pytest.raises(kg.UnsupportedError, match="kg.where"):
    t[t > 0]
  with pytest.raises(kg.IndexOutOfRangeError, match="boolean index of shape"):
    t[[True, False]]


def test_realized_bool_mask_becomes_indices(device):
  mask = Tensor([[True, False, False, True], [False, False, True, False], [True] * 4])
  x = Tensor.arange(12).reshape(3, 4)
  same(x[mask], np.arange(12, dtype=np.int32).reshape(3, 4)[mask.numpy()])


def test_take(device):
  same(kg.take(source(), [5, 0, 59]), np.take(A, [5, 0, 59]))
  same(kg.take(source(), [[1, 3]], axis=1), np.take(A, [[1, 3]], axis=1))
  same(source().take(Tensor([4, -1]), axis=-1), np.take(A, [4, -1], axis=-1))


def test_gather_is_take_along_axis(device):
  idx = np.array([[[0, 3]], [[2, 2]], [[1, -4]]])            # (3, 1, 2): broadcasts over dim 1
  same(source().gather(2, Tensor(idx.astype(np.int32))), np.take_along_axis(A, idx, 2))
  idx0 = np.array([[[2], [0], [1], [1]]])                    # (1, 4, 1) along axis 0
  same(source().gather(0, idx0), np.take_along_axis(A, idx0, 0))


def scatter_reference(t, axis, idx, src, add):
  """torch.scatter / scatter_add written out: every index position in order, the last wins."""
  out = t.copy()
  for pos in np.ndindex(*idx.shape):
    target = list(pos)
    target[axis] = idx[pos]
    out[tuple(target)] = out[tuple(target)] + src[pos] if add else src[pos]
  return out


@pytest.mark.parametrize("add", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_and_scatter_add(device, axis, add):
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  idx = np.array([[0, 1, 0], [2, 0, 0]]) if axis == 0 else np.array([[0, 3, 0], [2, 2, 2]])
  src = np.arange(1, 13, dtype=np.float32).reshape(3, 4) * 10
  t = Tensor.arange(12, dtype="float32").reshape(3, 4)
  op = t.scatter_add if add else t.scatter
  same(op(axis, Tensor(idx.astype(np.int32)), Tensor(src)),
       scatter_reference(x, axis, idx, src, add))


def test_scatter_add_is_a_histogram(device):
  values = Tensor([3, 1, 3, 3, 0, 1])
  counts = Tensor.zeros(5, dtype="int32").scatter_add(0, values, Tensor.ones(6, dtype="int32"))
  same(counts, np.bincount([3, 1, 3, 3, 0, 1], minlength=5).astype(np.int32))


def test_scatter_scalar_src_and_out_of_range_device_index(device):
  t = Tensor.zeros(2, 3)
  idx = Tensor([[0, 5, 2]]) - 0                # 5 (computed on the device) writes nothing
  same(t.scatter(1, idx, 4.0), np.array([[4, 0, 4], [0, 0, 0]], np.float32))


SETITEM = [
  ((1,), 7.0),
  ((slice(1, 3),), -1.0),
  ((slice(None), slice(None, None, -2), 1), np.array([100.0, 200.0], np.float32)),
  ((Ellipsis, slice(4, 0, -3)), 9.5),
  (([0, 2], slice(None), [1, 1]), np.arange(8, dtype=np.float32).reshape(2, 4)),
  (([0, 0], 1), np.arange(10, dtype=np.float32).reshape(2, 5)),     # duplicates: the last wins
  ((slice(None), [3, -1]), 4.0),
  ((np.array([True, False, True]), 0), np.arange(5, dtype=np.float32) + 0.5),
  (([2, 0, -1],), np.arange(60, dtype=np.float32).reshape(3, 4, 5)),  # one axis, duplicates
  ((slice(1, 3), None, slice(None, None, -1), [4, 0]),
   np.float32([-1.0, -2.0]).reshape(2, 1, 1, 1)),
]


@pytest.mark.parametrize("index,value", SETITEM, ids=[str(i) for i in range(len(SETITEM))])
def test_setitem_is_a_functional_update(device, index, value):
  t = source()
  before = t
  view = t[0]
  t[index] = Tensor(value) if isinstance(value, np.ndarray) else value
  expected = A.copy()
  expected[index] = value
  same(t, expected)
  assert t is before                         # the same object, holding the new graph
  same(view, A[0])                           # a view taken before does not change


def test_setitem_device_index_out_of_range_writes_nothing(device):
  t = Tensor.zeros(2, 4, dtype="int32")
  t[:, Tensor.arange(3) * 3 - 1] = 8         # [-1, 2, 5]: -1 is the last, 5 is out
  same(t, np.array([[0, 0, 8, 8], [0, 0, 8, 8]], np.int32))


def test_setitem_on_one_axis_with_host_indices_is_elementwise():
  """t[:, idx] = v with a host index: a take of v and a mask, no one-hot reduction over t."""
  t = Tensor.zeros(64, 256)
  t[:, [5, 1, 9, 3, 7, 2, 8, 0, 6, 4]] = Tensor.arange(10, dtype="float32")
  t[[0, 2, 4]] = 1.0
  kernels = kg.compile(t)
  assert len(kernels) == 1 and kernels[0].name.startswith("E_"), [k.name for k in kernels]
  expected = np.zeros((64, 256), np.float32)
  expected[:, [5, 1, 9, 3, 7, 2, 8, 0, 6, 4]] = np.arange(10)
  expected[[0, 2, 4]] = 1
  same(t, expected)


def test_setitem_through_a_computed_mask(device):
  t = source()
  t[t < 0] = 0.0                             # as numpy: where(mask, value, t), any mask
  t[(t > 10)[:, :, 0]] = Tensor([-7.0])      # a mask over the leading dims, a 1-element value
  expected = np.maximum(A, 0)
  expected[(expected > 10)[:, :, 0]] = -7.0
  same(t, expected)
  with pytest.raises(kg.UnsupportedError, match="kg.where"):
    t[t > 0] = Tensor([1.0, 2.0])            # one value per True: a data-dependent count


def test_iteration_stops_at_the_end():
  assert [row.tolist() for row in Tensor([[1, 2], [3, 4]])] == [[1, 2], [3, 4]]


def test_gather_compiles_for_wgsl_and_ptx():
  y = source()[:, Tensor([3, 0]) + 0]
  check_compiles(y)


def test_gather_fuses_into_one_kernel():
  t = Tensor.randn(8, 16, seed=1)
  assert len(kg.compile((t * 2)[Tensor([1, 7, 7]) + 0].relu())) == 1
  assert len(kg.compile(t[[1, 2, 3]].exp())) == 1       # host run: a view, no reduction
  assert t[[1, 2, 3]].dtype == dtypes.float32


def test_gather_over_a_long_axis_is_one_kernel(device):
  """A gather loads its rows: one kernel whatever the axis length (66000 > the 65536 where a
  one-hot reduction would have been split), the table's expression fused at the index."""
  x = Tensor.arange(66000, dtype="float32") * 0.5
  y = x[Tensor([65999, 5, -1, 66000]) + 0]
  assert len(kg.compile(y)) == 1
  same(y, np.float32([32999.5, 2.5, 32999.5, 0.0]))
