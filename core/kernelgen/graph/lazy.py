"""The lazy tensor graph: what a Tensor holds until it is realized.

A `LazyOp` is one node of a tensor program: a realized buffer, a constant, an index ramp, an
elementwise op, a reduction, a view (movement) or a gather (a read at positions held in data).
Unlike UOps these are not interned: a node is realized in place (`node.buffer` is set) so every
tensor sharing it reuses the result.
"""
from __future__ import annotations

from enum import Enum, auto

from .. import limits
from ..dtype import DType
from ..errors import LimitError
from ..uop.ops import Ops
from .view import View, prod


class L(Enum):
  BUFFER = auto()   # realized data; arg unused, `buffer` set
  CONST = auto()    # one value broadcast to the shape; arg = Python value
  IOTA = auto()     # 0, 1, 2, ... along a 1-d shape (int32); makes arange, eye, rand
  ALU = auto()      # elementwise; arg = Ops; sources have this node's shape
  CAST = auto()     # value conversion to dtype
  BITCAST = auto()  # reinterpret the bits as dtype (same width)
  REDUCE = auto()   # arg = (Ops.ADD|MUL|MAX|MIN, axes); reduced axes keep size 1
  CONTIGUOUS = auto()  # the source's values, always realized into a buffer of their own
  VIEW = auto()     # arg = View from src[0]'s shape (laid out contiguously) to this shape
  GATHER = auto()   # src (table, index), index shaped like this node; arg = axis: out[i] =
                    # table[i with i[axis] := index[i]], an index outside 0..n-1 reads 0
  SORTNET = auto()  # steps of a sorting network on blocks of (key, index) word pairs, each
                    # block in workgroup memory: arg = (block, steps); always its own kernel
                    # (lowering/sortnet.py)
  ATTENTION = auto()  # src (q, k, v[, mask]) broadcast to this node's batch axes, arg = (scale,
                      # causal): softmax(q k^T scale + mask) v, always its own kernel, one pass
                      # over the keys per query row (lowering/attention.py)


class Buffer:
  """`size` elements of `dtype` in numpy layout on `device`; host bytes until a kernel needs it.
  Without `data` its values are unspecified until written (`Tensor.empty`: a kernel input).
  `name`: what compiled kernels call it (None: `in1`, `in2`... by slot)."""

  def __init__(self, device: str, dtype: DType, size: int, data: bytes | None = None,
               name: str | None = None):
    self.device, self.dtype, self.size, self.name = device, dtype, size, name
    self.is_input = False   # made by Tensor.empty: a program input the caller fills (kg.export)
    self._handle = None
    self._host = bytes(data) if data is not None else None

  @property
  def nbytes(self) -> int:
    return self.size * self.dtype.itemsize

  @property
  def runtime(self):
    from ..device import Device
    return Device[self.device]

  @property
  def handle(self):
    """The device buffer, allocated (and filled with the host bytes) on first use."""
    if self._handle is None:
      # kept only once filled: an upload cut short (Ctrl-C) must not leave an empty handle that
      # the next realize would read as this buffer's data
      handle = self._alloc()
      if self._host is not None and self.nbytes:
        try:
          self.runtime.copyin(handle, self._host)
        except BaseException:
          self.runtime.free(handle)
          raise
      self._handle, self._host = handle, None
    return self._handle

  def _alloc(self):
    what = f"a buffer of {self.size} x {self.dtype.name} on {self.device}"
    limits.check("buffer_bytes", self.nbytes, f"{what}: its bytes")
    try:
      return self.runtime.alloc(max(self.nbytes, 1))
    except MemoryError:
      raise LimitError(f"{what} ({self.nbytes} bytes) does not fit this machine's memory: make "
                       f"the tensor smaller or run on a larger device", limit="memory") from None

  @property
  def host_only(self) -> bool:
    """Its values are host bytes not yet uploaded (kernels have not read it)."""
    return self._handle is None and self._host is not None

  def swap_storage(self, other: Buffer) -> None:
    """Exchange contents with `other` (same device, dtype and size): kg.jit's double buffers."""
    self._handle, other._handle = other._handle, self._handle
    self._host, other._host = other._host, self._host

  def copyout(self) -> bytes:
    if self._handle is None:
      return self._host if self._host is not None else bytes(self.nbytes)
    return bytes(self.runtime.copyout(self._handle))[:self.nbytes] if self.nbytes else b""


class LazyOp:
  __slots__ = ("op", "dtype", "shape", "src", "arg", "buffer", "device", "__weakref__")

  def __init__(self, op: L, dtype: DType, shape: tuple, src: tuple = (), arg=None,
               device: str | None = None, buffer: Buffer | None = None):
    self.op, self.dtype, self.shape, self.src, self.arg = op, dtype, tuple(shape), tuple(src), arg
    self.buffer = buffer
    self.device = device if device is not None else (src[0].device if src else None)

  @property
  def size(self) -> int:
    return prod(self.shape)

  @property
  def realized(self) -> bool:
    return self.buffer is not None

  def __repr__(self) -> str:
    arg = f" {self.arg}" if self.op not in (L.VIEW,) and self.arg is not None else ""
    return f"<{self.op.name}{arg} {self.dtype} {self.shape}{' realized' if self.realized else ''}>"

  # ---- builders ----
  @staticmethod
  def from_buffer(buffer: Buffer, shape) -> LazyOp:
    return LazyOp(L.BUFFER, buffer.dtype, shape, device=buffer.device, buffer=buffer)

  def alu(self, op: Ops, dtype: DType, *others: LazyOp) -> LazyOp:
    return LazyOp(L.ALU, dtype, self.shape, (self,) + others, op)


def base_view(node: LazyOp) -> tuple[LazyOp, View]:
  """The node a movement chain starts from and the view of it, when one view can express it."""
  if node.op is L.VIEW and not node.realized:
    return node.src[0], node.arg
  return node, View.contiguous(node.shape)


def chain_view(node: LazyOp, move: str, *args) -> LazyOp:
  """Apply a movement to `node`, merging it into the existing view where possible."""
  base, view = base_view(node)
  moved = getattr(view, move)(*args)
  if moved is None:
    base, moved = node, getattr(View.contiguous(node.shape), move)(*args)
  if moved.shape == base.shape and moved.is_contiguous():
    return base
  return LazyOp(L.VIEW, node.dtype, moved.shape, (base,), moved)
