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
  """The loop iterations each warp of one launch may run (limit ptxsim_work). Both engines
  count, per warp (32 threads), the backward branches it takes (once per branch, however many
  of its lanes take it), so a launch may run limit x its warps iterations in all, while a loop
  that never ends stops with a LimitError after `limit` trips of one warp, whatever the size of
  the launch (the fast engine runs a batch of warps together, so that is bounded time too)."""
  __slots__ = ("limit", "name")

  def __init__(self, name: str):
    self.limit, self.name = limits.get("ptxsim_work"), name

  def over(self) -> LimitError:
    """The error for a warp that has taken more than `limit` backward branches."""
    return LimitError(f"kernel {self.name} on PTXSIM: one of its warps has taken {self.limit} "
                      f"loop iterations (backward branches) and goes on: over kernelgen's limit "
                      f"ptxsim_work (per warp), so its loop may never end (an exit that depends "
                      f"on data); if it is meant to run longer, raise the limit with "
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
