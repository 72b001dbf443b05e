"""One run of an ONNX model: values by name (device Tensors, and host copies of static ones),
the nodes evaluated in order, static nodes folded on the host (model.py explains when)."""
from __future__ import annotations

import contextlib
import math
import struct
import weakref

from ..dtype import dtypes
from ..errors import KernelgenError, ModelError, ShapeError
from ..tensor.tensor import Tensor
from ..graph.dims import Sym
from . import merged, symshape
from .operators import implementation
from ..tensor.symbolic import concrete_shape
from .values import (FOLD_MAX, HOST_COPY_MAX, NARROW, NONE, Static, narrow_bytes,
                     tensor_from_bytes)

_BUGS = (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, struct.error,
         OverflowError, AttributeError)


def _host_side(value) -> bool:
  """Whether a feed's values are host memory, read with no device round trip (then it keeps a
  host copy: an If on Silero's `sr` keys a replay on it): an array, or a Tensor computed on
  PYTHON; never a placeholder (Tensor.empty: kg.export's inputs, whose bytes mean nothing)."""
  if not isinstance(value, Tensor):
    return True
  buffer = getattr(value.node, "buffer", None)
  return value.device == "PYTHON" and value.node.realized and buffer is not None \
    and not buffer.is_input


# model -> {initializer name: (its raw bytes, their Static)}: small initializers unpacked once,
# not at every run (Silero VAD unpacked 8 of them per warm call)
_UNPACKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _statics(model) -> dict:
  """{initializer name: Static (a small one, unpacked) or (dtype, shape, raw)}. A Static is
  kept per model while its initializer's bytes stay the same object (never changed in place,
  so runs share it)."""
  kept = _UNPACKED.setdefault(model, {})
  statics = {}
  for name, (dtype, shape, raw) in model.initializers.items():
    if math.prod(shape) > FOLD_MAX:
      statics[name] = (dtype, shape, raw)
      continue
    found = kept.get(name)
    if found is None or found[0] is not raw:
      found = kept[name] = (raw, Static.from_bytes(dtype, shape, raw))
    statics[name] = found[1]
  return statics


class Runner:
  """Evaluates a Model's nodes for one set of feeds on one device."""

  def __init__(self, model, device: str):
    self.model, self.device = model, device
    self.tensors: dict = {}       # name -> Tensor on self.device
    self.static: dict = _statics(model)   # name -> Static (constant for this run: folded)
    self.host: dict = {}          # name -> Static host copy of a feed (not folded)
    self.folding = False          # True while a static node runs on PYTHON in full precision
    self.node = None
    self.host_reads: set = set()  # feeds whose host copy an operator read (replay.py keys on them)
    self.data_reads: list = []    # device tensors whose values an operator read (data-dependent)
    self.grouped: dict = {}       # name -> merged.Group: a Reshape's merge of symbolic dims

  # ---- feeds and results ----
  def run(self, feeds: dict) -> dict:
    self._feed(feeds)
    return self.evaluate()

  def evaluate(self) -> dict:
    """{output name: value} of the model's nodes over the fed inputs (self.tensors)."""
    for node in self.model.nodes:
      self._eval(node, implementation(node))
    if self.grouped:
      merged.check_outputs(self)
    outs = {name: self.value(name) for name in self.model.output_names}
    return {name: None if v is NONE else v for name, v in outs.items()}

  def _feed(self, feeds: dict) -> None:
    unknown = set(feeds) - set(self.model.input_names) - set(self.model.initializers)
    if unknown:
      raise ModelError(f"no model input named {sorted(unknown)}: the inputs are "
                       f"{self.model.input_names}")
    missing = [n for n in self.model.input_names if n not in feeds]
    if missing:
      raise ModelError(f"missing inputs {missing}: give every one of {self.model.input_names}")
    sizes: dict = {}
    for name, value in feeds.items():
      kind = self.model.input_kinds.get(name, "tensor")
      if value is None and kind == "optional":
        self.tensors[name] = NONE
        continue
      if kind == "sequence" or kind == "optional" and isinstance(value, (list, tuple)):
        if not isinstance(value, (list, tuple)):
          raise ModelError(f"input {name!r} is a sequence: give a list of arrays or Tensors")
        self.tensors[name] = [self._to_device(v if isinstance(v, Tensor) else
                                              Tensor(v, device="PYTHON"), f"input {name!r}")
                              for v in value]
        continue
      t = value if isinstance(value, Tensor) else Tensor(value, device="PYTHON")
      if self.model.input_dtypes.get(name) == dtypes.bfloat16 and t.dtype == dtypes.float32:
        t = t.cast(dtypes.bfloat16)     # numpy has no bfloat16: float32 arrays stand for it
      shape = concrete_shape(t) if t.node.sym is not None else t.shape
      self._check_shape(name, shape, sizes)
      ranged = self._ranged_dims(name, shape)
      if _host_side(value) and math.prod(t.shape) <= HOST_COPY_MAX and ranged is None:
        self.host[name] = Static(t.dtype, t.shape, _flat(t.tolist()))
      self.static.pop(name, None)
      t = self._to_device(t, f"input {name!r}")
      self.tensors[name] = t if ranged is None else resymbolic(t, ranged)

  def _ranged_dims(self, name: str, shape: tuple):
    """The logical shape of input `name` when load()'s dims give a range to some dim it
    declares (those sizes symbolic: kg.Dim(dim_param, lo, hi) bound to the size given), else
    None."""
    declared = self.model.input_shapes.get(name)
    if not declared or not any(isinstance(self.model.dims.get(d), tuple) for d in declared
                               if isinstance(d, str)):
      return None
    from ..graph.dims import Dim
    out = []
    for want, got in zip(declared, shape):
      bounds = self.model.dims.get(want) if isinstance(want, str) else None
      if isinstance(bounds, tuple) and bounds[0] < bounds[1]:
        out.append(Dim(want, *bounds).bind(got))
      else:
        out.append(got)
    return tuple(out)

  def _check_shape(self, name: str, shape: tuple, sizes: dict) -> None:
    declared = self.model.input_shapes.get(name)
    if declared is None:
      return
    if len(declared) != len(shape):
      raise ShapeError(f"input {name!r} has shape {shape}, the model declares {declared}")
    for want, got in zip(declared, shape):
      if isinstance(want, int) and want > 0 and want != got:
        raise ShapeError(f"input {name!r} has shape {shape}, the model declares {declared}")
      if not isinstance(want, str) or want == "?":     # "?": an unnamed dim, its own unknown
        continue
      if sizes.setdefault(want, got) != got:
        raise ShapeError(f"input {name!r} gives {want} = {got}, another input gave "
                         f"{sizes[want]}: symbolic dims of one name must agree")
      fixed = self.model.dims.get(want)
      if isinstance(fixed, int) and got != fixed or \
         isinstance(fixed, tuple) and not fixed[0] <= got <= fixed[1]:
        raise ShapeError(f"input {name!r} gives {want} = {got}; the model was loaded with "
                         f"dims {want}={fixed}")

  def _to_device(self, t: Tensor, what: str) -> Tensor:
    target = NARROW.get(t.dtype) or (dtypes.float32 if t.dtype == dtypes.float64 and
                                     self.model.float64 == "float32" else None)
    if target is None and t.device == self.device:
      return t
    raw = t._bytes()
    if target is not None:
      raw, dtype = narrow_bytes(raw, t.dtype, t.shape, what, self.model.float64)
    else:
      dtype = t.dtype
    return tensor_from_bytes(raw, t.shape, dtype, self.device)

  # ---- values for ops ----
  def value(self, name: str) -> Tensor:
    """The device Tensor of `name` (static values uploaded, narrowed, on first use)."""
    if name in self.tensors and not (self.folding and name in self.static):
      return self.tensors[name]
    shared = not self.folding and type(self) is Runner and name in self.model.initializers
    key = (self.device, name)
    if shared and key in self.model.uploads:      # an initializer uploaded by an earlier run
      t = self.model.uploads[key]
    else:
      t = self.upload(self.static[name], f"tensor {name!r}")
    if shared:
      self.model.uploads[key] = t
    if not self.folding:
      self.tensors[name] = t
    return t

  def upload(self, s, what: str) -> Tensor:
    """A Static (or (dtype, shape, bytes)) as a Tensor: on PYTHON in full precision while
    folding, else on the device, narrowed."""
    if isinstance(s, tuple):
      dtype, shape, raw = s
    else:
      from ..tensor.data import pack
      if symshape.has_sym(s):
        raise symshape.refuse(self.node.op if self.node else "reading", what)
      dtype, shape, raw = s.dtype, s.shape, pack(s.values, s.dtype)
    if not self.folding:
      raw, dtype = narrow_bytes(raw, dtype, shape, what, self.model.float64)
    return tensor_from_bytes(raw, shape, dtype, "PYTHON" if self.folding else self.device)

  def constant(self, name: str):
    """The Static value of `name` when the program itself fixes it (an initializer, a Constant,
    a folded node), else None: never a feed's host copy (data stays a run-time input)."""
    s = self.static.get(name)
    if isinstance(s, tuple):
      return Static.from_bytes(*s)
    return s

  def known(self, name: str):
    """The Static host value of `name` when known without running anything, else None."""
    s = self.static.get(name)
    if s is None and name in self.host:
      s = self.host[name]
      self.host_reads.add(name)
    if isinstance(s, tuple):
      return Static.from_bytes(*s)
    return s

  def host_values(self, name: str, what: str) -> Static:
    """Host values of `name`: known, or (a data-dependent shape) computed now."""
    s = self.known(name)
    if s is not None:
      return s
    t = self.value(name)
    leaves = self._feeds_under(name)
    if leaves is None:
      self.data_reads.append(name)
    else:           # a function of small feeds' host copies: a replay keys on their values
      self.host_reads.update(leaves)
    with unrecorded():
      return Static(t.dtype, t.shape, _flat(t.tolist()))

  def _feeds_under(self, name: str):
    """The feeds value `name` is computed from when every one of them has a host copy (then
    its values are a function of theirs), else None."""
    producers, model = self.model.producers(), self.model
    leaves, stack, seen = set(), [name], set()
    while stack:
      n = stack.pop()
      if not n or n in seen or n in model.initializers:
        continue
      seen.add(n)
      if n in model.input_names:
        if n not in self.host:
          return None
        leaves.add(n)
      elif n in producers:
        node = producers[n]
        stack += node.inputs + node.captures
      else:
        return None
    return leaves

  # ---- subgraphs (If branches, Loop and Scan bodies) ----
  def run_graph(self, graph, bindings: dict) -> list:
    """Run subgraph `graph` in a scope that sees this one's values, with its inputs bound to
    `bindings` ({name: Tensor or Static}); its outputs as Static where static, else Tensors."""
    scope = Scope(self)
    for name, (dtype, shape, raw) in graph.initializers.items():
      scope.bind(name, Static.from_bytes(dtype, shape, raw))
    for name, value in bindings.items():
      scope.bind(name, value)
    for node in graph.nodes:
      scope._eval(node, implementation(node))
    return [scope.result(name) for name in graph.output_names]

  def bind(self, name: str, value) -> None:
    if isinstance(value, Static):
      self.static[name] = value
      self.tensors.pop(name, None)
    else:
      self.tensors[name] = value
      self.static.pop(name, None)
    self.host.pop(name, None)

  def result(self, name: str):
    s = self.static.get(name)
    return s if isinstance(s, Static) else self.value(name)

  # ---- evaluation ----
  def _eval(self, node, fn) -> None:
    self.node = node
    names = [n for n in node.inputs if n]
    if (self.grouped or node.op == "Reshape") and merged.evaluate(self, node, fn):
      return
    symbolic = self._symbolic(node, names)
    if symbolic is True:
      return
    fold = not symbolic and (getattr(fn, "shape_only", False) or getattr(fn, "foldable", True)
                             and all(isinstance(self.static.get(n), Static) and
                                     self.static[n].size <= FOLD_MAX for n in names))
    if fold and self._fold(node, fn):
      return
    self.put(node, self._call(node, fn, False))

  def run_node(self, node, fn) -> list:
    """The outputs of `node` computed by `fn` on the device (never folded)."""
    return self._call(node, fn, False)

  def put(self, node, outs: list) -> None:
    """Store `node`'s outputs `outs` (Static values as host values, Tensors by name)."""
    for name, out in zip(node.outputs, outs):
      if name and isinstance(out, Static):      # control flow passes static values through
        self.static[name] = out
        self.tensors.pop(name, None)
      elif name and out is not None:
        self.tensors[name] = out
        if isinstance(out, Tensor) and out.device != self.device:
          raise ModelError(f"{node.describe()} produced a tensor on {out.device}")

  def _fold(self, node, fn) -> bool:
    """Evaluate static `node` on the host (PYTHON, full precision, never recorded for a replay):
    True when its outputs are small enough to keep as Static values."""
    with unrecorded():
      outs = self._call(node, fn, True)
      if not all(o is None or math.prod(o.shape) <= FOLD_MAX for o in outs):
        return False
      for name, out in zip(node.outputs, outs):
        if name and out is not None:
          self.static[name] = out if isinstance(out, Static) else \
            Static(out.dtype, out.shape, _flat(out.tolist()))
    return True

  def _symbolic(self, node, names: list):
    """Shape computations over symbolic sizes (symshape.py): True once `node`'s outputs are
    computed here as Static values holding them; "consumer" for an operator that takes such a
    value (it runs, not folded); False for everything else."""
    if node.op in ("Shape", "Size") and names and names[0] in self.tensors and \
       self.tensors[names[0]].node.sym is not None:
      x = self.tensors[names[0]]
      out = symshape.shape_of(x, node.attrs) if node.op == "Shape" else symshape.size_of(x)
      self.static[node.outputs[0]] = out
      return True
    if not any(symshape.has_sym(self.static.get(n)) for n in names):
      return False
    if node.op in SYMBOLIC_CONSUMERS:
      return "consumer"
    statics = [self.static.get(n) if n else None for n in node.inputs]
    out = None
    if all(isinstance(s, Static) for s in statics if s is not None):
      out = symshape.evaluate(node.op, statics, node.attrs, node.opset, node.describe())
    if out is None:
      raise symshape.refuse(node.op, node.describe())
    self.static[node.outputs[0]] = out
    self.tensors.pop(node.outputs[0], None)
    return True

  def _call(self, node, fn, folding: bool) -> list:
    self.folding = folding
    try:
      outs = fn(Inputs(self, node), node.attrs)
    except KernelgenError as e:
      e.args = (f"{node.describe()}: {e.args[0] if e.args else ''}",) + e.args[1:]
      raise
    except RecursionError:
      raise ModelError(f"{node.describe()}: the model is too deep to build") from None
    except _BUGS as e:
      raise ModelError(f"{node.describe()}: cannot compute it from these inputs and "
                       f"attributes ({type(e).__name__}: {e})") from None
    finally:
      self.folding = False
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    return list(outs)


class Scope(Runner):
  """The values of one subgraph run: the enclosing scope's, plus the subgraph's own."""

  def __init__(self, parent: Runner):    # pylint: disable=super-init-not-called
    self.model, self.device = parent.model, parent.device
    self.tensors, self.static = dict(parent.tensors), dict(parent.static)
    self.host = dict(parent.host)
    self.folding, self.node = False, None
    self.host_reads, self.data_reads = parent.host_reads, parent.data_reads
    self.grouped = dict(parent.grouped)


# operators that take a shape value holding a symbolic size (Inputs.ints passes the Sym on)
SYMBOLIC_CONSUMERS = ("Reshape", "Expand", "Range", "ConstantOfShape", "GroupQueryAttention")


class Inputs:
  """What an operator sees: its inputs by position, as Tensors or host values, and dtypes."""

  def __init__(self, runner: Runner, node):
    self.runner, self.node = runner, node
    self.names = node.inputs

  def __len__(self) -> int:
    return len(self.names)

  def has(self, i: int) -> bool:
    return i < len(self.names) and bool(self.names[i])

  def __getitem__(self, i: int) -> Tensor | None:
    return self.runner.value(self.names[i]) if self.has(i) else None

  def all(self) -> list:
    return [self[i] for i in range(len(self.names)) if self.has(i)]

  def values(self, i: int, default=None):
    """Input i as a flat list of Python numbers (for shapes, axes, pads ...)."""
    if not self.has(i):
      return default
    return self.runner.host_values(self.names[i], self.node.describe()).values

  def ints(self, i: int, default=None):
    """Input i as a list of ints (a symbolic size, symshape.py, stays a Sym)."""
    values = self.values(i, None)
    return default if values is None else [v if isinstance(v, Sym) else int(v) for v in values]

  def scalar(self, i: int, default=None):
    values = self.values(i, None)
    return default if not values else values[0]

  def dtype(self, code: int):
    """The dtype to compute ONNX element type `code` in (narrowed unless folding)."""
    from .data import elem_dtype
    dt = elem_dtype(code, self.node.describe())
    if self.runner.folding:
      return dt
    if dt == dtypes.float64 and self.runner.model.float64 == "float32":
      return dtypes.float32
    return NARROW.get(dt, dt)

  @property
  def device(self) -> str:
    return "PYTHON" if self.runner.folding else self.runner.device

  @property
  def opset(self) -> int:
    return self.node.opset

  @property
  def int_dtype(self):
    return dtypes.int64 if self.runner.folding else dtypes.int32


@contextlib.contextmanager
def unrecorded():
  """Host work (folding, reading values) kept out of a replay's recording (realize.recording)."""
  from .. import realize
  was, realize.recording = realize.recording, None
  try:
    yield
  finally:
    realize.recording = was


def resymbolic(t: Tensor, shape: tuple) -> Tensor:
  """Feed `t` as a tensor of logical shape `shape` (its symbolic sizes bound to t's sizes). A
  tensor that is symbolic already (a present KV cache fed back as the next step's past) keeps
  its buffer: its padding is cut or extended to the new sizes' largest values (a view, no
  kernel), only the values count."""
  if t.node.sym is None:
    return t.symbolic(*shape)
  from ..graph.dims import split_shape
  from ..graph.lazy import chain_view
  from ..tensor.symbolic import with_sym
  phys, node = split_shape(shape)[0], t.node
  cut = tuple(min(p, n) for p, n in zip(phys, node.shape))
  if cut != node.shape:
    node = chain_view(node, "shrink", tuple((0, n) for n in cut), sym=cut)
  if phys != node.shape:
    node = chain_view(node, "pad", tuple((0, p - n) for p, n in zip(phys, cut)), sym=phys)
  return with_sym(Tensor(node), shape)


def _flat(x) -> list:
  """The scalars of nested lists `x` in order (a stack, not recursion on the nesting)."""
  if not isinstance(x, list):
    return [x]
  out, stack = [], [iter(x)]
  while stack:
    for v in stack[-1]:
      if isinstance(v, list):
        stack.append(iter(v))
        break
      out.append(v)
    else:
      stack.pop()
  return out
