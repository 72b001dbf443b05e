"""Kernels with several outputs: elementwise siblings of one iteration space joined into one kernel.

The scheduler (schedule.py) gives each kernel one output. Two elementwise kernels over the same
shape that read the same buffers (an LSTM cell's c' and h' = o * tanh(c'); issue 42) then each
launch a grid and load those buffers once apiece, and the second reads the first's output back
from memory. `join_outputs` folds such a kernel into an earlier one of the same shape: the joined
kernel stores every output at each thread's indices (ScheduleItem.extra; lowering/lower.py's
thread stores), computing a member that another member reads at the same indices once, in
registers, instead of loading it.

A kernel joins an earlier one (its "head") when both are elementwise at their output (an ALU op,
a cast, a bitcast or a contiguous(); no row kernel, no recomputed reduction, no symbolic size; a
reduction inside, the matvec of an LSTM's gates, of at most JOIN_REDUCE_MAX elements per output
and fewer than TILED_REDUCE_MIN outputs) of one shape on one device; it shares an input buffer
with the group (where no member reduces) or reads a member's output,
only elementwise at its own indices (no reduction or view between them), and that output is a
requested one or read by another kernel too (else the join would store it for nobody: a
contiguous() chain, which stays two kernels as asked); no kernel scheduled between them reads a
member's output (the joined kernel runs at the last member's place); and the joined kernel binds
at most `max_buffers` buffers. The members' reductions over the same elements share one loop
(lowering/reductions.py sibling_reduces walks every output).

In-place writes (L.WRITE: a decoder layer's k and v appended to their caches, tensor/kv_append.py)
join the same way, a write with an earlier write: values of one shape (and one symbolic shape),
no reduction in either (a write that computes its projection keeps its own grouped lanes), a
shared input (the position; the joined q/k/v projection), distinct targets that no member
reads, and neither reading the other's output. Each thread stores its element of every value
into that write's own target (lowering/lower.py write_stores): a decode step's layer launches
one cache write, not two. Writes whose projections they compute themselves (schedule.py's write
fusion: k and v Linear layers of one normed row) join alike while those reductions are short
(_plain's bounds), each thread computing an element of each.

A write also joins a group whose head is plain (a thread per output, its reductions short: a
decode layer's QKV projection, or its q projection beside k and v Linear layers), where its value
is a run of a member's output (member_slice: the k or v slice of a QKV projection that attention
reads too; the thread computing each element stores it into the cache as well, from registers),
or where it computes its own projection from an input the group reads, its value as many elements
as the head's output (each thread computes one of each). A kg.nn decoder with separate k and v
caches (tests/devices/test_symbolic_decode.py): 5 -> 4 dispatches a layer; with q, k and v
Linear layers 6 -> 4. A write whose value reads a member's elements elementwise through views
(read_member: an imported ONNX LM's rotated key, k[i] with k[i + d/2] of the QKV projection)
joins too, the group's head then possibly a bare reduction's kernel (_write_head: the q4
projection, which no plain kernel joins, and only for such a write); its threads exchange the
member through workgroup memory (lowering/exchange.py), and the v write joins as a slice:
kg.generate's decode step of the tiny q4 LM 19 -> 17 launches (2 layers). Not joined here: a
symbolic projection (a prompt's rows); the page's bundles launch the pair cut to one row joined
so for a decode run (graph/one_row.py write_joined_at). Not yet joined: row kernels, kernels
of other shapes, a write after a kernel that reads a member's output (the joined kernel would run
after that reader), and writes with a kernel between them that reads the first one's output
(examples/tiny_gpt.py: its scores read the k cache before the v write is scheduled; joining
there would need the later write moved up).
"""
from __future__ import annotations

from .bind_limit import BufferLimit, as_limit, storage_count
from .lazy import L, LazyOp
from .member_reads import member_reads
from .schedule import TILED_REDUCE_MIN, ScheduleItem, kernel_reduces
from .view import contiguous_strides

_PLAIN = (L.ALU, L.CAST, L.BITCAST, L.CONTIGUOUS)   # the output ops of a kernel that may join
# the most elements a member's reduction sums per output: a joined kernel runs a thread per output
# (lower.py's thread stores), each reduction a loop of its own (an LSTM step's gate rows, the
# hidden size long); a longer one keeps its kernel, whose grouped lanes may read it faster, as
# does one of TILED_REDUCE_MIN outputs or more (its register tiles). A prototype's bounds, not
# yet measured (issue 42)
JOIN_REDUCE_MAX = 1024
_SAME_INDICES = (L.ALU, L.CAST, L.BITCAST, L.CONTIGUOUS)   # ops reading sources at their own indices


def join_outputs(items: list[ScheduleItem], roots: list[LazyOp],
                 max_buffers: BufferLimit | int | None = None) -> list[ScheduleItem]:
  """`items` (schedule order) computing `roots` with sibling elementwise kernels joined (see the
  module docstring): each group becomes one ScheduleItem whose `out` is the first member's
  output and whose `extra` holds the others' in order, placed where its last member was. The
  items' order otherwise stays; a list of the same items where nothing joins."""
  readers: dict[int, int] = {id(r): 1 for r in roots}     # a requested output counts as read
  for item in items:
    for i in item.inputs:
      readers[id(i)] = readers.get(id(i), 0) + 1
  groups: list[list[ScheduleItem]] = []
  open_groups: list[int] = []       # indices into `groups` a later kernel may still join
  for item in items:
    target = None
    if _plain(item) or _write(item) or _write_head(item):
      # a write joins another write first (a KV cache's k and v), else a plain group it reads
      order = sorted(open_groups, key=lambda g: (groups[g][0].out.op is not item.out.op, g))
      for g in order:
        if _fits(groups[g], item, readers, max_buffers):
          target = g
          break
    for g in list(open_groups):     # a kernel reading a member's output closes that group
      if g != target and _reads_any(item, groups[g]):
        open_groups.remove(g)
    if target is not None:
      groups[target].append(item)
      continue
    groups.append([item])
    if _plain(item) or _write(item) or _write_head(item):
      open_groups.append(len(groups) - 1)
  if all(len(g) == 1 for g in groups):
    return items
  return _ordered(groups, items)


def _plain(item: ScheduleItem, ops: tuple = _PLAIN) -> bool:
  """A kernel that may join another: elementwise at its output (one of `ops`), static shape, its
  reductions (if any) short enough for a thread per output (JOIN_REDUCE_MAX)."""
  out = item.out
  if out.op not in ops or not out.size or out.sym is not None or item.rows or \
     item.recomputed or item.extra:
    return False
  reduces = kernel_reduces(item)
  return not reduces or (out.size < TILED_REDUCE_MIN and
                         all(r.src[0].size <= JOIN_REDUCE_MAX * r.size for r in reduces))


def _write_head(item: ScheduleItem) -> bool:
  """A reduction's kernel that only writes may join (a decode layer's QKV projection, the
  sum itself its output), its reductions short as _plain's; plain kernels keep theirs."""
  return item.out.op is L.REDUCE and _plain(item, (L.REDUCE,))


def _write(item: ScheduleItem) -> bool:
  """An in-place write that may join another: no row kernel; the reductions inside (a projection
  the write computes, schedule.py's write fusion) short enough for a thread per element
  (JOIN_REDUCE_MAX), as _plain's."""
  out = item.out
  if out.op is not L.WRITE or not out.size or item.rows or item.recomputed or item.extra:
    return False
  reduces = kernel_reduces(item)
  return not reduces or (out.src[1].size < TILED_REDUCE_MIN and
                         all(r.src[0].size <= JOIN_REDUCE_MAX * r.size for r in reduces))


def _outputs(group: list[ScheduleItem]) -> list[LazyOp]:
  return [it.out for it in group]


def _reads_any(item: ScheduleItem, group: list[ScheduleItem]) -> bool:
  outs = {id(o) for o in _outputs(group)}
  return any(id(i) in outs for i in item.inputs)


def _fits(group: list[ScheduleItem], item: ScheduleItem, readers: dict,
          max_buffers: BufferLimit | int | None) -> bool:
  head = group[0].out
  if head.op is L.REDUCE and not any(_reads_others(it, group + [item]) for it in group + [item]):
    return False      # a bare reduction's kernel takes writes for a write that needs it alone
  if head.op is not L.WRITE and item.out.op is L.WRITE:
    return _write_after_plain(group, item, max_buffers)
  if (head.op is L.WRITE) != (item.out.op is L.WRITE) or head.op is L.REDUCE:
    return False
  if head.op is L.WRITE:
    return _writes_fit(group, item, max_buffers)
  if item.out.shape != head.shape or item.out.device != head.device or \
     any(it.out.op is L.WRITE for it in group):
    return False
  outs = {id(o) for o in _outputs(group)}
  reads = {id(i) for it in group for i in it.inputs}
  read = [i for i in item.inputs if id(i) in outs]
  if not read and not any(id(i) in reads for i in item.inputs):
    return False                      # unrelated kernels keep their own grids
  if not read and any(kernel_reduces(it) for it in group + [item]):
    return False     # siblings that only share inputs join without reductions (two convs of one
                     # image keep their own tiles)
  if read and (not _reads_in_place(item, outs) or any(readers[id(i)] < 2 for i in read)):
    return False     # (a member only `item` reads would be stored for nobody: a contiguous()
                     # chain; it stays two kernels, as asked)
  inputs = _joined_inputs(group + [item])
  return _bind_fits(inputs, len(group) + 1, max_buffers)


def _writes_fit(group: list[ScheduleItem], item: ScheduleItem,
                max_buffers: BufferLimit | int | None) -> bool:
  """Whether the in-place write `item` joins the writes `group`: values of one shape, one device,
  a shared input; its target is none of the members' and read by none of them, and it reads no
  member's target or output; the joined kernel binds at most `max_buffers` buffers."""
  head, value = group[0].out, item.out.src[1]
  if value.shape != head.src[1].shape or value.sym != head.src[1].sym or \
     item.out.device != head.device:
    return False
  targets = {_buffer_key(it.out.src[0]) for it in group}
  member_inputs = {_buffer_key(i) for it in group for i in it.inputs}
  own = _buffer_key(item.out.src[0])
  if own in member_inputs or own in targets:
    return False
  reads = [_buffer_key(i) for i in item.inputs if i is not item.out.src[0]]
  outs = {id(o) for o in _outputs(group)}
  if any(k in targets for k in reads) or any(id(i) in outs for i in item.inputs):
    return False
  shared = member_inputs - targets
  if not any(k in shared for k in reads):
    return False                      # unrelated writes keep their own grids
  writes = group + [item]
  targets.add(own)
  inputs = [i for i in _joined_inputs(writes) if _buffer_key(i) not in targets]
  return _bind_fits(inputs, len(writes), max_buffers)


def _write_after_plain(group: list[ScheduleItem], item: ScheduleItem,
                       max_buffers: BufferLimit | int | None) -> bool:
  """Whether the in-place write `item` joins the thread-per-output group `group` (a plain head):
  its value is a contiguous run of a plain member's output (member_slice: a decode layer's key or
  value, a slice of the QKV projection), so the thread computing each of those elements also
  stores it into the write's target; or the write computes its own short projection (_write)
  from an input the group reads, its value as many elements as the head (a decode layer's k and
  v Linear layers beside q's: each thread computes an element of each); the target is no
  member's target, read by no member, and the joined kernel binds at most `max_buffers`."""
  plain, value = [it.out for it in group if it.out.op is not L.WRITE], item.out.src[1]
  if item.out.device != group[0].out.device:
    return False
  if kernel_reduces(item):      # its own projection: a sibling of the head's, element for element
    reads = {_buffer_key(i) for it in group for i in it.inputs}
    if value.sym is not None or value.size != group[0].out.size or _reads_any(item, group) or \
       not any(_buffer_key(i) in reads for i in item.inputs if i is not item.out.src[0]):
      return False
  elif member_slice(value, plain) is None and not _reads_others(item, group) and \
      not (group[0].out.op is L.REDUCE and read_member(value, item.inputs, plain)):
    return False      # (a bare reduction heads a group for a write reading others' elements
                      # only: _fits; there a masked copy of its elements joins too, a cut
                      # one-row step's value write: graph/one_row.py write_joined_at)
  targets = {_buffer_key(it.out.src[0]) for it in group if it.out.op is L.WRITE}
  own = _buffer_key(item.out.src[0])
  if own in targets or own in {_buffer_key(i) for it in group for i in it.inputs}:
    return False
  if any(_buffer_key(i) in targets for i in item.inputs if i is not item.out.src[0]):
    return False
  joined = group + [item]
  targets.add(own)
  inputs = [i for i in _joined_inputs(joined) if _buffer_key(i) not in targets]
  return _bind_fits(inputs, len(joined), max_buffers)


def _bind_fits(inputs: list, written: int, max_buffers: BufferLimit | int | None) -> bool:
  """Whether a joined kernel reading `inputs` and writing `written` buffers fits `max_buffers`
  (bind_limit.py: small read-only inputs may take its small bindings)."""
  limit = as_limit(max_buffers)
  return limit is None or storage_count(inputs, written, limit) <= limit.storage


def member_slice(value: LazyOp, members: list[LazyOp]) -> tuple[LazyOp, int] | None:
  """(member, offset) where `value` (an in-place write's value, static) reads elements offset ..
  offset + value.size - 1 of one of `members`' outputs in order (a view with contiguous strides,
  no mask), else None: element j of the value is the member's flat element offset + j."""
  if value.op is not L.VIEW or value.realized or value.sym is not None or not value.size:
    return None
  src, v = value.src[0], value.arg
  if not any(src is m for m in members) or v.mask is not None or not isinstance(v.offset, int):
    return None
  if any(n > 1 and s != c for s, c, n in zip(v.strides, contiguous_strides(v.shape), v.shape)):
    return None
  return (src, v.offset) if 0 <= v.offset and v.offset + value.size <= src.size else None


def read_member(value: LazyOp, inputs: tuple, members: list[LazyOp]) -> tuple | None:
  """(member, reads) where an in-place write's `value`, an elementwise expression (no reduction,
  static) over `inputs` (buffers), reads one of `members`' outputs through views (a rotated
  key: k[i] and k[i + d/2] of a QKV projection), `reads` as member_reads lists them; else
  None."""
  leaves = {id(i) for i in inputs}
  for m in members:
    reads = member_reads(value, m, leaves - {id(m)})
    if reads is not None and all(member_reads(value, o, leaves - {id(o)}) is None
                                 for o in members if o is not m):
      return m, reads
  return None


def _reads_others(item: ScheduleItem, group: list[ScheduleItem]) -> bool:
  """Whether `item` is a write whose value reads, for some element e, a member element other than
  the one its thread computes (read_member; a rotated key's k[i + d/2]), not a run or a copy."""
  if item.out.op is not L.WRITE:
    return False
  plain = [it.out for it in group if it.out.op is not L.WRITE]
  if member_slice(item.out.src[1], plain) is not None:
    return False
  got = read_member(item.out.src[1], item.inputs, plain)
  if got is None:
    return False
  offset = min(min(r) for r in got[1] if r)
  return any(r - {offset + e} for e, r in enumerate(got[1]))


def _buffer_key(node: LazyOp):
  """The identity of the buffer `node` is read from: its realized buffer's, else the node's."""
  return id(node.buffer) if node.realized else id(node)


def _reads_in_place(item: ScheduleItem, outs: set) -> bool:
  """Whether every node of `item`'s kernel that reads one of `outs` reads it elementwise at its
  own indices (so the joined kernel computes it once per thread, at the indices it stores)."""
  stack, seen, inputs = [item.out], set(), {id(i) for i in item.inputs}
  while stack:
    node = stack.pop()
    if id(node) in seen or id(node) in inputs or node.realized:
      continue
    seen.add(id(node))
    for s in node.src:
      if id(s) in outs and (node.op not in _SAME_INDICES or node.shape != s.shape):
        return False
    stack.extend(node.src)
  return True


def _joined_inputs(group: list[ScheduleItem]) -> tuple[LazyOp, ...]:
  """The buffers a joined kernel reads: its members' inputs in order, once each, but the
  members' own outputs (computed in the kernel)."""
  outs = {id(o) for o in _outputs(group)}
  seen, inputs = set(), []
  for it in group:
    for i in it.inputs:
      if id(i) not in outs and id(i) not in seen:
        seen.add(id(i))
        inputs.append(i)
  return tuple(inputs)


def _ordered(groups: list[list[ScheduleItem]], items: list[ScheduleItem]) -> list[ScheduleItem]:
  """One item per group, at the place of its last member in `items`."""
  last = {id(g[-1]): g for g in groups}
  out = []
  for item in items:
    group = last.get(id(item))
    if group is None:
      continue
    if len(group) == 1:
      out.append(item)
      continue
    head = group[0]
    out.append(ScheduleItem(head.out, _joined_inputs(group), head.name,
                            extra=tuple(it.out for it in group[1:])))
  return out
