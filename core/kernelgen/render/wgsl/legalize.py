"""WGSL legalize: typed errors for what WGSL cannot do (64-bit types, tensor cores, subgroups
the device lacks, too many buffers), then the target's rewrite rules on the kernel graph.
"""
from __future__ import annotations

from ...dtype import PtrDType, dtypes
from ...errors import UnsupportedError
from ...uop.ops import Ops, UOp, describe, sink_order
from ...uop.pattern import PatternMatcher, UPat, graph_rewrite
from ...uop.verify import verify_node
from ...rules.transcendental import FLOAT32
from .target import NO_WGSL_TYPE, TARGET, check_buffer_count, make_options


def _isnan_bits(x: UOp) -> UOp:
  bits = x.cast(dtypes.float32.vec(x.dtype.count)).bitcast(dtypes.uint32.vec(x.dtype.count))
  magnitude = bits & 0x7FFFFFFF
  return magnitude.const_like(0x7F800000).lt(magnitude)


# Rules on the graph. (8/16-bit wrapping and f16 rounding are done as each op is rendered: a
# graph rule would read an accumulator through a new node the linearizer may hoist out of its loop.)
LEGALIZE = PatternMatcher([
  # x != x on floats -> a bit test (a shader compiler may fold x != x to false)
  (UPat(Ops.CMPNE, src=(UPat.var("x"), UPat.var("x")),
        custom=lambda u: u.src[0].dtype.is_float()), _isnan_bits),
  # sin, cos, log2 -> range reduction and polynomial in f32, a few ulp (unless fast_math: builtins)
  (UPat((Ops.SIN, Ops.COS, Ops.LOG2), name="x"),
   lambda ctx, x: None if ctx.fast_math else FLOAT32[x.op](x.src[0])),
])


# the ops a LEGALIZE rule can rewrite: a graph without any is already legal
_LEGALIZE_OPS = frozenset(op for op, rules in LEGALIZE.by_op.items() if rules)


# the ops legalize looks at beyond verifying and dtypes
_NOTED = _LEGALIZE_OPS | {Ops.WMMA, Ops.PARAM, Ops.SUBGROUP_REDUCE, Ops.QUAD_BROADCAST}

_SUBGROUP_OPS = (Ops.SUBGROUP_REDUCE, Ops.QUAD_BROADCAST)

HAS_TYPE: dict = {}   # dtype -> WGSL has a type for it (dtypes are interned: one entry each)


def check_dtype(u: UOp) -> None:
  ok = HAS_TYPE.get(u.dtype)
  if ok is None:
    dt = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
    ok = HAS_TYPE[u.dtype] = dt is None or dt.scalar.name not in NO_WGSL_TYPE
  if ok:
    return
  dt = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
  if dt is not None and dt.scalar.name in NO_WGSL_TYPE:
    raise UnsupportedError(
      f"{dt.scalar.name} is not available on target 'wgsl' (WebGPU has no {dt.scalar.name} "
      f"type): {NO_WGSL_TYPE[dt.scalar.name]}\n{describe(u)}", target=TARGET, dtype=dt.scalar)


def legalize(sink: UOp, **options) -> UOp:
  """The kernel graph made WGSL-legal; typed errors for what WGSL cannot do."""
  opts = make_options(options)
  params = set()
  rewrites = False
  has_type = HAS_TYPE
  for u in sink_order(sink):   # sources first: each node is verified here too (verify.py)
    if not u._verified:
      verify_node(u)
    if not has_type.get(u.dtype):
      check_dtype(u)
    op = u.op
    if op not in _NOTED:
      continue
    if op is Ops.WMMA:
      raise UnsupportedError("tensor-core ops (WMMA) do not exist in WGSL: compile without "
                             "tensor cores for 'wgsl', or use target 'ptx'", target=TARGET)
    if op is Ops.PARAM:
      params.add(u.arg)
    if op in _SUBGROUP_OPS and not opts.subgroups:
      raise UnsupportedError("this kernel uses subgroup operations, and the renderer was not told "
                             "the device has subgroups: compile with subgroups=True only for a "
                             "device with the `subgroups` feature", target=TARGET)
    rewrites = rewrites or op in _LEGALIZE_OPS
  # more than storage and uniform buffers together never fit (render checks the storage count,
  # the small read-only inputs bound as uniform buffers left out: target.py uniform_slots)
  check_buffer_count(len(params) - max(opts.max_uniform_buffers - 1, 0), opts)
  return graph_rewrite(sink, LEGALIZE, ctx=opts) if rewrites else sink
