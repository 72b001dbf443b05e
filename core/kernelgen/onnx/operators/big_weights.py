"""Constant weights larger than one storage-buffer binding, held as pieces that each fit one.

WebGPU binds at most maxStorageBufferBindingSize bytes of a buffer to a kernel: 128 MiB by
default, what lavapipe and SwiftShader offer (their buffers may be 2 GiB, their bindings may
not). Qwen2.5-0.5B's fp32 embedding table and LM head are 151936 x 896 floats, 544 MB each:
every kernel reading one was refused (LimitError) on WEBGPU, natively and in the page. Such a
2-D float initializer is uploaded as pieces of at most PIECE_BYTES, each its own buffer (once
per model and device, Model.uploads):

- a MatMul's weight (K, N) by column ranges, each held (N_i, K) contiguous (the layout the CPU
  adapters read a matvec fastest in, operators/weights.py), the product the pieces' products
  concatenated along N;
- a Gather's table (V, D) along axis 0 by row ranges, each index read from the piece that holds
  its row (the others masked by `where`), so the kernel binds every piece, each within the limit.

The same pieces on every device (PYTHON and PTXSIM too), so results and exported bundles do not
depend on where the model was traced. Weights at most PIECE_BYTES are untouched.
"""
from __future__ import annotations

from ...tensor.ops.advanced_indexing import take
from ...tensor.tensor import Tensor, cat, where
from .weights import matmul_rows, row_input, transposed

# bytes of a piece: WebGPU's default maxStorageBufferBindingSize, which every adapter binds
PIECE_BYTES = 1 << 27
# the uploads' key suffix (Model.uploads) of piece i of an initializer
PIECE = "#piece"


def _big(ins, i: int):
  """Input i's initializer (dtype, shape, bytes) where it is a 2-D float one over PIECE_BYTES
  read by a run on a device (not while folding constants); else None."""
  runner, name = ins.runner, ins.names[i] if i < len(ins.names) else ""
  init = runner.model.initializers.get(name) if name else None
  if runner.folding or init is None or len(init[1]) != 2 or not init[0].is_float():
    return None
  return init if len(init[2]) > PIECE_BYTES else None


def _bounds(length: int, row_bytes: int) -> list[tuple[int, int]]:
  """[(start, end)] of as few near-equal ranges of `length` rows as keep each within
  PIECE_BYTES, each a multiple of 4 rows but the last (vector loads stay whole)."""
  most = max(1, PIECE_BYTES // row_bytes)
  most = most // 4 * 4 or most
  per = -(-length // -(-length // most))
  per = min(most, -(-per // 4) * 4)
  return [(s, min(s + per, length)) for s in range(0, length, per)]


def _pieces(ins, i: int, init: tuple, by_rows: bytes) -> list[tuple[int, int, Tensor]]:
  """[(start, end, device Tensor)] of `init`'s row ranges (by_rows: its (R, C) bytes, rows
  contiguous), uploaded once per model and device."""
  runner, name = ins.runner, ins.names[i]
  dtype, (rows, cols) = init[0], init[1]
  row_bytes = cols * dtype.itemsize
  out = []
  for j, (s, e) in enumerate(_bounds(rows, row_bytes)):
    key = (runner.device, f"{name}{PIECE}{j}")
    if key not in runner.model.uploads:
      raw = by_rows[s * row_bytes:e * row_bytes]
      runner.model.uploads[key] = runner.upload((dtype, (e - s, cols), raw),
                                                f"tensor {name!r} rows {s}..{e - 1}")
    out.append((s, e, runner.model.uploads[key]))
  return out


def matmul_in_pieces(ins, product) -> Tensor | None:
  """A @ B for a MatMul whose B (input 1) is an initializer over PIECE_BYTES: the products by
  its column pieces (`product(a, b)`: the MatMul's own, nn._product), concatenated (A's normed
  row realized as for a weight held transposed, weights.row_input); None where B is not one."""
  init = _big(ins, 1)
  if init is None:
    return None
  a = row_input(ins, ins[0], matmul_rows(ins.runner))
  held = transposed(init)                # (N, K): a column range is a run of rows
  parts = []
  for _, _, t in _pieces(ins, 1, held, held[2]):
    b = t.permute(1, 0)
    if a.ndim >= 2:                       # (as MatMul's: the weight over A's batch axes)
      b = b.expand(a.shape[:-2] + b.shape)
    parts.append(product(a, b))
  return cat(parts, -1) if len(parts) > 1 else parts[0]


def gather_in_pieces(ins, idx: Tensor) -> Tensor | None:
  """Gather along axis 0 of a table (input 0) that is an initializer over PIECE_BYTES, by
  indices `idx` (negatives counted from the end), each read from its row's piece; None where
  the table is not one."""
  init = _big(ins, 0)
  if init is None:
    return None
  rows = init[1][0]
  idx = where(idx < 0, idx + rows, idx)
  out = None
  for s, e, t in _pieces(ins, 0, init, init[2]):
    local = where(idx < s, 0, where(idx >= e, e - s - 1, idx - s))
    got = take(t, local, axis=0)
    out = got if out is None else where(((idx >= s) & (idx < e)).unsqueeze(-1), got, out)
  return out


__all__ = ["PIECE_BYTES", "gather_in_pieces", "matmul_in_pieces"]
