"""The fast engine's memory and warp instructions: ld/st (global, shared, param; .v2/.v4),
atom.shared.add, shfl.sync.bfly and mma.sync, over every active thread of a batch at once.

Checks are the reference engine's (compile_memory.py, memory.py): an access outside every
buffer or shared variable, or misaligned, faults at the first such thread in thread order with
the reference's message; shared-memory reads check the per-byte (writer, barrier epoch) record.
"""
from __future__ import annotations

import numpy as np

from . import mma as mma_mod
from .compile_memory import ld_operands, param_name, shfl_form, st_operands
from .fast_operands import Fault, UINT, count, full, reader, shared, writer
from .fast_operands import f16_bits, f16_values, quiet32
from .memory import SHARED_BASE, SharedMemory
from .operands import FULL, LaneFault, TYPES
from .parser import Instr
from .steps import STEP, checked_operands, unsupported, where_text

# memory type -> (numpy dtype in memory, to register values, from register values)
_F = {"f32": ("<f4", quiet32, lambda v: np.asarray(v, np.float32)),
      "f64": ("<f8", lambda x: x.astype(np.float64), lambda v: np.asarray(v, np.float64)),
      "f16": ("<u2", f16_values, lambda v: f16_bits(np.asarray(v, np.float64)))}


def _codec(t: str):
  if t in _F:
    return _F[t]
  d = np.dtype(UINT[TYPES[t][1]]).newbyteorder("<")
  return d, (lambda x: x), (lambda v, d=d: np.asarray(v).astype(d))


def address(op, ctx, ins: Instr):
  """(S, idx) -> the byte address of every active thread (uint64)."""
  if op[0] != "addr":
    raise unsupported(ins, "the address must be written [reg+offset] or [symbol+offset]")
  base, off = op[1], op[2]
  if base is None or base[0] == "sym":
    a = off if base is None else ctx.symbol_address(base[1], where_text(ins)) + off
    const = np.uint64(a & (2 ** 64 - 1))
    return lambda S, idx: np.full(count(S, idx), const)
  t = "u64" if ctx.regs.get(base[1], "u64")[-2:] == "64" else "u32"
  read = reader(base, t, ctx, where_text(ins))
  add = np.uint64(off & (2 ** 64 - 1))
  if not off:
    return lambda S, idx: np.asarray(read(S, idx), np.uint64)
  return lambda S, idx: np.asarray(read(S, idx), np.uint64) + add


# ---- global memory -------------------------------------------------------------------------

def global_index(S, idx, a, size: int, what: str):
  """[(buffer, element index of each active thread, which threads)] for a checked access."""
  buf = S.mem.last
  if not buf.base <= int(a[0]) < buf.base + buf.size:
    buf = S.mem._containing(int(a[0]), int(a[0]) + size)
  if buf is not None:
    off = a - np.uint64(buf.base)      # an address below the buffer wraps to a huge offset
    if _fits(off, size, buf.size):
      S.mem.last = buf
      return [(buf, (off >> np.uint64(size.bit_length() - 1)).view(np.int64), None)]
  return _per_buffer(S, idx, a, size, what)


def _fits(off, size: int, limit: int) -> bool:
  """Every offset aligned to `size` with the access inside [0, limit). One reduction: the OR
  of the offsets is at least their maximum and has every low bit any of them has, so where it
  passes both checks pass; where it does not, the maximum decides."""
  bits = int(np.bitwise_or.reduce(off))
  if bits & (size - 1):
    return False
  return bits + size <= limit or int(off.max()) + size <= limit


def _per_buffer(S, idx, a, size, what):
  """The general case (several buffers, or a fault): each thread checked in order."""
  bases = np.array(S.mem.bases, dtype=np.uint64)
  which = np.searchsorted(bases, a, side="right") - 1
  for k, addr in enumerate(a.tolist()):
    buf = S.mem.buffers[int(bases[which[k]])] if which[k] >= 0 else None
    try:
      if buf is None or not _inside(buf, addr, size):
        S.mem.lookup(addr, size, 0, what)
    except LaneFault as f:
      raise Fault(_slot(idx, k), f.message) from None
    if addr % size:
      raise Fault(_slot(idx, k), f"misaligned global {what} of {size} bytes at {addr:#x}")
  out = []
  for w in np.unique(which):
    sel = np.flatnonzero(which == w)
    buf = S.mem.buffers[int(bases[w])]
    out.append((buf, ((a[sel] - np.uint64(buf.base)) // np.uint64(size)).astype(np.intp), sel))
  return out


def _inside(buf, addr, size):
  return buf.base <= addr and addr + size <= buf.base + buf.size


def _slot(idx, k):
  return k if idx is None else int(idx[k])


def _view(S, data, dtype):
  key = (id(data), dtype)
  v = S.views.get(key)
  if v is None:
    v = S.views[key] = np.frombuffer(data, dtype=dtype)
  return v


# ---- shared memory -------------------------------------------------------------------------

def shared_index(S, idx, a, size: int, what: str):
  """Byte offsets into the batch's shared array of each active thread, checked."""
  off = a.astype(np.int64) - SHARED_BASE
  inside = (off >= 0) & (off < S.ssize)
  ends = S.var_end[np.where(inside, off, 0)]
  ok = inside & (ends >= off + size) & (a % np.uint64(size) == 0)
  if not ok.all():
    k = int(np.argmin(ok))
    try:
      SharedMemory._offset(S.layout_holder, int(a[k]), size, 0, what)
    except LaneFault as f:
      raise Fault(_slot(idx, k), f.message) from None
  cta = S.slot_cta if idx is None else S.slot_cta[idx]
  return cta * S.sstride + off, off


def race_granularity(entry) -> int:
  """4 where every access that may reach shared memory moves whole aligned 4-byte words (the
  race record per word then says what the reference's per-byte record says), else 1."""
  for ins in entry.instrs:
    if ins.opcode in ("ld", "st", "atom") and not {"global", "param"} & set(ins.mods) and \
            ins.mods and TYPES.get(ins.mods[-1], ("", 8))[1] < 32:
      return 1
  return 4


def check_read(S, idx, flat, off, size: int) -> None:
  g = S.race_gran
  pos = (flat // g)[:, None] + np.arange(size // g)
  tid = (S.slot_tid if idx is None else S.slot_tid[idx])[:, None]
  who = S.sh_writer[pos]
  bad = (S.sh_epoch[pos] == S.epoch) & (who != tid)
  if bad.any():
    k, b = np.unravel_index(int(np.argmax(bad)), bad.shape)
    byte = int(off[k]) + int(b) * g
    raise Fault(_slot(idx, k), f"shared-memory race: thread {int(tid[k, 0])} reads shared byte "
                f"{byte} (address {SHARED_BASE + byte:#x}) that thread {int(who[k, b])} wrote "
                f"since the last barrier; add a bar.sync between them")


def record_write(S, idx, flat, size: int) -> None:
  g = S.race_gran
  pos = ((flat // g)[:, None] + np.arange(size // g)).ravel()
  tid = S.slot_tid if idx is None else S.slot_tid[idx]
  S.sh_writer[pos] = np.repeat(tid, size // g)
  S.sh_epoch[pos] = S.epoch


def _is_shared(S, idx, space, a):
  if space == "global":
    return False
  return space == "shared" or int(a[0]) < (1 << 32)


# ---- ld / st -------------------------------------------------------------------------------

def ld_step(ins: Instr, ctx):
  space, vec, t, rt, dsts, addr = ld_operands(ins)
  where = where_text(ins)
  if space == "param":
    return _ld_param(ins, ctx, t, dsts[0], addr)
  writes = [writer(d, rt, ctx, where) for d in dsts]
  esize = TYPES[t][1] // 8
  size = esize * vec
  mdt, to_reg, _ = _codec(t)
  get_addr = address(addr, ctx, ins)

  def step(S, idx):
    a = get_addr(S, idx)
    if _is_shared(S, idx, space, a):
      vals = _shared_load(S, idx, a, size, esize, vec, mdt)
    else:
      vals = _global_load(S, idx, a, size, esize, vec, mdt)
    for wr, v in zip(writes, vals):
      wr(S, idx, to_reg(v))

  def merged(S, idx, mask):
    """Guarded, at full width: inactive threads load from the first active one's address; any
    fault is reported by the compressed path (exactly which thread faulted first)."""
    a = get_addr(S, idx)
    first = int(np.argmax(mask))
    if space != "global" and int(a[first]) < (1 << 32):
      return step(S, S.slots(idx)[mask])
    try:
      vals = _global_load(S, idx, np.where(mask, a, a[first]), size, esize, vec, mdt)
    except Fault:
      return step(S, S.slots(idx)[mask])
    for wr, v in zip(writes, vals):
      wr(S, idx, to_reg(v), mask)
  if vec == 1 and space != "shared":
    step = _direct_load(step, get_addr, writes[0], (t, to_reg, mdt), size, space)
  step.merged = merged
  return STEP, step, None


def _direct_load(general, get_addr, write, codec: tuple, size: int, space: str):
  """A scalar global load run by the whole batch, in one buffer, aligned and inside it: the
  general step's values with fewer calls (the writer's store inlined where it is a plain one);
  anything else (a subset of threads, generic addresses into shared memory, another buffer, a
  fault) is the general step's."""
  t, to_reg, mdt = codec
  shift = np.uint64(size.bit_length() - 1)
  last = [-1]     # the base of the buffer this instruction read last (loads alternate buffers)
  dest = getattr(write, "direct", None)
  plain = dest is not None and dest[2] is None and (
    dest[1] is np.float32 if t == "f32" else TYPES[t][0] in "usb" and np.dtype(mdt) == dest[1])
  name = dest[0] if plain else None

  def step(S, idx):
    if idx is not None:
      return general(S, idx)
    a = get_addr(S, None)
    a0, buf = int(a[0]), S.mem.buffers.get(last[0])
    if space != "global" and a0 < (1 << 32):
      return general(S, idx)
    if buf is None or not buf.base <= a0 < buf.base + buf.size:
      buf = S.mem._containing(a0, a0 + size)
      if buf is None:
        return general(S, idx)
      last[0] = buf.base
    off = a - np.uint64(buf.base)
    bits = int(np.bitwise_or.reduce(off))
    if bits & (size - 1) or (bits + size > buf.size and int(off.max()) + size > buf.size):
      return general(S, idx)
    v = _view(S, buf.data, mdt).take((off >> shift).view(np.int64))
    if t != "f32":
      v = to_reg(v)
    else:       # quieted as the reference reads an f32 (quiet32), where there is a NaN
      m = np.maximum.reduce(v)
      if m != m:
        v = quiet32(v)
    if name is None:
      write(S, None, v)
    else:
      S.R[name] = v if v.base is None else shared(v)
  return step


def _global_load(S, idx, a, size, esize, vec, mdt):
  parts = global_index(S, idx, a, size, "load")
  if len(parts) == 1 and parts[0][2] is None:
    buf, ix, _ = parts[0]
    view = _view(S, buf.data, mdt)
    return [view[ix * vec + k] for k in range(vec)] if vec > 1 else [view.take(ix)]
  out = [np.zeros(len(a), dtype=mdt) for _ in range(vec)]
  for buf, ix, sel in parts:
    view = _view(S, buf.data, mdt)
    for k in range(vec):
      out[k][sel] = view[ix * vec + k]
  return out


def _shared_load(S, idx, a, size, esize, vec, mdt):
  flat, off = shared_index(S, idx, a, size, "load")
  if S.check:
    check_read(S, idx, flat, off, size)
  view = S.shared_view(mdt)
  ix = flat // esize
  return [view[ix + k] for k in range(vec)]


def _ld_param(ins, ctx, t, dst, addr):
  name = param_name(ins, ctx, addr)
  write = writer(dst, t, ctx, where_text(ins))
  cls, w = TYPES[t]

  def step(S, idx):
    value = S.params[name]
    write(S, idx, full(S, idx, value if cls == "f" else value & ((1 << w) - 1), t))
  return STEP, step, None


def st_step(ins: Instr, ctx):
  space, vec, t, rt, addr, src_ops = st_operands(ins)
  where = where_text(ins)
  srcs = [reader(s, rt, ctx, where) for s in src_ops]
  esize = TYPES[t][1] // 8
  size = esize * vec
  mdt, _, to_mem = _codec(t)
  get_addr = address(addr, ctx, ins)

  def step(S, idx):
    a = get_addr(S, idx)
    vals = [to_mem(full(S, idx, r(S, idx), rt)) for r in srcs]
    if _is_shared(S, idx, space, a):
      _shared_store(S, idx, a, size, esize, vals, mdt)
    else:
      _global_store(S, idx, a, size, vals, mdt)
  return STEP, step, None


def _global_store(S, idx, a, size, vals, mdt):
  vec = len(vals)
  for buf, ix, sel in global_index(S, idx, a, size, "store"):
    view = _view(S, buf.data, mdt)
    for k, v in enumerate(vals):
      view[ix * vec + k] = v if sel is None else v[sel]


def _shared_store(S, idx, a, size, esize, vals, mdt):
  flat, _ = shared_index(S, idx, a, size, "store")
  view = S.shared_view(mdt)
  ix = flat // esize
  for k, v in enumerate(vals):
    view[ix + k] = v
  if S.check:
    record_write(S, idx, flat, size)


# ---- atomics, shuffles, mma ----------------------------------------------------------------

def atom_step(ins: Instr, ctx):
  """atom.shared.add.{u32,s32}: the active threads add in thread order; each gets the value
  before its own add (as a bit pattern of the type)."""
  mods, t = ins.mods[:-1], ins.mods[-1]
  if set(mods) != {"shared", "add"} or t not in ("u32", "s32"):
    raise unsupported(ins, "only atom.shared.add.u32 / .s32 are simulated")
  dst, addr, src = checked_operands(ins, 3)
  where = where_text(ins)
  write, read = writer(dst, t, ctx, where), reader(src, t, ctx, where)
  get_addr = address(addr, ctx, ins)

  def step(S, idx):
    a, values = get_addr(S, idx), full(S, idx, read(S, idx), t).tolist()
    flat, _ = shared_index(S, idx, a, 4, "atomic add")
    u32, old = S.shared_view("<u4"), np.zeros(len(a), np.uint32)
    for k, i in enumerate((flat // 4).tolist()):
      old[k] = u32[i]
      u32[i] = (int(old[k]) + values[k]) & 0xFFFFFFFF
    write(S, idx, old)
  return STEP, step, None


def warp_masks(S, idx):
  """(active slots, their global warp numbers, each touched warp's active-lane bitmask)."""
  a = np.arange(S.n) if idx is None else idx
  tid = S.slot_tid[a]
  gw = S.slot_cta[a] * S.nwarps + tid // 32
  masks = np.zeros(S.nwarps * S.nctas, dtype=np.uint64)
  np.bitwise_or.at(masks, gw, np.left_shift(np.uint64(1), (tid % 32).astype(np.uint64)))
  return a, tid, gw, masks


def _first_bad_warp(S, a, gw, masks, wanted_of):
  """(slot of the first thread of the first warp whose mask is not `wanted_of(warps)`'s, lane),
  or None; `wanted_of` maps an array of warp numbers to their wanted masks (uint64). The
  touched warps in order: `gw` is non-decreasing (slots are sorted)."""
  if not len(gw):
    return None
  touched = gw[np.flatnonzero(np.diff(gw, prepend=-1))]
  bad = np.flatnonzero(masks[touched] != wanted_of(touched))
  if not len(bad):
    return None
  w = int(touched[bad[0]])
  diff = int(masks[w]) ^ int(wanted_of(np.array([w]))[0])
  lane = (diff & -diff).bit_length() - 1
  cta, wi = divmod(w, S.nwarps)
  return (cta, wi * 32 + lane), lane


def live_masks(S, warps):
  """The live-lane bitmask (uint64) of each of the batch's warps `warps`: all 32 lanes but in
  a CTA's last, partial warp."""
  left = np.minimum(S.block_threads - (warps % S.nwarps) * 32, 32).astype(np.uint64)
  return (np.uint64(1) << left) - np.uint64(1)


def shfl_step(ins: Instr, ctx):
  dst, src, step_, clamp, wanted = shfl_form(ins)
  where = where_text(ins)
  write, read = writer(dst, "b32", ctx, where), reader(src, "b32", ctx, where)

  def step(S, idx):
    a, tid, gw, masks = warp_masks(S, idx)
    bad = _first_bad_warp(S, a, gw, masks, lambda w: np.uint64(wanted) & live_masks(S, w))
    if bad is not None:
      raise Fault(bad[0], "shfl.sync: the lanes executing it must be exactly the member mask's "
                          "(converged warp)")
    lane = tid % 32
    j = lane ^ step_
    j = np.where(j > clamp, lane, j)
    partner = a - lane + j
    ok = ((masks[gw] >> j.astype(np.uint64)) & np.uint64(1)) == 1
    if not ok.all():
      k = int(np.argmin(ok))
      raise Fault(int(a[k]), f"shfl.sync reads lane {int(j[k])}, which is not active: "
                             f"undefined value")
    vals = full(S, idx, read(S, idx), "b32")
    write(S, idx, vals[np.searchsorted(a, partner)])
  return STEP, step, None


def mma_step(ins: Instr, ctx):
  # the reference engine compiled this instruction first: its operands and shape are checked
  shape, itype = ins.mods[2], ins.mods[6]
  d, a, b, c = ins.operands
  where = where_text(ins)
  ra = [reader(o, "b32", ctx, where) for o in a[1]]
  rb = [reader(o, "b32", ctx, where) for o in b[1]]
  rc = [reader(o, "f32", ctx, where) for o in c[1]]
  wd = [writer(o, "f32", ctx, where) for o in d[1]]

  def step(S, idx):
    slots, _, gw, masks = warp_masks(S, idx)
    bad = _first_bad_warp(S, slots, gw, masks, lambda w: np.full(len(w), FULL, np.uint64))
    if bad is not None:
      raise Fault(bad[0], "mma.sync needs all 32 lanes of the warp active and converged")
    regs = [[full(S, idx, r(S, idx), t).reshape(-1, 32) for r in rs]
            for rs, t in ((ra, "b32"), (rb, "b32"), (rc, "f32"))]
    for wr, vals in zip(wd, warp_mma(shape, itype, *regs)):
      wr(S, idx, vals.ravel())
  return STEP, step, None


_DECODE = {"f16": lambda b: f16_values(b & 0xFFFF),
           "bf16": lambda b: ((b & 0xFFFF) << 16).astype(np.uint32).view(np.float32)
           .astype(np.float64),
           "tf32": lambda b: (b & 0xFFFFE000).astype(np.uint32).view(np.float32)
           .astype(np.float64)}


def _matrix(regs, table, per_reg: int, decode, rows: int, cols: int):
  """mma.gather for every warp at once: (warps, rows, cols) from regs[j] of shape (warps, 32)."""
  lane, i, r, c = (np.array(v) for v in zip(*table))
  words = np.stack(regs)[i // per_reg, :, lane].astype(np.uint64)    # (elements, warps)
  if per_reg == 2:
    words = np.where((i & 1)[:, None] == 1, words >> np.uint64(16), words & np.uint64(0xFFFF))
  mat = np.zeros((words.shape[1], rows, cols))
  mat[:, r, c] = decode(words).T
  return mat


def warp_mma(shape: str, itype: str, a_regs, b_regs, c_regs) -> list:
  """mma.mma over every warp at once, with the same double arithmetic in the same order (the
  products are exact; the sum runs over k from 0, then adds C, then rounds to f32)."""
  M, N, K, _, _, _, _, per = mma_mod.SHAPES[(shape, itype)]
  tables = mma_mod._tables(shape, itype)
  A = _matrix(a_regs, tables[0], per, _DECODE[itype], M, K)
  B = _matrix(b_regs, tables[1], per, _DECODE[itype], K, N)
  C = _matrix([np.asarray(r, np.float32).view(np.uint32) for r in c_regs], tables[2], 1,
              lambda w: w.astype(np.uint32).view(np.float32).astype(np.float64), M, N)
  D = np.zeros((A.shape[0], M, N))
  for k in range(K):
    D = D + A[:, :, k, None] * B[:, None, k, :]
  D = (D + C).astype(np.float32)
  lane, i, r, c = (np.array(v) for v in zip(*tables[2]))
  out = np.zeros((4, D.shape[0], 32), np.float32)
  out[i, :, lane] = D[:, r, c].T
  return list(out)

