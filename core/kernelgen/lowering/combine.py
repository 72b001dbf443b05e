"""How the terms of one reduction step combine into its update: in order (chained), or pairwise
as a tree (Opts.reduce_inner's unrolled words), with the q4 matvec's folds of a shared factor
(a block's scale, its zero point, a field's power-of-two scale) applied once per block.
Lowerer._accumulate_many builds every plain accumulator's update with these.
"""
from __future__ import annotations

import math

from ..uop.ops import Ops, UOp
from ..rules.symbolic import simplify


def chained(op: Ops, dtype, terms: list) -> UOp:
  """((t0 op t1) op t2) op ...: the terms of one step in order."""
  total = terms[0]
  for t in terms[1:]:
    total = UOp(op, dtype, (total, t))
  return total


def pairwise(op: Ops, dtype, terms: list) -> UOp:
  """The terms of one step combined pairwise ((t0 op t1) op (t2 op t3) ...): a tree of
  log2(n) levels, not a chain of n - 1 dependent ops (Opts.reduce_inner's unrolled words). A sum
  of products whose last factors repeat (a_i * c, b_j * d, ...) is taken as (sum a_i) * c +
  (sum b_j) * d + ...: a block's scale applied once per block, not once per value (a whole
  unrolled reduction has one factor per block). Likewise products whose last factors are
  differences with one subtrahend (x_i * (b_i - z): a block's values less its zero point) are
  taken as sum x_i * b_i - (sum x_i) * z: where the x_i are the activation (the same nodes in
  every row of a thread), their sum is made once per block for all the thread's rows, and a
  value costs no subtraction (quant_nbits.matmul_words)."""
  if op is Ops.ADD and len(terms) > 1 and all(t.op is Ops.MUL for t in terms):
    by_factor: dict = {}
    for t in terms:
      by_factor.setdefault(t.src[1], []).append(t.src[0])
    if len(by_factor) < len(terms):
      terms = [UOp(Ops.MUL, dtype, (_minus_common(dtype, parts), factor))
               for factor, parts in by_factor.items()]
  return _tree(op, dtype, terms)


def _minus_common(dtype, terms: list) -> UOp:
  """The sum of `terms`; where each is x_i * (b_i - z) with one z, sum x_i * b_i - (sum x_i) * z.
  The q4 matvec (bench/q4_matvec.py's shapes, the same process's kernel without the fold, CPU
  seconds per run, median of 20 interleaved rounds, two runs, load 6.5-8): lavapipe 1536x576
  1.09 / 1.09x, 576x1536 1.28 / 1.30x, 4864x896 1.03 / 0.98x, 896x4864 1.15 / 1.02x, 49152x576
  0.98 / 1.13x; SwiftShader (8 rounds) 1.03-1.06x. Small: its loads rather than its arithmetic
  seem to bound it (lavapipe, the MLP shapes: a kernel only summing the words takes 1.0-1.7x the copy's
  time, the matvec 1.4-2.5x)."""
  if len(terms) > 1 and all(t.op is Ops.MUL and t.src[1].op is Ops.SUB for t in terms):
    z = terms[0].src[1].src[1]
    if all(t.src[1].src[1] is z for t in terms):
      xb = _tree(Ops.ADD, dtype, [_scaled_first(dtype, t.src[0], t.src[1].src[0]) for t in terms])
      xs = _tree(Ops.ADD, dtype, [t.src[0] for t in terms])
      return UOp(Ops.SUB, dtype, (xb, UOp(Ops.MUL, dtype, (xs, z))))
  return _tree(Ops.ADD, dtype, terms)


def _scaled_first(dtype, x: UOp, b: UOp) -> UOp:
  """x * b; where b is c * k with k a power-of-two float constant, (x * k) * c: the same value
  (a power of two scales exactly, barring underflow to subnormals), and x * k is one node for
  every row of a thread sharing x (the q4 matvec's activation times its field's 2^-pos,
  quant_nbits.placed_fields), so a value costs one multiply, not two. The q4 matvec's WGSL 11 %
  shorter (bench/q4_matvec.py's 1536x576: 1822 -> 1626 lines), its speed within the noise: in one
  process, interleaved, without / with, the copy's time over the matvec's (fastest of 15-20) and
  CPU seconds (median), the four MLP shapes, lavapipe (load 17-19 on 2 CPUs) 0.65 / 0.67, 0.64 /
  0.65, 0.53 / 0.53, 0.58 / 0.59, cpu 0.75 / 0.77, 1.03 / 0.95, 0.75 / 0.75, 0.67 / 0.69;
  SwiftShader (load 20-22) 0.42 / 0.39, 0.40 / 0.40, 0.40 / 0.41, 0.40 / 0.40, cpu 0.53 / 0.68,
  0.61 / 0.58, 0.44 / 0.44, 0.43 / 0.41 (issue 35: neither adapter is bound by this multiply)."""
  k = simplify(b.src[1]) if b.op is Ops.MUL and dtype.is_float() else None
  if k is None or k.op is not Ops.CONST or k.dtype != dtype:
    return UOp(Ops.MUL, dtype, (x, b))
  if not math.isfinite(k.arg) or k.arg <= 0 or k.arg == 1 or math.frexp(k.arg)[0] != 0.5:
    return UOp(Ops.MUL, dtype, (x, b))
  return UOp(Ops.MUL, dtype, (UOp(Ops.MUL, dtype, (x, k)), b.src[0]))


def _tree(op: Ops, dtype, terms: list) -> UOp:
  """The terms combined pairwise, level by level."""
  while len(terms) > 1:
    pairs = [UOp(op, dtype, (a, b)) for a, b in zip(terms[::2], terms[1::2])]
    terms = pairs + terms[len(pairs) * 2:]
  return terms[0]
