"""An ONNX model as kernelgen Tensors: `load(src)` reads and checks the graph, `Model.run(feeds)`
builds every output as a lazy Tensor on the chosen device (nothing runs until asked).

The graph is checked at load: every node input names an earlier output, an initializer or a
graph input (else `ModelError`), the nodes have no cycle (they are sorted when out of order),
every operator is implemented for the model's opset (else `UnsupportedError` naming the
operator, the node and the opset), attributes have the types the operators need.

Shapes are static inside kernelgen, so shape computations are folded on the host: a value is
*static* when it comes from an initializer, a Constant or a Shape/Size of a tensor, and a node
whose inputs are all static and small (FOLD_MAX elements) is evaluated at once on the PYTHON
device in full precision (int64 kept); its outputs are static too. Shape -> Gather -> Concat ->
Reshape chains thus become the constant shape Reshape needs, and symbolic dims (a batch size
`N`) take their sizes from the inputs given to `run`.

Sibling projections (MatMul / MatMulNBits nodes reading one input with weights of their own: a
layer's q, k and v) are joined at load into one node over their weights concatenated along N
(siblings.py): `nodes` and `initializers` hold the joined ones.

64-bit: WGSL has neither int64 nor float64. Data tensors of type int64 (uint64) become int32
(uint32) on every device, checked for range (a `ShapeError` naming the tensor when a value does
not fit); outputs declared int64 therefore come back as int32. float64 models run on PYTHON,
PTXSIM and CUDA; on WEBGPU they are an `UnsupportedError` unless loaded with
`float64="float32"`, which narrows every float64 tensor and cast to float32.
"""
from __future__ import annotations

import struct

from ..dtype import dtypes
from ..errors import ModelError, UnsupportedError
from . import data, proto, siblings
from .operators import check_supported
from .runner import Runner

MIN_OPSET, MAX_OPSET = 7, 28
# ---- attributes --------------------------------------------------------------------------

_ATTR_FIELD = {"FLOAT": "f", "INT": "i", "STRING": "s", "TENSOR": "t", "GRAPH": "g",
               "FLOATS": "floats", "INTS": "ints", "STRINGS": "strings", "TENSORS": "tensors",
               "GRAPHS": "graphs", "SPARSE_TENSOR": "sparse_tensor", "TYPE_PROTO": "tp"}


def _attr_value(a, where: str):
  kind = proto.ATTR_TYPES.get(a.type)
  if kind is None:     # old writers leave type unset: infer it from the field present
    kind = next((k for k, f in _ATTR_FIELD.items() if a.has(f) or
                 (f in ("floats", "ints", "strings") and getattr(a, f))), None)
  if kind is None:
    raise ModelError(f"attribute {a.name!r} of {where} has no value")
  value = getattr(a, _ATTR_FIELD.get(kind, "t"))
  if kind == "STRING":
    value = value.decode("utf-8", "replace")
  elif kind == "STRINGS":
    value = [s.decode("utf-8", "replace") for s in value]
  return kind, value


class Attrs:
  """A node's attributes, read with the type each operator expects."""

  def __init__(self, node, where: str):
    self.where = where
    self.values = {}
    for a in node.attribute:
      if a.ref_attr_name:
        raise UnsupportedError(f"{where}: attribute references (functions) are not supported")
      self.values[a.name] = _attr_value(a, where)

  def _get(self, name, kinds, default):
    if name not in self.values:
      return default
    kind, value = self.values[name]
    if kind not in kinds:
      raise ModelError(f"attribute {name!r} of {self.where} is {kind}, the operator needs "
                       f"{' or '.join(kinds)}: the model is damaged")
    return value

  def int(self, name, default=None): return self._get(name, ("INT",), default)
  def float(self, name, default=None): return self._get(name, ("FLOAT",), default)
  def str(self, name, default=None): return self._get(name, ("STRING",), default)
  def ints(self, name, default=None): return self._get(name, ("INTS",), default)
  def floats(self, name, default=None): return self._get(name, ("FLOATS",), default)
  def tensor(self, name, default=None): return self._get(name, ("TENSOR",), default)
  def graph(self, name, default=None): return self._get(name, ("GRAPH",), default)

  def any(self, name):
    return self.values.get(name, (None, None))


# ---- the model -------------------------------------------------------------------------------

def _type_info(vi) -> tuple:
  """(shape with ints, dim_param strings or None, ONNX element type) of a ValueInfoProto."""
  tt = vi.type.tensor_type if vi.type is not None else None
  if tt is None:
    return None, 0
  shape = None
  if tt.shape is not None:
    shape = tuple(d.dim_value if d.has("dim_value") else (d.dim_param or None)
                  for d in tt.shape.dim)
  return shape, tt.elem_type


class Node:
  """One graph node with its parsed attributes and the opset it is read in; `subgraphs` holds
  the Graph of each graph attribute (If branches, Loop/Scan bodies), `captures` the outer names
  they read (the node depends on those too)."""
  __slots__ = ("op", "name", "inputs", "outputs", "attrs", "opset", "proto", "subgraphs",
               "captures")

  def __init__(self, n, index: int, opset: int):
    self.op, self.inputs, self.outputs = n.op_type, list(n.input), list(n.output)
    self.name = n.name or f"#{index}"
    self.opset, self.proto = opset, n
    self.attrs = Attrs(n, self.describe())
    self.subgraphs, self.captures = {}, []

  def describe(self) -> str:
    return f"node {self.name!r} ({self.op}, opset {self.opset})"


class Graph:
  """A subgraph (an If branch, a Loop or Scan body): its nodes in order, input and output names,
  initializers; `free` are the names it reads from enclosing scopes."""

  def __init__(self, g, opset: int, outer: set):
    self.initializers = {}
    for t in g.initializer:
      self.initializers[t.name] = data.tensor_payload(t, None, f"initializer {t.name!r}")
    self.input_names = [v.name for v in g.input]
    self.output_names = [v.name for v in g.output]
    own = set(self.initializers) | set(self.input_names)
    self.nodes = _sorted_nodes(g, opset, outer | own)
    for node in self.nodes:
      check_supported(node)
    own |= {o for node in self.nodes for o in node.outputs}
    self.free = sorted({n for node in self.nodes for n in node.inputs + node.captures
                        if n and n not in own})


class Model:
  """A loaded ONNX model (`kg.onnx.load`); `run` builds its outputs as lazy Tensors. Attributes:
  `opset`, `input_names` / `output_names`, `input_shapes` / `output_shapes` and `input_dtypes`
  / `output_dtypes` (as the model declares them; None where it does not), `nodes` (in
  topological order), `initializers` (the weights), `uses_float64`, and `replayer` (warm calls'
  recorded kernels, onnx/replay.py; `replayer.replays` counts the calls it answered).

  Raises ModelError for a model without a graph, a broken graph (a name nobody computes, a
  cycle) or a bad `float64` argument; UnsupportedError for an operator, opset or attribute
  kernelgen does not implement."""

  def __init__(self, mp, base_dir: str | None, float64: str | None, dims: dict | None = None):
    if mp.graph is None:
      raise ModelError("the model has no graph: not an ONNX model, or an empty one")
    if float64 not in (None, "float32"):
      raise ModelError(f"float64={float64!r}: use None (keep float64) or 'float32' (narrow)")
    self.proto, self.float64 = mp, float64
    self.opset = _default_opset(mp)
    g = mp.graph
    self.initializers, budget = {}, data.ExternalBudget()
    for t in g.initializer:
      dtype, shape, raw = data.tensor_payload(t, base_dir, f"initializer {t.name!r}", budget)
      self.initializers[t.name] = (dtype, shape, raw)
    self.input_names = [v.name for v in g.input if v.name not in self.initializers]
    self.uploads: dict = {}     # (device, initializer name) -> its device Tensor, kept by runs
    self.four_bit = {t.name for t in g.initializer if t.data_type in data.NIBBLES} | \
      {v.name for v in g.input if _type_info(v)[1] in data.NIBBLES}   # int4/uint4, one per byte
    self.output_names = [v.name for v in g.output]
    infos = {v.name: _type_info(v) for v in list(g.input) + list(g.output)}
    self.input_shapes = {n: infos[n][0] for n in self.input_names}
    self.output_shapes = {n: infos[n][0] for n in self.output_names}
    kinds = {v.name: _kind(v) for v in g.input}
    self.input_kinds = {n: kinds[n] for n in self.input_names}
    self.input_dtypes = {n: _dtype_or_none(infos[n][1]) for n in self.input_names}
    self.dims = _check_dims(dims, self.input_shapes)
    self.output_dtypes = {n: _dtype_or_none(infos[n][1]) for n in self.output_names}
    self.nodes = _sorted_nodes(g, self.opset, set(self.initializers) | {v.name for v in g.input})
    siblings.join(self)
    for node in self.nodes:
      check_supported(node)
    self.uses_float64 = self._uses_float64()
    self.replayer = None        # onnx/replay.py: warm calls' recorded kernels
    self._producers = None

  def __repr__(self) -> str:
    return (f"<onnx Model opset {self.opset}: {len(self.nodes)} nodes, inputs "
            f"{self.input_names}, outputs {self.output_names}>")

  def producers(self) -> dict:
    """{value name: the node that computes it} of the main graph."""
    if self._producers is None:
      self._producers = {o: node for node in self.nodes for o in node.outputs if o}
    return self._producers

  def op_histogram(self) -> dict:
    """{operator: count}, most used first."""
    counts: dict = {}
    for node in self.nodes:
      counts[node.op] = counts.get(node.op, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

  def _uses_float64(self) -> bool:
    if any(dt == dtypes.float64 for dt, _, _ in self.initializers.values()):
      return True
    if dtypes.float64 in (*self.input_dtypes.values(), *self.output_dtypes.values()):
      return True
    return any(n.op == "Cast" and n.attrs.int("to") == 11 for n in self.nodes)

  def run(self, feeds: dict, device: str | None = None, replay: bool = True) -> dict:
    """{output name: Tensor} for `feeds` ({input name: numpy array, list or Tensor}).

    A sequence input takes a list of arrays or Tensors, an optional input a value or None;
    sequence outputs come back as lists of Tensors, an empty optional as None. device: where
    the outputs are computed (default `kg.Device.DEFAULT`); nothing runs until they are read.
    replay: warm calls (the same input shapes as an earlier call) replay the kernels a call
    recorded, with no per-node work (onnx/replay.py): the first call of a shape is lazy as
    above, later ones return realized outputs. False: always build the lazy graph.

    Raises ModelError for unknown or missing inputs (or an operator that cannot be built from
    them), ShapeError for an input whose shape contradicts the model's declaration, and
    UnsupportedError for a float64 model on WEBGPU (load it with float64="float32")."""
    from ..device import Device
    device = Device.canonical(device) if device is not None else Device.DEFAULT
    if self.uses_float64 and self.float64 is None and device == "WEBGPU":
      raise UnsupportedError("this model computes in float64, which WGSL (WEBGPU) does not "
                             "have: load it with kg.onnx.load(src, float64='float32') to narrow "
                             "to float32, or run it on PYTHON, PTXSIM or CUDA",
                             target="wgsl", dtype=dtypes.float64)
    if not replay:
      return Runner(self, device).run(feeds)
    if self.replayer is None:
      from .replay import Replayer
      self.replayer = Replayer(self)
    return self.replayer.run(feeds, device)


def _kind(vi) -> str:
  """'tensor', 'sequence' (a list of tensors) or 'optional' (a value or None) of an input."""
  t = vi.type
  if t is not None and t.has("sequence_type"):
    return "sequence"
  if t is not None and t.has("optional_type"):
    return "optional"
  return "tensor"


def _dtype_or_none(code: int):
  return data.ELEM_TYPES.get(code, (None, None))[1]


def _default_opset(mp) -> int:
  versions = {o.domain: o.version for o in mp.opset_import}
  version = versions.get("", versions.get("ai.onnx"))
  if version is None:     # only other domains: their operators are refused by name at load
    return 0
  if not MIN_OPSET <= version <= MAX_OPSET:
    raise UnsupportedError(f"opset {version} of the default domain: kernelgen reads opsets "
                           f"{MIN_OPSET} to {MAX_OPSET}; convert the model with "
                           f"onnx.version_converter.convert_version(model, {MAX_OPSET})")
  return version


def _sorted_nodes(g, opset: int, known: set) -> list:
  """The graph's nodes in an order where every input is produced first; ModelError otherwise."""
  nodes = [Node(n, i, opset) for i, n in enumerate(g.node)]
  producer = {}
  for node in nodes:
    for out in node.outputs:
      if out and (out in producer or out in known):
        raise ModelError(f"{node.describe()} writes {out!r}, which another node or a graph "
                         f"input already defines: a value has one producer in ONNX")
      if out:
        producer[out] = node
  for node in nodes:
    _subgraphs(node, opset, known | set(producer))
    for name in node.inputs + node.captures:
      if name and name not in known and name not in producer:
        raise ModelError(f"{node.describe()} reads {name!r}, which no node, initializer or "
                         f"graph input defines (a dangling name)")
  for out in g.output:
    if out.name not in known and out.name not in producer:
      raise ModelError(f"graph output {out.name!r} is never computed (a dangling name)")
  return _topological(nodes, producer)


def _subgraphs(node, opset: int, visible: set) -> None:
  """Parse the node's graph attributes into Graphs (names of the enclosing scopes visible)."""
  for name, (kind, value) in node.attrs.values.items():
    if kind == "GRAPHS":
      raise UnsupportedError(f"{node.describe()}: graph-list attribute {name!r} is not "
                             f"supported")
    if kind == "GRAPH":
      node.subgraphs[name] = Graph(value, opset, visible)
  node.captures = sorted({n for g in node.subgraphs.values() for n in g.free})


def _topological(nodes: list, producer: dict) -> list:
  order, state = [], {}
  for root in nodes:
    stack = [(root, False)]
    while stack:
      node, done = stack.pop()
      if done:
        state[id(node)] = 2
        order.append(node)
        continue
      if state.get(id(node)) == 2:
        continue
      if state.get(id(node)) == 1:
        raise ModelError(f"{node.describe()} depends on its own output (a cycle in the graph)")
      state[id(node)] = 1
      stack.append((node, True))
      for name in node.inputs + node.captures:
        dep = producer.get(name)
        if dep is None:
          continue
        if state.get(id(dep)) == 1:
          raise ModelError(f"{node.describe()} is in a cycle through {name!r}: ONNX graphs "
                           f"are acyclic")
        if state.get(id(dep)) != 2:
          stack.append((dep, False))
  return order


def _check_dims(dims, input_shapes: dict) -> dict:
  """load()'s dims: {dim_param: an int (fixed) or (lo, hi) (bounded)}, each named by an input."""
  dims = dict(dims or {})
  named = {d for shape in input_shapes.values() if shape for d in shape if isinstance(d, str)}
  for name, value in dims.items():
    if name not in named:
      raise ModelError(f"dims names {name!r}, which no input of the model declares (its "
                       f"symbolic dims: {', '.join(sorted(named)) or 'none'})")
    ok = isinstance(value, int) and value >= 0 or isinstance(value, tuple) and len(value) == 2 \
      and all(isinstance(v, int) for v in value) and 0 <= value[0] <= value[1]
    if not ok:
      raise ModelError(f"dims[{name!r}] = {value!r}: give a size (an int) or a range (lo, hi)")
  return dims


def load(src, float64: str | None = None, dims: dict | None = None) -> Model:
  """Read an ONNX model from a path, bytes or a binary file object.

  float64: None keeps float64 tensors (PYTHON/PTXSIM/CUDA run them; WEBGPU refuses), "float32"
  narrows them all to float32. dims: {an input's dim_param: a size or a range (lo, hi)}: `run`
  checks the inputs against them (a ShapeError names the dim); an exporter's Reshape(x, [-1, H])
  that merges two ranged dims (batch * seq) keeps them apart (onnx/merged.py). Unnamed dims (no
  dim_param, or the "?" converters write) are each their own unknown. Returns a Model; external
  data files are read from the model's folder.

  Raises ModelError for a path that cannot be opened or bytes that are not a readable ONNX
  model, LimitError for a model of MAX_MODEL_BYTES or more, UnsupportedError for an operator or
  opset kernelgen does not implement.
  """
  raw, base_dir = data.read_limited(src)
  try:
    mp = proto.parse_model(raw)
  except (struct.error, RecursionError) as e:
    raise ModelError(f"not a readable ONNX model: {e}") from None
  return Model(mp, base_dir, float64, dims)


__all__ = ["load", "Model"]
