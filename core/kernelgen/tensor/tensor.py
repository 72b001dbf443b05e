"""Tensor: the numpy-like front end. Every operation builds a lazy graph (lazy.py); nothing runs
until the data is asked for (`tolist`, `data`, `numpy`, `realize`) or the graph is compiled.

Semantics follow numpy (broadcasting, dtype promotion, floor `//` and `%`), with these
deliberate differences, because WGSL has no 64-bit types:
- Python ints and lists of ints become int32, Python floats float32 (64-bit dtypes only when asked
  for, or when a numpy array of that dtype is passed). Python scalars in expressions are "weak"
  (they take the tensor's dtype), as in numpy 2.
- `/`, `sqrt`, `exp`, `mean`... of int32/uint32 give float32 (numpy: float64).
- `sum`/`prod` of bool and ints narrower than 32 bits accumulate in int32 (uint32 for unsigned);
  int32 stays int32 (numpy: int64). float16/bfloat16 reductions accumulate in float32.
- `argmax`/`argmin` give int32 (numpy: int64). `gelu` is the tanh approximation.
- `.data()` of float16 gives the raw 16-bit patterns (format 'H'): the standard library's
  memoryview cannot hold half floats. bfloat16 likewise.
- `avg_pool2d` counts padded zeros (count_include_pad).

Python and numpy protocols (tensor/protocols.py): `for row in t`, `len(t)`, `float/int/bool(t)`
and `t.item()` of one element, `np.asarray(t)` (the ndarray of `.numpy()`). numpy ufuncs on a
tensor (`np.exp(t)`, `ndarray + t`, `t + ndarray`) give a lazy Tensor where kernelgen has the op, with
kernelgen's dtype rules; other ufuncs, ufunc methods or keywords (`out=`) and other numpy
functions (`np.sum(t)`) give numpy's ndarray. `Tensor.empty` is an unfilled input buffer.

One concept, the Tensor class with its creation, movement and cast methods; it runs past 500
lines because every public method carries its user documentation (the API reference page).
"""
from __future__ import annotations

import math

from .. import limits
from ..graph import lazy
from ..dtype import DType, dtypes, promote_types, truncate
from ..errors import DeviceError, DTypeError, ShapeError
from ..graph.lazy import L, LazyOp, chain_view
from ..uop.ops import Ops
from .data import (Scalar, check_ints, host_narrowed, infer_dtype, nest, pairs,  # noqa: F401
                          raw_of, resolve_axes, shape_args, broadcast_shape, pack, unpack)
from ..graph.view import View, prod
from ..graph.dims import Sym
from .operands import TensorOps, acc_dtype, coerce, float_of, result_dtype  # noqa: F401
from .combine import cat, pad_widths, stack, where  # noqa: F401
from .ops.elementwise import ArithmeticOps, MathOps
from .ops.special import SpecialOps
from .ops.activations import ActivationOps
from .ops.reduce import ReduceOps
from .ops.linalg import LinalgOps
from .ops.conv import ConvOps
from .ops.pooling import PoolOps
from .ops.norms import NormOps
from .ops.scan import ScanMixin
from .ops.sort import SortMixin
from .ops.advanced_indexing import IndexingOps
from .ops.scatter import ScatterOps
from .ops.shape import ShapeOps
from .ops.interpolate import InterpolateOps
from .ops.dropout import DropoutOps
from .ops.losses import LossOps
from .ops.attention import AttentionOps
from .protocols import PythonProtocols
from .autograd import AutogradMixin, record


# ---- helpers ---------------------------------------------------------------------------------

def _default_device() -> str:
  from ..device import Device
  return Device.DEFAULT


# ---- the Tensor ------------------------------------------------------------------------------

def _finite(*values) -> bool:
  try:
    return all(math.isfinite(v) for v in values)
  except TypeError:
    return False


class Tensor(ArithmeticOps, MathOps, SpecialOps, ActivationOps, ReduceOps, LinalgOps, ConvOps,
             PoolOps, NormOps, ScanMixin, SortMixin, IndexingOps, ScatterOps, ShapeOps,
             InterpolateOps, DropoutOps, AttentionOps, LossOps, PythonProtocols, AutogradMixin):
  """A lazily evaluated n-dimensional array on a device. Its operations come from the mixins it
  lists, one operation family per module of tensor/ops/ (elementwise: operators and math;
  reduce; linalg: matmul; conv; pooling; norms; scan; sort; indexing; shape; interpolate;
  scatter; dropout; attention; losses ...); protocols: Python's and numpy's; autograd: backward,
  grad).

  `Tensor(data, dtype=None, device=None, requires_grad=False)`: data is a Python number, a nested
  list of numbers, a numpy array, a buffer-protocol object or another Tensor (copied, without its
  gradient history). dtype: a DType or its name; when None, Python ints become int32, floats
  float32 and bools bool, a numpy array keeps its dtype. device: a device name or `kg.Device`
  value (default `kg.Device.DEFAULT`). Nothing is computed until the values are asked for.

  Raises DTypeError for an unknown dtype or data of no supported type, ShapeError for ragged
  lists, DeviceError for an unknown device.

  Attributes besides the properties: `requires_grad` (bool: `backward()` computes this tensor's
  gradient), `grad` (the accumulated gradient, a Tensor of the same shape, or None), `node`
  (the lazy graph node that computes it) and `ctx` (autograd's record of how it was computed)."""
  __slots__ = ("node", "requires_grad", "grad", "ctx", "__weakref__")
  __array_priority__ = 1000   # numpy defers to our operators: np_array + tensor -> Tensor

  def __init__(self, data, dtype=None, device: str | None = None, requires_grad: bool = False):
    self.requires_grad, self.grad, self.ctx = False, None, None   # autograd (tensor/autograd)
    dtype = dtypes.from_name(dtype) if dtype is not None else None
    if isinstance(data, LazyOp):
      self.node = data
    elif isinstance(data, Tensor):   # a copy without gradient history, as torch.tensor(t)
      self.node = (data.cast(dtype) if dtype else data).to(device or data.device).node
    else:
      from ..device import Device
      device = Device.canonical(device) if device is not None else _default_device()
      raw, shape, dtype = raw_of(data, dtype)
      buffer = lazy.Buffer(device, dtype, prod(shape), raw)
      self.node = LazyOp.from_buffer(buffer, shape)
    if requires_grad:
      self.requires_grad_()

  # ---- basic properties ----
  @property
  def shape(self) -> tuple[int, ...]:
    """The size of each dimension, a tuple of ints (`()` for a 0-d tensor)."""
    return self.node.shape

  @property
  def symbolic_shape(self) -> tuple:
    """The shape with its symbolic sizes (kg.Dim expressions) where it has any; `shape` is the
    physical one (a symbolic size s counts s.hi elements, graph/dims.py)."""
    return self.node.logical

  def symbolic(self, *shape) -> Tensor:
    """These values as a tensor of logical shape `shape`, whose symbolic sizes are bound to this
    tensor's sizes: `Tensor(rows).symbolic(n.bind(len(rows)), 64)`. Host data is padded to
    each size's largest value on the host (no kernel); a computed tensor with a pad."""
    from . import symbolic
    return symbolic.symbolic(self, shape_args(shape))

  @property
  def dtype(self) -> DType:
    """The element type, a `DType` (`kg.dtypes.float32`, ...)."""
    return self.node.dtype

  @property
  def device(self) -> str:
    """The canonical name of the device that holds the tensor ("WEBGPU", "PTXSIM", "PYTHON", ...).
    """
    return self.node.device

  @property
  def ndim(self) -> int:
    """The number of dimensions, `len(self.shape)`."""
    return len(self.shape)

  def numel(self):
    """The number of elements, the product of the shape (1 for a 0-d tensor), an int. Also the
    property `size`. With a symbolic size (kg.Dim) the count is one too: a size expression of
    the dims (64 * n for a tensor of (n, 64)) that stands wherever a size does
    (`x.reshape(x.numel())`), its `.value` the count under the bound values and its `.hi` the
    elements the padded buffer holds (`shape` is that padded shape). UnsupportedError where
    several axes are symbolic: their product is no size expression (use `symbolic_shape`)."""
    if self.node.sym is None:
      return prod(self.shape)
    from .symbolic import numel
    return numel(self)

  size = property(numel)

  def _elements(self) -> int:
    """The elements of the (padded) buffer, an int: numel() of a static tensor; what the
    library's own shape checks count."""
    return prod(self.shape)

  def __len__(self) -> int:
    if not self.shape:
      raise TypeError("len() of a 0-d tensor")
    return self.shape[0]

  def __repr__(self) -> str:
    return f"<Tensor {self.shape} {self.dtype} on {self.device}>"

  # ---- realizing and reading ----
  def realize(self) -> Tensor:
    """Compute the tensor into a buffer on its device; data given by the host (Tensor(array))
    is uploaded now rather than at its first use (as a peer's realize does before a timed loop)."""
    from ..realize import realize
    realize([self.node])
    if self.node.buffer is not None:
      self.node.buffer.handle
    return self

  def _bytes(self, raw: bytes | None = None) -> bytes:
    """The values as bytes in numpy layout, of the logical shape (_host_shape); `raw`: the
    buffer's bytes when they were read already (numpy_of)."""
    if raw is None:
      from ..realize import read_bytes
      raw = read_bytes(self.node)
    if self.node.sym is None:
      return raw
    from .symbolic import compact
    return compact(raw, self.shape, self._host_shape(), self.dtype.itemsize)

  def _host_shape(self) -> tuple:
    """The shape of the values read back: symbolic sizes at their bound values."""
    if self.node.sym is None:
      return self.shape
    from .symbolic import concrete_shape
    return concrete_shape(self)

  def tolist(self):
    """The values as nested Python lists (a plain number for a 0-d tensor), computing the tensor
    first. bool gives bools, integer dtypes ints and float dtypes floats."""
    return nest(unpack(self._bytes(), self.dtype), self._host_shape())

  def item(self):
    """The value of a one-element tensor as a Python number (or bool), computing it first.

    Raises ShapeError when the tensor has more or fewer than one element."""
    if self._elements() != 1:
      raise ShapeError(f"item() needs a tensor of one element, this one has shape {self.shape}")
    return unpack(self._bytes(), self.dtype)[0]

  def data(self) -> memoryview:
    """The values as a memoryview in the tensor's shape (flat when it has no elements), computing
    the tensor first. float16 and bfloat16 give their raw 16-bit patterns (format 'H'): a
    memoryview cannot hold half floats."""
    fmt = "H" if self.dtype.fmt == "e" else self.dtype.fmt
    view = memoryview(self._bytes())
    shape = self._host_shape()
    return view.cast(fmt, shape) if prod(shape) else view.cast(fmt)

  def numpy(self):
    """The values as a new numpy ndarray of the tensor's shape and dtype (bfloat16 becomes float32),
    computing the tensor first.

    Raises DeviceError when numpy is not installed (use `tolist` or `data` then)."""
    return self._array(None)

  def _array(self, raw: bytes | None):
    """numpy(), from the buffer's bytes `raw` when they were read already."""
    try:
      import numpy as np
    except ImportError:
      raise DeviceError("Tensor.numpy() needs numpy, which is not installed here: "
                        "use .tolist() or .data() instead") from None
    raw, shape = self._bytes(raw), self._host_shape()
    if self.dtype == dtypes.bfloat16:
      return np.array(unpack(raw, self.dtype), dtype=np.float32).reshape(shape)
    return np.frombuffer(raw, dtype=np.dtype(self.dtype.name)).reshape(shape).copy()

  def to(self, device: str) -> Tensor:
    """The tensor on `device` (a name such as "WEBGPU" or "PTXSIM", or a `kg.Device` value): the
    same tensor when it is there already, otherwise a copy of its values (gradients flow through
    the copy).

    Raises DeviceError for an unknown or unavailable device."""
    from ..device import Device
    device = Device.canonical(device)
    if device == self.device:
      return self
    buffer = lazy.Buffer(device, self.dtype, self._elements(), self._bytes())
    return record(Tensor(LazyOp.from_buffer(buffer, self.shape)), (self,), "to")

  def contiguous(self) -> Tensor:
    """The same values, realized into their own buffer (a kernel boundary) when computed."""
    return record(Tensor(LazyOp(L.CONTIGUOUS, self.dtype, self.shape, (self.node,))), (self,),
                  "contiguous")

  # ---- creation ----
  @staticmethod
  def _full_node(shape, value, dtype: DType, device) -> LazyOp:
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
      raise ShapeError(f"negative dimension in shape {shape}: sizes must be >= 0")
    from ..device import Device
    device = Device.canonical(device) if device else _default_device()
    node = LazyOp(L.CONST, dtype, (), arg=truncate(value, dtype), device=device)
    node = chain_view(node, "reshape", (1,) * len(shape))
    return chain_view(node, "expand", shape)

  @staticmethod
  def full(shape, value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of `shape` (an int or a tuple) with every element `value`. dtype: inferred from
    `value` when None (int32 for a Python int, float32 for a float, bool for a bool); device: the
    default device when None. A constant: no buffer is stored.

    Raises ShapeError for a negative size."""
    shape = (shape,) if isinstance(shape, (int, Sym)) else tuple(shape)
    dtype = dtypes.from_name(dtype) if dtype else infer_dtype([value])
    if any(isinstance(s, Sym) for s in shape):
      from . import symbolic
      return symbolic.full(Tensor, shape, value, dtype, device).requires_grad_(requires_grad)
    return Tensor(Tensor._full_node(shape, value, dtype, device)).requires_grad_(requires_grad)

  @staticmethod
  def zeros(*shape, dtype=dtypes.float32, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of `shape` (ints, or one tuple) filled with 0, float32 unless `dtype` says
    otherwise.

    Raises ShapeError for a negative size."""
    return Tensor.full(shape_args(shape), 0, dtype, device, requires_grad)

  @staticmethod
  def ones(*shape, dtype=dtypes.float32, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of `shape` (ints, or one tuple) filled with 1, float32 unless `dtype` says
    otherwise.

    Raises ShapeError for a negative size."""
    return Tensor.full(shape_args(shape), 1, dtype, device, requires_grad)

  @staticmethod
  def empty(*shape, dtype=dtypes.float32, device=None, name=None,
            requires_grad: bool = False) -> Tensor:
    """An input: a buffer whose values are unspecified until written (numpy's `empty`; reading
    them is allowed and gives whatever the device holds). Compiled kernels bind it as a buffer,
    called `name` when given (rules: tensor/names.py)."""
    from ..device import Device
    from .names import check_name
    shape, name = shape_args(shape), check_name(name)
    if any(isinstance(s, Sym) for s in shape):
      from . import symbolic
      return symbolic.empty(Tensor, shape, dtypes.from_name(dtype), device, name, requires_grad)
    if any(s < 0 for s in shape):
      raise ShapeError(f"negative dimension in shape {shape}: sizes must be >= 0")
    device = Device.canonical(device) if device else _default_device()
    buffer = lazy.Buffer(device, dtypes.from_name(dtype), prod(shape), None, name)
    buffer.is_input = True
    return Tensor(LazyOp.from_buffer(buffer, shape)).requires_grad_(requires_grad)

  @staticmethod
  def arange(start, stop=None, step=1, dtype=None, device=None,
             requires_grad: bool = False) -> Tensor:
    """The 1-d tensor start, start + step, ... up to but not including `stop` (numpy.arange;
    `arange(n)` counts 0..n-1). dtype: inferred from start, stop and step when None (int32 for
    ints, float32 when any is a float).

    Raises ShapeError when `step` is 0."""
    if stop is None:
      start, stop = 0, start
    if isinstance(start, Sym) or isinstance(stop, Sym):
      from . import symbolic
      if not (isinstance(stop, Sym) and start == 0 and step == 1):
        raise ShapeError(f"arange with a symbolic size takes arange(n), got start={start} "
                         f"stop={stop} step={step}: add the start or scale the result")
      out = symbolic.arange(Tensor, stop, device)
      return (out.cast(dtype) if dtype else out).requires_grad_(requires_grad)
    dtype = dtypes.from_name(dtype) if dtype else infer_dtype([start, stop, step])
    if step == 0:
      raise ShapeError("arange step must not be 0: use a positive or negative step")
    if not _finite(start, stop, step):
      raise ShapeError(f"arange({start!r}, {stop!r}, {step!r}): start, stop and step must be "
                       f"finite numbers")
    n = limits.check("elements", max(0, math.ceil((stop - start) / step)), "arange's length")
    from ..device import Device
    device = Device.canonical(device) if device else _default_device()
    ramp = Tensor(LazyOp(L.IOTA, dtypes.int32, (n,), device=device))
    return (ramp.cast(dtype) * step + start).cast(dtype).requires_grad_(requires_grad)

  @staticmethod
  def eye(n: int, m: int | None = None, dtype=dtypes.float32, device=None,
          requires_grad: bool = False) -> Tensor:
    """The (n, m) identity matrix (m defaults to n): 1 on the diagonal, 0 elsewhere; float32 unless
    `dtype` says otherwise."""
    m = n if m is None else m
    if not all(hasattr(v, "__index__") and not isinstance(v, bool) and v >= 0 for v in (n, m)):
      raise ShapeError(f"eye({n!r}, {m!r}): the sizes must be non-negative ints")
    rows = Tensor.arange(n, device=device).reshape(n, 1)
    eye = (rows == Tensor.arange(m, device=device).reshape(1, m)).cast(dtype)
    return eye.requires_grad_(requires_grad)

  @staticmethod
  def rand(*shape, seed=0, dtype=dtypes.float32, device=None,
           requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) from a counter-based hash of (seed, element index): deterministic. seed:
    an int, or a one-element integer Tensor (a seed on the device: no new kernel per seed).
    A tensor of `shape` (ints, or one tuple) in `dtype` (float32 by default).

    Raises ShapeError for a negative size."""
    shape = shape_args(shape)
    if any(s < 0 for s in shape):
      raise ShapeError(f"negative dimension in shape {shape}: sizes must be >= 0")
    bits = hash_u32(Tensor.arange(prod(shape), device=device), seed)
    unit = (bits >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))
    return unit.reshape(shape).cast(dtype).requires_grad_(requires_grad)

  @staticmethod
  def randn(*shape, seed=0, dtype=dtypes.float32, device=None,
            requires_grad: bool = False) -> Tensor:
    """Standard normal values (Box-Muller over two hashed streams); deterministic in `seed`. A
    tensor of `shape` (ints, or one tuple) in `dtype` (float32 by default).

    Raises ShapeError for a negative size."""
    shape = shape_args(shape)
    u1 = 1.0 - Tensor.rand(*shape, seed=seed * 2 + 1, device=device)
    u2 = Tensor.rand(*shape, seed=seed * 2 + 2, device=device)
    normal = ((-2.0 * u1.log()).sqrt() * (u2 * (2 * math.pi)).cos()).cast(dtype)
    return normal.requires_grad_(requires_grad)

  @staticmethod
  def zeros_like(t: Tensor, dtype=None, requires_grad: bool = False) -> Tensor:
    """Zeros of `t`'s shape on `t`'s device, in `dtype` (default: `t`'s dtype)."""
    return Tensor.zeros(*t.shape, dtype=dtype or t.dtype, device=t.device,
                        requires_grad=requires_grad)

  @staticmethod
  def ones_like(t: Tensor, dtype=None, requires_grad: bool = False) -> Tensor:
    """Ones of `t`'s shape on `t`'s device, in `dtype` (default: `t`'s dtype)."""
    return Tensor.ones(*t.shape, dtype=dtype or t.dtype, device=t.device,
                       requires_grad=requires_grad)

  def _const(self, value, dtype: DType | None = None) -> Tensor:
    return Tensor(Tensor._full_node(self.shape, value, dtype or self.dtype, self.device))

  # ---- movement ----
  def _move(self, move: str, *args) -> Tensor:
    return record(Tensor(chain_view(self.node, move, *args)), (self,), "move", (move, args))

  def reshape(self, *shape) -> Tensor:
    """The same elements in row-major order with a new shape (ints, or one tuple; one size may be -1
    to be inferred). No data is copied. Also `view`.

    Raises ShapeError when the element counts differ or more than one size is -1."""
    shape = list(shape_args(shape))
    if any(isinstance(s, Sym) for s in shape):
      from . import symbolic
      return symbolic.reshape(self, shape)
    if shape.count(-1) > 1:
      raise ShapeError(f"reshape to {tuple(shape)}: only one dim can be -1")
    if -1 in shape:
      known = prod(s for s in shape if s != -1)
      shape[shape.index(-1)] = self._elements() // known if known else 0
    if prod(shape) != self._elements() or any(s < 0 for s in shape):
      held = f"padded to {self.shape}" if self.node.sym is not None else \
        f"{self._elements()} elements"
      raise ShapeError(f"cannot reshape {self.node.logical} ({held}) to "
                       f"{tuple(shape)}: the element counts must match")
    return self if tuple(shape) == self.shape else self._move("reshape", tuple(shape))

  view = reshape

  def flatten(self) -> Tensor:
    """The elements as a 1-d tensor of `numel()` elements (row-major)."""
    return self.reshape(-1)

  def permute(self, *order) -> Tensor:
    """The axes reordered: result axis i is input axis `order[i]` (negative axes allowed). No data
    is copied.

    Raises ShapeError unless `order` names every axis once."""
    order = shape_args(order)
    if any(not -self.ndim <= a < self.ndim for a in order) or \
       sorted(a % self.ndim for a in order) != list(range(self.ndim)):
      raise ShapeError(f"permute{tuple(order)} of a {self.ndim}-d tensor: give each axis "
                       f"0..{self.ndim - 1} once")
    return self._move("permute", tuple(a % self.ndim for a in order))

  def transpose(self, *axes) -> Tensor:
    """numpy's transpose: no axes reverses them; otherwise a full permutation."""
    return self.permute(*(axes or range(self.ndim - 1, -1, -1)))

  def swapaxes(self, a: int, b: int) -> Tensor:
    """The tensor with axes `a` and `b` exchanged (numpy.swapaxes).

    Raises ShapeError for an axis out of range."""
    order = list(range(self.ndim))
    a, b = resolve_axes(a, self.ndim)[0], resolve_axes(b, self.ndim)[0]
    order[a], order[b] = order[b], order[a]
    return self.permute(*order)

  @property
  def T(self) -> Tensor:
    """The transpose: the axes in reverse order (a matrix's rows become its columns)."""
    return self.transpose()

  def expand(self, *shape) -> Tensor:
    """The tensor broadcast to `shape` (ints, or one tuple; -1 keeps a size): size-1 dimensions
    repeat without copying, and new leading dimensions are added. Also `broadcast_to`.

    Raises ShapeError when a dimension larger than 1 would have to change."""
    shape = shape_args(shape)
    if any(isinstance(s, Sym) for s in shape):
      from . import symbolic
      return symbolic.expand(self, shape)
    shape = tuple(s if s != -1 else o for s, o in
                  zip(shape, (1,) * (len(shape) - self.ndim) + self.shape))
    target = broadcast_shape(self.shape, shape)
    if target != shape:
      raise ShapeError(f"cannot expand {self.shape} to {shape}: only size-1 dims can grow")
    x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape)
    return x if x.shape == shape else x._move("expand", shape)

  broadcast_to = expand

  def unsqueeze(self, axis: int) -> Tensor:
    """The tensor with a new size-1 dimension at `axis` (0..ndim, negative counts from the end).
    Also `expand_dims`."""
    axis = resolve_axes(axis, self.ndim + 1)[0]
    return self.reshape(self.shape[:axis] + (1,) + self.shape[axis:])

  expand_dims = unsqueeze

  def squeeze(self, axis=None) -> Tensor:
    """The tensor without size-1 dimensions: those at `axis` (an int or a tuple), or all of them
    when None.

    Raises ShapeError when a named axis has a size other than 1."""
    axes = resolve_axes(axis, self.ndim) if axis is not None else \
      tuple(i for i, s in enumerate(self.shape) if s == 1)
    if any(self.shape[a] != 1 for a in axes):
      raise ShapeError(f"squeeze axis {axis} of shape {self.shape}: only size-1 dims can go")
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

  def pad(self, pad_width, value=0, mode="constant") -> Tensor:
    """numpy.pad: pad_width is ((before, after), ...) per dim; mode "constant" fills with value,
    "edge", "reflect", "symmetric" and "wrap" repeat the data (tensor/ops/shape.py). Each dim
    grows by before + after; same dtype.

    Raises ShapeError for negative widths (use shrink to cut) or widths that do not fit the
    dims."""
    if isinstance(value, str):       # pad(widths, "edge"), as numpy.pad's positional mode
      mode, value = value, 0
    if mode != "constant":
      from .ops.shape import pad_mode
      return pad_mode(self, pad_width, mode)
    pads = pairs(pad_width, self.ndim, "pad")
    check_ints([w for pair in pads for w in pair], "pad")
    if any(b < 0 or a < 0 for b, a in pads):
      raise ShapeError(f"pad widths must be >= 0, got {pads}; use shrink to cut")
    if any(isinstance(w, Sym) for pair in pads for w in pair):
      return pad_widths(self, pads, value)
    if self._elements() == 0 and any(b or a for b, a in pads):   # nothing to place: all fill
      shape = tuple(n + b + a for n, (b, a) in zip(self.shape, pads))
      return Tensor.full(shape, value, dtype=self.dtype, device=self.device)
    if self.node.sym is not None and any(isinstance(s, Sym) and a for s, (_, a) in
                                         zip(self.node.sym, pads)):
      from . import symbolic
      return symbolic.pad(self, pads, value)
    out = self._move("pad", pads) if any(b or a for b, a in pads) else self
    if value == 0 or out is self:
      return out
    inside = Tensor.ones(*self.shape, dtype=dtypes.bool, device=self.device)._move("pad", pads)
    fill = Tensor.full((), value, dtype=self.dtype, device=self.device)   # numpy.pad: the
    return where(inside, out, fill)                   # value cast to the tensor's dtype

  def shrink(self, bounds) -> Tensor:
    """The slice (start, end) of each dimension, one pair per dimension (None keeps the whole
    dimension). No data is copied.

    Raises ShapeError unless 0 <= start <= end <= size for every dimension."""
    bounds = tuple((0, n) if b is None else tuple(b) for b, n in zip(bounds, self.shape))
    if len(bounds) != self.ndim or any(not 0 <= b <= e <= n for (b, e), n in
                                       zip(bounds, self.shape)):
      raise ShapeError(f"shrink {bounds} of shape {self.shape}: give (start, end) per dim "
                       f"with 0 <= start <= end <= size")
    if all(b == (0, n) for b, n in zip(bounds, self.shape)):
      return self
    return self._move("shrink", bounds)

  def flip(self, axis=None) -> Tensor:
    """The elements in reverse order along `axis` (an int or a tuple; None: every axis), numpy.flip.
    """
    axes = resolve_axes(axis, self.ndim)
    if self.node.sym is not None and any(isinstance(self.node.sym[a], Sym) for a in axes):
      from .symbolic import flip
      return flip(self, axes)
    return self._move("flip", axes) if axes else self

  def _step(self, steps) -> Tensor:
    return self._move("step", tuple(steps)) if any(k != 1 for k in steps) else self

  def __getitem__(self, index) -> Tensor:
    from .symbolic import symbolic_index
    from .symbolic_steps import stepped
    if symbolic_index(index) or stepped(self, index):
      from .symbolic_steps import getitem as symbolic_getitem
      return symbolic_getitem(self, index)
    from .ops.indexing import getitem
    return getitem(self, index)

  def repeat(self, *reps) -> Tensor:
    """The tensor tiled `reps[i]` times along each dimension (numpy.tile; torch's repeat). More reps
    than dimensions add leading dimensions."""
    reps = shape_args(reps)
    x = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
    expanded = x.reshape(tuple(v for s in x.shape for v in (1, s)))
    expanded = expanded.expand(tuple(v for r, s in zip(reps, x.shape) for v in (r, s)))
    return expanded.reshape(tuple(r * s for r, s in zip(reps, x.shape)))

  def _windows(self, kernel, stride, dilation) -> Tensor:
    """(..., H, W) -> (..., OH, OW, kh, kw): sliding windows as a strided view, no copy."""
    if self.node.sym is not None:
      from .symbolic_steps import windows
      return windows(self, kernel, stride, dilation)
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    *lead, h, w = self.shape
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
      raise ShapeError(f"window {kernel} (dilation {dilation}) is larger than the padded "
                       f"input {(h, w)}: use a smaller kernel or more padding")
    lead_strides = [prod(lead[i + 1:]) * h * w for i in range(len(lead))]
    view = View(tuple(lead) + (oh, ow, kh, kw),
                tuple(lead_strides) + (sh * w, sw, dh * w, dw))
    view = View.contiguous(view.shape)._with(view.shape, view.strides, 0, None)
    return record(Tensor(LazyOp(L.VIEW, self.dtype, view.shape, (self.node,), view)), (self,),
                  "windows", (kernel, stride, dilation))

  # ---- elementwise ----
  def _binary(self, op: Ops, other, reverse=False, dtype: DType | None = None) -> Tensor:
    a, b = (other, self) if reverse else (self, other)
    a, b = coerce(a, b)
    out = dtypes.bool if op in (Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE) else a.dtype
    return record(Tensor(a.node.alu(op, dtype or out, b.node)), (a, b), "alu", op)

  def _unary(self, op: Ops) -> Tensor:
    return record(Tensor(self.node.alu(op, self.dtype)), (self,), "alu", op)

  def cast(self, dtype) -> Tensor:
    """The values converted to `dtype` (a DType or its name: "float16", "int32", ...), as numpy's
    astype: floats to ints truncate toward zero. The same tensor when the dtype already matches.
    Also `astype`.

    Raises DTypeError for an unknown dtype name."""
    dtype = dtypes.from_name(dtype)
    if dtype == self.dtype:
      return self
    if not self.requires_grad and (node := host_narrowed(self.node, dtype)) is not None:
      return Tensor(node)
    return record(Tensor(LazyOp(L.CAST, dtype, self.shape, (self.node,))), (self,), "cast")

  astype = cast

  def bitcast(self, dtype) -> Tensor:
    """The same bits read as `dtype`, which must have the dtype's width (float32 <-> int32/uint32,
    float16 <-> int16/uint16 ...).

    Raises DTypeError when the widths differ."""
    dtype = dtypes.from_name(dtype)
    if dtype.itemsize != self.dtype.itemsize:
      raise DTypeError(f"bitcast from {self.dtype} to {dtype} needs equal widths "
                       f"({self.dtype.itemsize} vs {dtype.itemsize} bytes): use cast instead")
    return self if dtype == self.dtype else \
      Tensor(LazyOp(L.BITCAST, dtype, self.shape, (self.node,)))

  def float(self) -> Tensor:
    """The values cast to float32."""
    return self.cast(dtypes.float32)

  def half(self) -> Tensor:
    """The values cast to float16."""
    return self.cast(dtypes.float16)

  def int(self) -> Tensor:
    """The values cast to int32 (floats truncate toward zero)."""
    return self.cast(dtypes.int32)

  def bool(self) -> Tensor:
    """The values cast to bool (nonzero is True)."""
    return self.cast(dtypes.bool)

  def where(self, x, y) -> Tensor:
    """where(self, x, y): x where self is true, else y (the mixins select with it)."""
    return where(self, x, y)


def numpy_of(*tensors: Tensor) -> list:
  """The values of several tensors as new numpy arrays (each as Tensor.numpy gives it),
  computed together and read back together: on WEBGPU one submit and one map for all of them
  (a model's outputs: `kg.numpy_of(out["output"], out["stateN"])`), where reading each with
  .numpy() maps once per tensor.

  Raises DTypeError for a value that is not a Tensor, DeviceError when numpy is not
  installed."""
  from ..realize import read_many
  for t in tensors:
    if not isinstance(t, Tensor):
      raise DTypeError(f"kg.numpy_of takes Tensors, got a {type(t).__name__}: pass only "
                       f"kg.Tensor values (other values are on the host already)")
  raws = read_many([t.node for t in tensors])
  return [t._array(raw) for t, raw in zip(tensors, raws)]


def hash_u32(index: Tensor, seed) -> Tensor:
  """A counter-based integer hash (lowbias32-style mixing) of index and seed, as uint32. The
  seed is a Python int (a constant of the kernel) or a one-element integer Tensor (read from
  its buffer, so every seed runs the same kernel); equal seeds give equal bits either way."""
  if isinstance(seed, Tensor):
    key = seed.cast(dtypes.uint32).reshape(()) * 0x9E3779B9 + 0x85EBCA6B
  else:
    key = truncate(seed * 0x9E3779B9 + 0x85EBCA6B, dtypes.uint32)
  x = index.cast(dtypes.uint32) ^ key
  for shift, mult in ((16, 0x7FEB352D), (15, 0x846CA68B), (16, None)):
    x = x ^ (x >> shift)
    if mult is not None:
      x = x * mult
  return x

