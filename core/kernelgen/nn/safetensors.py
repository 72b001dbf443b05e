"""kg.save / kg.load: the safetensors file format, standard library only.

A file is: an unsigned little-endian 64-bit header length N, N bytes of JSON header (padded with
spaces to a multiple of 8), then the tensor data. The header maps each name to {"dtype", "shape",
"data_offsets": [begin, end]} (offsets relative to the data section, tensors laid out in order
without gaps), plus an optional "__metadata__" of string -> string. Tensor data is row-major,
little-endian. `save` writes what the `safetensors` package writes for the same tensors (names
sorted by its dtype order, then by name, as it does), so files are byte-identical (with at
most one metadata key: the package writes several in its hash map's varying order; we keep the
order given).

kernelgen's dtypes map to safetensors' names: BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32,
U64, I64, F64. Malformed files raise SafetensorsError (a KernelgenError) saying what is wrong.

Two levels: `encode` / `decode` / `write` / `read` handle raw (dtype name, shape, bytes)
entries (export bundles' weights use them); `serialize` / `deserialize` / `save` / `load` are
the Tensor level built on them.
"""
from __future__ import annotations

import json
import os
import struct
import sys

from .. import limits
from ..device import Device
from ..dtype import dtypes
from ..errors import KernelgenError
from ..graph import lazy
from ..tensor.tensor import Tensor

NAMES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16",
         "float16": "F16", "bfloat16": "BF16", "uint32": "U32", "int32": "I32",
         "float32": "F32", "uint64": "U64", "int64": "I64", "float64": "F64"}
DTYPES = {v: k for k, v in NAMES.items()}
# the safetensors package's dtype order (its file layout sorts by it, descending, then by name)
ORDER = ["BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64",
         "U64"]
MAX_HEADER = 100_000_000


class SafetensorsError(KernelgenError, ValueError):
  """A malformed safetensors file, or a value that cannot be saved."""


def _as_tensor(name, value):
  if isinstance(value, Tensor):
    return value
  try:
    return Tensor(value, device="PYTHON")
  except KernelgenError as error:
    raise SafetensorsError(f"cannot save {name!r}: {error}") from None


def _le_bytes(t) -> bytes:
  """The tensor's bytes in little-endian order (the host order is what _bytes gives)."""
  raw = t.detach()._bytes()
  if sys.byteorder == "little" or t.dtype.itemsize == 1:
    return raw
  width = t.dtype.itemsize
  return b"".join(raw[i:i + width][::-1] for i in range(0, len(raw), width))


def encode(tensors: dict, metadata: dict | None = None) -> bytes:
  """The safetensors bytes of name -> (kernelgen dtype name, shape, little-endian raw bytes),
  laid out in the order given (the raw level that `serialize` and export bundles build on)."""
  header, chunks, offset = {}, [], 0
  if metadata is not None:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
      raise SafetensorsError("metadata must map strings to strings")
    header["__metadata__"] = dict(metadata)
  for name, (dtype, shape, raw) in tensors.items():
    if dtype not in NAMES:
      raise SafetensorsError(f"{name!r} has dtype {dtype}, which safetensors cannot store: "
                             f"cast it")
    header[name] = {"dtype": NAMES[dtype], "shape": list(shape),
                    "data_offsets": [offset, offset + len(raw)]}
    chunks.append(bytes(raw))
    offset += len(raw)
  text = json.dumps(header, separators=(",", ":")).encode()
  text += b" " * (-len(text) % 8)
  return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def serialize(tensors: dict, metadata: dict | None = None) -> bytes:
  """The safetensors bytes of name -> Tensor (or anything Tensor() takes)."""
  if not isinstance(tensors, dict):
    raise SafetensorsError(f"save needs a dict of name -> tensor, got {type(tensors).__name__}")
  items = []
  for name, value in tensors.items():
    if not isinstance(name, str) or name == "__metadata__":
      raise SafetensorsError(f"tensor names must be strings other than '__metadata__', "
                             f"got {name!r}")
    t = _as_tensor(name, value)
    if t.dtype.name not in NAMES:
      raise SafetensorsError(f"{name!r} has dtype {t.dtype}, which safetensors cannot store")
    items.append((name, t))
  items.sort(key=lambda it: (-ORDER.index(NAMES[it[1].dtype.name]), it[0]))
  return encode({name: (t.dtype.name, tuple(t.shape), _le_bytes(t)) for name, t in items},
                metadata)


def _parse_header(blob) -> tuple[dict, int]:
  if len(blob) < 8:
    raise SafetensorsError(f"not a safetensors file: {len(blob)} bytes, the 8-byte header "
                           f"length alone needs more")
  (n,) = struct.unpack("<Q", bytes(blob[:8]))
  if n > MAX_HEADER or 8 + n > len(blob):   # n itself is not quoted: it may be any file's bytes
    raise SafetensorsError(f"not a safetensors file: its first 8 bytes give a header length "
                           f"that does not fit the file of {len(blob)} bytes (or is over "
                           f"{MAX_HEADER}): the file is truncated or not safetensors")
  try:
    text = bytes(blob[8:8 + n]).decode("utf-8")
    limits.json_depth(text, "the safetensors header")
    header = json.loads(text)
  except UnicodeDecodeError as error:
    raise SafetensorsError(f"safetensors header is not UTF-8 (at byte {error.start}): the file "
                           f"is damaged or not safetensors") from None
  except ValueError as error:   # JSONDecodeError, or an int of more digits than Python converts
    where = f" at line {error.lineno} column {error.colno}" if hasattr(error, "lineno") else ""
    raise SafetensorsError(f"safetensors header is not valid JSON{where}: the file is damaged "
                           f"or not safetensors") from None
  if not isinstance(header, dict):
    raise SafetensorsError("safetensors header must be a JSON object")
  return header, 8 + n


def _shown(value) -> str:
  text = repr(value)
  return text if len(text) <= 40 else text[:37] + "..."


def _check_entry(name, entry, data_len) -> tuple[str, tuple, int, int]:
  if not isinstance(entry, dict) or set(entry) - {"dtype", "shape", "data_offsets"} or \
     len(entry) != 3:
    raise SafetensorsError(f"header entry {_shown(name)} must have exactly dtype, shape and "
                           f"data_offsets")
  dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
  name = _shown(name)
  if not isinstance(dtype, str) or dtype not in DTYPES:
    raise SafetensorsError(f"{name} has dtype {_shown(dtype)}, which kernelgen cannot load "
                           f"(supported: {', '.join(DTYPES)})")
  if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
    raise SafetensorsError(f"{name} has shape {_shown(shape)}: a list of non-negative ints")
  limits.check("dims", len(shape), f"the number of dimensions of {name}")
  if not (isinstance(offsets, list) and len(offsets) == 2 and
          all(type(o) is int for o in offsets) and 0 <= offsets[0] <= offsets[1] <= data_len):
    raise SafetensorsError(f"{name} has data_offsets {_shown(offsets)} outside the data section "
                           f"of {data_len} bytes")
  count = 1
  for s in shape:
    count = min(count * s, 1 << 64)   # past the file's size either way; keeps the int small
  if count * dtypes.from_name(DTYPES[dtype]).itemsize != offsets[1] - offsets[0]:
    raise SafetensorsError(f"{name}: shape {_shown(shape)} of {dtype} needs "
                           f"{count * dtypes.from_name(DTYPES[dtype]).itemsize} bytes, "
                           f"data_offsets give {offsets[1] - offsets[0]}")
  return DTYPES[dtype], tuple(shape), offsets[0], offsets[1]


def _from_bytes(raw: bytes, shape: tuple, dtype, device):
  """A realized Tensor holding `raw` (numpy layout, host byte order)."""
  device = Device.canonical(device) if device else Device.DEFAULT
  count = len(raw) // dtype.itemsize
  return Tensor(lazy.LazyOp.from_buffer(lazy.Buffer(device, dtype, count, raw), shape))


def decode(blob, with_metadata: bool = False):
  """name -> (kernelgen dtype name, shape, little-endian raw bytes) from safetensors bytes, in
  file order, every entry checked; `with_metadata=True` also returns the metadata (or None)."""
  header, start = _parse_header(blob)
  metadata = header.pop("__metadata__", None)
  if metadata is not None and not (isinstance(metadata, dict) and
                                   all(isinstance(v, str) for v in metadata.values())):
    raise SafetensorsError("__metadata__ must be an object of strings")
  data = memoryview(blob)[start:]
  entries = sorted(((name, _check_entry(name, e, len(data))) for name, e in header.items()),
                   key=lambda it: it[1][2:])
  end = 0
  for name, (_, _, begin, stop) in entries:
    if begin != end:
      raise SafetensorsError(f"{name!r} starts at {begin}, expected {end}: tensors must be "
                             f"laid out without gaps or overlaps")
    end = stop
  if end != len(data):
    raise SafetensorsError(f"the data section has {len(data)} bytes, the tensors cover {end}")
  out = {name: (dtype_name, shape, bytes(data[begin:stop]))
         for name, (dtype_name, shape, begin, stop) in entries}
  return (out, metadata) if with_metadata else out


def write(path: str, tensors: dict, metadata: dict | None = None) -> None:
  """Write name -> (dtype name, shape, raw bytes) to a safetensors file at `path`."""
  with open(path, "wb") as f:
    f.write(encode(tensors, metadata))


def read(path: str, with_metadata: bool = False):
  """name -> (dtype name, shape, raw bytes) from the safetensors file at `path`."""
  return decode(limits.read_file(os.fspath(path), "the safetensors file"), with_metadata)


def deserialize(blob, device: str | None = None) -> tuple[dict, dict | None]:
  """(name -> Tensor, metadata or None) from safetensors bytes."""
  raw_tensors, metadata = decode(blob, with_metadata=True)
  out = {}
  for name, (dtype_name, shape, raw) in raw_tensors.items():
    dtype = dtypes.from_name(dtype_name)
    if sys.byteorder != "little" and dtype.itemsize > 1:
      w = dtype.itemsize
      raw = b"".join(raw[i:i + w][::-1] for i in range(0, len(raw), w))
    out[name] = _from_bytes(raw, shape, dtype, device)
  return out, metadata


def save(tensors: dict, path_or_file, metadata: dict | None = None) -> None:
  """Write name -> tensor (e.g. a module's state_dict()) as safetensors to a path or a binary
  file object, computing the tensors first; `metadata` is a dict of strings stored in the
  header.

  Raises SafetensorsError for something other than a dict of string names to tensors, a dtype
  safetensors cannot store, or metadata that is not strings."""
  blob = serialize(tensors, metadata)
  if hasattr(path_or_file, "write"):
    path_or_file.write(blob)
  else:
    with open(path_or_file, "wb") as f:
      f.write(blob)


def load(source, device: str | None = None, with_metadata: bool = False):
  """name -> Tensor from a safetensors path, file object or bytes, each on `device` (default
  `kg.Device.DEFAULT`) with the file's shape and dtype; `with_metadata=True` returns
  (tensors, the metadata dict or None).

  Raises SafetensorsError for a malformed file (header, offsets, dtypes), OSError for a path
  that cannot be read."""
  if isinstance(source, (bytes, bytearray, memoryview)):
    blob = bytes(source)
  elif hasattr(source, "read"):
    blob = source.read()
  else:
    blob = limits.read_file(os.fspath(source), "the safetensors file")
  tensors, metadata = deserialize(blob, device)
  return (tensors, metadata) if with_metadata else tensors
