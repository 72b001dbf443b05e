"""A PTX simulator in pure Python: parses PTX text and executes it on the CPU.

`parse(text)` reads PTX into a Module; `program(text, entry)` compiles an entry (cached by the
source text); `launch(prog, grid, block, args, memory)` runs it on a `GlobalMemory` whose
buffers the caller allocates. Semantics follow the PTX ISA (see the tests, which each state
the ISA rule they check). Errors: `PTXSyntaxError` (a CompileError naming the line) for text
outside the supported subset, `ExecutionError` for out-of-bounds accesses, uninitialised
registers and shared-memory races, naming the instruction, the thread and the address.
"""
from .machine import Program, launch, load, program
from .memory import Buffer, GlobalMemory
from .parser import Entry, Instr, Module, PTXSyntaxError, parse


def run(source: str, grid, block, args: list, memory: GlobalMemory, entry: str | None = None,
        check_races: bool = True, engine: str | None = None, progress=None) -> str:
  """Parse (cached), compile and launch `entry` (the first one by default) of PTX `source`;
  returns the engine that ran it ("fast" or "reference", see machine.launch)."""
  return launch(program(source, entry), grid, block, args, memory, check_races, engine, progress)


__all__ = ["Buffer", "Entry", "GlobalMemory", "Instr", "Module", "PTXSyntaxError", "Program",
           "launch", "load", "parse", "program", "run"]
