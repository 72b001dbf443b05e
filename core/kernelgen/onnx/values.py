"""Values known on the host while a model is loaded and run: `Static` (a folded constant, 64-bit
kept), and the conversions of raw initializer bytes into device Tensors (int64 narrowed to int32
with a range check, float64 to float32 when the model is loaded with float64="float32")."""
from __future__ import annotations

import math
import struct

from ..dtype import dtypes, truncate
from ..errors import ShapeError
from ..graph import lazy
from ..graph.lazy import LazyOp
from ..tensor.tensor import Tensor
from ..tensor.data import unpack

FOLD_MAX = 4096            # static values up to this many elements are folded on the host
HOST_COPY_MAX = 1 << 16    # feeds up to this many elements keep a host copy (shape inputs)
NARROW = {dtypes.int64: dtypes.int32, dtypes.uint64: dtypes.uint32}


class _None:
  """The value of an empty optional (None means 'no output' to the evaluator)."""
  __slots__ = ()

  def __repr__(self) -> str:
    return "NONE"


NONE = _None()


class Static:
  """A value known on the host: dtype (64-bit kept), shape, flat list of Python numbers."""
  __slots__ = ("dtype", "shape", "values")

  def __init__(self, dtype, shape, values):
    self.dtype, self.shape, self.values = dtype, tuple(shape), list(values)

  @staticmethod
  def from_bytes(dtype, shape, raw: bytes) -> Static:
    return Static(dtype, shape, unpack(raw, dtype))

  @property
  def size(self) -> int:
    return math.prod(self.shape)


def tensor_from_bytes(raw: bytes, shape, dtype, device: str) -> Tensor:
  """A device Tensor holding little-endian `raw` (no Python lists on the way)."""
  buffer = lazy.Buffer(device, dtype, math.prod(shape), raw)
  return Tensor(LazyOp.from_buffer(buffer, tuple(shape)))


def narrow_bytes(raw: bytes, dtype, shape, what: str, float64: str | None):
  """(bytes, dtype) of data narrowed for the device: int64 -> int32 checked, float64 when asked."""
  target = NARROW.get(dtype)
  if target is None and dtype == dtypes.float64 and float64 == "float32":
    target = dtypes.float32
  if target is None:
    return raw, dtype
  n = len(raw) // 8
  values = struct.unpack(f"<{n}{dtype.fmt}", raw)
  if target.is_int():
    lo, hi = (-(1 << 31), (1 << 31) - 1) if target == dtypes.int32 else (0, (1 << 32) - 1)
    bad = next((v for v in values if not lo <= v <= hi), None)
    if bad is not None:
      raise ShapeError(f"{what} holds {bad}, which does not fit {target} (kernelgen computes "
                       f"int64 data in 32 bits, as WGSL must): keep the values in "
                       f"{lo}..{hi}")
  else:       # float64 -> float32: out of range becomes +-inf, as a cast does
    values = [truncate(v, target) for v in values]
  return struct.pack(f"<{n}{target.fmt}", *values), target
