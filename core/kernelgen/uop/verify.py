"""The verifier: checks the invariants of a UOp graph (IR.md) and names the node that breaks one."""
from __future__ import annotations

from typing import Iterable

from ..dtype import DType, PtrDType, dtypes
from ..errors import VerifyError
from .ops import GroupOp, Ops, UOp, describe, set_verified

_SRC_COUNT = {Ops.PARAM: (0,), Ops.VAR: (0,), Ops.DEFINE_LOCAL: (0,), Ops.SPECIAL: (0,),
              Ops.CONST: (0,), Ops.RANGE: (1,), Ops.IF: (1,), Ops.ENDIF: (1,),
              Ops.ASSIGN: (2,), Ops.LOAD: (2, 4), Ops.STORE: (3, 4), Ops.GEP: (1,),
              Ops.WMMA: (3,), Ops.WHERE: (3,), Ops.MULACC: (3,), Ops.CAST: (1,), Ops.BITCAST: (1,),
              Ops.SUBGROUP_REDUCE: (1,), Ops.QUAD_BROADCAST: (1,), Ops.ATOMIC_ADD: (3, 4)}

# SPECIAL kinds: workgroup id, thread id in the workgroup (dims 0..2), lane in the subgroup (dim 0)
_SPECIAL_KINDS = {"gid": 3, "lid": 3, "sglane": 1}


def _fail(node: UOp, why: str):
  raise VerifyError(f"{why}\n{describe(node)}")


_ARITY = {**{op: 1 for op in GroupOp.Unary}, **{op: 2 for op in GroupOp.Binary}}
# ops whose result dtype is their operands' and that take every kind of operand
_PLAIN_ALU = GroupOp.ALU - GroupOp.Comparison - GroupOp.IntOnly - GroupOp.Transcendental \
  - GroupOp.Bitwise - {Ops.WHERE}


def _check_alu(u: UOp):
  op, src = u.op, u.src
  if len(src) != _ARITY.get(op, len(src)):
    _fail(u, f"{u.op.name} has {len(u.src)} sources")
  if op in _PLAIN_ALU:      # the common case, checked in one go; the full checks name the error
    operand = src[0].dtype
    if u.dtype is operand:
      for s in src:
        if s.dtype is not operand:
          break
      else:
        return
  if u.op is Ops.WHERE:
    cond, x, y = u.src
    if cond.dtype.scalar != dtypes.bool:
      _fail(u, f"WHERE needs a bool condition, got {cond.dtype}")
    if not x.dtype == y.dtype == u.dtype:
      _fail(u, f"WHERE branches must have the result dtype: {x.dtype}, {y.dtype} -> {u.dtype}")
    return
  operand = u.src[0].dtype
  for s in u.src[1:]:
    if s.dtype != operand:
      _fail(u, f"{u.op.name} mixes operand dtypes {operand} and {s.dtype}; cast one of them first")
  want = dtypes.bool.vec(operand.count) if u.op in GroupOp.Comparison else operand
  if u.dtype != want:
    _fail(u, f"{u.op.name} of {operand} must give {want}, not {u.dtype}")
  if u.op in GroupOp.IntOnly and not operand.is_int():
    _fail(u, f"{u.op.name} needs integer operands, got {operand}")
  if u.op in GroupOp.Transcendental and not operand.is_float():
    _fail(u, f"{u.op.name} needs float operands, got {operand}")
  if u.op in GroupOp.Bitwise and operand.is_float():
    _fail(u, f"{u.op.name} needs integer or bool operands, got {operand}")


def _check_memory(u: UOp):
  buf = u.src[0]
  while buf.op is Ops.AFTER:
    buf = buf.src[0]
  if not isinstance(buf.dtype, PtrDType):
    _fail(u, f"{u.op.name} needs a buffer (PARAM or DEFINE_LOCAL) as source 0, got {buf.op.name}")
  if u.src[1].dtype != dtypes.int32:
    _fail(u, f"{u.op.name} index must be int32, got {u.src[1].dtype}")
  gate = u.src[2] if u.op is Ops.LOAD and len(u.src) == 4 else (
    u.src[3] if u.op is Ops.STORE and len(u.src) == 4 else None)
  if gate is not None and gate.dtype != dtypes.bool:
    _fail(u, f"{u.op.name} gate must be bool, got {gate.dtype}")
  value_dtype = u.dtype if u.op is Ops.LOAD else u.src[2].dtype
  if value_dtype.scalar != buf.dtype.base.scalar:
    _fail(u, f"{u.op.name} of {value_dtype} from a buffer of {buf.dtype.base}")
  if u.op is Ops.LOAD and len(u.src) == 4 and u.src[3].dtype != u.dtype:
    _fail(u, f"LOAD fallback value has dtype {u.src[3].dtype}, the load gives {u.dtype}")


def _check_subgroup(u: UOp):
  x = u.src[0].dtype
  if u.arg not in GroupOp.SubgroupReduce:
    _fail(u, f"SUBGROUP_REDUCE combines with one of "
             f"{', '.join(sorted(o.name for o in GroupOp.SubgroupReduce))}, not {u.arg!r}")
  if u.dtype != x or x.count != 1 or x == dtypes.bool:
    _fail(u, f"SUBGROUP_REDUCE takes a scalar number and gives its dtype: {x} -> {u.dtype}")
  if u.arg in GroupOp.Bitwise and not x.is_int():
    _fail(u, f"SUBGROUP_REDUCE {u.arg.name} needs an integer operand, got {x}")


# the scalar types a quad broadcast moves (alone or as a vector's lanes)
QUAD_SCALARS = frozenset({"float32", "int32", "uint32"})


def _check_quad(u: UOp):
  x = u.src[0].dtype
  if not isinstance(u.arg, int) or isinstance(u.arg, bool) or not 0 <= u.arg < 4:
    _fail(u, f"QUAD_BROADCAST reads lane 0..3 of the quad, not {u.arg!r}")
  if u.dtype != x or x.name not in QUAD_SCALARS or isinstance(x, PtrDType):
    _fail(u, f"QUAD_BROADCAST takes an int32/uint32/float32 value (or vector) and gives its "
             f"dtype: {x} -> {u.dtype}")


def _check_atomic(u: UOp):
  buf = u.src[0]
  while buf.op is Ops.AFTER:
    buf = buf.src[0]
  if buf.op is not Ops.DEFINE_LOCAL or buf.dtype.base not in (dtypes.int32, dtypes.uint32):
    _fail(u, "ATOMIC_ADD works on int32/uint32 workgroup memory (a DEFINE_LOCAL) only")
  if u.src[1].dtype != dtypes.int32:
    _fail(u, f"ATOMIC_ADD index must be int32, got {u.src[1].dtype}")
  if not u.dtype == u.src[2].dtype == buf.dtype.base:
    _fail(u, f"ATOMIC_ADD adds and gives the buffer's {buf.dtype.base}: "
             f"{u.src[2].dtype} -> {u.dtype}")
  if len(u.src) == 4 and u.src[3].dtype != dtypes.bool:
    _fail(u, f"ATOMIC_ADD gate must be bool, got {u.src[3].dtype}")


_NO_DTYPE = frozenset({Ops.STORE, Ops.SINK, Ops.ENDRANGE, Ops.ENDIF, Ops.IF, Ops.BARRIER})


def _check_int32(u: UOp):
  if u.dtype != dtypes.int32:
    _fail(u, f"{u.op.name} must be int32, got {u.dtype}")


def _check_special(u: UOp):
  if not isinstance(u.arg, tuple) or len(u.arg) != 3 or \
     not 0 <= u.arg[1] < _SPECIAL_KINDS.get(u.arg[0], 0):
    _fail(u, f"SPECIAL arg must be (kind, dim, extent) with kind gid/lid (dim 0..2) or "
             f"sglane (dim 0), got {u.arg!r}")
  _check_int32(u)


def _check_range(u: UOp):
  _check_int32(u)
  if u.src[0].dtype != dtypes.int32:
    _fail(u, f"RANGE end must be int32, got {u.src[0].dtype}")


def _check_assign(u: UOp):
  if u.src[0].op is not Ops.DEFINE_ACC or u.src[1].dtype != u.src[0].dtype:
    _fail(u, "ASSIGN writes a value of the accumulator's dtype into a DEFINE_ACC")


def _check_endrange(u: UOp):
  if not u.src or u.src[0].op is not Ops.RANGE:
    _fail(u, "ENDRANGE must name the RANGE it closes as its first source")


def _check_vectorize(u: UOp):
  if u.dtype.count != len(u.src) or any(s.dtype != u.dtype.scalar for s in u.src):
    _fail(u, f"VECTORIZE to {u.dtype} needs {u.dtype.count} sources of {u.dtype.scalar}")


def _check_gep(u: UOp):
  if not 0 <= u.arg < u.src[0].dtype.count:
    _fail(u, f"GEP lane {u.arg} of a {u.src[0].dtype}")


def _check_bitcast(u: UOp):
  if u.dtype.nbytes != u.src[0].dtype.nbytes:
    _fail(u, f"BITCAST needs equal widths: {u.src[0].dtype} to {u.dtype}")


def _check_const(u: UOp):
  if not isinstance(u.arg, (bool, int, float)):
    _fail(u, f"CONST holds {type(u.arg).__name__}, not a number")


# the checks of each op beyond source counts and dtypes (ALU ops: _check_alu)
_CHECKS = {Ops.LOAD: _check_memory, Ops.STORE: _check_memory,
           Ops.SUBGROUP_REDUCE: _check_subgroup, Ops.ATOMIC_ADD: _check_atomic,
           Ops.QUAD_BROADCAST: _check_quad,
           Ops.SPECIAL: _check_special, Ops.RANGE: _check_range,
           Ops.VAR: _check_int32, Ops.ASSIGN: _check_assign, Ops.ENDRANGE: _check_endrange,
           Ops.VECTORIZE: _check_vectorize, Ops.GEP: _check_gep, Ops.BITCAST: _check_bitcast,
           Ops.CONST: _check_const}
_ALU = GroupOp.ALU


def _check_node(u: UOp):
  op = u.op
  counts = _SRC_COUNT.get(op)
  if counts is not None and len(u.src) not in counts:
    _fail(u, f"{op.name} takes {' or '.join(map(str, counts))} sources, not {len(u.src)}")
  if op not in _NO_DTYPE and not isinstance(u.dtype, DType):
    _fail(u, f"{op.name} has no dtype (got {u.dtype!r}); every value node needs one")
  if op in _ALU:
    _check_alu(u)
    return
  check = _CHECKS.get(op)
  if check is not None:
    check(u)


# A node's validity depends only on itself and its (immutable) sources, so an interned node
# checked once stays valid: verify marks it (UOp._verified) and never checks it again.

def verify(roots: UOp | Iterable[UOp]) -> None:
  """Check every node reachable from `roots`; raises VerifyError naming the first bad node."""
  stack = [roots] if isinstance(roots, UOp) else list(roots)
  pending: list[UOp] = []
  seen: set[UOp] = set()
  while stack:
    u = stack.pop()
    if not isinstance(u, UOp):
      raise VerifyError(f"not a UOp in the graph: {u!r}")
    if u._verified or u in seen:
      continue
    seen.add(u)
    pending.append(u)
    stack.extend(u.src)
  for u in reversed(pending):   # sources before users, so the first error is the deepest
    _check_node(u)
    set_verified(u, True)


def verify_node(u: UOp) -> None:
  """Check one node whose sources are checked (a walk in toposort order, e.g. a target's
  legalize, verifies as it goes; `verify` then stops at the checked nodes)."""
  if not u._verified:
    _check_node(u)
    set_verified(u, True)


# the ops verify_linear checks the blocks of (those in uniform control flow only, block brackets)
_BLOCKS = frozenset({Ops.SUBGROUP_REDUCE, Ops.QUAD_BROADCAST, Ops.BARRIER, Ops.RANGE, Ops.IF,
                     Ops.ENDRANGE, Ops.ENDIF})


_UNIFORM = (Ops.SUBGROUP_REDUCE, Ops.QUAD_BROADCAST, Ops.BARRIER)


def verify_linear(uops: list[UOp]) -> None:
  """Check a linearized kernel: nodes valid, sources first, blocks properly nested."""
  placed: set[UOp] = set()
  place = placed.add
  open_blocks: list[UOp] = []
  for u in uops:
    if not u._verified:
      _check_node(u)
      set_verified(u, True)
    if not placed.issuperset(u.src):
      s = next(s for s in u.src if s not in placed)
      _fail(u, f"source {s.op.name} is not placed before its user")
    place(u)
    if u.op not in _BLOCKS:
      continue
    if u.op in _UNIFORM and any(b.op is Ops.IF for b in open_blocks):
      _fail(u, f"{u.op.name} inside an IF block: it must be reached by every thread of the "
               f"workgroup (uniform control flow)")
    if u.op in (Ops.RANGE, Ops.IF):
      open_blocks.append(u)
    elif u.op in (Ops.ENDRANGE, Ops.ENDIF):
      if not open_blocks or open_blocks[-1] is not u.src[0]:
        _fail(u, f"{u.op.name} does not close the innermost open block")
      open_blocks.pop()
  if open_blocks:
    _fail(open_blocks[-1], f"{open_blocks[-1].op.name} is never closed")
