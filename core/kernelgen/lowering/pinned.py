"""A variant of a symbolic kernel for the one bound value at the low end of its dim's range
(issue 34: no speed lost to generality at n = 1).

A row kernel over a symbolic row (softmax over rows of n, n in 1..4096) runs its short-row
variant at n = 1: a thread per row whose two loops (the max, then the sum) run to the run-time
length. SwiftShader compiles such a loop as a loop, and at n = 1 the kernel took 0.0086 to
0.0097 ms against the static kernel's 0.0060 (softmax (64, 1), GPU timestamps, best of 40
interleaved rounds); the same WGSL with its loops removed took 0.0064, and the static kernel
with a uniform bound and read 0.0058 (the uniform costs nothing; the loops do).

So the value `lo` gets a kernel of its own: the variant lowered as usual, then every read of the
dim replaced by the constant (`pin_dim`), which the simplifier folds through the loop bounds
and masks as it does for a static size. The kernel still reads the dim once, as the gate of
its global stores (dim == lo, true wherever it runs: `variant_for` picks it only for bound
values up to lo, the range's low end; a pinned variant is CompiledKernel.exact, so no pick takes
it at another value: uop/program.py serves): its arguments stay the kernel's, so every runtime and
bundle binds it as the kernel (the same uniforms are what `compiler.with_variants` checks).
"""
from __future__ import annotations

from ..uop.ops import Ops, UOp, toposort
from .index_math import I32, gate_and, int_const

# the key of a variant's options that asks for it (compiler.with_variants takes it out)
PIN = "pin"
# the key of a register tile's variant for one of the range's smallest values (variants.py
# STATIC_VALUES) compiled as the static kernel of that size (graph/at_value.py: the same
# buffers at the same positions); its value is the dim's VAR argument (name, lo, hi). Where
# the kernel reads the dim, the variant's stores are gated by it as a pinned variant's are
# (pin_dim's `arg`), so it takes the kernel's arguments.
STATIC = "static"


def pin_dim(sink: UOp, name: str, value: int, arg: tuple | None = None) -> UOp:
  """`sink` with dim `name` read as the constant `value`, its global stores gated by
  name == value (the one read left: the kernel keeps its arguments). A sink that does not read
  the dim is returned as it is, or with `arg` (the dim's VAR argument) gated by it."""
  var = next((u for u in toposort([sink]) if u.op is Ops.VAR and u.arg[0] == name), None)
  if var is None and arg is None:
    return sink
  var = UOp(Ops.VAR, I32, (), tuple(arg)) if var is None else var
  guard = var.eq(int_const(value))
  new: dict = {}
  for u in toposort([sink]):
    if u.op is Ops.VAR and u.arg[0] == name:
      new[u] = int_const(value)
      continue
    src = tuple(new[s] for s in u.src)
    if u.op is Ops.STORE and src[0].op is Ops.PARAM:
      gate = gate_and(src[3] if len(src) == 4 else None, guard)
      src = src[:3] + (gate,)
    new[u] = u.replace(src=src) if src != u.src else u
  return new[sink]
