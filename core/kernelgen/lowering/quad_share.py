"""Quad sharing (Opts.quad: option quad_weights with subgroups): loads the 4 lanes of a quad
share are loaded a quarter per lane and handed round with QUAD_BROADCAST.

In a register-tiled conv or matmul the lanes next to each other compute other pixels (or rows)
of the same output channels, so each step's weight loads read the same addresses in all of them.
On CPU adapters every load at a computed index is a lane-by-lane gather (bench/
swiftshader_loads.py): here lane j of each quad loads the j-th of every 4 such loads of a step,
and the others take it with QUAD_BROADCAST (WGSL quadBroadcast).

A load is shared when its address (and gate) is provably the same in the 4 lanes of a quad:
`quad_uniform` walks the index math with workgroup ids, loop counters, arguments and constants
uniform, and the thread id of a 1-D workgroup (of a multiple of 4 threads) "aligned": t = 4a + r,
r the lane in the quad; an aligned value plus a non-negative multiple of 4 stays aligned, divided
by a multiple of 4 it is uniform, taken modulo one it stays aligned. The quad of subgroup lanes
(sglane & ~3) .. + 3 is the thread ids 4a .. 4a + 3 where subgroups hold consecutive thread ids
(Vulkan's CPU drivers, lavapipe and SwiftShader, the adapters whose tables set quad_weights:
render/wgsl/adapters.py); WebGPU's subgroups are at least 4 lanes, so every quad is whole.

Measured (bench/quad_weights.py, natively, 2 shared CPUs at load 9-11, CPU ms best / median,
off -> on, interleaved): lavapipe, det's conv 96 -> 24 at 80x80 19.9 -> 12.4, matmul
512x384x512 23.8 -> 17.5; PP-OCRv4 det's warm call (26 of 79 kernels change, 25 faster) CPU
246.7 / 278.3 -> 213.9 / 246.9, GPU timestamps 185.6 / 232.1 -> 139.6 / 171.4. SwiftShader: the
conv 100.2 -> 81.9, the matmul 90.7 -> 83.7; det's call (25 change, 24 faster) CPU 600.3 / 747.9
-> 561.2 / 665.7.
"""
from __future__ import annotations

from ..dtype import PtrDType, dtypes
from ..rules.ranges import divisible, value_range
from ..uop.ops import Ops, UOp, sink_order
from ..uop.verify import QUAD_SCALARS

I32 = dtypes.int32
# a value's kind over a quad's 4 lanes: the same in all, or 4a + r (r the lane in the quad)
UNIFORM, ALIGNED = "uniform", "aligned"
QUAD = 4
# ops whose value is uniform when all their sources are (loads: a uniform address)
_LEAVES = (Ops.PARAM, Ops.DEFINE_LOCAL, Ops.VAR, Ops.CONST)


def quad_share(sink: UOp) -> UOp:
  """`sink` with its quad-uniform global loads inside loops shared by quads (the graph as it is
  when there is nothing to share or the workgroup is not 1-D of a multiple of 4 threads)."""
  order = sink_order(sink)
  lids = {u.arg for u in order if u.op is Ops.SPECIAL and u.arg[0] == "lid"}
  if len(lids) != 1 or next(iter(lids))[1] != 0 or next(iter(lids))[2] % QUAD:
    return sink
  kinds, loops = quad_kinds(order), _loops(order)
  written = {u.src[0] for u in order if u.op is Ops.STORE}
  groups: dict[tuple, list[UOp]] = {}
  for u in order:
    if _shareable(u, kinds) and loops[u] and u.src[0] not in written:
      key = (u.src[0], u.src[2:], u.dtype, loops[u])
      groups.setdefault(key, []).append(u)
  lane = UOp(Ops.SPECIAL, I32, (), ("sglane", 0, min(next(iter(lids))[2], 128)))
  q = lane & UOp.const(I32, QUAD - 1)
  swaps = {}
  for loads in groups.values():
    for at in range(0, len(loads) - QUAD + 1, QUAD):
      quad = loads[at:at + QUAD]
      own = quad[0].replace(src=(quad[0].src[0], _own_index(quad, q)) + quad[0].src[2:])
      swaps.update({u: UOp(Ops.QUAD_BROADCAST, u.dtype, (own,), j) for j, u in enumerate(quad)})
  return _substitute(sink, order, swaps) if swaps else sink


def quad_kinds(order: list[UOp]) -> dict[UOp, str]:
  """UNIFORM or ALIGNED for the nodes of `order` (sources first) that are, over a quad."""
  kinds: dict[UOp, str] = {}
  for u in order:
    kind = _kind(u, kinds)
    if kind is not None:
      kinds[u] = kind
  return kinds


def _kind(u: UOp, kinds: dict) -> str | None:
  op, src = u.op, u.src
  if op in _LEAVES:
    return UNIFORM
  if op is Ops.SPECIAL:
    return {"gid": UNIFORM, "lid": ALIGNED}.get(u.arg[0])
  seen = [kinds.get(s) for s in src]
  if op is Ops.ADD and sorted(seen, key=str) == [ALIGNED, UNIFORM]:
    other = src[seen.index(UNIFORM)]
    return ALIGNED if divisible(other, QUAD) and value_range(other)[0] >= 0 else None
  if op in (Ops.IDIV, Ops.MOD) and seen[0] is ALIGNED and src[1].op is Ops.CONST and \
     src[1].arg > 0 and src[1].arg % QUAD == 0 and value_range(src[0])[0] >= 0:
    return UNIFORM if op is Ops.IDIV else ALIGNED
  if op in (Ops.DEFINE_ACC, Ops.ASSIGN, Ops.AFTER, Ops.STORE, Ops.ATOMIC_ADD):
    return None                     # (memory and registers a thread writes: never assumed)
  return UNIFORM if all(k is UNIFORM for k in seen) else None


def _shareable(u: UOp, kinds: dict) -> bool:
  """A global load of a quad-uniform address and gate whose dtype a broadcast moves."""
  return u.op is Ops.LOAD and kinds.get(u) is UNIFORM and u.src[0].op is Ops.PARAM and \
    u.dtype.name in QUAD_SCALARS and not isinstance(u.dtype, PtrDType)


def _loops(order: list[UOp]) -> dict[UOp, frozenset]:
  """The loops (RANGE nodes) each node depends on: the loads of one loop body share."""
  loops: dict[UOp, frozenset] = {}
  none = frozenset()
  for u in order:
    inner = none
    for s in u.src:
      got = loops[s]
      if not got <= inner:
        inner = got if inner <= got else inner | got
    loops[u] = inner | {u} if u.op is Ops.RANGE else inner
  return loops


def _own_index(quad: list[UOp], q: UOp) -> UOp:
  """The index lane q of the quad loads: base + c[q] where the indices are one base plus
  constants (base + c0 + q * step where those are evenly spaced), else a select."""
  parts = [_base_offset(u.src[1]) for u in quad]
  if len({b for b, _ in parts}) == 1:
    base, offsets = parts[0][0], [c for _, c in parts]
    step = offsets[1] - offsets[0]
    if all(c == offsets[0] + j * step for j, c in enumerate(offsets)):
      picked = q * UOp.const(I32, step) + UOp.const(I32, offsets[0])
    else:
      picked = _select(q, [UOp.const(I32, c) for c in offsets])
    return picked if base is None else base + picked
  return _select(q, [u.src[1] for u in quad])


def _base_offset(index: UOp) -> tuple:
  """(base, constant) with index = base + constant (base None: a constant index)."""
  if index.op is Ops.CONST:
    return None, index.arg
  if index.op is Ops.ADD and index.src[1].op is Ops.CONST:
    return index.src[0], index.src[1].arg
  return index, 0


def _select(q: UOp, values: list[UOp]) -> UOp:
  """values[q] for q in 0..3, as nested selects."""
  out = values[0]
  for j in range(1, len(values)):
    out = q.eq(UOp.const(I32, j)).where(values[j], out)
  return out


def _substitute(sink: UOp, order: list[UOp], swaps: dict) -> UOp:
  """`sink` rebuilt with the nodes of `swaps` replaced (sources first; a broadcast's own load is
  made of old nodes, rebuilt as well)."""
  new: dict[UOp, UOp] = {}

  def rebuilt(u: UOp) -> UOp:
    if u not in new:
      src = tuple(rebuilt(s) for s in u.src)
      new[u] = u if src == u.src else u.replace(src=src)
    return new[u]

  for u in order:
    if u in swaps:
      new[u] = rebuilt(swaps[u])
    else:
      src = tuple(new.get(s, s) for s in u.src)
      new[u] = u if src == u.src else u.replace(src=src)
  return new[sink]
