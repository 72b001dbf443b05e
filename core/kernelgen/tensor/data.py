"""Python values into tensors and back: user data (nested lists, numpy arrays, buffers) as bytes
in numpy layout with its shape and dtype, bytes as nested lists, and the shape and axis
arguments of Tensor methods, checked (tensor.py has the semantics).
"""
from __future__ import annotations

import struct

from .. import limits
from ..dtype import DType, dtypes, from_bits, to_bits, truncate
from ..errors import DTypeError, ShapeError
from ..graph.lazy import L, Buffer, LazyOp
from ..graph.view import prod

Scalar = (bool, int, float)


# ---- user data -------------------------------------------------------------------------------

def flatten(data, shape: list) -> list:
  """Flatten nested lists, recording the shape; ragged input is a ShapeError."""
  if isinstance(data, (list, tuple)):
    shape.append(len(data))
    limits.check("dims", len(shape), "the nesting depth of the data (its dimensions)")
    if not data:
      return []
    parts = [flatten(d, shape[:]) for d in data]
    inner = [_shape_of(d) for d in data]
    if any(s != inner[0] for s in inner):
      raise ShapeError("ragged nested lists: every row must have the same length; pad the rows")
    shape.extend(inner[0])
    return [x for p in parts for x in p]
  if hasattr(data, "tolist") and not isinstance(data, Scalar):
    return flatten(data.tolist(), shape)
  return [data]


def _shape_of(d) -> list:
  out: list = []
  while isinstance(d, (list, tuple)):
    out.append(len(d))
    d = d[0] if d else None
  return out


def infer_dtype(values: list) -> DType:
  if values and all(isinstance(v, bool) for v in values):
    return dtypes.bool
  if any(isinstance(v, float) for v in values):
    return dtypes.float32
  if all(isinstance(v, (bool, int)) for v in values):
    return dtypes.int32 if values else dtypes.float32
  raise DTypeError(f"cannot make a tensor of {type(values[0]).__name__}: use numbers or bools")


def pack(values: list, dtype: DType) -> bytes:
  """Python numbers to bytes in numpy layout (little-endian)."""
  if dtype == dtypes.bfloat16:
    return struct.pack(f"<{len(values)}H", *(to_bits(v, dtype) for v in values))
  return struct.pack(f"<{len(values)}{dtype.fmt}", *(truncate(v, dtype) for v in values))


def unpack(data: bytes, dtype: DType) -> list:
  n = len(data) // dtype.itemsize
  values = struct.unpack(f"<{n}{dtype.fmt}", data[:n * dtype.itemsize])
  return [from_bits(v, dtype) for v in values] if dtype == dtypes.bfloat16 else list(values)


def nest(values: list, shape: tuple):
  if not shape:
    return values[0]
  if len(shape) == 1:
    return list(values)
  step = prod(shape[1:])
  return [nest(values[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def raw_of(data, dtype: DType | None) -> tuple[bytes, tuple, DType]:
  """(bytes in numpy layout, shape, dtype) of user data."""
  if hasattr(data, "__array_interface__") and hasattr(data, "dtype"):
    name = str(data.dtype)
    if dtype is None and name in {d.name for d in dtypes.all}:
      import numpy as np
      arr = np.ascontiguousarray(data)   # (this makes 0-d arrays 1-d: keep data's shape)
      return arr.tobytes(), tuple(data.shape), dtypes.from_name(name)
    data = data.tolist()
  if isinstance(data, (bytes, bytearray, memoryview)) and not isinstance(data, list):
    view = memoryview(data)
    fmt = view.format.lstrip("@<=")
    src = next((d for d in dtypes.all if d.fmt == fmt and d != dtypes.bfloat16), dtypes.uint8)
    values = view.cast("B").cast(fmt).tolist() if view.ndim != 1 else view.tolist()
    shape = tuple(view.shape) if view.ndim else ()
    return pack(values, dtype or src), shape, dtype or src
  shape: list = []
  values = flatten(data, shape)
  dtype = dtype or infer_dtype(values)
  return pack(values, dtype), tuple(shape), dtype


# WebGPU kernels have no 64-bit types: a cast of 64-bit host data for it is done on the host
WIDE = (dtypes.float64, dtypes.int64, dtypes.uint64)


def host_narrowed(node: LazyOp, dtype: DType) -> LazyOp | None:
  """`node` cast to `dtype` on the host, as a new host buffer, when node is 64-bit data from the
  host (not yet uploaded) on WEBGPU, where no kernel can read it (kg.Tensor(np.arange(3.0))
  .cast("float32")); None otherwise. Values convert as the CAST op does (uop/alu.py)."""
  buffer = node.buffer
  if node.op is not L.BUFFER or node.dtype not in WIDE or node.device != "WEBGPU" or \
     not buffer.host_only:
    return None
  from ..uop.alu import exec_cast
  values = [exec_cast(v, node.dtype, dtype) for v in unpack(buffer.copyout(), node.dtype)]
  narrowed = Buffer(node.device, dtype, buffer.size, pack(values, dtype))
  return LazyOp.from_buffer(narrowed, node.shape)


# ---- shape and axis arguments ----------------------------------------------------------------

def broadcast_shape(*shapes) -> tuple[int, ...]:
  ndim = max(len(s) for s in shapes)
  padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
  out = []
  for dims in zip(*padded):
    sizes = {d for d in dims if d != 1}
    if len(sizes) > 1:
      raise ShapeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast: "
                       f"each dim must match or be 1; reshape or expand one operand")
    out.append(sizes.pop() if sizes else 1)
  return tuple(out)


def resolve_axes(axis, ndim: int) -> tuple[int, ...]:
  if axis is None:
    return tuple(range(ndim))
  axes = (axis,) if isinstance(axis, int) else tuple(axis) if isinstance(axis, (tuple, list)) \
    else (axis,)
  check_ints(axes, "axis")
  out = []
  for a in axes:
    if not -max(ndim, 1) <= a < max(ndim, 1) or (ndim == 0 and a not in (0, -1)):
      raise ShapeError(f"axis {a} is out of range for a tensor with {ndim} dims: "
                       f"use an axis in {-ndim}..{ndim - 1}")
    out.append(a % max(ndim, 1))
  if len(set(out)) != len(out):
    raise ShapeError(f"axis {axis} repeats an axis: name each axis once")
  return tuple(sorted(out)) if ndim else ()


def pairs(arg, ndim: int, what: str):
  if isinstance(arg, int):
    return ((arg, arg),) * ndim
  arg = tuple(arg)
  if len(arg) == 2 and all(isinstance(a, int) for a in arg):
    return (arg,) * ndim
  if len(arg) != ndim:
    raise ShapeError(f"{what} needs one (before, after) pair per dim ({ndim}), got {len(arg)}")
  return tuple((0, 0) if a is None else tuple(a) for a in arg)


def shape_args(shape) -> tuple[int, ...]:
  if len(shape) == 1 and isinstance(shape[0], (tuple, list, range)):
    shape = tuple(shape[0])
  check_ints(shape, "a shape")
  return tuple(shape)


def check_ints(values, what: str) -> None:
  from ..graph.dims import Sym
  bad = [v for v in values if not (hasattr(v, "__index__") or isinstance(v, Sym)) or
         isinstance(v, bool)]
  if bad:
    raise ShapeError(f"{what} takes ints, got {bad[0]!r} in {tuple(values)}: use int(...)")
