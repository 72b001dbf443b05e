"""ONNX tensors as bytes: element types, a TensorProto's payload (raw_data, the typed repeated
fields, or external data in a file next to the model), and reading model files under a size
limit.

Every payload comes out as little-endian bytes in numpy layout with its ONNX element type, so
the importer builds kernelgen buffers from it without going through Python lists.
"""
from __future__ import annotations

import os
import struct

from .. import limits
from ..dtype import dtypes
from ..errors import LimitError, ModelError, PathError, UnsupportedError
from . import proto

MAX_MODEL_BYTES = 1 << 30          # a model file (or bytes) this large or larger is refused
# all external data of one model together: kernelgen.limits' external_bytes

# ONNX TensorProto.DataType -> (name, kernelgen dtype or None, struct format of typed fields)
ELEM_TYPES = {
  1: ("float32", dtypes.float32), 2: ("uint8", dtypes.uint8), 3: ("int8", dtypes.int8),
  4: ("uint16", dtypes.uint16), 5: ("int16", dtypes.int16), 6: ("int32", dtypes.int32),
  7: ("int64", dtypes.int64), 8: ("string", None), 9: ("bool", dtypes.bool),
  10: ("float16", dtypes.float16), 11: ("float64", dtypes.float64),
  12: ("uint32", dtypes.uint32), 13: ("uint64", dtypes.uint64), 14: ("complex64", None),
  15: ("complex128", None), 16: ("bfloat16", dtypes.bfloat16), 17: ("float8e4m3fn", None),
  18: ("float8e4m3fnuz", None), 19: ("float8e5m2", None), 20: ("float8e5m2fnuz", None),
  21: ("uint4", None), 22: ("int4", None), 23: ("float4e2m1", None), 24: ("float8e8m0", None),
  25: ("uint2", None), 26: ("int2", None), 27: ("float6e2m3", None), 28: ("float6e3m2", None),
}
ONNX_CODE = {dt: code for code, (_, dt) in ELEM_TYPES.items() if dt is not None}
# 4-bit integers (opset 21) are held one per byte: uint4 as uint8, int4 as int8 (sign extended);
# their packed payloads (two per byte, the low nibble first) are unpacked as they are read.
NIBBLES = {21: dtypes.uint8, 22: dtypes.int8}


def elem_dtype(code: int, what: str):
  """The kernelgen dtype of ONNX element type `code`; UnsupportedError for the ones we lack."""
  name, dtype = ELEM_TYPES.get(code, (f"unknown type {code}", None))
  dtype = NIBBLES.get(code, dtype)
  if dtype is None:
    raise UnsupportedError(f"{what} has element type {name}, which kernelgen does not support: "
                           f"supported are {', '.join(sorted(d.name for d in ONNX_CODE))}",
                           dtype=name)
  return dtype


def _typed_values(t, dtype) -> bytes:
  """The payload of a tensor stored in its typed repeated field."""
  n = len(t.float_data) + len(t.int32_data) + len(t.int64_data) + len(t.double_data) + \
    len(t.uint64_data)
  if dtype == dtypes.float32:
    return struct.pack(f"<{len(t.float_data)}f", *t.float_data)
  if dtype == dtypes.float64:
    return struct.pack(f"<{len(t.double_data)}d", *t.double_data)
  if dtype == dtypes.int64:
    return struct.pack(f"<{len(t.int64_data)}q", *t.int64_data)
  if dtype in (dtypes.uint32, dtypes.uint64):
    fmt = "I" if dtype == dtypes.uint32 else "Q"
    return struct.pack(f"<{len(t.uint64_data)}{fmt}", *(v & ((1 << dtype.bits) - 1)
                                                        for v in t.uint64_data))
  if dtype in (dtypes.float16, dtypes.bfloat16):   # bit patterns in int32_data
    return struct.pack(f"<{len(t.int32_data)}H", *(v & 0xFFFF for v in t.int32_data))
  if dtype == dtypes.bool:
    return bytes(1 if v else 0 for v in t.int32_data)
  if dtype in (dtypes.int32, dtypes.int16, dtypes.int8, dtypes.uint16, dtypes.uint8):
    mask = (1 << dtype.bits) - 1
    vals = [v & mask for v in t.int32_data]
    return struct.pack(f"<{len(vals)}{dtype.fmt.upper() if dtype.kind == 'i' else dtype.fmt}",
                       *vals) if dtype.itemsize > 1 else bytes(vals)
  raise ModelError(f"tensor {t.name!r}: no payload for {dtype} ({n} values in other fields)")


def tensor_payload(t, base_dir: str | None, what: str = "",
                   budget: ExternalBudget | None = None) -> tuple:
  """(dtype, shape, little-endian bytes) of TensorProto `t`; external data read from base_dir
  (under `budget`: one per model)."""
  what = what or f"tensor {t.name!r}"
  dtype = elem_dtype(t.data_type, what)
  shape = tuple(t.dims)
  if any(d < 0 for d in shape):
    raise ModelError(f"{what} has negative dims {shape}: the model is damaged")
  count = 1
  for d in shape:
    count *= d
  if t.data_location == 1:
    raw = _external(t, base_dir, what, budget)
  elif t.has("raw_data"):
    raw = t.raw_data
  elif t.data_type in NIBBLES:        # packed bytes, one per int32_data entry
    raw = bytes(v & 0xFF for v in t.int32_data)
  else:
    raw = _typed_values(t, dtype)
  if t.data_type in NIBBLES:
    raw = _unpack_nibbles(raw, count, dtype == dtypes.int8, what)
  if len(raw) != count * dtype.itemsize:
    raise ModelError(f"{what} has shape {shape} of {dtype} ({count * dtype.itemsize} bytes) but "
                     f"{len(raw)} bytes of data: the model is damaged")
  return dtype, shape, bytes(raw)


class ExternalBudget:
  """What is left of one model's external-data limit (limits: external_bytes), spent per tensor
  before its bytes are read."""

  def __init__(self):
    self.used = 0

  def spend(self, nbytes: int, what: str) -> None:
    self.used += nbytes
    limits.check("external_bytes", self.used, f"{what}: the model's external data so far")


def _unpack_nibbles(packed: bytes, count: int, signed: bool, what: str) -> bytes:
  """`count` 4-bit values (two per byte, the low nibble first) as one byte each."""
  if len(packed) != (count + 1) // 2:
    raise ModelError(f"{what} holds {count} 4-bit values ({(count + 1) // 2} bytes) but "
                     f"{len(packed)} bytes of data: the model is damaged")
  table = bytes((b - 16) & 0xFF if signed and b >= 8 else b for b in range(16))
  low = packed.translate(bytes(table[b & 15] for b in range(256)))
  high = packed.translate(bytes(table[b >> 4] for b in range(256)))
  out = bytearray(2 * len(packed))
  out[0::2], out[1::2] = low, high
  return bytes(out[:count])


def _external(t, base_dir: str | None, what: str, budget: ExternalBudget | None) -> bytes:
  info = {e.key: e.value for e in t.external_data}
  location = info.get("location")
  if base_dir is None:
    raise ModelError(f"{what} keeps its data in the external file {location!r}: load the model "
                     f"from its path (not bytes) so the file next to it can be found")
  try:
    path = limits.confined(base_dir, location, f"{what}'s external data")
  except PathError as error:
    raise ModelError(str(error)) from None
  size = os.path.getsize(path)
  try:
    offset, length = int(info.get("offset", 0)), info.get("length")
    length = size - offset if length is None else int(length)
  except ValueError:
    raise ModelError(f"{what}: external data {location!r} has an offset or length that is not "
                     f"an int: the model is damaged") from None
  if offset < 0 or length < 0 or offset + length > size:
    raise ModelError(f"{what}: external data {location!r} has {size} bytes, the tensor asks "
                     f"for {length} at offset {offset}: the file does not match the model")
  (budget or ExternalBudget()).spend(length, what)
  with open(path, "rb") as f:
    f.seek(offset)
    return f.read(length)


def read_limited(src) -> tuple[bytes, str | None]:
  """(bytes, folder for external data) of a path, bytes or binary file, under MAX_MODEL_BYTES."""
  if isinstance(src, (bytes, bytearray, memoryview)):
    _check_size(len(src), "the model bytes")
    return bytes(src), None
  if isinstance(src, (str, os.PathLike)):
    path = os.fspath(src)
    try:
      size = limits.regular_size(path, "kg.onnx.load")
    except PathError as e:
      raise ModelError(f"cannot open model {path!r}: {e}") from None
    _check_size(size, f"model file {path!r}")
    with open(path, "rb") as f:
      return f.read(MAX_MODEL_BYTES), os.path.dirname(os.path.abspath(path))
  if hasattr(src, "read"):
    data = src.read(MAX_MODEL_BYTES + 1)
    if not isinstance(data, (bytes, bytearray)):
      raise ModelError("the file object gave text: open the model in binary mode ('rb')")
    _check_size(len(data), "the model file object")
    name = getattr(src, "name", None)
    folder = os.path.dirname(os.path.abspath(name)) if isinstance(name, str) else None
    return bytes(data), folder
  raise ModelError(f"kg.onnx.load takes a path, bytes or a binary file object, got "
                   f"{type(src).__name__}")


def _check_size(size: int, what: str) -> None:
  if size >= MAX_MODEL_BYTES:
    raise LimitError(f"{what} is {size} bytes, over the limit of {MAX_MODEL_BYTES} "
                     f"(kernelgen.onnx.data.MAX_MODEL_BYTES): keep large weights as "
                     f"external data next to the model")


def read_tensor_file(path: str):
  """(name, dtype, shape, bytes) of a TensorProto file (.pb)."""
  data, folder = read_limited(path)
  t = proto.parse_tensor(data)
  dtype, shape, raw = tensor_payload(t, folder)
  return t.name, dtype, shape, raw
