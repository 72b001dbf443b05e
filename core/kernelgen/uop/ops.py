"""The IR: the `Ops` enum and the immutable, interned `UOp` node, with one printer.

A UOp is `(op, dtype, src, arg)`. Nodes are interned: building a node equal to an existing one
returns that same object, so identity is structural equality, and `is`/hash are cheap.
Operator overloads build graphs (`a + b`, `a * 2`, `a.lt(b)`); Python numbers become constants
of the other operand's dtype.

The lowered-kernel contract (what the lowering produces, the linearizer orders, and the
interpreter and renderers consume) is written next to each op below and in IR.md.
"""
from __future__ import annotations

import math
import weakref
from enum import Enum, auto
from typing import Iterable, Iterator

from ..dtype import DType, PtrDType, dtypes, max_value, min_value, truncate
from ..errors import DTypeError


class Ops(Enum):
  # ---- kernel arguments and definitions ----
  PARAM = auto()         # a global buffer argument; dtype ptr; arg = binding slot (int)
  VAR = auto()           # a scalar int32 kernel argument; arg = (name, min, max)
  DEFINE_LOCAL = auto()  # workgroup memory; dtype local ptr; arg = id (int)
  DEFINE_ACC = auto()    # a mutable register; src = (init, *ranges it is reset in); arg = id
  SPECIAL = auto()       # a thread index, int32; arg = ("gid"|"lid"|"sglane", dim 0..2, extent)
  CONST = auto()         # a constant; arg = Python value already truncated to dtype

  # ---- loops and control ----
  RANGE = auto()         # loop counter 0..end-1, int32; src = (end,); arg = id (int)
  ENDRANGE = auto()      # closes a loop; src = (range, *side effects that belong inside it)
  IF = auto()            # src = (bool condition,); made by the linearizer from gated stores
  ENDIF = auto()         # src = (if,)
  BARRIER = auto()       # workgroup barrier; src = (*stores it must follow)
  AFTER = auto()         # src[0] (value or buffer) as it is after src[1:] happened; renders as src[0]
  SINK = auto()          # the kernel's root; src = (*stores)
  ASSIGN = auto()        # write src[1] into the DEFINE_ACC src[0]; its value is src[1]

  # ---- memory ----
  LOAD = auto()          # src = (buf, index) | (buf, index, gate, alt); index counts elements
  STORE = auto()         # src = (buf, index, value) | (buf, index, value, gate); no dtype

  # ---- unary ----
  NEG = auto()           # -x
  NOT = auto()           # logical not (bool) / bitwise not (ints)
  EXP2 = auto()          # 2**x; arg None or one of EXP2_BOUNDS (what is known of x)
  LOG2 = auto()          # log2(x)
  SIN = auto()           # sin(x)
  COS = auto()           # cos(x)
  SQRT = auto()          # sqrt(x)
  RECIP = auto()         # 1/x
  TRUNC = auto()         # round toward zero, float -> same float type
  CAST = auto()          # value conversion to dtype (C semantics, float->int truncates)
  BITCAST = auto()       # reinterpret the bits as dtype (same width)

  # ---- binary ----
  ADD = auto()
  SUB = auto()
  MUL = auto()
  IDIV = auto()          # integer division truncating toward zero (C); ints only
  MOD = auto()           # remainder with the sign of the dividend (C); ints only
  FDIV = auto()          # float division
  MAX = auto()
  MIN = auto()
  CMPLT = auto()         # a < b -> bool
  CMPEQ = auto()         # a == b -> bool
  CMPNE = auto()         # a != b -> bool (true when either is NaN)
  AND = auto()
  OR = auto()
  XOR = auto()
  SHL = auto()           # shift left; shift amounts are taken modulo the bit width
  SHR = auto()           # shift right: arithmetic for signed, logical for unsigned

  # ---- ternary ----
  WHERE = auto()         # src = (bool cond, x if true, y if false)
  MULACC = auto()        # a * b + c (fused for floats)

  # ---- vectors ----
  VECTORIZE = auto()     # a vector of dtype.count lanes from scalar sources
  GEP = auto()           # lane `arg` (int) of a vector

  # ---- subgroups and atomics (grouped reductions; only where the device has subgroups) ----
  SUBGROUP_REDUCE = auto()  # src = (x,); arg = ADD|MUL|MAX|MIN|AND|OR|XOR: x combined over the
                            # active threads of this thread's subgroup; uniform control flow only
  QUAD_BROADCAST = auto()   # src = (x,); arg = j (0..3): x as lane (sglane & ~3) + j of this
                            # thread's quad has it (WGSL quadBroadcast); the quad's 4 lanes all
                            # active (uniform control flow); int32/uint32/float32 scalars, vectors
  ATOMIC_ADD = auto()    # src = (local buf, index, value[, gate]): buf[index] += value atomically;
                         # gives buf[index] before the add (0 where the gate is false: no add);
                         # int32/uint32 workgroup memory only

  # ---- tensor cores ----
  WMMA = auto()          # warp matrix multiply-accumulate; src = (a, b, c); arg = WmmaArg

  # Members are singletons compared by identity, so identity hashing is exact — and much
  # cheaper than Enum's name-based __hash__, which every dict/set lookup of an op pays.
  __hash__ = object.__hash__


# EXP2's arg: what the Lowerer knows of the argument x, so that a renderer may skip the guards its
# exp2 needs elsewhere (overflow, NaN); renderers that need none ignore it
EXP2_NONPOSITIVE = "nonpositive"   # x <= 0, -inf or NaN (softmax's (x - max(x)) * c): never above 0
EXP2_NAN_UNREAD = "nan_unread"     # as EXP2_NONPOSITIVE, and where x is NaN the result is never
                                   # read (any value will do: the online softmax's sum, made NaN
                                   # afterwards wherever a NaN entered it)
EXP2_BOUNDS = (EXP2_NONPOSITIVE, EXP2_NAN_UNREAD)


class GroupOp:
  Unary = frozenset({Ops.NEG, Ops.NOT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT, Ops.RECIP,
                     Ops.TRUNC})
  Binary = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.MAX, Ops.MIN,
                      Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})
  Ternary = frozenset({Ops.WHERE, Ops.MULACC})
  ALU = Unary | Binary | Ternary
  Comparison = frozenset({Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE})
  Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN, Ops.CMPEQ, Ops.CMPNE, Ops.AND,
                           Ops.OR, Ops.XOR})
  Transcendental = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT, Ops.RECIP})
  Defines = frozenset({Ops.PARAM, Ops.VAR, Ops.DEFINE_LOCAL, Ops.DEFINE_ACC})
  Buffers = frozenset({Ops.PARAM, Ops.DEFINE_LOCAL})
  IntOnly = frozenset({Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR})
  SubgroupReduce = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN, Ops.AND, Ops.OR, Ops.XOR})
  Bitwise = frozenset({Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.NOT})


def _arg_key(arg):
  """A hashable key that tells apart args Python considers equal (0.0/-0.0, 1/1.0/True, NaNs)."""
  if isinstance(arg, float):
    return ("f", arg.hex())
  if isinstance(arg, bool):
    return ("b", arg)
  if isinstance(arg, tuple):
    return tuple(_arg_key(a) for a in arg)
  return arg


_I32 = dtypes.int32
# int32 constants up to +-_SMALL, kept for the process (index math builds them all the time);
# nodes are interned, so this only saves looking them up
_SMALL, _SMALL_I32 = 1 << 16, {}
# the slots a built node may still set
_CACHES = frozenset({"_vrange", "_verified", "_sum", "_simple"})


class _Interned(type):
  # key -> weak reference to the live node; a node's entry goes when the node does. (A plain dict
  # of KeyedRefs: WeakValueDictionary.get is Python code, and this lookup runs per node built.)
  _cache: dict = {}

  def __call__(cls, op: Ops, dtype: DType = None, src: tuple = (), arg=None):
    key = (op, dtype, src, arg if arg is None or type(arg) is int else _arg_key(arg))
    ref = _CACHE.get(key)
    if ref is not None:
      node = ref()
      if node is not None:
        return node
    node = _object_new(cls)   # slots written directly, past __setattr__ (runs per node built)
    _set_op(node, op)
    _set_dtype(node, dtype)
    _set_src(node, src if src.__class__ is tuple else tuple(src))
    _set_arg(node, arg)
    _set_vrange(node, None)
    _set_verified(node, False)
    _set_sum(node, None)
    _set_simple(node, None)
    ref = _CACHE[key] = _KeyedRef(node, _forget)
    ref.key = key
    return node


class _KeyedRef(weakref.ref):
  """A weak reference that knows its cache key (weakref.KeyedRef builds itself in Python)."""
  __slots__ = ("key",)


_CACHE = _Interned._cache


def _forget(ref, cache=_CACHE, pop=_CACHE.pop):
  """A node died: drop its entry (unless the key already names a newer node: put that back)."""
  got = pop(ref.key, None)
  if got is not ref and got is not None:
    cache[ref.key] = got


class UOp(metaclass=_Interned):
  """One IR node. Immutable and interned; compare with `is` (== is not overloaded)."""
  __slots__ = ("op", "dtype", "src", "arg", "_vrange", "_verified", "_sum", "_simple",
               "__weakref__")

  # built by the interning metaclass, which writes the slots directly. Caches of facts that
  # depend only on the node and its sources: _vrange its value range (rules/ranges.py), _sum its
  # linear form (rules/symbolic.py), _simple what `simplify` made of it (pattern.py,
  # memo=True: the node itself as SIMPLE, so no node keeps itself alive); _verified is set by
  # verify.py once the node passed its checks

  def __setattr__(self, name, value):
    if name not in _CACHES:
      raise AttributeError("UOp is immutable: build a new node with .replace(...)")
    object.__setattr__(self, name, value)

  def __reduce__(self):
    return UOp, (self.op, self.dtype, self.src, self.arg)

  def replace(self, **kw) -> UOp:
    return UOp(kw.get("op", self.op), kw.get("dtype", self.dtype), kw.get("src", self.src),
               kw.get("arg", self.arg))

  def __repr__(self) -> str:
    return print_graph(self)

  # ---- construction helpers ----
  @staticmethod
  def const(dtype: DType, value) -> UOp:
    """A constant; a vector dtype gives a VECTORIZE of equal scalar constants."""
    if dtype is _I32 and type(value) is int:   # the common index constant: nothing to truncate
      got = _SMALL_I32.get(value)
      if got is not None:
        return got
      if -0x80000000 <= value <= 0x7FFFFFFF:
        node = UOp(Ops.CONST, dtype, (), value)
        if -_SMALL <= value <= _SMALL:
          _SMALL_I32[value] = node
        return node
    if dtype.count > 1:
      c = UOp.const(dtype.scalar, value)
      return UOp(Ops.VECTORIZE, dtype, (c,) * dtype.count)
    return UOp(Ops.CONST, dtype, (), truncate(value, dtype))

  def _operand(self, x) -> UOp:
    return x if isinstance(x, UOp) else UOp.const(self.dtype, x)

  def alu(self, op: Ops, *others) -> UOp:
    if len(others) == 1:      # the common binary case, without a generator
      o = others[0]
      srcs = (self, o if o.__class__ is UOp else UOp.const(self.dtype, o))
    else:
      srcs = (self,) + tuple(self._operand(o) for o in others)
    dtype = dtypes.bool.vec(self.dtype.count) if op in GroupOp.Comparison else srcs[-1].dtype
    if op is Ops.WHERE:
      dtype = srcs[1].dtype
    return UOp(op, dtype, srcs)

  def cast(self, dtype: DType) -> UOp:
    return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))

  def bitcast(self, dtype: DType) -> UOp:
    return self if self.dtype == dtype else UOp(Ops.BITCAST, dtype, (self,))

  def where(self, x, y) -> UOp:
    x = x if isinstance(x, UOp) else (y.const_like(x) if isinstance(y, UOp) else x)
    y = y if isinstance(y, UOp) else x.const_like(y)
    return UOp(Ops.WHERE, x.dtype, (self, x, y))

  def const_like(self, value) -> UOp:
    return UOp.const(self.dtype, value)

  def gep(self, i: int) -> UOp:
    return self if self.dtype.count == 1 else UOp(Ops.GEP, self.dtype.scalar, (self,), i)

  def load(self, index, gate: UOp | None = None, alt=None, dtype: DType | None = None) -> UOp:
    dtype = dtype or self.dtype.base
    index = index if isinstance(index, UOp) else UOp.const(dtypes.int32, index)
    if gate is None:
      return UOp(Ops.LOAD, dtype, (self, index))
    alt = alt if isinstance(alt, UOp) else UOp.const(dtype, 0 if alt is None else alt)
    return UOp(Ops.LOAD, dtype, (self, index, gate, alt))

  def store(self, index, value: UOp, gate: UOp | None = None) -> UOp:
    index = index if isinstance(index, UOp) else UOp.const(dtypes.int32, index)
    return UOp(Ops.STORE, None, (self, index, value) + ((gate,) if gate is not None else ()))

  # ---- operators ----
  def __add__(self, x): return self.alu(Ops.ADD, x)
  def __radd__(self, x): return self._operand(x).alu(Ops.ADD, self)
  def __sub__(self, x): return self.alu(Ops.SUB, x)
  def __rsub__(self, x): return self._operand(x).alu(Ops.SUB, self)
  def __mul__(self, x): return self.alu(Ops.MUL, x)
  def __rmul__(self, x): return self._operand(x).alu(Ops.MUL, self)
  def __floordiv__(self, x): return self.alu(Ops.IDIV, x)   # C division; see IR.md
  def __mod__(self, x): return self.alu(Ops.MOD, x)         # C remainder; see IR.md
  def __truediv__(self, x): return self.alu(Ops.FDIV, x)
  def __neg__(self): return UOp(Ops.NEG, self.dtype, (self,))
  def __and__(self, x): return self.alu(Ops.AND, x)
  def __or__(self, x): return self.alu(Ops.OR, x)
  def __xor__(self, x): return self.alu(Ops.XOR, x)
  def __lshift__(self, x): return self.alu(Ops.SHL, x)
  def __rshift__(self, x): return self.alu(Ops.SHR, x)
  def __invert__(self): return UOp(Ops.NOT, self.dtype, (self,))
  def lt(self, x): return self.alu(Ops.CMPLT, x)
  def ge(self, x): return UOp(Ops.NOT, dtypes.bool.vec(self.dtype.count), (self.lt(x),))
  def eq(self, x): return self.alu(Ops.CMPEQ, x)
  def ne(self, x): return self.alu(Ops.CMPNE, x)
  def maximum(self, x): return self.alu(Ops.MAX, x)
  def minimum(self, x): return self.alu(Ops.MIN, x)
  def __bool__(self):
    raise TypeError("a UOp has no truth value; compare with `is`, or build a comparison node")

  # ---- graph queries ----
  def toposort(self) -> list[UOp]:
    return toposort([self])

  @property
  def const_value(self):
    return self.arg if self.op is Ops.CONST else None


_SET = {n: UOp.__dict__[n].__set__ for n in UOp.__slots__ if n != "__weakref__"}


# writers of the cache slots that skip UOp.__setattr__ (hot: a value range per index node)
set_vrange, set_verified, set_sum = _SET["_vrange"], _SET["_verified"], _SET["_sum"]
set_simple = _SET["_simple"]
# what the interning metaclass builds a node with (module globals, bound once UOp exists)
_object_new = object.__new__
_set_op, _set_dtype, _set_src, _set_arg = _SET["op"], _SET["dtype"], _SET["src"], _SET["arg"]
_set_vrange, _set_verified, _set_sum, _set_simple = set_vrange, set_verified, set_sum, set_simple


def toposort(roots: Iterable[UOp]) -> list[UOp]:
  """Every node reachable from `roots`, each after its sources; deterministic, iterative.
  (Depth-first, sources in order: a node goes in when its last source is done.)"""
  order: list[UOp] = []
  seen: set[UOp] = set()    # UOps hash by identity
  add, emit = seen.add, order.append
  for root in roots:
    if root in seen:
      continue
    add(root)
    stack = [(root, iter(root.src))]
    push, pop = stack.append, stack.pop
    while stack:
      node, it = stack[-1]
      for s in it:
        if s not in seen:
          add(s)
          push((s, iter(s.src)))
          break
      else:
        pop()
        emit(node)
  return order


# ---- printing --------------------------------------------------------------------------------

def _fmt_arg(arg) -> str:
  if isinstance(arg, float):
    return repr(arg) if math.isfinite(arg) else {"inf": "inf", "-inf": "-inf"}.get(repr(arg), "nan")
  if isinstance(arg, Enum):
    return arg.name.lower()
  return repr(arg)


def format_node(node: UOp, names: dict[UOp, str]) -> str:
  """One line: `%3 = add %1, %2 : float32`, with the arg in brackets when there is one."""
  operands = ", ".join(names.get(s, "?") for s in node.src)
  text = f"{names[node]} = {node.op.name.lower()}"
  if node.arg is not None:
    text += f" [{_fmt_arg(node.arg)}]"
  if operands:
    text += " " + operands
  if node.dtype is not None:
    text += f" : {node.dtype}"
  return text


def print_uops(uops: Iterable[UOp]) -> str:
  """The printed form of an ordered list of nodes (a linearized kernel), one per line."""
  uops = list(uops)
  names = {u: f"%{i}" for i, u in enumerate(uops)}
  depth, lines = 0, []
  for u in uops:
    if u.op in (Ops.ENDRANGE, Ops.ENDIF):
      depth -= 1
    lines.append("  " * max(depth, 0) + format_node(u, names))
    if u.op in (Ops.RANGE, Ops.IF):
      depth += 1
  return "\n".join(lines)


def print_graph(root: UOp) -> str:
  """The printed form of the graph under `root`, sources first."""
  order = toposort([root])
  names = {u: f"%{i}" for i, u in enumerate(order)}
  return "\n".join(format_node(u, names) for u in order)


def describe(node: UOp, context: int = 8) -> str:
  """`node` in printed form with up to `context` of its nearest sources, for error messages."""
  order = toposort([node])[-context:]
  names = {u: f"%{i}" for i, u in enumerate(order)}
  return "\n".join(("> " if u is node else "  ") + format_node(u, names) for u in order)


# the last kernel graph `sink_order` walked, as (SINK, its toposort): the passes after lowering
# (legalize, verify, linearize) walk one kernel's graph in turn, and a graph never changes (nodes
# are immutable). One tuple, replaced whole, so threads compiling at once never mix two entries.
_last_walk: tuple = (None, ())


def sink_order(sink: UOp) -> list[UOp]:
  """toposort([sink]), walked once for consecutive calls on one sink (a new list each call)."""
  global _last_walk
  last = _last_walk
  if last[0] is not sink:
    last = _last_walk = (sink, toposort([sink]))
  return list(last[1])


def walk(roots: Iterable[UOp]) -> Iterator[UOp]:
  yield from toposort(roots)


def check_dtype(value) -> DType:
  if not isinstance(value, DType):
    raise DTypeError(f"expected a kernelgen dtype, got {value!r}: use kernelgen.dtypes.float32 "
                     f"or a name like 'float32'")
  return value


__all__ = ["Ops", "GroupOp", "UOp", "PtrDType", "toposort", "sink_order", "print_uops", "print_graph",
           "describe", "format_node"]


# ---- reductions -------------------------------------------------------------------------------

# the op a reduction over bool combines with (a bool sum is any, a product all)
BOOL_REDUCE = {Ops.ADD: Ops.OR, Ops.MUL: Ops.AND, Ops.MAX: Ops.OR, Ops.MIN: Ops.AND}


def identity_element(op: Ops, dtype):
  """The value a reduction with `op` over `dtype` starts from (combining with it changes nothing)."""
  if op in (Ops.ADD, Ops.OR):      # OR: bool sum/max (False; was max_value: True)
    return 0
  if op in (Ops.MUL, Ops.AND):
    return 1
  return min_value(dtype) if op is Ops.MAX else max_value(dtype)
