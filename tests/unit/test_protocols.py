"""Python and numpy protocols on Tensor (tensor/protocols.py): iteration, len, conversion to
Python numbers, np.asarray, numpy ufuncs and functions. numpy is the oracle."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor

X = np.array([[1.5, -2.0, 3.0], [0.25, 4.0, -0.5]], dtype=np.float32)


def t(value=X, device="PYTHON") -> Tensor:
  return Tensor(value, device=device)


# ---- iteration and len ----

def test_iterating_gives_the_rows_like_numpy():
  rows = [row.numpy() for row in t()]
  assert len(rows) == 2
  for got, want in zip(rows, X):
    np.testing.assert_array_equal(got, want)
  assert [v.item() for v in Tensor.arange(4, device="PYTHON")] == [0, 1, 2, 3]
  assert len(t()) == 2 and len(Tensor.zeros(0, 3)) == 0 and list(Tensor.zeros(0, 3)) == []


def test_iterating_a_0d_tensor_is_a_type_error_like_numpy():
  with pytest.raises(TypeError, match="0-d"):
    iter(Tensor(1.0))
  with pytest.raises(TypeError):
    len(Tensor(1.0))


def test_an_index_past_the_end_is_an_index_error_so_the_sequence_protocol_stops():
  with pytest.raises(IndexError, match="index 2 is out of bounds for axis 0 with size 2"):
    t()[2]
  with pytest.raises(kg.IndexOutOfRangeError):
    t()[0, -4]
  with pytest.raises(kg.ShapeError):      # still a ShapeError, as before
    t()[5]

  class OnlyGetitem:                      # what Python does without __iter__: index until
    def __getitem__(self, i):             # IndexError
      return t()[i]
  assert len(list(OnlyGetitem())) == 2


def test_unpacking_and_zip_use_the_rows():
  a, b = t()
  np.testing.assert_array_equal(b.numpy(), X[1])
  assert [float(u + v) for u, v in zip(Tensor([1.0, 2.0]), Tensor([10.0, 20.0]))] == [11.0, 22.0]


# ---- Python numbers ----

@pytest.mark.parametrize("convert", [float, int, bool])
def test_python_numbers_of_one_element_match_numpy(convert):
  for value in ([[2.75]], [-3.5], 0.0, [7], [True], [0]):
    assert convert(Tensor(value, device="PTXSIM")) == convert(np.array(value).item())  # as torch
    assert type(convert(Tensor(value))) is convert


@pytest.mark.parametrize("convert", [float, int, bool])
def test_python_numbers_of_many_elements_are_a_typed_error_saying_why(convert):
  with pytest.raises(kg.ShapeError, match=rf"{convert.__name__}\(\) needs a tensor of one element, "
                                          r"this one has shape \(2, 3\)"):
    convert(t())
  with pytest.raises(kg.ShapeError, match="0 elements"):
    convert(Tensor.zeros(0))


def test_if_on_a_comparison_realizes_it():
  assert bool(t()[0, 0] > 1) and not bool(t()[0, 1] > 1)
  assert (1 if Tensor([3]) == 3 else 0) == 1


def test_item_gives_the_python_value():
  assert t()[1, 1].item() == 4.0 and Tensor([5], dtype="int16").item() == 5
  with pytest.raises(kg.ShapeError, match="item"):
    t().item()


# ---- numpy arrays ----

@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "bool", "float16", "int8"])
def test_asarray_and_array_give_numpys_dtype_and_values(dtype):
  x = (X * 3).astype(dtype)
  tensor = Tensor(x, device="PYTHON") + 0 if dtype != "bool" else Tensor(x, device="PYTHON")
  for got in (np.asarray(tensor), np.array(tensor)):
    assert isinstance(got, np.ndarray) and got.dtype == tensor.numpy().dtype == x.dtype
    np.testing.assert_array_equal(got, x if dtype == "bool" else x + 0)


def test_asarray_with_dtype_converts_and_copy_false_is_a_typed_error():
  got = np.asarray(t(), dtype=np.float64)
  assert got.dtype == np.float64
  np.testing.assert_array_equal(got, X.astype(np.float64))
  assert np.array(t(), copy=True).dtype == np.float32
  with pytest.raises(kg.UnsupportedError, match="copy=False"):
    np.asarray(t(), copy=False)


# ---- numpy ufuncs: a Tensor where kernelgen has the op ----

UNARY = ["exp", "exp2", "log", "log2", "sqrt", "sin", "cos", "tan", "tanh", "floor", "ceil",
         "trunc", "rint", "negative", "absolute", "sign", "isnan", "isinf"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_ufuncs_give_a_lazy_tensor_with_numpys_values(name):
  x = np.abs(X) + 0.5 if name in ("log", "log2", "sqrt") else X
  got = getattr(np, name)(Tensor(x, device="PTXSIM"))
  assert isinstance(got, Tensor) and got.device == "PTXSIM"
  want = getattr(np, name)(x)
  assert got.dtype.name == want.dtype.name
  np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=1e-6)


BINARY = ["add", "subtract", "multiply", "true_divide", "floor_divide", "remainder", "power",
          "maximum", "minimum", "less", "greater", "less_equal", "greater_equal", "equal",
          "not_equal"]


@pytest.mark.parametrize("name", BINARY)
def test_binary_ufuncs_with_tensors_arrays_and_scalars(name):
  y = np.array([[2.0, 0.5, -1.5], [3.0, 2.0, 0.5]], dtype=np.float32)
  ufunc = getattr(np, name)
  base = np.abs(X) if name == "power" else X
  for a, b, want in ((t(base), t(y), ufunc(base, y)), (base, t(y), ufunc(base, y)),
                     (t(base), y, ufunc(base, y)), (t(base), 2.0, ufunc(base, np.float32(2.0)))):
    got = ufunc(a, b)
    assert isinstance(got, Tensor), (name, type(a), type(b))
    assert got.dtype.name == want.dtype.name
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-6)


def test_integer_and_bitwise_ufuncs():
  a = np.array([5, -7, 12], dtype=np.int32)
  b = np.array([3, 2, -5], dtype=np.int32)
  for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "floor_divide", "remainder"):
    got = getattr(np, name)(Tensor(a), Tensor(b))
    np.testing.assert_array_equal(got.numpy(), getattr(np, name)(a, b), err_msg=name)
  np.testing.assert_array_equal(np.invert(Tensor(a)).numpy(), np.invert(a))
  np.testing.assert_array_equal(np.left_shift(Tensor(a), 2).numpy(), np.left_shift(a, 2))
  np.testing.assert_array_equal(np.logical_not(Tensor(a > 0)).numpy(), np.logical_not(a > 0))


def test_array_plus_tensor_stays_a_tensor_both_ways():
  for got in (X + t(), t() + 1.0, X * t(), np.float32(2) * t(), X @ t().T):
    assert isinstance(got, Tensor)
  np.testing.assert_allclose((X @ t().T).numpy(), X @ X.T, rtol=1e-6)
  np.testing.assert_array_equal((X - t()).numpy(), np.zeros_like(X))
  np.testing.assert_array_equal(np.matmul(t(), X.T).numpy(), X @ X.T)


def test_ufunc_dtype_follows_kernelgen_int_to_float32():
  # documented difference: kernelgen's float of int32 is float32 (numpy: float64)
  got = np.exp(Tensor([0, 1, 2]))
  assert got.dtype == kg.dtypes.float32
  np.testing.assert_allclose(got.numpy(), np.exp([0, 1, 2]), rtol=1e-6)


# ---- everything else: numpy's ndarray ----

def test_other_ufuncs_methods_and_keywords_give_numpys_ndarray():
  for got, want in ((np.arctan(t()), np.arctan(X)), (np.add.reduce(t()), np.add.reduce(X)),
                    (np.multiply.outer(t()[0], t()[1]), np.multiply.outer(X[0], X[1])),
                    (np.exp(t(), dtype=np.float64), np.exp(X, dtype=np.float64)),
                    (np.hypot(t(), X), np.hypot(X, X))):
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)
  out = np.empty_like(X)
  assert np.exp(t(), out=out) is out
  np.testing.assert_allclose(out, np.exp(X), rtol=1e-6)


def test_ufunc_cannot_write_into_a_tensor():
  with pytest.raises(TypeError):
    np.exp(X, out=t())


def test_numpy_functions_realize_and_give_ndarrays():
  assert np.sum(t()) == pytest.approx(X.sum())
  np.testing.assert_allclose(np.mean(t(), axis=0), X.mean(axis=0))
  np.testing.assert_array_equal(np.concatenate([t(), X]), np.concatenate([X, X]))
  np.testing.assert_array_equal(np.where(t() > 0, t(), 0), np.where(X > 0, X, 0))
  assert isinstance(np.transpose(t()), np.ndarray)
  np.testing.assert_allclose(np.linalg.norm(t()), np.linalg.norm(X), rtol=1e-6)


# ---- numpy values as operands (Tensor on the left, in kg.where) ------------------------------

def test_tensor_op_ndarray_and_numpy_scalar_give_tensors_with_numpy_promotion():
  t = kg.Tensor([1.0, 2.0], device="PYTHON")
  a = np.array([0.5, 0.25], dtype=np.float32)
  got = t + a
  assert isinstance(got, kg.Tensor) and got.dtype == kg.dtypes.float32
  np.testing.assert_array_equal(got.numpy(), np.array([1.5, 2.25], dtype=np.float32))
  np.testing.assert_array_equal((t * np.float32(3)).numpy(), np.array([3, 6], dtype=np.float32))
  assert (t + np.float64(1)).dtype == kg.dtypes.float64      # numpy scalars are strong (numpy 2)
  cond = kg.Tensor([True, False], device="PYTHON")
  np.testing.assert_array_equal(kg.where(cond, a, t).numpy(), np.array([0.5, 2.0], np.float32))
