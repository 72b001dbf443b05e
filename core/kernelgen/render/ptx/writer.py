"""The PTX writer: the state of rendering one kernel (typed registers, the operand strings of each
value, labels, declarations) and the text of the finished `.entry`. The instruction each op
becomes is its handler's (ptx.py lists them).
"""
from __future__ import annotations

import re

from ...dtype import DType
from ...errors import LimitError, UnsupportedError
from ...uop.ops import GroupOp, Ops, UOp, describe
from ...uop.program import Kernel
from ..templates import ENTRY_MARK, NAME_MARK, buffer_mark
from .target import ISA_VERSION, MAX_GRID_YZ, REGISTER, ptx_identifier

# value ops that may read an accumulator through a node legalize made (a conversion, an op in a
# wider type); the linearizer places such a node by its sources, so possibly before the loop
_DEFERRABLE = frozenset({Ops.CAST, Ops.BITCAST, Ops.GEP, Ops.VECTORIZE}) | GroupOp.ALU


def _reads_accumulator(u: UOp, deferred: set) -> bool:
  """A value computed from an accumulator's current value. Placed before the accumulator's loop
  it would see only the initial value (int8 max reduced with cvt.s16.s8 of the initial value),
  so it is rendered where it is used instead (Writer.materialize)."""
  if u.op in _DEFERRABLE:
    for s in u.src:
      if s.op is Ops.DEFINE_ACC or s in deferred:
        return True
  return False


# the accesses whose index (src[1]) _address folds: index + constant -> [address+bytes]
_ACCESSES = frozenset({Ops.LOAD, Ops.STORE, Ops.ATOMIC_ADD})
# ops that begin or end a block: an address computed before one is not reused after it
_BLOCK_EDGES = frozenset({Ops.RANGE, Ops.ENDRANGE, Ops.IF, Ops.ENDIF})


def folded_indices(uops: list[UOp]) -> set:
  """The index nodes `x + c` (c > 0) read only as a memory access's index: the access folds c
  into its constant offset (instructions._address), so they are never computed."""
  folded, used = set(), set()
  for u in uops:
    for i, s in enumerate(u.src):
      if i == 1 and u.op in _ACCESSES and s.op is Ops.ADD and s.src[1].op is Ops.CONST \
         and s.src[1].arg > 0:
        folded.add(s)
      else:
        used.add(s)
  return folded - used


class Writer:
  """Renders one Kernel: registers, operands, and the instruction lines."""

  def __init__(self, kernel: Kernel, sm: int, handlers: dict):
    self.kernel, self.sm = kernel, sm
    self.handlers = handlers                 # op -> how it is rendered (ptx.py: _HANDLERS)
    self.lanes: dict[UOp, list[str]] = {}    # value node -> one operand string per lane
    self.counts: dict[str, int] = {}         # register prefix -> registers used
    self.decl: dict[str, str] = {}           # register prefix -> declaration type
    self.prologue: list[str] = []
    self.body: list[str] = []
    self.shared: list[str] = []
    self.consts: dict[tuple, str] = {}
    self.labels: dict[UOp, str] = {}
    self.grid = _folded_grid(kernel.global_size)
    self.deferred: set[UOp] = set()          # conversions of accumulators, rendered at each use
    self.addresses: dict[tuple, str] = {}    # (buffer, index) -> its address register, in this
                                             # block (instructions._address)

  # ---- registers and operands ----
  def new_reg(self, dt: DType) -> str:
    kind, prefix = REGISTER[dt.scalar.name]
    n = self.counts.get(prefix, 0)
    self.counts[prefix], self.decl[prefix] = n + 1, kind
    return f"{prefix}{n}"

  def emit(self, line: str) -> None:
    self.body.append("\t" + line + ";")

  def operand(self, u: UOp, lane: int = 0) -> str:
    lanes = self.lanes.get(u)
    if lanes is None:
      raise UnsupportedError(f"the PTX renderer reached a value before its definition (the "
                             f"kernel is not linearized?)\n{describe(u)}", target="ptx")
    return lanes[lane]

  def reg(self, u: UOp, lane: int = 0) -> str:
    """The operand as a register (an immediate is moved into one, once, in the prologue)."""
    text = self.operand(u, lane)
    if text.startswith("%"):
      return text
    return self.const_reg(text, u.dtype.scalar)

  def const_reg(self, text: str, dt: DType) -> str:
    key = (text, REGISTER[dt.name][0])
    if key not in self.consts:
      reg = self.new_reg(dt)
      kind = REGISTER[dt.name][0]
      self.prologue.append(f"\tmov.{kind} {reg}, {text};")
      self.consts[key] = reg
    return self.consts[key]

  def label(self, u: UOp, kind: str) -> str:
    if u not in self.labels:
      self.labels[u] = f"$L{kind}_{len(self.labels)}"
    return self.labels[u]

  # ---- the whole kernel ----
  def render(self) -> str:
    skipped = folded_indices(self.kernel.uops)
    for u in self.kernel.uops:
      if u in skipped:
        continue
      if u.op in _BLOCK_EDGES:
        self.addresses.clear()
      handler = self.handlers.get(u.op)
      if handler is None:
        raise UnsupportedError(f"the PTX renderer has no rule for {u.op.name}; this op should "
                               f"have been rewritten before rendering\n{describe(u)}", target="ptx")
      if u.op in _DEFERRABLE and _reads_accumulator(u, self.deferred):
        self.deferred.add(u)
        continue
      if self.deferred:
        self.materialize(u)
      handler(self, u)
    return self.source()

  def materialize(self, u: UOp, done: set | None = None) -> None:
    """Renders the deferred values `u` reads (once each for this `u`), here, where it reads them."""
    done = set() if done is None else done
    for s in u.src:
      if s in self.deferred and s not in done:
        done.add(s)
        self.materialize(s, done)
        self.handlers[s.op](self, s)

  def source(self) -> str:
    """The kernel's PTX with its names left as marks (render/templates.py: render fills them)."""
    k, name = self.kernel, ENTRY_MARK
    params = [f"\t.param .u64 {buffer_mark(b.slot)}" for b in k.buffers]
    params += [f"\t.param .s32 {var_name(v)}" for v in k.vars]
    regs = [f"\t.reg .{self.decl[p]} {p}<{n}>;" for p, n in sorted(self.counts.items())]
    lx, ly, lz = k.local_size
    head = [f"// kernelgen: kernel {NAME_MARK} for sm_{self.sm}",
            f".version {'.'.join(map(str, ISA_VERSION[self.sm]))}", f".target sm_{self.sm}",
            ".address_size 64", "", f".visible .entry {name}(", ",\n".join(params), ")",
            f".maxntid {lx}, {ly}, {lz}", "{"]
    return "\n".join(head + regs + self.shared + self.prologue + self.body + ["\tret;", "}", ""])


def param_name(slot: int, kernel) -> str:
  """`data<slot>_<the buffer's name>` (the name made an identifier), so exported PTX says which
  parameter is which; `data<slot>` where the name has no letters or digits."""
  name = next((b.name for b in kernel.buffers if b.slot == slot), "")
  clean = "_".join(NOT_PARAM.sub(" ", name).split())
  return f"data{slot}_{clean}" if clean else f"data{slot}"


NOT_PARAM = re.compile(r"[^A-Za-z0-9]")


def var_name(v: UOp) -> str:
  return "var_" + ptx_identifier(str(v.arg[0]), prefix="v_")


def _folded_grid(grid: tuple[int, int, int]) -> tuple[int, int, int] | None:
  """The 1-D grid used when y or z exceed CUDA's 65535 blocks; None when no folding is needed."""
  gx, gy, gz = grid
  if gy <= MAX_GRID_YZ and gz <= MAX_GRID_YZ:
    return None
  if gx * gy * gz >= 1 << 31:
    raise LimitError(f"a grid of {grid} blocks exceeds CUDA's 2**31 - 1 blocks: use bigger "
                     f"workgroups (local size) or split the kernel")
  return (gx * gy * gz, 1, 1)


def emit_mov(w: Writer, dt: DType, dst: str, src: str, pred: str = "") -> None:
  w.emit(f"{pred}mov.{REGISTER[dt.scalar.name][0]} {dst}, {src}")
