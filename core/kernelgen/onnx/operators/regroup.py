"""MatMulNBits' per-block scales and 4-bit zero points regrouped on the host.

quant_nbits.row_grouped and grouped_nibbles hold a q4 matvec's per-block values grouped by a
thread's rows (N // rows, blocks, rows...). Built as a kernel, that copy runs where the model
runs; an export traces on the PYTHON device, whose reference interpreter took ~18 s for the
SmolLM2 LM head's 884,736 scales (a 2-layer q4 bundle's export 13 -> 23 s). Where the values are
an initializer (little-endian bytes in the model), `host_stored` reorders those bytes in
CPython instead (a slice assignment per row; a loop over the zero points' nibbles) and uploads
the result: the same bytes, no kernel.
"""
from __future__ import annotations

import struct
from array import array

from ...dtype import dtypes
from ..values import tensor_from_bytes


def host_stored(ins, i: int, dims: tuple, nibbles: bool = False):
  """Input i of MatMulNBits (scales, or with `nibbles` 4-bit packed zero points) as the stored
  copy row_grouped (float32 (N // rows, blocks, rows)) or grouped_nibbles (uint32 (N // rows,
  blocks, rows // 8)) realizes, built from the initializer's bytes on the runner's device; None
  where it is no initializer of the expected dtype and size (the kernel builds it then)."""
  n, blocks, rows = dims
  entry = ins.runner.model.initializers.get(ins.names[i])
  if not isinstance(entry, tuple) or len(entry) != 3 or rows < 2 or n % rows:
    return None
  dtype, _, raw = entry
  if nibbles:
    words = _nibble_words(raw, dtype, dims)
    return None if words is None else \
      tensor_from_bytes(words, (n // rows, blocks, rows // 8), dtypes.uint32, ins.runner.device)
  values = _floats(raw, dtype)
  if values is None or len(values) != n * blocks:
    return None
  out = array("f", bytes(4 * n * blocks))
  for r in range(n):
    group, lane = divmod(r, rows)
    start = group * blocks * rows + lane
    out[start:start + blocks * rows:rows] = values[r * blocks:(r + 1) * blocks]
  return tensor_from_bytes(_little(out), (n // rows, blocks, rows), dtypes.float32,
                           ins.runner.device)


def _floats(raw: bytes, dtype):
  """float32 or float16 little-endian bytes as an array('f'); None for other dtypes."""
  if dtype == dtypes.float32 and len(raw) % 4 == 0:
    values = array("f")
    values.frombytes(raw)
    if array("H", [1]).tobytes()[0] != 1:
      values.byteswap()
    return values
  if dtype == dtypes.float16 and len(raw) % 2 == 0:
    return array("f", struct.unpack(f"<{len(raw) // 2}e", raw))
  return None


def _nibble_words(raw: bytes, dtype, dims: tuple) -> bytes | None:
  """uint8 rows of 4-bit zero points (block b in byte b // 2, the low nibble first) as words of
  8 rows' nibbles (the first row lowest), ordered (N // rows, blocks, rows // 8)."""
  n, blocks, rows = dims
  if dtype != dtypes.uint8 or rows % 8 or len(raw) % n:
    return None
  width, per = len(raw) // n, rows // 8
  if 2 * width < blocks:
    return None
  words = array("I", bytes(4 * (n // rows) * blocks * per))
  for r in range(n):
    group, lane = divmod(r, rows)
    base, shift = group * blocks * per + lane // 8, 4 * (lane % 8)
    row = raw[r * width:(r + 1) * width]
    for b in range(blocks):
      words[base + b * per] |= ((row[b >> 1] >> (4 * (b & 1))) & 15) << shift
  return _little(words)


def _little(values: array) -> bytes:
  """An array's bytes, little-endian."""
  if array("H", [1]).tobytes()[0] != 1:
    values = array(values.typecode, values)
    values.byteswap()
  return values.tobytes()
