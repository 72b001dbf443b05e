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
values up to lo, the range's low end): its arguments stay the kernel's, so every runtime and
bundle binds it as the kernel (the same uniforms are what `compiler.with_variants` checks).
"""
from __future__ import annotations

from ..uop.ops import Ops, UOp, toposort
from .index_math import I32, gate_and, int_const

# the key of a variant's options that asks for it (compiler.with_variants takes it out)
PIN = "pin"


def pin_dim(sink: UOp, name: str, value: int) -> UOp:
  """`sink` with dim `name` read as the constant `value`, its global stores gated by
  name == value (the one read left: the kernel keeps its arguments)."""
  var = next((u for u in toposort([sink]) if u.op is Ops.VAR and u.arg[0] == name), None)
  if var is None:
    return sink
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
