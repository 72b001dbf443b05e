"""The Python and numpy protocols of Tensor: what `for`, `len`, `float`, `bool`, `np.asarray`
and numpy's functions do with a tensor (a mixin `Tensor` lists among its bases).

- `for row in t` gives `t[0]`, `t[1]`, ... (views, lazy); `len(t)` is `t.shape[0]`. An index past
  the end raises `kg.IndexOutOfRangeError`, a `ShapeError` that is also an `IndexError`, so Python's
  sequence protocol stops there too.
- `float(t)`, `int(t)`, `bool(t)`, `t.item()` realize a one-element tensor and give its value; any
  other size is a `ShapeError` (`if t:` on many elements is ambiguous, as in numpy).
- `np.asarray(t)` / `np.array(t)` realize the tensor and give `t.numpy()` (same dtype; `dtype=`
  converts). The values always cross from the device, so `copy=False` is an UnsupportedError.
- numpy ufuncs on a tensor (`np.exp(t)`, `np.add(a, t)`, `ndarray + t`) give a lazy **Tensor** on
  the tensor's device where kernelgen has the operation (`UFUNCS`), with kernelgen's dtype rules
  (np.exp of int32 is float32, not float64); ndarray operands become tensors (their dtype kept).
  Any other ufunc, a ufunc method (`np.add.reduce`) or keyword (`out=`, `where=`, `dtype=`), and
  every other numpy function (`np.sum(t)`, `np.concatenate`) realize the tensors and give numpy's
  result, an **ndarray**.
"""
from __future__ import annotations

from ..errors import ShapeError, UnsupportedError
from .operands import TensorOps, array_operand

# numpy ufunc name -> the Tensor method (or operator) computing it
UFUNCS = {
  "add": "__add__", "subtract": "__sub__", "multiply": "__mul__", "true_divide": "__truediv__",
  "divide": "__truediv__", "floor_divide": "__floordiv__", "remainder": "__mod__",
  "mod": "__mod__", "power": "__pow__", "matmul": "__matmul__", "maximum": "maximum",
  "minimum": "minimum", "less": "__lt__", "greater": "__gt__", "less_equal": "__le__",
  "greater_equal": "__ge__", "equal": "__eq__", "not_equal": "__ne__", "bitwise_and": "__and__",
  "bitwise_or": "__or__", "bitwise_xor": "__xor__", "left_shift": "__lshift__",
  "right_shift": "__rshift__", "negative": "__neg__", "absolute": "abs", "sign": "sign",
  "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "sqrt": "sqrt", "sin": "sin",
  "cos": "cos", "tan": "tan", "tanh": "tanh", "floor": "floor", "ceil": "ceil", "trunc": "trunc",
  "rint": "round", "isnan": "isnan", "isinf": "isinf", "logical_not": "logical_not",
  "invert": "__invert__",
}


class PythonProtocols(TensorOps):
  """Iteration, conversion to Python numbers and numpy interoperability (module docstring)."""
  __slots__ = ()

  def __iter__(self):
    if not self.shape:
      raise TypeError("iteration over a 0-d tensor: use .item() for its value")
    return (self[i] for i in range(self.shape[0]))

  def _scalar(self, what: str):
    if self._elements() != 1:
      raise ShapeError(f"{what} needs a tensor of one element, this one has shape {self.shape} "
                       f"({self._elements()} elements): index one element first, or use .tolist()"
                       + (", or reduce it first (t.max(), t.min())" if what == "bool()" else ""))
    return self.item()

  def __float__(self) -> float:
    return float(self._scalar("float()"))

  def __int__(self) -> int:
    return int(self._scalar("int()"))

  def __bool__(self) -> bool:
    return bool(self._scalar("bool()"))

  # ---- numpy ----
  def __array__(self, dtype=None, copy=None):
    if copy is False:
      raise UnsupportedError("np.asarray(tensor, copy=False): a tensor's values live on its "
                             f"device ({self.device}), so numpy always gets a copy: leave copy "
                             "out (or pass copy=True)")
    out = self.numpy()
    return out if dtype is None else out.astype(dtype, copy=False)

  def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
    name = UFUNCS.get(ufunc.__name__)
    if name is not None and method == "__call__" and not kwargs:
      device = next(x.device for x in inputs if isinstance(x, PythonProtocols))
      args = [array_operand(x, type(self), device) for x in inputs]
      return getattr(args[0], name)(*args[1:])
    if any(isinstance(x, PythonProtocols) for x in kwargs.get("out", ())):
      return NotImplemented     # numpy cannot write into a tensor: its TypeError says so
    return getattr(ufunc, method)(*_to_numpy(inputs), **kwargs)

  def __array_function__(self, func, types, args, kwargs):
    return func(*_to_numpy(args), **{k: _to_numpy(v) for k, v in kwargs.items()})


def _to_numpy(value):
  """`value` with every tensor in it (inside lists and tuples too) realized as an ndarray."""
  if isinstance(value, PythonProtocols):
    return value.numpy()
  if isinstance(value, (list, tuple)):
    return type(value)(_to_numpy(v) for v in value)
  return value
