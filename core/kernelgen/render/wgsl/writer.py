"""The WGSL writer: names for nodes and the statements of one kernel (loads and stores, packed
8/16-bit memory, vec4 buffers, atomics, loops and branches, thread ids). Values' expressions come
from expressions.py; the module around the statements is __init__.py's.
"""
from __future__ import annotations

import math

from ...dtype import DType, dtypes
from ...errors import UnsupportedError
from ...uop.ops import GroupOp, Ops, UOp, describe
from ...uop.program import Kernel
from ...rules.ranges import divisible
from ..templates import buffer_mark
from .expressions import Expressions
from .legalize import HAS_TYPE, check_dtype
from .target import PACKED_BITS, TARGET, WGSLOptions, clean_name, kernel_vars, uniform_slots

# ---- vector memory (W14) ---------------------------------------------------------------------------

# element dtypes a buffer may hold as vec4 words
VEC4_DTYPES = frozenset({"float32", "int32", "uint32"})


def _base(buf: UOp) -> UOp:
  while buf.op is Ops.AFTER:
    buf = buf.src[0]
  return buf


def vec4_slots(kernel: Kernel, accesses=None) -> frozenset:
  """Global buffers declared as array<vec4<T>>: 32-bit elements, a size divisible by 4, some
  access a 4-lane load or store at an index provably divisible by 4 and every other access a
  scalar load (read as one lane of a word: a row kernel's vector passes keep their vec4 loads
  when it also reads one element of the row). `accesses`: the kernel's LOADs and STOREs, where
  the caller has them."""
  usable: dict[int, bool] = {}
  wide: set = set()
  memo: dict = {}
  for u in kernel.uops if accesses is None else accesses:
    if u.op not in (Ops.LOAD, Ops.STORE) or _base(u.src[0]).op is not Ops.PARAM:
      continue
    dt = u.dtype if u.op is Ops.LOAD else u.src[2].dtype
    slot = _base(u.src[0]).arg
    good = dt.scalar.name in VEC4_DTYPES and (dt.count == 1 and u.op is Ops.LOAD or
                                              dt.count == 4 and divisible(u.src[1], 4, memo))
    if good and dt.count == 4:
      wide.add(slot)
    usable[slot] = usable.get(slot, True) and good
  sizes = {b.slot: b.size for b in kernel.buffers}
  return frozenset(slot for slot, good in usable.items()
                   if good and slot in wide and sizes.get(slot, 1) % 4 == 0)


# ---- the writer ----------------------------------------------------------------------------------

# the ops Writer looks for before writing (atomic workgroup buffers, subgroup builtins, thread
# ids, workgroup buffers, memory accesses)
_SCANNED = frozenset({Ops.ATOMIC_ADD, Ops.SUBGROUP_REDUCE, Ops.QUAD_BROADCAST, Ops.SPECIAL,
                      Ops.DEFINE_LOCAL, Ops.LOAD, Ops.STORE})


class Writer(Expressions):
  """Renders one kernel; holds the names given to nodes and the lines written so far."""

  def __init__(self, kernel: Kernel, opts: WGSLOptions, dispatch: tuple[int, int, int]):
    super().__init__(opts)
    self.kernel, self.dispatch = kernel, dispatch
    self.vars = kernel_vars(kernel)     # the scalar arguments, in order
    self.var_fields = {v: f"u{i}_{clean_name(v.arg[0])}".rstrip("_")
                       for i, v in enumerate(self.vars)}
    self.names: dict[UOp, str] = {}
    self.lines: list[str] = []
    self.depth = 1
    self.specs = {b.slot: b for b in kernel.buffers}
    # each buffer's name in the text: a mark the module's template fills in (__init__.py)
    self.buffer_names = {b.slot: buffer_mark(b.slot) for b in kernel.buffers}
    # workgroup buffers that atomics use (declared atomic<i32>/atomic<u32>)
    self.atomic_locals, self.uses_subgroups, self.specials = set(), False, set()
    self.locals, accesses, has_type = [], [], HAS_TYPE
    for u in kernel.uops:         # one scan: dtypes WGSL has, and what the module declares
      if not has_type.get(u.dtype):
        check_dtype(u)
      op = u.op
      if op not in _SCANNED:
        continue
      if op is Ops.LOAD or op is Ops.STORE:
        accesses.append(u)
      elif op is Ops.DEFINE_LOCAL:
        self.locals.append(u)
      elif op is Ops.ATOMIC_ADD:
        self.atomic_locals.add(_base(u.src[0]))
      elif op is Ops.SUBGROUP_REDUCE or op is Ops.QUAD_BROADCAST:
        self.uses_subgroups = True
      else:                         # SPECIAL: the thread ids the prologue derives
        self.specials.add(u.arg[:2])
        self.uses_subgroups = self.uses_subgroups or u.arg[0] == "sglane"
    self.vec4 = vec4_slots(kernel, accesses)
    # small read-only inputs bound as uniform arrays of 16-byte words (target.py uniform_slots):
    # element i of the 32-bit words is word i / 4, lane i % 4; f16 stays packed in u32 there
    self.uniform = uniform_slots(kernel, opts)

  def packed(self, slot: int) -> bool:
    dt = self.specs[slot].dtype
    return dt.name in PACKED_BITS and not (dt == dtypes.float16 and self.opts.f16 and
                                           slot not in self.uniform)

  def word(self, buf: UOp, index: str) -> str:
    """The 32-bit word `index` (a u32 or i32 expression) of buffer `buf`."""
    name = self.names[buf]
    if buf.op is Ops.PARAM and buf.arg in self.uniform:
      return f"{name}[u32({index}) / 4u][u32({index}) % 4u]"
    return f"{name}[{index}]"

  def atomic(self, slot: int) -> bool:
    return self.packed(slot) and self.specs[slot].access != "read"

  def emit(self, line: str) -> None:
    self.lines.append("  " * self.depth + line)

  # -- memory --
  def load_element(self, buf: UOp, idx: str, dt: DType) -> str:
    if buf.op is Ops.DEFINE_LOCAL or not self.packed(buf.arg):
      return self.word(buf, idx)
    bits = PACKED_BITS[dt.name]
    word = self.word(buf, f"u32({idx}) / {32 // bits}u")
    word = f"atomicLoad(&{word})" if self.atomic(buf.arg) else word
    offset = f"((u32({idx}) % {32 // bits}u) * {bits}u)"
    if dt == dtypes.float16:
      half = f"unpack2x16float({word} >> {offset}).x"
      return f"f16({half})" if self.opts.f16 else half
    if dt == dtypes.bool:
      return f"(extractBits({word}, {offset}, 8u) != 0u)"
    if dt.is_unsigned():
      return f"extractBits({word}, {offset}, {bits}u)"
    return f"extractBits(bitcast<i32>({word}), {offset}, {bits}u)"

  def lanes(self, idx: str, count: int) -> list[str]:
    if count == 1:
      return [idx]
    return [idx] + [f"({idx} + {k}i)" for k in range(1, count)]

  def load(self, u: UOp, name: str) -> None:
    buf, idx = self.buffer(u.src[0]), self.names[u.src[1]]
    if buf in self.atomic_locals:   # a counter read after a barrier: the same for every thread
      if len(u.src) != 2:
        raise UnsupportedError(f"an atomic workgroup value is read ungated in uniform control "
                               f"flow only\n{describe(u)}", target=TARGET)
      value = f"workgroupUniformLoad(&{self.names[buf]}[{idx}])"
      self.emit(f"let {name}: {self.reg(u.dtype)} = {value};")
      return
    elem = u.dtype.scalar
    gate = self.names[u.src[2]] if len(u.src) > 2 else None
    if gate is not None:    # branch-free: read element 0 when the gate is off (see below)
      idx = f"select(0i, {idx}, {gate})"
    parts = [self.load_element(buf, i, elem) for i in self.lanes(idx, u.dtype.count)]
    value = parts[0] if len(parts) == 1 else f"{self.reg(u.dtype)}({', '.join(parts)})"
    if buf.op is Ops.PARAM and buf.arg in self.vec4:
      word = f"{self.names[buf]}[u32({idx}) >> 2u]"
      value = word if u.dtype.count == 4 else f"{word}[u32({idx}) & 3u]"
    if gate is None:
      self.emit(f"let {name}: {self.reg(u.dtype)} = {value};")
      return
    # a gated load is a select, not `if (gate) { v = load; }`: lavapipe's LLVM compiles a
    # kernel in time superlinear in its basic blocks (a register-tiled pool over a 4-way concat
    # has ~1300 gated loads: 45 s to compile with branches), SwiftShader likewise
    self.emit(f"let {name}: {self.reg(u.dtype)} = select({self.names[u.src[3]]}, {value}, "
              f"{gate});")

  def bind(self, name: str, dtype, value: str, gate: str | None, default: str) -> None:
    """`let name = value;`, or with a gate `var name = default; if (gate) { name = value; }`."""
    if gate is None:
      self.emit(f"let {name}: {self.reg(dtype)} = {value};")
      return
    self.emit(f"var {name}: {self.reg(dtype)} = {default};")
    self.emit(f"if ({gate}) {{ {name} = {value}; }}")

  def store(self, u: UOp) -> None:
    buf, idx, value = self.buffer(u.src[0]), self.names[u.src[1]], self.names[u.src[2]]
    if buf in self.atomic_locals:
      if len(u.src) != 3 or u.src[2].dtype.count != 1:
        raise UnsupportedError(f"an atomic workgroup value is set ungated, one element at a time"
                               f"\n{describe(u)}", target=TARGET)
      self.emit(f"atomicStore(&{self.names[buf]}[{idx}], {value});")
      return
    gated = len(u.src) == 4
    if gated:
      self.emit(f"if ({self.names[u.src[3]]}) {{")
      self.depth += 1
    count = u.src[2].dtype.count
    if buf.op is Ops.PARAM and buf.arg in self.vec4:
      self.emit(f"{self.names[buf]}[u32({idx}) >> 2u] = {value};")
    else:
      for k, i in enumerate(self.lanes(idx, count)):
        self.store_element(buf, i, value if count == 1 else f"{value}[{k}]", u.src[2].dtype.scalar)
    if gated:
      self.depth -= 1
      self.emit("}")

  def store_element(self, buf: UOp, idx: str, value: str, dt: DType) -> None:
    name = self.names[buf]
    if buf.op is Ops.DEFINE_LOCAL or not self.packed(buf.arg):
      self.emit(f"{name}[{idx}] = {value};")
      return
    bits = PACKED_BITS[dt.name]
    mask = f"0x{(1 << bits) - 1:x}u"
    self.emit("{")
    self.emit(f"  let kg_w = u32({idx}) / {32 // bits}u;")
    self.emit(f"  let kg_s = (u32({idx}) % {32 // bits}u) * {bits}u;")
    self.emit(f"  atomicAnd(&{name}[kg_w], ~({mask} << kg_s));")
    self.emit(f"  atomicOr(&{name}[kg_w], ({self.store_bits(value, dt)} & {mask}) << kg_s);")
    self.emit("}")

  def store_bits(self, value: str, dt: DType) -> str:
    if dt == dtypes.float16:
      return f"pack2x16float(vec2<f32>({value}, 0.0f))"
    if dt == dtypes.bool:
      return f"select(0u, 1u, {value})"
    return value if dt.is_unsigned() else f"bitcast<u32>({value})"

  @staticmethod
  def buffer(buf: UOp) -> UOp:
    return _base(buf)

  # -- nodes --
  def node(self, i: int, u: UOp) -> None:
    op, names = u.op, self.names
    if op in NAMED:
      names[u] = NAMED[op](self, u)
    elif op in BLOCK:
      BLOCK[op](self, i, u)
    elif op is Ops.LOAD:
      names[u] = f"v{i}"
      self.load(u, names[u])
    elif op is Ops.STORE:
      self.store(u)
    elif op is Ops.ATOMIC_ADD:
      names[u] = f"v{i}"
      self.atomic_add(u, names[u])
    elif op is Ops.WMMA:
      raise UnsupportedError("tensor-core ops (WMMA) do not exist in WGSL: use target 'ptx'",
                             target=TARGET)
    else:
      names[u] = f"v{i}"
      self.emit(f"let v{i}: {self.reg(u.dtype)} = {self.value(u)};")

  def value(self, u: UOp) -> str:
    a = list(map(self.names.__getitem__, u.src))
    if u.op in GroupOp.ALU:
      return self.narrow_result(u, self.alu(u, a))
    if u.op is Ops.CAST:
      return self.cast(u.src[0].dtype, u.dtype, a[0])
    if u.op is Ops.BITCAST:
      return self.bitcast(u.src[0].dtype, u.dtype, a[0])
    if u.op is Ops.VECTORIZE:
      return f"{self.reg(u.dtype)}({', '.join(a)})"
    if u.op is Ops.GEP:
      return f"{a[0]}[{u.arg}]"
    if u.op is Ops.SUBGROUP_REDUCE:
      return self.narrow_result(u, self.subgroup_reduce(u, a[0]))
    if u.op is Ops.QUAD_BROADCAST:
      return f"quadBroadcast({a[0]}, {u.arg}u)"
    raise UnsupportedError(f"the WGSL renderer has no form for {u.op.name}\n{describe(u)}",
                           target=TARGET)

  def atomic_add(self, u: UOp, name: str) -> None:
    buf, idx, value = self.buffer(u.src[0]), self.names[u.src[1]], self.names[u.src[2]]
    call = f"atomicAdd(&{self.names[buf]}[{idx}], {value})"
    self.bind(name, u.dtype, call, self.names[u.src[3]] if len(u.src) == 4 else None,
              f"{self.reg(u.dtype)}()")

  def barrier(self, i: int, u: UOp) -> None:
    """workgroupBarrier(), unless the next statement is a workgroupUniformLoad: that is itself
    a barrier with workgroup memory semantics (so the one before it adds nothing)."""
    for v in self.kernel.uops[i + 1:]:
      if v.op in NAMED:
        continue
      if v.op is Ops.LOAD and self.buffer(v.src[0]) in self.atomic_locals:
        return
      break
    self.emit("workgroupBarrier();")

  def define_acc(self, i: int, u: UOp) -> None:
    self.names[u] = f"acc{i}"
    self.emit(f"var acc{i}: {self.reg(u.dtype)} = {self.names[u.src[0]]};")

  def assign(self, i: int, u: UOp) -> None:
    self.emit(f"{self.names[u.src[0]]} = {self.names[u.src[1]]};")
    self.names[u] = self.names[u.src[1]]

  def open_range(self, i: int, u: UOp) -> None:
    self.names[u] = f"r{i}"
    if u.src[0].op is Ops.CONST and u.src[0].arg == 1:   # one trip (lowering/pinned.py)
      self.emit(f"{{ let r{i}: i32 = 0i;")
    else:
      self.emit(f"for (var r{i}: i32 = 0i; r{i} < {self.names[u.src[0]]}; r{i}++) {{")
    self.depth += 1

  def open_if(self, i: int, u: UOp) -> None:
    self.emit(f"if ({self.names[u.src[0]]}) {{")
    self.depth += 1

  def close(self, i: int, u: UOp) -> None:
    self.depth -= 1
    self.emit("}")

  # -- definitions --
  def var_field(self, u: UOp) -> str:
    return f"kg_vars.{self.var_fields[u]}"

  def special(self, u: UOp) -> str:
    kind, dim, _ = u.arg
    return f"kg_{kind}{dim}"

  def prologue(self) -> list[str]:
    """The thread and group ids the kernel uses, re-derived when the grid is folded."""
    used = sorted(self.specials)
    grid, lines = self.kernel.global_size, []
    folded = tuple(self.dispatch) != tuple(grid)
    if folded and any(kind == "gid" for kind, _ in used):
      dx, dy, _ = self.dispatch
      lines.append(f"let kg_group = kg_wid.x + kg_wid.y * {dx}u + kg_wid.z * {dx * dy}u;")
      if math.prod(self.dispatch) != math.prod(grid):
        lines.append(f"if (kg_group >= {math.prod(grid)}u) {{ return; }}")
    for kind, dim in used:
      xyz = "xyz"[dim]
      if kind == "lid":
        lines.append(f"let kg_lid{dim} = i32(kg_lid.{xyz});")
      elif kind == "sglane":
        lines.append(f"let kg_sglane{dim} = i32(kg_sglane);")
      elif folded:
        stride = math.prod(grid[:dim])
        lines.append(f"let kg_gid{dim} = i32((kg_group / {stride}u) % {grid[dim]}u);")
      else:
        lines.append(f"let kg_gid{dim} = i32(kg_wid.{xyz});")
    return ["  " + line for line in lines]


# nodes that only get a name (no line of their own)
NAMED = {
  Ops.PARAM: lambda w, u: w.buffer_names[u.arg],
  Ops.DEFINE_LOCAL: lambda w, u: f"l{u.arg}",
  Ops.VAR: Writer.var_field,
  Ops.SPECIAL: Writer.special,
  Ops.CONST: Writer.const,
  Ops.AFTER: lambda w, u: w.names[u.src[0]],
  Ops.SINK: lambda w, u: "",
}

# nodes that write a statement or open/close a block
BLOCK = {
  Ops.DEFINE_ACC: Writer.define_acc,
  Ops.ASSIGN: Writer.assign,
  Ops.RANGE: Writer.open_range,
  Ops.ENDRANGE: Writer.close,
  Ops.IF: Writer.open_if,
  Ops.ENDIF: Writer.close,
  Ops.BARRIER: Writer.barrier,
}
