"""Tensor cores: a matmul-shaped kernel lowered to warps of WMMA tiles (PTX `mma.sync`).

`match_matmul(item)` recognises a kernel whose output is (elementwise ops and reshapes of) one
sum over k of a product of two operands, accumulated in float32 — the shape `a @ b` schedules
to, fused pro- and epilogues included. `tensor_core_shape` picks the WMMA shape the target and
arch have for the operands' dtype: f16 and bf16 always, f32 (as tf32) only with `tf32=True`.
`lower_tensor_cores(item, target, options)` returns the kernel's (SINK, buffers) built from WMMA
tiles, or None where the normal lowering applies.

The lowering: each warp computes TM x TN tiles of 16x8 outputs (a workgroup holds WM x WN
warps); it loops over k in steps of K, loads its A and B fragments from global memory where
the fragment layout (wmma.fragment_position) puts them, and accumulates in a float32x4
register per tile; then it stores its D fragments through the kernel's epilogue. Sizes that
are not multiples of the tiles get bounds gates on loads (value 0) and stores.

Options: `tensor_cores` None (default: on for target "ptx"), False (never), True (force: also
on target "python", whose interpreter runs WMMA; for an arch lacking the shape the PTX renderer
then raises its typed error); `tf32=True` lets float32 matmuls use tf32 tensor cores.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..dtype import dtypes
from ..errors import UnsupportedError
from ..uop.wmma import WMMA_SHAPES, fragment_position
from ..graph.lazy import L, LazyOp
from .index_math import gate_and, int_const, plus_offset
from .lowerer import Lowerer
from ..uop.ops import Ops, UOp, toposort
from ..uop.program import BufferSpec, kernel_buffers
from ..graph.schedule import ScheduleItem
from ..graph.view import contiguous_strides
from ..render.target import Target

I32, F32 = dtypes.int32, dtypes.float32

# input dtype -> WMMA shapes (M, N, K) to use, best first (the arch picks the first it has)
SHAPES = {"float16": ((16, 8, 16), (16, 8, 8)), "bfloat16": ((16, 8, 16),),
          "float32": ((16, 8, 8),)}
# the most 16x8 tiles one warp computes along M and along N (4 x 4 accumulators per tile)
WARP_TILES = (2, 4)
# the most warps one workgroup holds along M and along N
GROUP_WARPS = (2, 2)
# the arch tensor cores are built for when the options name none
DEFAULT_ARCH = "sm_80"


# ---- detection --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Matmul:
  reduce: LazyOp          # the REDUCE(ADD) over k, float32
  a: LazyOp               # the product's operand that varies along M (and k)
  b: LazyOp               # the operand that varies along N (and k)
  m_axis: int             # axes of the product's shape
  n_axis: int
  k_axis: int
  batch: tuple[int, ...]  # other axes of size > 1 (both operands may vary along them)
  shape: tuple[int, ...]  # the product's shape
  dtype_in: str           # what the operands are, as the tensor cores read them


def _is_reshape(node: LazyOp) -> bool:
  """A VIEW that only adds or drops size-1 dims (each output element is its own source's)."""
  view, src = node.arg, node.src[0]
  return view.mask is None and view.offset == 0 and \
    view.strides == contiguous_strides(view.shape) and \
    [n for n in view.shape if n != 1] == [n for n in src.shape if n != 1]


def _output_reduce(item: ScheduleItem) -> LazyOp | None:
  """The kernel's one REDUCE, when only elementwise ops and reshapes lie between it and the
  output; None otherwise."""
  inputs = {id(n) for n in item.inputs}
  found, stack, seen = [], [(item.out, True)], set()
  while stack:
    node, direct = stack.pop()
    if (id(node), direct) in seen or node.realized or (id(node) in inputs and node is not item.out):
      continue
    seen.add((id(node), direct))
    if node.op is L.REDUCE:
      found.append((node, direct))
      continue
    keep = direct and (node.op is not L.VIEW or _is_reshape(node))
    stack.extend((s, keep) for s in node.src)
  if len({id(n) for n, _ in found}) != 1 or not all(direct for _, direct in found):
    return None
  return found[0][0]


def _product(reduce: LazyOp) -> LazyOp | None:
  """The MUL summed by `reduce` (through a cast to float32), when it is a float32 sum of one."""
  op, axes = reduce.arg
  if op is not Ops.ADD or len(axes) != 1 or reduce.dtype != F32:
    return None
  body = reduce.src[0]
  if body.op is L.CAST and body.src[0].dtype in (dtypes.float16, dtypes.bfloat16):
    body = body.src[0]
  return body if body.op is L.ALU and body.arg is Ops.MUL else None


def _placeholders(shape) -> tuple[UOp, ...]:
  return tuple(UOp(Ops.VAR, I32, (), (f"tc_axis{d}", 0, max(n - 1, 0)))
               for d, n in enumerate(shape))


def _depends(item: ScheduleItem, node: LazyOp, idxs: tuple) -> tuple[set, UOp]:
  """The axes `node`'s value depends on, and its value at the placeholder indices."""
  value = Lowerer(item).value(node, idxs, None)
  used = {u for u in toposort([value]) if u.op is Ops.VAR}
  return {d for d, p in enumerate(idxs) if p in used}, value


def _operand_dtype(mul: LazyOp, values: list[UOp]) -> str | None:
  """The dtype the tensor cores read the operands as: the product's own half dtype, a half
  dtype both operands were exactly cast to float32 from, or float32."""
  if mul.dtype in (dtypes.float16, dtypes.bfloat16):
    return mul.dtype.name
  if mul.dtype != F32:
    return None
  inner = {v.src[0].dtype.name if v.op is Ops.CAST else v.dtype.name for v in values}
  return inner.pop() if len(inner) == 1 and inner <= {"float16", "bfloat16"} else "float32"


def match_matmul(item: ScheduleItem) -> Matmul | None:
  """The matmul `item` computes, or None when it is not matmul-shaped."""
  reduce = _output_reduce(item)
  mul = None if reduce is None else _product(reduce)
  if mul is None:
    return None
  k_axis = reduce.arg[1][0]
  idxs = _placeholders(mul.shape)
  (dep_a, val_a), (dep_b, val_b) = (_depends(item, s, idxs) for s in mul.src)
  free = [d for d, n in enumerate(mul.shape) if n > 1 and d != k_axis]
  only_a = [d for d in free if d in dep_a and d not in dep_b]
  only_b = [d for d in free if d in dep_b and d not in dep_a]
  if len(only_a) != 1 or len(only_b) != 1:
    return None
  dtype_in = _operand_dtype(mul, [val_a, val_b])
  if dtype_in is None:
    return None
  batch = tuple(d for d in free if d not in (only_a[0], only_b[0]))
  return Matmul(reduce, mul.src[0], mul.src[1], only_a[0], only_b[0], k_axis, batch,
                mul.shape, dtype_in)


# ---- target and arch ---------------------------------------------------------------------------

def _wanted(target: Target, options: dict) -> bool:
  forced = options.get("tensor_cores")
  if forced and not target.runs_wmma:
    raise UnsupportedError("WebGPU (WGSL) has no tensor cores: drop tensor_cores=True, or "
                           "compile for target='ptx'", target=target.name)
  return bool(forced) if forced is not None else target.tensor_cores


def tensor_core_shape(dtype_in: str, target: Target, options: dict) -> tuple | None:
  """The WMMA (M, N, K) for operands of `dtype_in` on `target`/arch, or None (normal path).
  Forcing tensor cores on an arch without a shape returns the best shape anyway, so the
  renderer raises its typed error naming the archs that have it."""
  if not _wanted(target, options) or (dtype_in == "float32" and not options.get("tf32")):
    return None
  sm = target.arch(options.get("arch") or DEFAULT_ARCH)
  shapes = SHAPES.get(dtype_in, ())
  for shape in shapes:
    if target.mma_shapes[(*shape, dtype_in)][0] <= sm:   # (target python models PTX's)
      return shape
  return shapes[0] if shapes and options.get("tensor_cores") else None


def lower_tensor_cores(item: ScheduleItem, target: Target, options: dict):
  """(SINK, buffers) of `item` computed with tensor cores, or None where they do not apply."""
  if not _wanted(target, options) or item.out.size == 0 or item.extra:
    return None            # (a joined kernel's several outputs: lower.py's thread stores)
  mm = match_matmul(item)
  shape = None if mm is None else tensor_core_shape(mm.dtype_in, target, options)
  if shape is None:
    return None
  return _TileLowering(item, mm, shape).lower()


# ---- lowering ----------------------------------------------------------------------------------

class _EpilogueLowerer(Lowerer):
  """The normal lowering, except that the matmul's REDUCE is the tile value being stored."""

  def __init__(self, item: ScheduleItem, reduce: LazyOp):
    super().__init__(item)
    self.reduce, self.result = reduce, None

  def _reduce(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    return self.result if node is self.reduce else super()._reduce(node, idxs, gate)


def _tiles(m: int, n: int) -> tuple[int, int, int, int]:
  """(TM, TN, WM, WN): tiles per warp and warps per workgroup along M and N."""
  tm, tn = min(WARP_TILES[0], math.ceil(m / 16)), min(WARP_TILES[1], math.ceil(n / 8))
  wm = min(GROUP_WARPS[0], math.ceil(m / (16 * tm)))
  wn = min(GROUP_WARPS[1], math.ceil(n / (8 * tn)))
  return tm, tn, wm, wn


class _TileLowering:
  """Builds the WMMA kernel for one matched matmul (see the module docstring)."""

  def __init__(self, item: ScheduleItem, mm: Matmul, shape: tuple[int, int, int]):
    self.item, self.mm, self.shape = item, mm, shape
    self.lw = _EpilogueLowerer(item, mm.reduce)
    self.sizes = tuple(mm.shape[d] for d in (mm.m_axis, mm.n_axis, mm.k_axis))
    self.counts = WMMA_SHAPES[(*shape, mm.dtype_in)]
    self.arg = (f"wmma_m{shape[0]}n{shape[1]}k{shape[2]}_{mm.dtype_in}", shape,
                dtypes.from_name(mm.dtype_in), F32)

  def lower(self) -> tuple[UOp, list[BufferSpec]]:
    (m, n, _), (tm, tn, wm, wn) = self.sizes, _tiles(*self.sizes[:2])
    self.block = (16 * tm * wm, 8 * tn * wn)
    self.gate_m, self.gate_n = m % self.block[0] != 0, n % self.block[1] != 0
    self._threads(tm, tn, wm, wn)
    self.first = None
    accs = self._accumulate(tm, tn)
    stores = [st for (i, j), values in accs.items() for st in self._store(i, j, values)]
    item = self.item
    buffers = kernel_buffers(item.out, item.inputs)
    return UOp(Ops.SINK, None, tuple(stores)), buffers

  def _threads(self, tm: int, tn: int, wm: int, wn: int) -> None:
    """Thread ids: the warp's first output row and column, the lane's (g, t), batch indices."""
    (m, n, _), mm = self.sizes, self.mm
    gid_n = UOp(Ops.SPECIAL, I32, (), ("gid", 0, math.ceil(n / self.block[1])))
    gid_m = UOp(Ops.SPECIAL, I32, (), ("gid", 1, math.ceil(m / self.block[0])))
    lid = UOp(Ops.SPECIAL, I32, (), ("lid", 0, 32 * wm * wn))
    warp, lane = (lid // int_const(32), lid % int_const(32)) if wm * wn > 1 else (int_const(0), lid)
    self.g, self.t = lane // int_const(4), lane % int_const(4)
    self.row0 = gid_m * int_const(self.block[0]) + (warp // int_const(wn)) * int_const(16 * tm)
    self.col0 = gid_n * int_const(self.block[1]) + (warp % int_const(wn)) * int_const(8 * tn)
    self.batch_idx = self._batch_indices()

  def _batch_indices(self) -> dict[int, UOp]:
    sizes = [self.mm.shape[d] for d in self.mm.batch]
    if not sizes:
      return {}
    flat = UOp(Ops.SPECIAL, I32, (), ("gid", 2, math.prod(sizes)))
    out, inner = {}, math.prod(sizes)
    for d, size in zip(self.mm.batch, sizes):
      inner //= size
      q = flat // int_const(inner) if inner > 1 else flat
      out[d] = q % int_const(size) if inner * size < math.prod(sizes) else q
    return out

  def _index(self, row: UOp, col: UOp, k: UOp) -> tuple[UOp, ...]:
    """Indices into the product's shape of output (row, col) at reduction step k."""
    mm = self.mm
    at = {mm.m_axis: row, mm.n_axis: col, mm.k_axis: k, **self.batch_idx}
    return tuple(at.get(d, int_const(0)) for d in range(len(mm.shape)))

  def _accumulate(self, tm: int, tn: int) -> dict[tuple[int, int], list[UOp]]:
    """The K loop: each tile's 4 float32 accumulators after it (AFTER nodes)."""
    k_size, step = self.sizes[2], self.shape[2]
    loop = UOp(Ops.RANGE, I32, (int_const(math.ceil(k_size / step)),), self.lw._id())
    k0 = loop * int_const(step)
    frags_a = [self._fragment("a", self.mm.a, self.row0 + int_const(16 * i), k0) for i in range(tm)]
    frags_b = [self._fragment("b", self.mm.b, self.col0 + int_const(8 * j), k0) for j in range(tn)]
    f32x4, tiles = F32.vec(4), [(i, j) for i in range(tm) for j in range(tn)]

    def update(k: int, acc: UOp) -> UOp:
      i, j = tiles[k]
      return UOp(Ops.WMMA, f32x4, (frags_a[i], frags_b[j], acc), self.arg)

    results = self.lw.accumulators([UOp.const(f32x4, 0.0)] * len(tiles), update, [loop])
    return {ij: [result.gep(e) for e in range(4)] for ij, result in zip(tiles, results)}

  def _fragment(self, operand: str, node: LazyOp, base: UOp, k0: UOp) -> UOp:
    """This lane's fragment of A (rows from `base`) or B (columns from `base`) at step k0."""
    (m, n, k_size), dtype_in = self.sizes, self.mm.dtype_in
    count = self.counts["ab".index(operand)]
    elems = []
    for e in range(count):
      r, c = fragment_position(self.shape, dtype_in, operand, self.g, self.t, e)
      if operand == "a":
        pos, k, limit, gated = base + r, k0 + c, m, self.gate_m
      else:
        pos, k, limit, gated = base + c, k0 + r, n, self.gate_n
      gate = gate_and(pos.lt(int_const(limit)) if gated else None,
                  k.lt(int_const(k_size)) if k_size % self.shape[2] else None)
      idx = self._index(pos, int_const(0), k) if operand == "a" else self._index(int_const(0), pos, k)
      elems.append(self._element(node, idx, gate))
    return _vector(elems)

  def _element(self, node: LazyOp, idx: tuple, gate: UOp | None) -> UOp:
    """One operand element as the tensor cores read it; 0 where `gate` is false."""
    value = self.lw.value(node, idx, gate)
    want = dtypes.from_name(self.mm.dtype_in)
    if value.op is Ops.CAST and value.src[0].dtype == want:
      value = value.src[0]
    value = value.cast(want)
    if gate is not None and value.op is not Ops.LOAD:
      value = gate.where(value, value.const_like(0))
    return value

  def _store(self, i: int, j: int, values: list[UOp]) -> list[UOp]:
    """Stores of tile (i, j)'s D fragment through the kernel's epilogue; its pairs of
    consecutive columns (d0, d1 and d2, d3) as one 2-lane store where the output's columns are
    consecutive and need no gate. Where the output's value reads nothing but the product (and
    constants: through views without masks), the first element's value and index serve every
    element (its own product; the index plus a constant)."""
    from .regtile import gather_lanes, reads_only, rebuilt
    out, stores, pending = self.item.out, [], []
    strides = contiguous_strides(out.shape)
    # the D layout is affine: element e of lane (g, t) sits at lane (g, t)'s element 0 plus
    # element e's place in lane (0, 0)
    r0, c0 = fragment_position(self.shape, self.mm.dtype_in, "d", self.g, self.t, 0)
    for e, value in enumerate(values):
      r, c = fragment_position(self.shape, self.mm.dtype_in, "d", 0, 0, e)
      dr, dc = 16 * i + r, 8 * j + c          # from element 0 of tile (0, 0)
      row, col = plus_offset(self.row0, dr) + r0, plus_offset(self.col0, dc) + c0
      gate = gate_and(row.lt(int_const(self.sizes[0])) if self.gate_m else None,
                  col.lt(int_const(self.sizes[1])) if self.gate_n else None)
      self.lw.result = value
      if self.first:      # element 0 of tile (0, 0)'s value and index, moved to this one
        flat0, value0, got0, (sr, sc), pair = self.first
        flat, got = plus_offset(flat0, dr * sr + dc * sc), rebuilt(got0, value0, value, {})
      else:
        reduce_idx = self._index(row, col, int_const(0))
        kept = [u for d, u in enumerate(reduce_idx) if self.mm.shape[d] > 1 and
                d != self.mm.k_axis]
        out_idx = _output_indices(out.shape, kept)
        flat, got = linear_sum(out_idx, strides), self.lw.value(out, out_idx, gate)
        pair = not self.gate_n and any(u is col and strides[d] == 1 for d, u in enumerate(out_idx))
        if self.first is None:
          self.first = reads_only(got, value) and \
            (flat, value, got, tuple(next((strides[d] for d, u in enumerate(out_idx) if u is x), 0)
                                     for x in (row, col)), pair)
      if pair and e % 2 == 1 and pending:       # d(e-1), d(e): columns c - 1, c
        flat0, gate0, got0 = pending.pop()
        stores.append(self.lw.params[0].store(flat0, gather_lanes([got0, got]), gate0))
      elif pair and e % 2 == 0:
        pending.append((flat, gate, got))
      else:
        stores.append(self.lw.params[0].store(flat, got, gate))
    for flat, gate, got in pending:
      stores.append(self.lw.params[0].store(flat, got, gate))
    return stores


def _vector(elems: list[UOp]) -> UOp:
  return UOp(Ops.VECTORIZE, elems[0].dtype.vec(len(elems)), tuple(elems))


def _output_indices(shape: tuple, kept: list[UOp]) -> tuple[UOp, ...]:
  """Indices into the output's shape: the reduce's size>1 indices, in order, on its size>1 dims."""
  it = iter(kept)
  return tuple(next(it) if n > 1 else int_const(0) for n in shape)


def linear_sum(idxs: tuple, strides: tuple) -> UOp:
  out = None
  for u, s in zip(idxs, strides):
    if s == 0 or (u.op is Ops.CONST and u.arg == 0):
      continue
    term = u if s == 1 else u * int_const(s)
    out = term if out is None else out + term
  return int_const(0) if out is None else out
