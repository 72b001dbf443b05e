"""Sibling projections joined at load (issue 35): MatMul (or com.microsoft MatMulNBits) nodes
that read the same input tensor with constant weights (a layer's q, k and v projections of its
normed hidden state; the MLP's gate and up) become one node over their weights concatenated
along N, computed by one kernel per step; its output's columns are sliced for each sibling's
readers (views, fused into what reads them). A decode layer's dispatches drop by the siblings
less one per group.

Joined only where exact: the same input name, the same operator, domain and attributes but N;
every weight (and MatMulNBits' scales, zero points and bias) an initializer read by this node
alone (no other node, subgraph, graph output or input that may override it needs it as its
own buffer), of the same dtype
and, for MatMul, 2-D with the same K; MatMulNBits' bits, block size and K equal, no g_idx, the
same optional inputs present. Each output element is the same sum over K as before.

Not joined: siblings whose outputs meet in an elementwise expression (the MLP's silu(gate) * up).
The scheduler already computes the product in the second projection's epilogue (where the
projections are matmuls of a prompt's rows: their kernels' tiles, schedule.py), or for one row the
pair and its activation in one kernel; joined, the product would be left to every reader of the
slices (the down projection recomputed silu(gate) * up per output: fp32 SmolLM2 widths on
lavapipe, its down projection 1.5 -> 3.0 ms a layer), for one dispatch saved at most.

The joined initializer replaces its parts in Model.initializers (its bytes are theirs,
concatenated along N), and the parts' tensors are dropped from Model.proto's graph: the weight
bytes the model holds do not grow (the parts are not kept alive beside the whole).
"""
from __future__ import annotations

from .proto import AttributeProto, NodeProto

# the domain of a joined node: its operator is the siblings' (operators/weights.py computes it)
JOINED = "kernelgen.joined"
MS = "com.microsoft"
# MatMulNBits' inputs that are per-row data joined along N, with the bytes each row takes
_NBITS_ROWS = (1, 2, 3, 5)


def join(model) -> None:
  """Join `model`'s sibling projections in place (model.nodes, model.initializers, the
  proto's initializer list)."""
  readers: dict = {}
  for node in model.nodes:
    for name in node.inputs + node.captures:
      readers.setdefault(name, set()).add(id(node))
  kept = set(model.output_names) | {v.name for v in model.proto.graph.input}
  groups: dict = {}
  for node in model.nodes:
    key = _key(model, node, readers, kept)
    if key is not None:
      groups.setdefault(key, []).append(node)
  consumers: dict = {}
  for node in model.nodes:
    for name in node.inputs:
      consumers.setdefault(name, []).append(node)
  groups = {key: g for key, g in groups.items() if len(g) > 1 and not _meet(g, consumers)}
  joined = {id(g[0]): _joined_node(model, g) for g in groups.values()}
  if not joined:
    return
  gone = {id(n) for g in groups.values() for n in g[1:]}
  model.nodes = [joined.get(id(n), n) for n in model.nodes if id(n) not in gone]
  model._producers = None
  graph = model.proto.graph
  graph.initializer[:] = [t for t in graph.initializer if t.name in model.initializers]


# the operators through which two siblings' outputs are looked for a meeting (an activation and
# the product of a gated MLP); any other reader ends the walk
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Neg", "Sigmoid", "Tanh", "Relu", "Erf",
                          "Gelu", "FastGelu", "QuickGelu", "BiasGelu", "Silu", "Swish", "Softplus",
                          "HardSigmoid", "HardSwish", "Cast", "Where"})


def _meet(group: list, consumers: dict, depth: int = 3) -> bool:
  """Whether two of `group`'s outputs are read by one elementwise node within `depth` steps of
  elementwise nodes from each."""
  seen: dict = {}
  for node in group:
    frontier, reached = list(node.outputs), set()
    for _ in range(depth):
      nxt = []
      for name in frontier:
        for reader in consumers.get(name, ()):
          if reader.op in _ELEMENTWISE and id(reader) not in reached:
            reached.add(id(reader))
            nxt += reader.outputs
      frontier = nxt
    if any(seen.get(r, node) is not node for r in reached):
      return True
    seen.update((r, node) for r in reached)
  return False


def _key(model, node, readers: dict, kept: set):
  """What a node must share with its siblings to be joined with them, or None where it may not
  be joined at all (kept: the graph's output and input names, never joined)."""
  inits = model.initializers
  if node.subgraphs or len(node.outputs) != 1 or not node.inputs or not node.inputs[0]:
    return None
  if (node.proto.domain, node.op) == ("", "MatMul") and len(node.inputs) == 2:
    w = inits.get(node.inputs[1])
    if w is None or len(w[1]) != 2 or not w[0].is_float():
      return None
    params = (w[0], w[1][0])
  elif (node.proto.domain, node.op) == (MS, "MatMulNBits"):
    params = _nbits_params(model, node)
    if params is None:
      return None
  else:
    return None
  consts = [n for n in node.inputs[1:] if n]
  if any(n in kept or readers.get(n) != {id(node)} for n in consts) or \
     len(set(consts)) != len(consts) or node.inputs[0] in consts:
    return None
  return (node.proto.domain, node.op, node.opset, node.inputs[0], params)


def _nbits_params(model, node):
  """(the attributes but N, which optional inputs, their dtypes) of a MatMulNBits whose
  per-row inputs are initializers of whole rows, else None."""
  ins, inits, at = node.inputs, model.initializers, node.attrs
  n, k, bits, block = at.int("N"), at.int("K"), at.int("bits", 4), at.int("block_size")
  if not n or not k or bits not in (4, 8) or not block or block & (block - 1):
    return None
  if len(ins) > 4 and ins[4] or len(ins) < 3:
    return None                      # g_idx (act-order): not joined
  present = tuple(i for i in _NBITS_ROWS if i < len(ins) and ins[i])
  if any(ins[i] not in inits or len(inits[ins[i]][2]) % n or
         len(inits[ins[i]][1]) > 1 and inits[ins[i]][1][0] != n for i in present):
    return None
  blocks = -(-k // block)
  if len(inits[ins[1]][2]) != n * blocks * block * bits // 8 or \
     len(inits[ins[2]][2]) != n * blocks * inits[ins[2]][0].itemsize:
    return None
  others = tuple(sorted((name, tuple(v) if isinstance(v, list) else v)
                       for name, (_, v) in at.values.items() if name != "N"))
  return (others, present, tuple(inits[ins[i]][0] for i in present),
          tuple(len(inits[ins[i]][1]) for i in present),
          tuple(inits[ins[i]][1][1:] for i in present))


def _joined_node(model, group: list):
  """The one node computing `group`'s outputs; its joined initializers replace the parts."""
  first = group[0]
  widths = [node.attrs.int("N") if first.op != "MatMul" else
            model.initializers[node.inputs[1]][1][1] for node in group]
  inputs = [first.inputs[0]]
  for i, name in enumerate(first.inputs[1:], 1):
    parts = [node.inputs[i] for node in group]
    inputs.append(_join_initializer(model, parts, first.op == "MatMul") if name else "")
  attrs = [a for a in first.proto.attribute if a.name != "N"]
  if first.op != "MatMul":
    attrs.append(AttributeProto(name="N", type=2, i=sum(widths)))
  attrs.append(AttributeProto(name="splits", type=7, ints=widths))
  proto = NodeProto(op_type=first.op, domain=JOINED, input=inputs,
                    output=[o for node in group for o in node.outputs],
                    name="+".join(node.name for node in group), attribute=attrs)
  return type(first)(proto, 0, first.opset)     # model.Node (not imported: model imports us)


def _join_initializer(model, parts: list, columns: bool) -> str:
  """The name of `parts`' initializers concatenated along N, held in their place: MatMul's
  (K, N_i) weights side by side (columns), MatMulNBits' per-row data one after another."""
  inits = model.initializers
  dtype, shape, _ = inits[parts[0]]
  name = "+".join(parts)
  while name in inits:
    name += "+"
  datas = [inits.pop(p) for p in parts]
  if columns:
    k, item = shape[0], dtype.itemsize
    rows = [(d[2], d[1][1] * item) for d in datas]
    raw = b"".join(data[r * w:(r + 1) * w] for r in range(k) for data, w in rows)
    inits[name] = (dtype, (k, sum(d[1][1] for d in datas)), raw)
  else:
    lead = sum(d[1][0] for d in datas) if len(shape) > 1 else sum(len(d[2]) for d in datas) \
      // dtype.itemsize
    inits[name] = (dtype, (lead, *shape[1:]), b"".join(d[2] for d in datas))
  return name


__all__ = ["JOINED", "join"]
