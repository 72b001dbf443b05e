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
from .combine_sizes import merge_sym
from .dims import Sym, describe_sym, move_sym
from .view import View, prod


# whether any graph has made an L.VAR node or a node with a symbolic size (realize.py walks for
# the dims' values only then: a VAR's argument, a symbolic size's run-time grid)
vars_made = False


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
  ATTENTION = auto()  # src (q, k, v[, mask][, keys]) broadcast to this node's batch axes, arg =
                      # (scale, causal[, "keys"]): softmax(q k^T scale + mask) v, always its own
                      # kernel, one pass over the keys per query row (lowering/attention.py);
                      # with "keys", the last src (an int32 scalar, a run-time value) is how
                      # many keys there are (a symbolic key length: the loop stops there)
  WRITE = auto()    # an in-place write: src (target, value, start, stop), arg = axis: the
                    # realized target's buffer with value written along axis at positions
                    # start..stop-1 (int32 scalar nodes: run-time values; or shape (B,):
                    # each row of axis 0 at its own); its kernel writes only value's
                    # elements, into the target's own buffer (lower.write_stores)
  VAR = auto()      # a symbolic dim's bound value, an int32 scalar (shape ()) that kernels take
                    # as a run-time argument; arg = (name, lo, hi); `bound` holds the value


class Buffer:
  """`size` elements of `dtype` in numpy layout on `device`; host bytes until a kernel needs it.
  Without `data` its values are unspecified until written (`Tensor.empty`: a kernel input).
  `name`: what compiled kernels call it (None: `in1`, `in2`... by slot)."""

  def __init__(self, device: str, dtype: DType, size: int, data: bytes | None = None,
               name: str | None = None):
    self.device, self.dtype, self.size, self.name = device, dtype, size, name
    self.is_input = False   # made by Tensor.empty: a program input the caller fills (kg.export)
    self.label = None       # the program's variable holding it (names_inputs): a weight's key
    self.public_name = None  # an input's name for callers where `name` could not hold it (an
                             # ONNX input 'gpu_0/data_0'): the bundle manifest's input name
    self.public_view = None  # an input read as a prefix of its buffer (a KV cache written in
                             # place): that view, whose sizes the bundle manifest gives
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


def copyout_many(buffers: list) -> list[bytes]:
  """Each buffer's bytes (Buffer.copyout), those on a device read back together: one
  runtime.copyout_many per device (WEBGPU: one submit and one map for all of them)."""
  out = [None] * len(buffers)
  by_runtime: dict = {}
  for i, buf in enumerate(buffers):
    if buf._handle is None or not buf.nbytes:
      out[i] = buf.copyout()
    else:
      by_runtime.setdefault(buf.device, []).append(i)
  for device, picked in by_runtime.items():
    runtime = buffers[picked[0]].runtime
    read = runtime.copyout_many([buffers[i]._handle for i in picked])
    for i, raw in zip(picked, read):
      out[i] = bytes(raw)[:buffers[i].nbytes]
  return out


class LazyOp:
  """One node. `shape` is physical (ints: what buffers and kernels hold); `sym` is the logical
  shape where some axis is symbolic (graph/dims.py: the axis holds sym[a].hi elements, the first
  sym[a] of them values), else None. Elementwise nodes take theirs from their sources; other ops
  are given it (`sym=`) or infer it from the movement (chain_view)."""
  __slots__ = ("op", "dtype", "shape", "src", "arg", "buffer", "device", "sym", "bound",
               "__weakref__")

  def __init__(self, op: L, dtype: DType, shape: tuple, src: tuple = (), arg=None,
               device: str | None = None, buffer: Buffer | None = None, sym: tuple | None = None,
               bound: int | None = None):
    self.op, self.dtype, self.shape, self.src, self.arg = op, dtype, tuple(shape), tuple(src), arg
    self.buffer = buffer
    self.device = device if device is not None else (src[0].device if src else None)
    # L.VAR: the value its dim is bound to in this graph; L.REDUCE over symbolic axes: ((axis,
    # int32 scalar node of its logical length), ...): the elements past it are the identity
    # (masked), so the lowering may stop its loops there (Lowerer.limit)
    self.bound = bound
    global vars_made
    if op is L.VAR:
      vars_made = True
    if sym is None and op in _ELEMENTWISE and any(s.sym is not None for s in self.src):
      sym = merge_sym(self.shape, [s.sym for s in self.src])
    elif sym is None and op is L.GATHER and any(s.sym is not None for s in self.src):
      sym = _gather_sym(self)
    elif sym is None and op in _CHECKED and any(s.sym is not None for s in self.src):
      from ..errors import UnsupportedError
      raise UnsupportedError(f"{op.name.lower()} of a tensor with a symbolic axis "
                             f"({describe_sym(self.src[0].sym)}) is not supported yet")
    self.sym = sym if sym is not None and any(isinstance(n, Sym) for n in sym) else None
    if self.sym is not None and not vars_made:
      vars_made = True

  @property
  def size(self) -> int:
    return prod(self.shape)

  @property
  def logical(self) -> tuple:
    """The logical shape (symbolic sizes as Sym; the physical shape when none is)."""
    return self.sym if self.sym is not None else self.shape

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


def chain_view(node: LazyOp, move: str, *args, sym: tuple | None = None) -> LazyOp:
  """Apply a movement to `node`, merging it into the existing view where possible. `sym`: the
  result's logical shape (graph/dims.py), else inferred from the movement."""
  if sym is None and node.sym is not None:
    sym = move_sym(node.sym, node.shape, move, args)
  want = sym if sym is not None and any(isinstance(n, Sym) for n in sym) else None
  base, view = base_view(node)
  moved = getattr(view, move)(*args)
  if moved is None:
    base, moved = node, getattr(View.contiguous(node.shape), move)(*args)
  if moved.shape == base.shape and moved.is_contiguous():
    if base.sym == want:
      return base
    moved = View.contiguous(base.shape)
  return LazyOp(L.VIEW, node.dtype, moved.shape, (base,), moved, sym=want or ())


def _gather_sym(node: LazyOp) -> tuple:
  """A gather's logical shape: the index's, and the table's on the other axes (the table's
  gathered axis is read at the index: its padding is never asked for)."""
  table, index = node.src
  axis = node.arg
  tsym = None
  if table.sym is not None and len(table.shape) == len(node.shape):
    tsym = tuple(n if a == axis else s for a, (s, n) in enumerate(zip(table.sym, node.shape)))
  return merge_sym(node.shape, [index.sym, tsym])


# ops whose logical shape is their sources' (merge_sym); ops that must be given one
_ELEMENTWISE = frozenset({L.ALU, L.CAST, L.BITCAST, L.CONTIGUOUS})
_CHECKED = frozenset({L.VIEW, L.SORTNET, L.REDUCE, L.ATTENTION, L.WRITE})
