"""Lowering's one entry: `lower(item, opts)` picks the strategy the Opts ask for and builds the
kernel's stores with the base Lowerer (lowerer.py): a block sorting network (sortnet.py), fused
attention (attention.py), a row kernel's rows (rows.py), `upcast` outputs per thread (vectors
with `upcast_vec`: vector.py), a workgroup per output (`group`), register tiles (`tile`:
regtile.py, or each output of the block on its own), a window slid down rows (`slide`: slide.py),
or tiles through workgroup memory (`stage`: wgtile.py).
"""
from __future__ import annotations

import itertools
import math

from ..graph.join import member_slice, read_member
from ..graph.lazy import L
from ..graph.schedule import ScheduleItem
from ..graph.view import contiguous_strides
from ..rules.symbolic import simplify
from ..uop.ops import Ops, UOp
from ..uop.program import BufferSpec, kernel_buffers
from .index_math import I32, gate_and, int_const, linear_index, unravel
from .lowerer import Lowerer
from .opts import Opts
from .tile_grid import grid_axis, tile_axes, tile_threads
from .reductions import nested_reduces, sibling_reduces
from .quad_share import quad_share
from .exchange import exchange, exchangeable
from .regtile import tiled_stores
from .attention import attention_stores
from .rows import row_stores
from .slide import slide_stores
from .sortnet import sortnet_stores
from .staged import stage_rows
from .vector import vector_loads, vector_stores, vector_thread_stores
from .wgtile import staged_stores


# the last lowering made, as one tuple (item, opts, result) (read and replaced whole: threads
# that compile at once see one or the other): the optimizer's probe of the kernel it then
# chooses (optimize._long_over_budget, _slide) is the lowering compile_item asks for next
_LAST: list = [(None, None, None)]


def lower(item: ScheduleItem, opts: Opts) -> tuple[UOp, list[BufferSpec]]:
  """The kernel's SINK and its buffer table (slot 0: the output); the same item and Opts as the
  last call give that call's result (UOps are immutable; the buffer table is read only)."""
  last = _LAST[0]
  if last[0] is item and last[1] == opts:
    return last[2]
  result = _lower(item, opts)
  _LAST[0] = (item, opts, result)
  return result


def forget_last() -> None:
  """Drop the last lowering kept by `lower` (compile_item calls this once it has its kernel's:
  the item holds its inputs' buffers, which must not outlive the compile)."""
  _LAST[0] = (None, None, None)


def _lower(item: ScheduleItem, opts: Opts) -> tuple[UOp, list[BufferSpec]]:
  lw = Lowerer(item)
  lw.nested = nested_reduces(item)
  lw.siblings = sibling_reduces(item, lw.nested)
  out = item.out
  if out.op is L.SORTNET:     # a block sorting network: its own threads and workgroup memory
    stores = sortnet_stores(lw, opts.local)
  elif out.op is L.ATTENTION:  # fused attention: query rows per thread (attention.py)
    stores = attention_stores(lw, opts)
  elif out.op is L.WRITE:      # an in-place write: value's elements into the target
    stores = write_stores(lw, opts)
  elif item.extra:             # several outputs (graph/join.py): a thread's indices each
    stores = _thread_stores(lw, opts)
  elif item.rows:
    stores = row_stores(lw, opts)
  elif opts.group:
    stores = _grouped_stores(lw, opts)
  elif opts.stage:
    stores = staged_stores(lw, opts)
  elif opts.slide:
    stores = slide_stores(lw, opts)
  else:
    stores = _tiled_stores(lw, opts) if opts.tile else _thread_stores(lw, opts)
  buffers = kernel_buffers(out, item.inputs, item.extra)
  sink = UOp(Ops.SINK, None, tuple(stores))
  if opts.shares_quads():
    sink = quad_share(simplify(sink))     # its indices simplified, to find base + constant
  return sink, buffers


def _thread_stores(lw: Lowerer, opts: Opts) -> list[UOp]:
  """Each thread computes `upcast` consecutive outputs."""
  out = lw.item.out
  n = out.size
  lw.reduce_inner, lw.reduce_unroll = opts.reduce_inner, opts.reduce_unroll
  if opts.reduce_inner and opts.upcast > 1:
    lw.split_loops = {}          # the outputs of a thread share their reductions' loops
  per_group = opts.local * opts.upcast
  groups = max(1, math.ceil(n / per_group))
  gid = UOp(Ops.SPECIAL, I32, (), ("gid", 0, groups))
  lid = UOp(Ops.SPECIAL, I32, (), ("lid", 0, opts.local))
  # SEQ_VEC: with Opts.seq_vec (option seq_vec, both CPU adapters' rows: render/wgsl/adapters.py;
  # optimize.py gives it to matvecs: threads.shares_a_vector), each reduction over one axis reads
  # seq_vec consecutive elements a step, runs of them as vector loads, gated loads whose gate
  # always holds too (a staged prologue's kernel sets its own).
  # Silero VAD's LSTM cell (128 outputs, 4 gates' rows of 128 weights over x and h), its c' and
  # h' kernels: Chromium's SwiftShader, GPU timestamps, best of 30, load 8-9 (bench/
  # bundle_call_ab.py --profile) 0.50 -> 0.36 ms and 0.29 -> 0.18 ms; lavapipe natively
  # (bench/pypi_kernels.py, best of 20, A/B/A/B, load ~15) 0.21-0.27 -> 0.11-0.12 ms and 0.13 ->
  # 0.07-0.12 ms, the model's 11 kernels 1.0-1.1 -> 0.7-0.8 ms.
  lw.seq_vec, lw.seq_gated = max(opts.seq_vec, 1), opts.seq_vec > 1
  stage_rows(lw, lid, opts.local)      # a prologue's one row, once per workgroup (staged.py)
  # output j of a thread: gid*(local*upcast) + lid*upcast + j, the form simplify gives that sum
  # (rules/sums.py), built as such: the loads' unravelled indices share it
  spread = [(gid, opts.local * opts.upcast, groups)] + ([(lid, opts.upcast, opts.local)]
                                                          if opts.local > 1 else [])
  vec = opts.upcast_vec and opts.upcast > 1 and groups * per_group == n and not lw.item.extra
  if vec:
    stores = vector_thread_stores(lw, spread, opts.upcast)
    if stores is not None:
      return stores
  stores, slots = [], _out_slots(lw.item)
  members = [node for _, node in slots if node.op is not L.WRITE]
  if any(node.op is L.WRITE and member_slice(node.src[1], members) is None and
         read_member(node.src[1], lw.item.inputs, members) for _, node in slots):
    return _exchange_stores(lw, opts, spread, slots, members)
  for j in range(opts.upcast):
    flat = linear_index(spread, j)
    gate = flat.lt(int_const(n)) if groups * per_group > n else None
    idxs = tuple(unravel([(flat, 1, n)], 0, out.shape))
    for slot, node in slots:
      if node.op is L.WRITE and member_slice(node.src[1], members) is None:
        stores.append(_write_store(lw, slot, node, flat, gate, gate))   # its own projection
      elif node.op is L.WRITE:   # a joined write of a run of a member's elements (graph/join.py)
        stores.append(_slice_write_store(lw, slot, node, members, flat, idxs, gate))
      else:
        stores.append(lw.params[slot].store(flat, lw.value(node, idxs, gate), gate))
  if vec:
    return vector_stores(stores, opts.upcast)
  rows = lw.split_loops is not None and len(members) == len(slots)   # (no joined write)
  return _rows_vector_loads(stores, opts.upcast) if rows else stores


def _exchange_stores(lw: Lowerer, opts: Opts, spread: list, slots: list, members: list) -> list:
  """_thread_stores of a joined kernel with a write whose value reads elements of a member
  other threads compute (a rotated key of the QKV projection): the members' stores first
  (their loads as vectors, as _rows_vector_loads), then each such member's values exchanged
  through workgroup memory where its workgroups hold what each write element reads
  (exchange.py), then the writes, each write element stored by the thread computing member
  element offset + e."""
  n, per_group = lw.item.out.size, opts.local * opts.upcast
  points = []
  for j in range(opts.upcast):
    flat = linear_index(spread, j)
    gate = flat.lt(int_const(n)) if spread[0][2] * per_group > n else None
    points.append((flat, gate, tuple(unravel([(flat, 1, n)], 0, lw.item.out.shape))))
  kept = [(slot, node) for slot, node in slots if node.op is not L.WRITE]
  stores = [lw.params[slot].store(flat, lw.value(node, idxs, gate), gate)
            for flat, gate, idxs in points for slot, node in kept]
  if lw.split_loops is not None:
    stores = _rows_vector_loads(stores, opts.upcast)
  values = {(j, id(node)): stores[j * len(kept) + k].src[2]
            for j in range(opts.upcast) for k, (_, node) in enumerate(kept)}
  for slot, node in slots:
    if node.op is not L.WRITE:
      continue
    got = member_slice(node.src[1], members)
    if got is not None:
      stores += [_slice_write_store(lw, slot, node, members, flat, idxs, gate,
                                    values[(j, id(got[0]))])
                 for j, (flat, gate, idxs) in enumerate(points)]
      continue
    member, reads = read_member(node.src[1], lw.item.inputs, members)
    offset = min(min(r) for r in reads if r)
    if id(member) not in lw.staged and exchangeable(reads, offset, per_group):
      lid = spread[1][0] if opts.local > 1 else None
      at = lid * int_const(opts.upcast) if lid is not None else int_const(0)
      exchange(lw, member, [values[(j, id(member))] for j in range(opts.upcast)],
               spread[0][0] * int_const(per_group), at, per_group)
    stores += [_offset_write_store(lw, slot, node, offset, flat, gate) for flat, gate, _ in points]
  return stores


def _rows_vector_loads(stores: list, rows: int) -> list:
  """The stores of a reduce_inner thread's `rows` outputs with each run of their loads at
  consecutive addresses (the same terms, consecutive constants: per-block values held grouped by
  the thread's rows, onnx/operators/quant_nbits.row_grouped) read as one vector load
  (vector.vector_loads): a q4 matvec's scales, 8 rows a thread, two vec4 loads a block, not 8
  scalar loads."""
  values = [v for v, _ in vector_loads([(s.src[2], None) for s in stores], rows)]
  return [s.replace(src=(*s.src[:2], v, *s.src[3:])) for s, v in zip(stores, values)]


def _out_slots(item: ScheduleItem) -> list[tuple[int, object]]:
  """(binding slot, node) of each output the kernel stores: `item.out` in slot 0, the further
  outputs of a joined kernel (graph/join.py) in the slots after the inputs."""
  return [(0, item.out)] + [(len(item.inputs) + 1 + k, e) for k, e in enumerate(item.extra)]


def write_stores(lw: Lowerer, opts: Opts) -> list[UOp]:
  """L.WRITE: a thread per element of the value (or, with Opts.group, a workgroup per element:
  a reduction the write computes, graph/schedule.py's write fusion), stored into the target
  (slot 0, its own buffer) at the same indices but along the axis, shifted by the run-time
  start (a scalar, or one per row of the leading axis: a batch's rows each at its own start); a
  position outside the target's axis writes nothing. Joined writes (graph/join.py: a KV cache's
  k and v, values of one shape) each store at the same thread's element into their own target."""
  n = lw.item.out.src[1].size
  if opts.group:
    flat, gate, store_gate = _group_lanes(lw, opts, n), None, lw.lane.eq(int_const(0))
  else:
    groups = max(1, math.ceil(n / opts.local))
    gid = UOp(Ops.SPECIAL, I32, (), ("gid", 0, groups))
    lid = UOp(Ops.SPECIAL, I32, (), ("lid", 0, opts.local))
    flat = linear_index([(gid, opts.local, groups)] + ([(lid, 1, opts.local)]
                                                       if opts.local > 1 else []), 0)
    gate = store_gate = flat.lt(int_const(n)) if groups * opts.local > n else None
    lw.reduce_inner = opts.reduce_inner
    stage_rows(lw, lid, opts.local)
  return [_write_store(lw, slot, out, flat, gate, store_gate) for slot, out in _out_slots(lw.item)]


def _slice_write_store(lw: Lowerer, slot: int, out, members: list, flat: UOp, idxs: tuple,
                       gate, v=None) -> UOp:
  """The store of in-place write `out`, whose value is the run offset .. offset + size - 1 of a
  member's elements (join.member_slice), by the thread computing member element `flat` (at
  `idxs`): the value the thread computed for the member (`v` where the caller has it), at the
  write's element flat - offset."""
  member, offset = member_slice(out.src[1], members)
  return _offset_write_store(lw, slot, out, offset, flat, gate,
                             lw.value(member, idxs, gate) if v is None else v)


def _offset_write_store(lw: Lowerer, slot: int, out, offset: int, flat: UOp, gate, v=None) -> UOp:
  """The store of in-place write `out`'s element flat - offset by the thread computing member
  element `flat` (none outside the write's elements); its value `v`, else computed there."""
  n = out.src[1].size
  inside = flat.ge(int_const(offset)) & flat.lt(int_const(offset + n))
  wgate = gate_and(gate, inside)
  at = (flat - int_const(offset)) if offset else flat
  return _write_store(lw, slot, out, inside.where(at, int_const(0)), wgate, wgate, v)


def _write_store(lw: Lowerer, slot: int, out, flat: UOp, gate, store_gate, v=None) -> UOp:
  """The store of in-place write `out` into binding `slot` at the value's element `flat` (its
  value `v` where the caller computed it)."""
  _, value, start, stop = out.src
  axis, n = out.arg, value.size
  idxs = list(unravel([(flat, 1, n)], 0, value.shape))
  row = tuple(idxs[:1]) if start.shape else ()      # per-row bounds: (B,), read at the row
  at = idxs[axis] + lw.value(start, row, gate)
  end = lw.value(stop, row, gate).minimum(int_const(out.shape[axis]))
  inside = at.ge(int_const(0)) & at.lt(end)
  idxs[axis] = at
  strides = [math.prod(out.shape[a + 1:]) for a in range(len(out.shape))]
  lin = linear_index([(u, s, 2) for u, s in zip(idxs, strides) if s], 0)
  if v is None:
    v = lw.value(value, tuple(unravel([(flat, 1, n)], 0, value.shape)), gate)
  return lw.params[slot].store(lin, v, gate_and(store_gate, inside))


def _group_lanes(lw: Lowerer, opts: Opts, n: int) -> UOp:
  """Set `lw` up for grouped reductions (a workgroup of Opts.group lanes per output, lw.lane the
  lane); the output index, the workgroup's id over `n` outputs."""
  lw.group, lw.subgroups = opts.group, opts.subgroups
  lw.lane = UOp(Ops.SPECIAL, I32, (), ("lid", 0, opts.group))
  lw.unroll, lw.vec = max(opts.group_unroll, 1), max(opts.group_vec, 1)
  lw.chunk = opts.group_chunk
  return UOp(Ops.SPECIAL, I32, (), ("gid", 0, max(n, 1)))


def _grouped_stores(lw: Lowerer, opts: Opts) -> list[UOp]:
  """One workgroup of `group` threads per output; lane 0 stores it."""
  out = lw.item.out
  gid = _group_lanes(lw, opts, out.size)
  value = lw.value(out, tuple(unravel([(gid, 1, out.size)], 0, out.shape)), None)
  return [lw.params[0].store(gid, value, lw.lane.eq(int_const(0)))]


def _tiled_stores(lw: Lowerer, opts: Opts) -> list[UOp]:
  """Each thread computes an R x C block of outputs over the last two output axes; the block's
  reductions share their loops, so each step loads R + C values. Where R or C does not divide
  the axis, the last block computes at clamped indices and gates its stores."""
  out = lw.item.out
  (rows, cols), (ar, ac) = opts.tile, opts.tile_axes or tile_axes(out.shape)
  stores = tiled_stores(lw, opts, (ar, ac))     # from the operands, the columns as vectors
  if stores is not None:
    return stores
  base, gate = tile_threads(out.shape, opts.tile, (ar, ac), opts.local, grid_axis(out),
                           opts.tile_chunk, quad=opts.shares_quads())
  strides = contiguous_strides(out.shape)
  lw.loops, lw.tile_inner = {}, opts.tile_inner
  stores = []
  for i, j in itertools.product(range(rows), range(cols)):
    idxs, at, store_gate = list(base), list(base), gate
    for axis, size, k in ((ar, rows, i), (ac, cols, j)):
      idxs[axis] = at[axis] = base[axis] * int_const(size) + int_const(k) if size > 1 else base[axis]
      if out.shape[axis] % size:
        inside = idxs[axis].lt(int_const(out.shape[axis]))
        at[axis] = inside.where(idxs[axis], int_const(out.shape[axis] - 1))
        store_gate = gate_and(store_gate, inside)
    flat = linear_index([(u, s, n) for u, s, n in zip(idxs, strides, out.shape) if n > 1], 0)
    stores.append(lw.params[0].store(flat, lw.value(out, tuple(at), gate), store_gate))
  return stores
