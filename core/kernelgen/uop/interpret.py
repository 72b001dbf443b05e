"""The reference interpreter (device PYTHON): runs a linearized kernel, and is the executable spec.

Each instruction runs for all threads of a workgroup at once: a value is a per-thread list
(tuples for vectors; None for threads that are not active). IF blocks and loops with
thread-dependent trip counts narrow the list of active threads; BARRIER is then simply the point
all threads have reached, and WMMA sees the whole warp. Subgroups (SUBGROUP_REDUCE,
QUAD_BROADCAST, SPECIAL sglane) are modelled with a configurable size and layout: "linear" puts
consecutive threads in a subgroup; "strided" deals threads out round-robin and numbers lanes
down from size - 1 (a partial subgroup has no lane 0), so a kernel that assumes WGSL promises more
than it does (consecutive ids, lane 0 = lowest id, lane 0 active) gives wrong results. (Quad
sharing, lowering/quad_share.py, does assume consecutive ids: only adapter tables whose drivers
give them set its option.) ALU semantics are alu.py's; memory is raw bytes in numpy layout
(bfloat16 as its 16 raw bits). Out-of-bounds accesses raise ExecutionError naming the
instruction, the thread and the index.

WMMA runs on the tensor-core fragment layouts of wmma.py (shared with lowering, renderers and
simulators; re-exported here).
"""
from __future__ import annotations

import struct
from typing import Callable

from .alu import alu_fn, exec_bitcast, exec_cast
from ..dtype import DType, PtrDType, bf16_bits, bf16_from_bits, dtypes, truncate
from ..errors import ExecutionError
from ..limits import tick
from .ops import GroupOp, Ops, UOp, format_node
from .program import Kernel
from .wmma import WMMA_SHAPES, fragment_position, wmma_layout

# ---- tensor cores (the fragment layouts: wmma.py) ----------------------------------------------

def _tf32(x: float) -> float:
  """The value a tensor core reads from a float32 operand in tf32 mode: low 13 bits ignored."""
  bits = struct.unpack("<I", struct.pack("<f", x))[0] & 0xFFFFE000
  return struct.unpack("<f", struct.pack("<I", bits))[0]


def wmma_warp(arg, a: list, b: list, c: list) -> list:
  """D = A @ B + C for one warp: a, b, c are the 32 lanes' fragments (tuples); returns D's.
  Products are exact in float64 and summed in k order, then C is added and the result rounded
  to float32 (the accumulator dtype)."""
  _, shape, dtype_in, _ = arg
  name = getattr(dtype_in, "name", dtype_in)
  (m, n, k) = shape
  read = _tf32 if name == "float32" else float
  A = _unfragment(wmma_layout(shape, "a", name), a, m, k, read)
  B = _unfragment(wmma_layout(shape, "b", name), b, k, n, read)
  C = _unfragment(wmma_layout(shape, "c", name), c, m, n, float)
  out = []
  for lane in wmma_layout(shape, "d", name):
    out.append(tuple(truncate(sum(A[r][j] * B[j][col] for j in range(k)) + C[r][col],
                              dtypes.float32) for r, col in lane))
  return out


def _unfragment(layout, frags, rows: int, cols: int, read: Callable) -> list[list[float]]:
  mat = [[0.0] * cols for _ in range(rows)]
  for lane, positions in enumerate(layout):
    for i, (r, col) in enumerate(positions):
      mat[r][col] = read(frags[lane][i])
  return mat


# ---- memory ---------------------------------------------------------------------------------------

class _Memory:
  """A buffer: raw bytes in numpy layout, read and written element by element."""
  __slots__ = ("data", "dtype", "size", "codec", "name")

  def __init__(self, data: bytearray, ptr: PtrDType, name: str):
    self.data, self.dtype, self.name = data, ptr.base.scalar, name
    self.size = ptr.size if ptr.size >= 0 else len(data) // self.dtype.itemsize
    self.codec = struct.Struct("<" + self.dtype.fmt)

  def read(self, index: int, count: int):
    item, unpack, data = self.dtype.itemsize, self.codec.unpack_from, self.data
    values = [unpack(data, (index + j) * item)[0] for j in range(count)]
    if self.dtype == dtypes.bfloat16:
      values = [bf16_from_bits(v) for v in values]
    return values[0] if count == 1 else tuple(values)

  def write(self, index: int, value) -> None:
    item, pack = self.dtype.itemsize, self.codec.pack_into
    for j, v in enumerate(value if isinstance(value, tuple) else (value,)):
      pack(self.data, (index + j) * item, bf16_bits(v) if self.dtype == dtypes.bfloat16 else v)


# ---- the program ----------------------------------------------------------------------------------

class _Program:
  """A linearized kernel prepared to run: block ends matched, printed names, handlers."""

  def __init__(self, kernel: Kernel, buffers: list, var_values: dict, subgroup_size: int = 32,
               subgroup_layout: str = "linear"):
    self.kernel, self.uops = kernel, list(kernel.uops)
    self.names = {u: f"%{i}" for i, u in enumerate(self.uops)}
    self.block_end = _match_blocks(self.uops)
    self.threads = kernel.local_size[0] * kernel.local_size[1] * kernel.local_size[2]
    self.memory = _bind_buffers(kernel, buffers)
    self.vars = _bind_vars(kernel, var_values)
    self.subgroup, self.sglane = subgroup_layout_of(self.threads, subgroup_size, subgroup_layout)
    self.lane_thread = {(g, lane): t for t, (g, lane) in enumerate(zip(self.subgroup, self.sglane))}

  def where(self, u: UOp) -> str:
    return format_node(u, self.names)

  def run(self, gid: tuple) -> None:
    wg = _Workgroup(self, gid)
    wg.block(0, len(self.uops), list(range(self.threads)))


SUBGROUP_LAYOUTS = ("linear", "strided")


def subgroup_layout_of(threads: int, size: int, layout: str) -> tuple[list[int], list[int]]:
  """(subgroup, lane) of each thread of a workgroup of `threads`, subgroups of at most `size`."""
  if not isinstance(size, int) or not 1 <= size <= 128 or layout not in SUBGROUP_LAYOUTS:
    raise ExecutionError(f"subgroup_size must be an int from 1 to 128 (WGSL's largest) and "
                         f"subgroup_layout one of "
                         f"{', '.join(SUBGROUP_LAYOUTS)}: got {size!r}, {layout!r}")
  if layout == "linear":
    return [t // size for t in range(threads)], [t % size for t in range(threads)]
  count = -(-threads // size)
  group = [t % count for t in range(threads)]
  return group, [size - 1 - group[:t].count(group[t]) for t in range(threads)]


def _match_blocks(uops: list[UOp]) -> dict[int, int]:
  """Index of each RANGE/IF -> index of its ENDRANGE/ENDIF."""
  position = {u: i for i, u in enumerate(uops)}
  return {position[u.src[0]]: i for i, u in enumerate(uops) if u.op in (Ops.ENDRANGE, Ops.ENDIF)}


def _bind_buffers(kernel: Kernel, buffers: list) -> dict[int, _Memory]:
  if len(buffers) != len(kernel.buffers):
    raise ExecutionError(f"kernel {kernel.name} takes {len(kernel.buffers)} buffers "
                         f"({', '.join(b.name for b in kernel.buffers)}), got {len(buffers)}")
  params = {u.arg: u for u in kernel.uops if u.op is Ops.PARAM}
  memory = {}
  for spec, data in zip(kernel.buffers, buffers):
    need = spec.size * spec.dtype.itemsize
    if len(data) < need:
      raise ExecutionError(f"buffer {spec.name} (slot {spec.slot}) has {len(data)} bytes; the "
                           f"kernel needs {need} ({spec.size} x {spec.dtype}): allocate more")
    memory[spec.slot] = _Memory(data, params[spec.slot].dtype, spec.name)
  return memory


def _bind_vars(kernel: Kernel, var_values: dict | None) -> dict[str, int]:
  values = dict(var_values or {})
  for v in kernel.vars:
    name, lo, hi = v.arg
    if name not in values:
      raise ExecutionError(f"kernel {kernel.name} needs a value for the variable {name!r}: "
                           f"pass var_values={{{name!r}: ...}} with {lo} <= value <= {hi}")
    if not lo <= values[name] <= hi:
      raise ExecutionError(f"variable {name!r} = {values[name]} is outside its range {lo}..{hi}")
  return values


class _Workgroup:
  """One workgroup's execution state: the per-thread values of every node run so far."""

  def __init__(self, program: _Program, gid: tuple):
    self.p, self.gid, self.env = program, gid, {}
    lx, ly, _ = program.kernel.local_size
    self.lid = [(t % lx, (t // lx) % ly, t // (lx * ly)) for t in range(program.threads)]
    self.locals: dict[int, _Memory] = {}

  def block(self, start: int, end: int, lanes: list[int]) -> None:
    """Run uops[start:end] for the threads in `lanes`."""
    uops, i = self.p.uops, start
    while i < end:
      u = uops[i]
      if u.op is Ops.RANGE:
        self.loop(u, i, lanes)
        i = self.p.block_end[i] + 1
      elif u.op is Ops.IF:
        cond = self.env[u.src[0]]
        inside = [t for t in lanes if cond[t]]
        if inside:
          self.block(i + 1, self.p.block_end[i], inside)
        i = self.p.block_end[i] + 1
      else:
        _HANDLERS[u.op](self, u, lanes)
        i += 1

  def loop(self, u: UOp, i: int, lanes: list[int]) -> None:
    ends, counter = self.env[u.src[0]], [None] * self.p.threads
    self.env[u] = counter
    for t in lanes:
      counter[t] = 0
    active = [t for t in lanes if counter[t] < ends[t]]
    while active:
      self.block(i + 1, self.p.block_end[i], active)
      for t in active:
        counter[t] += 1
      active = [t for t in active if counter[t] < ends[t]]

  def thread(self, t: int) -> str:
    return f"workgroup {self.gid}, thread {self.lid[t]}"

  def values(self, fn: Callable, u: UOp, lanes: list[int]) -> None:
    """env[u] = fn(*source values) for each active thread."""
    srcs = [self.env[s] for s in u.src]
    if len(lanes) == self.p.threads:
      self.env[u] = [fn(*args) for args in zip(*srcs)]
      return
    out = [None] * self.p.threads
    for t in lanes:
      out[t] = fn(*(s[t] for s in srcs))
    self.env[u] = out


# ---- instruction handlers -------------------------------------------------------------------------

def _lanewise(fn: Callable, count: int) -> Callable:
  if count == 1:
    return fn
  return lambda *xs: tuple(fn(*(x[j] if isinstance(x, tuple) else x for x in xs))
                           for j in range(count))


def _alu(wg: _Workgroup, u: UOp, lanes) -> None:
  wg.values(_lanewise(alu_fn(u.op, u.dtype.scalar), u.dtype.count), u, lanes)


def _cast(wg: _Workgroup, u: UOp, lanes) -> None:
  src, dst = u.src[0].dtype.scalar, u.dtype.scalar
  wg.values(_lanewise(lambda x: exec_cast(x, src, dst), u.dtype.count), u, lanes)


def _bitcast(wg: _Workgroup, u: UOp, lanes) -> None:
  src, dst = u.src[0].dtype, u.dtype
  wg.values(lambda x: exec_bitcast(x, src, dst), u, lanes)


def _const(wg: _Workgroup, u: UOp, lanes) -> None:
  wg.env[u] = [u.arg] * wg.p.threads


def _param(wg: _Workgroup, u: UOp, lanes) -> None:
  wg.env[u] = wg.p.memory[u.arg]


def _define_local(wg: _Workgroup, u: UOp, lanes) -> None:
  if u.arg not in wg.locals:
    size = u.dtype.size * u.dtype.base.nbytes
    wg.locals[u.arg] = _Memory(bytearray(size), u.dtype, f"local{u.arg}")
  wg.env[u] = wg.locals[u.arg]


def _var(wg: _Workgroup, u: UOp, lanes) -> None:
  wg.env[u] = [wg.p.vars[u.arg[0]]] * wg.p.threads


def _special(wg: _Workgroup, u: UOp, lanes) -> None:
  kind, dim, _ = u.arg
  if kind == "gid":
    wg.env[u] = [wg.gid[dim]] * wg.p.threads
  elif kind == "sglane":
    wg.env[u] = list(wg.p.sglane)
  else:
    wg.env[u] = [lid[dim] for lid in wg.lid]


def _define_acc(wg: _Workgroup, u: UOp, lanes) -> None:
  init, acc = wg.env[u.src[0]], wg.env.get(u) or [None] * wg.p.threads
  for t in lanes:
    acc[t] = init[t]
  wg.env[u] = acc


def _assign(wg: _Workgroup, u: UOp, lanes) -> None:
  acc, value = wg.env[u.src[0]], wg.env[u.src[1]]
  for t in lanes:
    acc[t] = value[t]
  wg.env[u] = value


def _after(wg: _Workgroup, u: UOp, lanes) -> None:
  value = wg.env[u.src[0]]
  wg.env[u] = list(value) if isinstance(value, list) else value


def _nothing(wg: _Workgroup, u: UOp, lanes) -> None:
  wg.env[u] = None


def _check_bounds(wg: _Workgroup, u: UOp, mem: _Memory, index, count: int, t: int) -> None:
  if not isinstance(index, int) or index < 0 or index + count > mem.size:
    what = "read" if u.op is Ops.LOAD else "write"
    raise ExecutionError(f"out-of-bounds {what} of {mem.name}[{index}] (size {mem.size}, "
                         f"{count} element(s)) by {wg.thread(t)} at\n  {wg.p.where(u)}\n"
                         f"guard the access with a gate, or fix the index math")


def _load(wg: _Workgroup, u: UOp, lanes) -> None:
  mem, index = wg.env[u.src[0]], wg.env[u.src[1]]
  gate, alt = (wg.env[u.src[2]], wg.env[u.src[3]]) if len(u.src) == 4 else (None, None)
  count, out = u.dtype.count, [None] * wg.p.threads
  for t in lanes:
    if gate is not None and not gate[t]:
      out[t] = alt[t]
      continue
    _check_bounds(wg, u, mem, index[t], count, t)
    out[t] = mem.read(index[t], count)
  wg.env[u] = out


def _store(wg: _Workgroup, u: UOp, lanes) -> None:
  mem, index, value = (wg.env[s] for s in u.src[:3])
  gate = wg.env[u.src[3]] if len(u.src) == 4 else None
  count = u.src[2].dtype.count
  for t in lanes:
    if gate is None or gate[t]:
      _check_bounds(wg, u, mem, index[t], count, t)
      mem.write(index[t], value[t])
  wg.env[u] = None


def _vectorize(wg: _Workgroup, u: UOp, lanes) -> None:
  wg.values(lambda *xs: xs, u, lanes)


def _gep(wg: _Workgroup, u: UOp, lanes) -> None:
  j = u.arg
  wg.values(lambda v: v[j], u, lanes)


def _wmma(wg: _Workgroup, u: UOp, lanes) -> None:
  if wg.p.threads % 32 or len(lanes) != wg.p.threads:
    raise ExecutionError(f"WMMA needs whole warps of 32 active threads (this workgroup has "
                         f"{wg.p.threads}, {len(lanes)} active) at\n  {wg.p.where(u)}")
  a, b, c = (wg.env[s] for s in u.src)
  out = [None] * wg.p.threads
  for base in range(0, wg.p.threads, 32):
    warp = slice(base, base + 32)
    out[warp] = wmma_warp(u.arg, a[warp], b[warp], c[warp])
  wg.env[u] = out


def _subgroup_reduce(wg: _Workgroup, u: UOp, lanes) -> None:
  """Each active thread gets op over the active threads of its subgroup (in lane order)."""
  fn, x, out = alu_fn(u.arg, u.dtype), wg.env[u.src[0]], [None] * wg.p.threads
  members: dict[int, list[int]] = {}
  for t in lanes:
    members.setdefault(wg.p.subgroup[t], []).append(t)
  for threads in members.values():
    threads.sort(key=lambda t: wg.p.sglane[t])
    total = x[threads[0]]
    for t in threads[1:]:
      total = fn(total, x[t])
    for t in threads:
      out[t] = total
  wg.env[u] = out


def _quad_broadcast(wg: _Workgroup, u: UOp, lanes) -> None:
  """Each active thread gets x as the thread of lane (its lane & ~3) + arg of its own subgroup
  has it; that thread must exist and be active (WGSL leaves anything else undefined)."""
  x, out, p = wg.env[u.src[0]], [None] * wg.p.threads, wg.p
  active = set(lanes)
  for t in lanes:
    src = p.lane_thread.get((p.subgroup[t], (p.sglane[t] & ~3) + u.arg))
    if src is None or src not in active:
      raise ExecutionError(f"quad broadcast from lane {(p.sglane[t] & ~3) + u.arg} of subgroup "
                           f"{p.subgroup[t]}, which has no such active thread (thread {t}) at\n"
                           f"  {p.where(u)}")
    out[t] = x[src]
  wg.env[u] = out


def _atomic_add(wg: _Workgroup, u: UOp, lanes) -> None:
  """Active threads add in thread order; each gets the value before its own add (0 where its
  gate is false)."""
  mem, index, value = (wg.env[s] for s in u.src[:3])
  gate = wg.env[u.src[3]] if len(u.src) == 4 else None
  add, out = alu_fn(Ops.ADD, u.dtype), [None] * wg.p.threads
  for t in lanes:
    if gate is not None and not gate[t]:
      out[t] = 0
      continue
    _check_bounds(wg, u, mem, index[t], 1, t)
    out[t] = mem.read(index[t], 1)
    mem.write(index[t], add(out[t], value[t]))
  wg.env[u] = out


# op -> how one instruction runs for the active threads
_HANDLERS: dict[Ops, Callable] = {
  Ops.PARAM: _param, Ops.DEFINE_LOCAL: _define_local, Ops.VAR: _var, Ops.SPECIAL: _special,
  Ops.CONST: _const, Ops.DEFINE_ACC: _define_acc, Ops.ASSIGN: _assign, Ops.AFTER: _after,
  Ops.ENDRANGE: _nothing, Ops.ENDIF: _nothing, Ops.BARRIER: _nothing, Ops.SINK: _nothing,
  Ops.LOAD: _load, Ops.STORE: _store, Ops.CAST: _cast, Ops.BITCAST: _bitcast,
  Ops.VECTORIZE: _vectorize, Ops.GEP: _gep, Ops.WMMA: _wmma,
  Ops.SUBGROUP_REDUCE: _subgroup_reduce, Ops.ATOMIC_ADD: _atomic_add,
  Ops.QUAD_BROADCAST: _quad_broadcast,
  **{op: _alu for op in GroupOp.ALU}}


def execute(kernel: Kernel, buffers: list[bytearray], var_values: dict[str, int] | None = None,
            subgroup_size: int = 32, subgroup_layout: str = "linear", dispatch=None):
  """Run `kernel` over its whole grid (or the first `dispatch` workgroups per axis: a run-time
  grid, uop/program.py launch_dispatch), mutating `buffers` (raw bytes, numpy layout, slot order);
  subgroups have `subgroup_size` threads (some may have fewer), laid out per `subgroup_layout`."""
  program = _Program(kernel, buffers, var_values, subgroup_size, subgroup_layout)
  gx, gy, gz = dispatch or kernel.global_size
  for z in range(gz):
    for y in range(gy):
      for x in range(gx):
        tick()         # the web page's time limit (limits.tick: nothing unless it is timed)
        program.run((x, y, z))


__all__ = ["execute", "fragment_position", "wmma_layout", "wmma_warp", "WMMA_SHAPES"]
