"""What the Tensor's operation mixins share without importing tensor.py: `TensorOps`, the root
class of every mixin (so `isinstance(x, TensorOps)` tells a Tensor, and `type(x)` is the Tensor
class to build new tensors with), and the dtype and operand rules of binary operations.
"""
from __future__ import annotations

from ..dtype import DType, dtypes, promote_types
from ..errors import DeviceError, DTypeError
from ..graph.combine_sizes import check_broadcast
from .data import Scalar, broadcast_shape


class TensorOps:
  """The root of the Tensor's operation mixins (ops/elementwise.py, ops/linalg.py, ...): a mixin's
  methods build their results from other Tensor methods on `self`, and new tensors with
  `type(self)`."""
  __slots__ = ()


def float_of(dt: DType) -> DType:
  """The float dtype `/`, `sqrt`, `exp`... give for `dt` (int32/uint32 -> float32, see above)."""
  if dt.is_float():
    return dt
  return {1: dtypes.float16, 2: dtypes.float32, 4: dtypes.float32}.get(dt.itemsize, dtypes.float64)


def acc_dtype(dt: DType) -> DType:
  """The dtype sum/prod accumulate in and return (see the module docstring)."""
  if dt.kind == "b" or (dt.kind == "i" and dt.itemsize < 4):
    return dtypes.int32
  if dt.kind == "u" and dt.itemsize < 4:
    return dtypes.uint32
  return dt


def is_numpy_value(x) -> bool:
  """A numpy array or numpy scalar (duck-typed: numpy is never imported here)."""
  return hasattr(x, "__array_interface__") or (hasattr(x, "dtype") and hasattr(x, "item")
                                                 and not isinstance(x, TensorOps))


def array_operand(x, tensor_type, device: str):
  """An operand as a Tensor operation takes it: tensors and Python numbers as they are, numpy
  arrays and numpy scalars as tensors of their dtype on `device` (strong, as in numpy)."""
  return tensor_type(x, device=device) if is_numpy_value(x) else x


def coerce(*xs) -> list:
  """Tensors of one broadcast shape and one promoted dtype; Python scalars are weak, numpy
  arrays and scalars become tensors of their own dtype."""
  tensors = [x for x in xs if isinstance(x, TensorOps)]
  if not tensors:
    raise DTypeError("an operation needs at least one Tensor operand")
  xs = [array_operand(x, type(tensors[0]), tensors[0].device) for x in xs]
  tensors = [x for x in xs if isinstance(x, TensorOps)]
  devices = {t.device for t in tensors}
  if len(devices) > 1:
    raise DeviceError(f"operands live on different devices {sorted(devices)}: "
                      f"move them with .to(device) first")
  dtype = result_dtype(*xs)
  cls = type(tensors[0])
  check_sizes(tensors)
  shape = broadcast_shape(*(t.shape for t in tensors))
  out = []
  for x in xs:
    t = x if isinstance(x, TensorOps) else cls(cls._full_node((), x, dtype, tensors[0].device))
    out.append(t.cast(dtype).expand(shape) if shape else t.cast(dtype))
  return out


def check_sizes(tensors) -> None:
  """ShapeError naming both sizes where tensors to broadcast together hold different symbolic
  sizes on one axis (their padded shapes may still agree: graph/dims.py's check_broadcast)."""
  if any(t.node.sym is not None for t in tensors):
    check_broadcast([t.node.sym or t.shape for t in tensors])


def result_dtype(*xs) -> DType:
  strong = [x.dtype for x in xs if isinstance(x, TensorOps)]
  dtype = promote_types(*strong) if strong else dtypes.bool
  for x in xs:
    if isinstance(x, float) and not dtype.is_float():
      dtype = dtypes.float64 if dtype.itemsize == 8 else dtypes.float32
    elif isinstance(x, int) and not isinstance(x, bool) and dtype == dtypes.bool:
      dtype = dtypes.int32
    elif not isinstance(x, (TensorOps,) + Scalar):
      raise DTypeError(f"cannot use {type(x).__name__} in a tensor expression: "
                       f"use a Tensor or a Python number")
  return dtype


def public_names(cls):
  """Give the methods a mixin assigns from module functions their public names (`Tensor.exp`'s
  function is the module's `_exp` wrapped, `Tensor.sum` is `sum_`): `help()` and tracebacks then
  show `exp` and `sum`. Returns the class (a decorator)."""
  for attr, value in vars(cls).items():
    if callable(value) and hasattr(value, "__name__") and not attr.startswith("__") and \
       value.__name__ != attr and value.__name__.strip("_") == attr:
      value.__name__ = value.__qualname__ = attr
  return cls
