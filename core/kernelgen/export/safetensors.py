"""A small safetensors writer and reader (standard library only) for export bundles' weights.

The format: an 8-byte little-endian header length, a JSON header mapping each tensor's name to
{"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data that follows), then the
tensors' bytes, little-endian, row-major. Issue 19's `kg.save`/`kg.load`
(frontend/safetensors.py) writes the same format; this module only handles raw bytes.
"""
from __future__ import annotations

import json
import struct

from ..errors import DTypeError, KernelgenError

# kernelgen dtype name <-> safetensors dtype code
CODES = {"bool": "BOOL", "int8": "I8", "uint8": "U8", "int16": "I16", "uint16": "U16",
         "int32": "I32", "uint32": "U32", "int64": "I64", "uint64": "U64", "float16": "F16",
         "bfloat16": "BF16", "float32": "F32", "float64": "F64"}
NAMES = {code: name for name, code in CODES.items()}
ALIGN = 8   # the data section starts on an 8-byte boundary (the header is padded with spaces)


def encode(tensors: dict[str, tuple[str, tuple, bytes]]) -> bytes:
  """The file's bytes for `tensors`: name -> (kernelgen dtype name, shape, raw bytes)."""
  header, chunks, offset = {}, [], 0
  for name, (dtype, shape, raw) in tensors.items():
    if dtype not in CODES:
      raise DTypeError(f"safetensors has no dtype for {dtype}: cast the tensor {name!r}")
    header[name] = {"dtype": CODES[dtype], "shape": list(shape),
                    "data_offsets": [offset, offset + len(raw)]}
    chunks.append(bytes(raw))
    offset += len(raw)
  text = json.dumps(header, separators=(",", ":")).encode()
  text += b" " * (-(len(text) + 8) % ALIGN)
  return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def decode(data: bytes) -> dict[str, tuple[str, tuple, bytes]]:
  """name -> (kernelgen dtype name, shape, raw bytes) from a safetensors file's bytes."""
  if len(data) < 8:
    raise KernelgenError("not a safetensors file: it is shorter than its 8-byte header length")
  (size,) = struct.unpack_from("<Q", data)
  try:
    header = json.loads(data[8:8 + size])
  except ValueError as error:
    raise KernelgenError(f"not a safetensors file: its header is not JSON ({error})") from None
  body, out = memoryview(data)[8 + size:], {}
  for name, entry in header.items():
    if name == "__metadata__":
      continue
    begin, end = entry["data_offsets"]
    out[name] = (NAMES[entry["dtype"]], tuple(entry["shape"]), bytes(body[begin:end]))
  return out


def write(path: str, tensors: dict[str, tuple[str, tuple, bytes]]) -> None:
  with open(path, "wb") as f:
    f.write(encode(tensors))


def read(path: str) -> dict[str, tuple[str, tuple, bytes]]:
  with open(path, "rb") as f:
    return decode(f.read())
