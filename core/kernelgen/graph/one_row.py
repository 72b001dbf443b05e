"""Kernel pairs that one row's run computes as one kernel (issue 35: a q4 LM's decode step).

A symbolic-step LM bundle (export/onnx_lm.py: one bundle prefills and decodes, `seq` new tokens
a run) schedules its gated MLP as two register-tiled matmuls at every seq: gate, then up with
silu(gate) * up as its epilogue (schedule.py _joint_matmuls: a kernel of two reductions has no
register tile). A decode run (seq = 1) then launches both, each its one-row variant, and the
second reads the first's row back from memory. `one_row_pairs` finds such pairs: a `head`
kernel whose output one `tail` kernel alone reads, only elementwise at its own indices (no
other kernel, no requested output), both reductions over one plain dim leading their outputs;
`joined_at` gives the tail with the head's boundary dropped (both reductions in its kernel, over
the same row) cut to one bound value of that dim (at_value.item_at): the static kernel a one-row
step takes (lowering: a thread's outputs each summing both products in one loop). A runtime
launches it where the dim is bound to that value, and the pair elsewhere (export/plan.py
`runs`), so prefill keeps its tiles.

The same bundle's decode run also computes each layer's QKV projection (a symbolic reduction)
and its k and v cache write (an in-place write whose rotated key reads k[i] and k[i + d/2] of
the projection, so join.py's read_member join takes static projections only) in two kernels.
`write_pairs` finds such a projection and write, `write_joined_at` cuts both to one row
(item_at with writes: the write's value and its gathers of the rotary tables) and joins them as
join.py joins kg.generate's static step (the rotated key exchanged through workgroup memory,
lowering/exchange.py), within the target's buffer limit: SmolLM2's joined kernel binds 8
storage buffers and its small read-only inputs (the position ids, the key count, the q4 zero
points) as uniform buffers, so WebGPU's default 8 holds. Measured (SmolLM2 widths, q4, 2
layers, prompt 128, lavapipe; main and this alternated, load 15-21 on 2 shared CPUs): natively
(bench/lm_bundle_native.py) decode 21 -> 19 dispatches, median CPU ms a token 20.6 23.3 22.8 ->
21.5 22.1 20.6 (within the noise), prefill the same 23 kernels (best CPU 0.235-0.238 s both);
in the page (bench/lm_page.py, Chromium lavapipe, 32 tokens) 21 -> 19 dispatches, decode 33.1
41.2 -> 19.2 56.7 tokens/s (wall time under other processes' load: noise), tokens as
onnxruntime's (32/32) in every run.

Measured (bench/gate_up_fused.py, SmolLM2 widths, q4, the pair's seq = 1 variants against the
joined kernel on the same buffers, lavapipe natively, GPU ms, median / min of 30 interleaved,
load 8-11 on 2 shared CPUs): 5.27 / 0.67 against 0.95 / 0.39, 1.52 / 0.88 against 0.99 / 0.53.
The bundle (bench/lm_bundle_native.py, SmolLM2 widths, q4, 2 layers, prompt 128, 3 rounds
alternated with main, load 17-24): decode 23 -> 21 dispatches, median CPU ms a token 23.8 25.6
29.9 -> 23.3 23.3 25.4; prefill 23 dispatches both, best CPU s 0.289 0.265 0.268 -> 0.244 0.243
0.258 (the same kernels: noise); export 68-81 s -> 86-94 s (one more compile a layer; 377 s in
one run at load 21+).

A layer's RMS norms, whose sums of squares are kernels of their own that the QKV projection and
gate read (the norm applied as they read), are taken into those kernels' one-row joins too
(`norm_joins`): each joined kernel inlines the norm's sum and takes the norm's factor out of its
matmul (lowering/row_factor.py: the sum of squares a sibling of the projection's sums, in one
loop), and the norm's kernel runs at two rows or more only: a decode step 7 -> 5 kernels a
layer, a prompt's the same kernels as before. Measured (bench/lm_bundle_native.py, SmolLM2
widths, q4, 2 layers, prompt 128, main and this alternated, natively, load 12-20 on 2 shared
CPUs: noise dominates): decode 19 -> 16 dispatches (the first layer's input norm, written as
rows by an elementwise kernel of the q4 embedding, is left); lavapipe median CPU ms a token
29.3 20.1 -> 21.6 24.2, prefill (23 dispatches both) best CPU s 0.294 0.235 -> 0.242 0.263;
SwiftShader decode 91.5 -> 83.8 ms, prefill 1.092 -> 1.036 s (one round each). In the page
(bench/lm_page.py, 32 tokens, 3 rounds, one run per tree): 19 -> 16 dispatches, tokens as
onnxruntime's (32/32) on lavapipe and SwiftShader; its tokens/s (main at load 12-17, this at
5-9) tell the load apart, not the trees.
"""
from __future__ import annotations

from math import prod

from .at_value import item_at
from .bind_limit import kernel_fits
from .dims import Sym
from .lazy import L, LazyOp
from .schedule import ScheduleItem, kernel_reduces
from .view import contiguous_strides

# the ops through which the tail may read the head's output (at the same indices)
_IN_PLACE = (L.ALU, L.CAST, L.BITCAST)


def leading_dim(item: ScheduleItem) -> tuple | None:
  """(name, lo, hi) of the plain dim that is the only symbolic axis of `item`'s output, where
  that axis is the first longer than 1 (the output's rows); else None."""
  syms = [(a, s) for a, s in enumerate(item.out.sym or ()) if isinstance(s, Sym)]
  if len(syms) != 1 or not syms[0][1].is_dim:
    return None
  axis, s = syms[0]
  if any(n != 1 for n in item.out.shape[:axis]):
    return None
  name = s.terms[0][0]
  return (name,) + tuple(s.ranges[name])


def one_row_pairs(items: list[ScheduleItem], roots: list[LazyOp]) -> list[tuple]:
  """[(head, tail)] of `items` (schedule order) as the module docstring describes: both with
  reductions and one leading dim (leading_dim) of the same name; the head's output read by the
  tail alone, elementwise at the tail's indices, and not one of `roots`; no in-place write
  scheduled between them (the joined kernel reads the head's inputs at the tail's place); no
  kernel in two pairs (of a chain, the first pair: the second's joined kernel would read the
  first's head output, which a one-row run does not write)."""
  readers: dict[int, list] = {}
  for item in items:
    for i in item.inputs:
      readers.setdefault(id(i), []).append(item)
  outs, at = {id(r) for r in roots}, {id(it): i for i, it in enumerate(items)}
  pairs, used = [], set()
  for head in items:
    users = readers.get(id(head.out), [])
    if len(users) != 1 or id(head.out) in outs or head.extra or head.rows or id(head) in used:
      continue
    tail = users[0]
    between = items[at[id(head)] + 1:at[id(tail)]]
    if id(tail) in used or any(it.out.op is L.WRITE for it in between):
      continue      # (a chain joins its first pair; a write between may change what head read)
    dim = leading_dim(head)
    if dim is None or leading_dim(tail) is None or leading_dim(tail)[0] != dim[0] or \
       tail.extra or tail.rows or tail.recomputed or head.recomputed or \
       not kernel_reduces(head) or not kernel_reduces(tail) or \
       not _reads_in_place(tail, head.out):
      continue
    pairs.append((head, tail))
    used |= {id(head), id(tail)}
  return pairs


def joined_at(head: ScheduleItem, tail: ScheduleItem, value: int) -> ScheduleItem | None:
  """`tail` computing `head`'s output itself (its inputs: the tail's but the head's output, then
  the head's), cut to `value` of their leading dim (at_value.item_at), named
  `<tail>_<dim><value>` (r_1_seq_1536__72_8_seq1); None where the cut refuses the graph."""
  inputs = [i for i in tail.inputs if i is not head.out]
  inputs += [i for i in head.inputs if all(i is not j for j in inputs)]
  name = leading_dim(tail)[0]
  joined = ScheduleItem(tail.out, tuple(inputs), f"{tail.name}_{name}{value}")
  return item_at(joined, name, value)


def write_pairs(items: list[ScheduleItem]) -> list[tuple]:
  """[(head, write)] of `items` (schedule order): an in-place write (a decode layer's k and v
  cache writes, joined) reading the output of an earlier kernel with reductions and one leading
  dim (leading_dim: the symbolic QKV projection), that no kernel between them reads and that no
  in-place write between them may change the inputs of (the joined kernel computes the head at
  the write's place: write_joined_at)."""
  at = {id(it): i for i, it in enumerate(items)}
  pairs = []
  for write in items:
    if write.out.op is not L.WRITE or write.rows or write.recomputed:
      continue
    heads = [it for it in items[:at[id(write)]] if any(it.out is i for i in write.inputs) and
             leading_dim(it) is not None and kernel_reduces(it) and not it.extra and
             not it.rows and not it.recomputed]
    if len(heads) != 1:
      continue
    between = items[at[id(heads[0])] + 1:at[id(write)]]
    if any(it.out.op is L.WRITE or any(i is heads[0].out for i in it.inputs) for it in between):
      continue
    pairs.append((heads[0], write))
  return pairs


def write_joined_at(head: ScheduleItem, write: ScheduleItem, value: int,
                    limit) -> ScheduleItem | None:
  """The one kernel computing `head` and `write` (write_pairs) cut to `value` of the head's
  leading dim (at_value.item_at with writes): the cut writes joined into the cut head by
  join.join_outputs (a rotated key read through workgroup memory: lowering/exchange.py) within
  `limit` (bind_limit.BufferLimit), named `<write>_<dim><value>`; its `out` and `extra` the
  cut nodes, its inputs the pair's buffers. None where the cut or the join refuses."""
  from .join import join_outputs
  name = leading_dim(head)[0]
  memo: dict = {}
  cut_head = item_at(head, name, value, writes=True, memo=memo)
  reads = tuple(i for i in write.inputs if i is not head.out)
  inline = ScheduleItem(write.out, reads + tuple(i for i in head.inputs if
                                                 all(i is not j for j in reads)),
                        write.name, extra=write.extra)
  cut = item_at(inline, name, value, writes=True, memo=memo) if cut_head else None
  if cut is None:
    return None
  outs = (cut.out, *cut.extra)
  writes = [ScheduleItem(w, (cut_head.out,) + tuple(i for i in reads if all(
    i is not o.src[0] for o in outs if o is not w)), write.name) for w in outs]
  joined = join_outputs([cut_head] + writes, [], limit)
  if len(joined) != 1:
    return None
  return ScheduleItem(joined[0].out, joined[0].inputs, f"{write.name}_{name}{value}",
                      extra=joined[0].extra)


def write_joins(items: list[ScheduleItem], taken: dict, limit) -> list[tuple]:
  """[(head, write, joined, stored)] for each of write_pairs(`items`) whose leading dim starts
  at one and whose kernels are in no pair of `taken` ({id(tail): head}): `joined` the one-row
  kernel (write_joined_at, within `limit`), `stored` the same wired as the pair's outputs (the
  head's output and the writes'; the cut head stores the same first elements: item_at)."""
  busy = set(taken) | {id(h) for h in taken.values()}
  out = []
  for head, write in write_pairs(items):
    _, lo, hi = leading_dim(head)
    if id(head) in busy or id(write) in busy or not lo == 1 < hi or reads_float_weights(head):
      continue
    joined = write_joined_at(head, write, lo, limit)
    if joined is not None:
      out.append((head, write, joined, _stored_write(head, write, joined)))
  return out


# A joined one-row kernel sums each output in one thread's loop: over packed q4 words (rows of
# the weight, MatMulNBits' layout) that is what the pair's variants do too, but over a float
# weight it walks a (K, N) matrix down its columns, where the unjoined seq = 1 variants read it
# as rows across a workgroup. Measured (the SmolLM2-width fp32 bundle, 2 layers, one decode
# run's launches each timed alone natively, GPU ms): the joined QKV + k/v write 11.5 (lavapipe) /
# 51.4 (SwiftShader) against the o-proj's 0.33 / 0.94 for 0.6x its bytes, the joined gate/up 7.5
# / 36.1 against the down projection's 1.0 / 2.3 for half its bytes; at 30 layers a decode token
# took 2.6 s natively on SwiftShader. So a pair whose head reads a float input the size of a
# weight (an eighth of its products or more, and 64K elements or more: small models keep
# joining) is not joined; q4 scales are a block's 1/32 of the products. The fp32 decode run's
# launches then total (same timing, load 2.7-3.1) lavapipe 88.2 -> 56.6 ms, SwiftShader 342.8 ->
# 174.3 ms (the head 45 / 150 ms of it); the q4 bundle keeps its kernels.
FLOAT_WEIGHT_SHARE, FLOAT_WEIGHT_LEAST = 8, 1 << 16


def reads_float_weights(head: ScheduleItem) -> bool:
  """Whether `head` (a kernel with reductions) reads a float input of static shape (not rows
  of the symbolic step) of at least 1/FLOAT_WEIGHT_SHARE of one output row's products and
  FLOAT_WEIGHT_LEAST elements: a float weight matrix."""
  rows = leading_dim(head)
  per_row = max((prod(r.src[0].shape) for r in kernel_reduces(head)), default=0) // \
    max(rows[2] if rows else 1, 1)
  least = max(per_row // FLOAT_WEIGHT_SHARE, FLOAT_WEIGHT_LEAST)
  return any(i.dtype.is_float() and prod(i.shape) >= least and
             not any(isinstance(s, Sym) for s in i.sym or ()) for i in head.inputs)


def _stored_write(head: ScheduleItem, write: ScheduleItem, joined: ScheduleItem) -> ScheduleItem:
  return ScheduleItem(head.out, joined.inputs, joined.name, extra=(write.out, *write.extra))


def one_row_joins(items: list[ScheduleItem], roots: list[LazyOp], limit, factor) -> list[tuple]:
  """[(after, members, joined, stored, dim)]: each one-row kernel of `items` (one_row_pairs'
  pairs joined_at the dim's lo, 1, within `limit`; write_joins'), launched after `after` where
  dim (name, lo, hi) is bound to lo, its `members` launched above lo only; `stored` the joined
  kernel wired as the members' outputs. Then norm_joins: an RMS norm's sum kernel read by
  joined members only is computed in their joined kernels (`factor`, lowering/row_factor.py
  factored: the norm taken out of the matmul), an entry (None, (norm,), None, None, dim)."""
  found = one_row_pairs(items, roots)
  joins = []
  for head, tail in found:
    name, lo, hi = leading_dim(tail)
    joined = joined_at(head, tail, lo) if lo == 1 < hi and not reads_float_weights(head) \
      else None                                                     # a one-row run
    if joined is not None and kernel_fits(joined.inputs, joined.out, limit):
      # wired as the tail's output (the cut one stores the same first elements: item_at)
      stored = ScheduleItem(tail.out, joined.inputs, joined.name)
      joins.append((tail, (head, tail), joined, stored, (name, lo, hi)))
  for head, write, joined, stored in write_joins(items, {id(t): h for h, t in found}, limit):
    joins.append((write, (head, write), joined, stored, leading_dim(head)))
  return norm_joins(items, roots, joins, limit, factor)


def norm_joins(items: list[ScheduleItem], roots: list[LazyOp], joins: list, limit,
               factor) -> list[tuple]:
  """`joins` (one_row_joins' entries) with each kernel `norm` (a sum, an RMS norm's, with the
  joins' leading dim) whose output only joined members read, and not one of `roots`, computed in
  those joins' kernels: each rejoined with the norm inlined into its members (`inlined`) and
  `factor`ed (None: refused); where every one is, the norm runs above the dim's lo only (an
  entry (None, (norm,), None, None, dim)). No in-place write between the norm and the last of
  its joined kernels may write into the norm's inputs (the joined kernel reads them later)."""
  member = {id(m): j for j, entry in enumerate(joins) for m in entry[1]}
  at = {id(it): i for i, it in enumerate(items)}
  outs = {id(r) for r in roots}
  joins, extra, norms = list(joins), [], {}      # norms: join index -> the norms it computes
  for norm in items:
    users = [it for it in items if any(i is norm.out for i in it.inputs)]
    mine = sorted({member.get(id(u), -1) for u in users})
    dim = leading_dim(norm)
    if not users or mine[0] < 0 or id(norm) in member or id(norm.out) in outs or norm.extra or \
       norm.recomputed or dim is None or not kernel_reduces(norm) or \
       any(joins[j][4][:2] != dim[:2] for j in mine):
      continue
    last = max(at[id(joins[j][0])] for j in mine)
    if any(it.out.op is L.WRITE and any(it.out.src[0] is i for i in norm.inputs)
           for it in items[at[id(norm)] + 1:last + 1]):
      continue
    again = {j: _rejoined(joins[j], norms.get(j, []) + [norm], limit, factor) for j in mine}
    if all(e is not None for e in again.values()):
      joins = [again.get(j, e) for j, e in enumerate(joins)]
      norms.update((j, norms.get(j, []) + [norm]) for j in mine)
      extra.append((None, (norm,), None, None, dim))
  return joins + extra


def _rejoined(entry: tuple, norms: list, limit, factor) -> tuple | None:
  """Join entry `entry` made again with `norms` inlined into its members and factored; None
  where the cut, the join, the buffer limit or the factoring refuses."""
  after, (head, tail), _, _, (_, lo, _) = entry
  for norm in norms:
    head, tail = inlined(head, norm), inlined(tail, norm)
  if tail.out.op is L.WRITE:
    joined = write_joined_at(head, tail, lo, limit)
  else:
    joined = joined_at(head, tail, lo)
  joined = joined and factor(joined)
  if joined is None:
    return None
  if tail.out.op is L.WRITE:      # (write_joined_at kept the limit)
    return after, entry[1], joined, _stored_write(head, tail, joined), entry[4]
  if not kernel_fits(joined.inputs, joined.out, limit):
    return None
  return after, entry[1], joined, ScheduleItem(tail.out, joined.inputs, joined.name), entry[4]


def inlined(item: ScheduleItem, norm: ScheduleItem) -> ScheduleItem:
  """`item` computing `norm`'s output itself where it reads it: its inputs but that output,
  then norm's."""
  if all(i is not norm.out for i in item.inputs):
    return item
  inputs = [i for i in item.inputs if i is not norm.out]
  inputs += [i for i in norm.inputs if all(i is not j for j in inputs)]
  return ScheduleItem(item.out, tuple(inputs), item.name, item.rows, item.recomputed, item.extra)


def _reads_in_place(item: ScheduleItem, node: LazyOp) -> bool:
  """Whether every node of `item`'s kernel that reads `node` (or a reshape of it: a view with
  contiguous strides, no offset or mask) is elementwise of its shape, so the joined kernel
  computes it once per output, where the output is stored; and one does."""
  inputs, kernel, stack = {id(i) for i in item.inputs}, {}, [item.out]
  while stack:
    n = stack.pop()
    if id(n) in kernel or n.realized or (id(n) in inputs and n is not item.out):
      continue
    kernel[id(n)] = n
    stack.extend(n.src)
  same, grew = {id(node)}, True
  while grew:
    grew = False
    for n in kernel.values():
      if id(n) not in same and n.op is L.VIEW and n.src and id(n.src[0]) in same and \
         _reshape(n):
        same.add(id(n))
        grew = True
  readers = [(n, s) for n in kernel.values() if id(n) not in same for s in n.src
             if id(s) in same]
  return bool(readers) and all(n.op in _IN_PLACE and n.shape == s.shape for n, s in readers)


def _reshape(node: LazyOp) -> bool:
  """VIEW `node` reads its source's elements in order (a reshape)."""
  v = node.arg
  want = contiguous_strides(v.shape)
  return v.mask is None and v.offset == 0 and node.size == node.src[0].size and \
    all(n == 1 or s == w for n, s, w in zip(v.shape, v.strides, want))
