"""What compiling every instruction shares: the step kinds, the per-entry Context, and the checks
of an instruction's modifiers and operands (compile.py has the module doc).
"""
from __future__ import annotations

from .. import limits
from ..errors import LimitError
from .memory import SHARED_BASE
from .operands import TYPES
from .parser import Entry, Instr, PTXSyntaxError

# SEGMENT: a fused run of STEPs (fused.py); its target is the number of instructions it runs
STEP, BRANCH, BARRIER, EXIT, SEGMENT = 0, 1, 2, 3, 4


class Context:
  """What compiling one entry needs: its register types, labels, shared layout, params."""

  def __init__(self, entry: Entry, shared_offsets: dict[str, int]):
    self.entry, self.regs, self.shared = entry, entry.regs, shared_offsets
    self.params = {name: t for name, t in entry.params}

  def symbol_address(self, name: str, where: str) -> int:
    if name in self.shared:
      return SHARED_BASE + self.shared[name]
    raise PTXSyntaxError(f"unknown symbol {name} {where}: only shared arrays have addresses")


class Work:
  """The loop iterations one launch may still run (limit ptxsim_work): both engines spend from
  it at every backward branch taken, one unit per warp (32 threads) that takes it, so a
  data-dependent loop that never ends stops with a LimitError instead of running forever."""
  __slots__ = ("left", "name")

  def __init__(self, name: str):
    self.left, self.name = limits.get("ptxsim_work"), name

  def spend(self, warps: int) -> None:
    self.left -= warps
    if self.left < 0:
      limit = limits.get("ptxsim_work")
      raise LimitError(f"kernel {self.name} on PTXSIM has taken {limit} loop iterations "
                       f"(backward branches, counted once per warp) and goes on: over "
                       f"kernelgen's limit ptxsim_work, so its loop may never end (an exit that "
                       f"depends on data); if it is meant to run longer, raise the limit with "
                       f"kernelgen.limits.set(ptxsim_work=...)", limit="ptxsim_work")


def unsupported(ins: Instr, why: str = "") -> PTXSyntaxError:
  name = ".".join((ins.opcode,) + ins.mods)
  return PTXSyntaxError(f"unsupported instruction {name} at line {ins.line}: `{ins.text}`"
                        + (f" ({why})" if why else ""), line=ins.line)


def where_text(ins: Instr) -> str:
  return f"at line {ins.line}: `{ins.text}`"


def split_mods(ins: Instr, allowed: set) -> tuple[set, str]:
  """(modifiers before the type, the type); unknown modifiers are unsupported."""
  if not ins.mods or ins.mods[-1] not in TYPES:
    raise unsupported(ins, "no operand type")
  mods = set(ins.mods[:-1])
  if not mods <= allowed:
    raise unsupported(ins, f"modifier .{sorted(mods - allowed)[0]}")
  return mods, ins.mods[-1]


def checked_operands(ins: Instr, n: int) -> tuple:
  if len(ins.operands) != n:
    raise unsupported(ins, f"expected {n} operands, got {len(ins.operands)}")
  return ins.operands
