"""What a new user of symbolic dims (issue 34) hits, as typed errors that name the sizes as the
user wrote them and say how to fix the program: operands whose symbolic sizes differ (the two
halves of a stepped slice, (n + 1) // 2 and n // 2), a cat or flatten whose size no expression
holds, reshapes and matmuls reported with logical shapes (not padded ones), and an index tensor
on another device than the tensor it indexes. The sums of floored sizes that one expression does
hold ((n + 1) // 2 + n // 2 == n) are sizes."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

HI = 77


def rows(hi=HI, name="n"):
  return kg.Tensor.empty(kg.Dim(name, 1, hi), 4, name="x", device="PYTHON")


# ---- operands whose symbolic sizes differ ----------------------------------------------------

@pytest.mark.parametrize("hi", [HI, 64])      # padded halves 39 and 38, or both 32
@pytest.mark.parametrize("combine", [
  lambda a, b: a + b,
  lambda a, b: kg.where(a > 0, a, b),
  lambda a, b: kg.cat([a, b], 1),
])
def test_the_halves_of_a_stepped_slice_name_both_sizes(hi, combine):
  x = rows(hi)
  with pytest.raises(kg.ShapeError) as err:
    combine(x[::2], x[1::2])
  text = str(err.value)
  assert "axis 0 has (n + 1) // 2 elements in one operand and n // 2 in another" in text
  assert "they differ at n = 1: 1 and 0" in text
  assert "x[:n - 1:2] has n // 2 elements" in text and "2*h rows" in text
  assert "39" not in text and "32" not in text            # no padded size


def test_the_fix_the_message_gives_works():
  x = rows()
  assert (x[:x.symbolic_shape[0] - 1:2] + x[1::2]).symbolic_shape[0] == x[1::2].symbolic_shape[0]


def test_two_dims_name_both_and_a_binding_where_they_differ():
  x, y = rows(name="n"), rows(name="m")
  with pytest.raises(kg.ShapeError, match=r"axis 0 has n elements in one operand and m in "
                                          r"another \(they differ at n = 1, m = 2: 1 and 2\).*"
                                          r"slice one operand to the other's size"):
    x * y


def test_a_static_axis_of_the_padded_size_still_combines():
  x = rows()
  assert (x[::2] + kg.Tensor.empty(39, 4, device="PYTHON")).symbolic_shape[0] == \
    x[::2].symbolic_shape[0]


def test_a_cat_with_static_axes_that_differ_keeps_its_message():
  with pytest.raises(kg.ShapeError, match=r"cat of shapes \(77, 4\) and \(77, 3\) along axis 0"):
    kg.cat([rows(), kg.Tensor.empty(kg.Dim("n", 1, HI), 3, device="PYTHON")])


# ---- floored sizes in cat and flatten ---------------------------------------------------------

def test_sums_of_floored_sizes_that_one_expression_holds():
  n, m = kg.Dim("n", 1, HI), kg.Dim("m", 2, 9)
  assert (n + 1) // 2 + n // 2 == n and (n + 2) // 3 + (n + 1) // 3 + n // 3 == n
  assert ((n + 1) // 2 + n // 2).hi == HI
  for v in range(1, HI + 1):
    total = (n.bind(v) + 3) // 4 + (n.bind(v) + 1) // 4
    assert total.value == (v + 3) // 4 + (v + 1) // 4, v
  for bad in (lambda: (n + 1) // 2 + (n + 1) // 2, lambda: n // 2 + n // 3,
              lambda: n // 2 + m // 2):
    with pytest.raises(kg.UnsupportedError, match="sum of two floored sizes"):
      bad()


def test_cat_of_the_halves_has_the_whole_length():
  x = rows()
  n = x.symbolic_shape[0]
  assert kg.cat([x[1::2], x[::2]]).symbolic_shape == (n, 4)
  assert kg.cat([x[::2], x]).symbolic_shape == ((3 * n + 1) // 2, 4)


def test_cat_whose_total_no_size_holds_says_what_to_do():
  x = rows()
  with pytest.raises(kg.UnsupportedError, match=r"kg.cat along axis 0 of parts of sizes "
                                                r"\(n \+ 1\) // 2, \(n \+ 1\) // 2: their total "
                                                r"is no size.*kg.stack.*2\*h rows"):
    kg.cat([x[::2], x[::2]])
  assert kg.stack([x[::2], x[::2]]).symbolic_shape == (2, x[::2].symbolic_shape[0], 4)


@pytest.mark.parametrize("flat", [lambda t: t.flatten(), lambda t: t.reshape(-1, 2)])
def test_flatten_of_a_floored_axis_says_what_to_do(flat):
  with pytest.raises(kg.UnsupportedError, match=r"a reshape of \(\(n \+ 1\) // 2, 4\) \(flatten "
                                                r"included\) that merges the floored size.*"
                                                r"4 \* \(\(n \+ 1\) // 2\).*keep the axes apart"
                                                r".*2\*h rows"):
    flat(rows()[::2])


# ---- logical shapes in reshape and matmul errors ----------------------------------------------

def test_reshape_and_matmul_errors_show_logical_shapes():
  x = rows(64)
  n = x.symbolic_shape[0]
  with pytest.raises(kg.ShapeError, match=r"cannot reshape \(n, 4\) to \(n \+ 1, 4\)"):
    x.reshape(n + 1, 4)
  with pytest.raises(kg.ShapeError, match=r"cannot reshape \(n, 4\) \(padded to \(64, 4\)\) to "
                                          r"\(65, 4\)"):
    x.reshape(65, 4)
  with pytest.raises(kg.ShapeError, match=r"matmul of shapes \(n, 4\) and \(n, 4\): the inner "
                                          r"dims 4 and n must match"):
    x @ x
  y = kg.Tensor.empty(kg.Dim("m", 1, 64), 4, device="PYTHON")
  with pytest.raises(kg.ShapeError, match=r"matmul of shapes \(4, n\) and \(m, 4\): the inner "
                                          r"dims n and m must match"):
    x.T @ y


# ---- an index tensor on another device --------------------------------------------------------

A = np.arange(20, dtype=np.float32).reshape(5, 4)
IDX = np.array([[1, 0, 3, 1]], dtype=np.int32)


@pytest.mark.parametrize("where, index_on", [("PYTHON", "PTXSIM"), ("PTXSIM", "PYTHON")])
@pytest.mark.parametrize("op", [
  lambda t, i: t[i[0]],
  lambda t, i: t[i[0], i[0]],
  lambda t, i: t.take(i),
  lambda t, i: t.gather(0, i),
  lambda t, i: t.scatter(0, i, 1.0),
  lambda t, i: t.__setitem__(i[0], 2.0),
])
def test_an_index_on_another_device_is_a_device_error(where, index_on, op):
  t, i = kg.Tensor(A, device=where), kg.Tensor(IDX, device=index_on)
  with pytest.raises(kg.DeviceError, match=rf"a tensor on {where} indexed with an index tensor "
                                           rf"on {index_on}: .*index\.to\('{where}'\)"):
    op(t, i)
  np.testing.assert_array_equal(kg.Tensor(A, device=where)[i.to(where)[0]].numpy(), A[IDX[0]])
