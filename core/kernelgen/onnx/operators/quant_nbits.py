"""Block-quantized weights of the com.microsoft domain: MatMulNBits (4- and 8-bit weights in
blocks along K, with scales, optional zero points and bias) and GatherBlockQuantized (a
quantized embedding table).

The packed bytes stay packed in memory: the dequantization (shift, mask, minus the zero point,
times the block's scale) is elementwise Tensor code over views of the packed buffer, so the
scheduler fuses it into the matmul's (or the gather's) kernel and each weight element is
dequantized in registers where it is used; no dequantized copy of a weight is ever written.
"""
from __future__ import annotations

import math

from ...dtype import dtypes
from ...errors import ShapeError, UnsupportedError
from ...graph.dims import is_sym
from ...graph.lazy import L
from ...tensor.ops.advanced_indexing import take
from ...tensor.tensor import Tensor
from ..registry import axis_index, domain_op
from ..values import tensor_from_bytes
from .quant_tiled import matmul_dequant
from .regroup import host_stored
from .weights import packed_rows, row_defaults, row_input

MS = "com.microsoft"
# the suffix of the upload key (Model.uploads) of an initializer held as 32-bit words
WORDS = "#uint32"
# the suffix of the upload key of an initializer held lane-major (lane_major)
LANES = "#lanes"
# packed weights of at least this many bytes are held lane-major where the adapter asks for it
# (lane_layout): the decode matvec of a weight that does not stay in the CPU's caches then reads
# each SIMD group's rows as one contiguous run. bench/q4_matvec.py's `cpu` ratios (the copy's
# CPU seconds per run over the matvec's, median, interleaved: loads of 10-24 made wall times
# useless), lavapipe, plain -> lane-major: 49152x576 (14 MB) 0.54-0.58 -> 0.62-0.78 over four
# runs; at 0.4-2.2 MB no gain beyond the noise (1536x576 0.61 -> 0.57, 576x1536 0.89 -> 0.90,
# 4864x896 0.74 -> 0.75, 896x4864 0.73 -> 0.77, load 22)
LANE_MAJOR_BYTES = 4 << 20
GROUPED = "#rows"   # the upload key suffix of an initializer held grouped by rows (row_grouped)
# Held grouped (group_rows): bench/q4_matvec.py copy/matvec, grouped / as given, the shapes 1536x576,
# 576x1536, 4864x896, 896x4864 at idle: lavapipe 0.84/0.67, 0.80/0.60, 0.73/0.68, 0.97/0.85; SwiftShader
# 0.38/0.34, 0.49/0.40, 0.47/0.39, 0.51/0.41 (load 1.2-1.6; its field arithmetic: SWIFTSHADER below)
# MatMulNBits over at least this many rows of activations (a prompt) is a register-tiled matmul
# of the weights dequantized in registers (matmul_dequant); one row (decoding) keeps the
# matrix-vector form (matmul_words). Native lavapipe, 1536 x 576 q4 (block 32, float zero
# points), CPU ms per run (the process's CPU time: lavapipe's threads; median of 5, best of 3
# interleaved rounds, load 10-13 on 2 shared CPUs), matmul_words / matmul_dequant, one-off
# kernels (runs 1): M=1 0.52 / 0.53 | 2 1.46 / 0.87 | 3 2.08 / 1.47 | 4 2.8 / 1.7 | 8 5.2 / 3.1 |
# 16 10.2 / 5.8 | 32 20.1 / 11.2 | 128 78 / 43.5 (a plain f32 matmul of that shape ~15); for
# many runs (runs 100: 16x16 tiles) 128 rows 78 / 15.9, the f32 matmul 15-17. (The same B as a
# dequantized (N, K) operand of one reduction over K: 62.5, runs 100 35: its words and scales
# reloaded for each value.)
TILED_ROWS = 2
# SWIFTSHADER: why its q4 matvec stays at 0.3-0.45 of a copy (issue 35). Hand-written WGSL against
# the copy in one process, CPU seconds per run, 1536x576: SwiftShader (Subzero, 4 lanes of SSE)
# pays per load instruction and lane wherever the lanes' addresses lie (lane-major weights: no
# gain). A thread per row summing its words as vec4<u32> runs 1.35-1.47x the copy's speed, as u32
# 0.69x; the activation's vec4s (one address in every lane) cost as much as the weight's: a row
# a thread with them 0.22, without 1.06. With 8 rows a thread sharing them: summing the words
# only 0.55; the dequantization's mask, conversion, multiply and add per field without the
# activation loads 0.52; the whole matvec (zero point 8) 0.42-0.44; the compiled kernel 0.29-0.31
# (its zero-point byte per block and row: 0.35 without). So 0.7 is out of reach there for an
# exact f32 dequantization: the field arithmetic alone (4 SIMD ops per 4-bit field) outlasts the
# copy. bench/q4_matvec.py at the defaults (main at 4aca660, load 2.0, best of 10), 1536x576 /
# 576x1536 / 4864x896 / 896x4864: 0.34 / 0.39 / 0.21 / 0.23, cpu 0.48 / 0.55 / 0.42 / 0.48;
# lane-major 0.35 / 0.38 / 0.36 / 0.54, cpu 0.49 / 0.53 / 0.43 / 0.47. Rows per thread 4 or 16,
# 2 blocks a trip (load ~18): cpu 0.31-0.56, no better; one multiply fewer per value
# (combine._scaled_first): within the noise.


def fields(x: Tensor, bits: int) -> Tensor:
  """The `bits`-wide unsigned fields of unsigned integer `x` along a new last axis, the lowest
  first: shape (..., x's width // bits), uint32. A shift by a ramp and a mask, so one load of
  `x` serves all its fields."""
  per = x.dtype.itemsize * 8 // bits
  shifts = (Tensor.arange(per, device=x.device) * bits).cast(dtypes.uint32)
  wide = x.cast(dtypes.uint32).unsqueeze(-1)
  return (wide >> shifts.reshape(*([1] * x.ndim), per)) & ((1 << bits) - 1)


def nibbles(x: Tensor) -> Tensor:
  """The 4-bit values of uint8 `x`, two per byte along the last axis (the low nibble first):
  shape (..., 2 * n), int32."""
  shape = x.shape
  return fields(x, 4).cast(dtypes.int32).reshape(*shape[:-1], 2 * shape[-1])


def _per_block(p: Tensor, block: int, k: int) -> Tensor:
  """(N, blocks) per-block values repeated over their blocks along K: (N, k)."""
  n, blocks = p.shape
  wide = p.reshape(n, blocks, 1).expand(n, blocks, block).reshape(n, blocks * block)
  return wide.shrink(((0, n), (0, k)))


def _codes(b: Tensor, bits: int, n: int, blocks: int, block: int, k: int) -> Tensor:
  """The quantized weight codes of MatMulNBits' packed B: (N, K) int32."""
  flat = b.reshape(n, -1)
  if flat.shape[1] != blocks * block * bits // 8:
    raise ShapeError(f"MatMulNBits: B has {b.shape}, the attributes ask for ({n}, {blocks}, "
                     f"{block * bits // 8}) bytes")
  codes = nibbles(flat) if bits == 4 else flat.cast(dtypes.int32)
  return codes.shrink(((0, n), (0, k)))


def _zero_points(zp, bits: int, n: int, blocks: int, block: int, k: int) -> Tensor | float:
  """MatMulNBits' zero points per weight element: (N, K) (or the default 2^(bits-1))."""
  if zp is None:
    return float(1 << (bits - 1))
  if zp.dtype.is_float():
    return _per_block(zp.reshape(n, blocks).cast(dtypes.float32), block, k)
  per_row = zp.reshape(n, -1)
  values = nibbles(per_row) if bits == 4 else per_row.cast(dtypes.int32)
  if values.shape[1] < blocks:
    raise ShapeError(f"MatMulNBits: zero_points has {zp.shape}, too few for {n} x {blocks} "
                     f"blocks")
  values = values.shrink(((0, n), (0, blocks)))
  return _per_block(values, block, k).cast(dtypes.float32)


def _check_g_idx(ins, block: int, k: int) -> None:
  """g_idx (a block per K row) is accepted only where it is the plain order k // block_size."""
  if not ins.has(4):
    return
  known = ins.runner.known(ins.names[4])
  if known is None or [int(v) for v in known.values] != [i // block for i in range(k)]:
    raise UnsupportedError(f"MatMulNBits with a reordering g_idx (act-order) of domain "
                           f"{MS!r} is not supported: requantize without act-order")


@domain_op(MS, "MatMulNBits")
def _matmul_nbits(ins, at):
  """y = A @ dequant(B).T + bias, the weights dequantized in registers inside the matmul."""
  a = ins[0]
  k, n = at.int("K"), at.int("N")
  bits, block = at.int("bits", 4), at.int("block_size")
  if bits not in (4, 8):
    raise UnsupportedError(f"MatMulNBits with bits={bits} of domain {MS!r}: 4 and 8 are "
                           f"supported")
  if not block or block < 16 or block & (block - 1):
    raise ShapeError(f"MatMulNBits block_size {block}: a power of two, at least 16")
  if a.shape[-1] != k:
    raise ShapeError(f"MatMulNBits: A's last dim {a.shape[-1]} is not K = {k}")
  _check_g_idx(ins, block, k)
  blocks = math.ceil(k / block)
  words = _packed_words(ins, n, blocks * block * bits // 32, blocks)
  if words is not None:
    # the row defaults of the adapter the model runs on, or of a one-row step's the adapter it
    # is traced for (an exported bundle's, export/onnx_lm.py): its normed row realized as natively
    table = packed_rows(ins.runner, a)
    row = row_input(ins, a, table)
    return _matmul_words(ins, row, words, (n, k, bits, block, blocks), group_rows(table, n))
  codes = _codes(ins[1], bits, n, blocks, block, k).cast(dtypes.float32)
  scale = _per_block(ins[2].reshape(n, blocks).cast(dtypes.float32), block, k)
  w = (codes - _zero_points(ins[3], bits, n, blocks, block, k)) * scale       # (N, K)
  lead = a.shape[:-1]
  y = a.reshape(-1, k).cast(dtypes.float32) @ w.permute(1, 0)
  if ins.has(5):
    y = y + ins[5].cast(dtypes.float32).reshape(1, n)
  return y.reshape(*lead, n).cast(a.dtype)


def _packed_words(ins, n: int, per_row: int, blocks: int) -> Tensor | None:
  """MatMulNBits' B (an initializer) as (N, per_row) uint32 words, uploaded once per model and
  device (in place of its bytes: B is read only as words), or where the device's adapter asks
  for it (_lanes) as lane_major's view (N // (lanes * rows), lanes, rows, blocks, words per
  block); None where B is not an initializer (then B is read byte by byte)."""
  runner, name = ins.runner, ins.names[1]
  init = runner.model.initializers.get(name)
  if runner.folding or init is None or len(init[2]) != n * per_row * 4:
    return None
  key = (runner.device, name + WORDS)
  if key not in runner.model.uploads:
    words = tensor_from_bytes(init[2], (n, per_row), dtypes.uint32, runner.device)
    lanes = _lanes(ins, n, len(init[2]))
    if lanes:
      words = lane_major(words.reshape(n, blocks, per_row // blocks), *lanes)
    runner.model.uploads[key] = words
  return runner.model.uploads[key]


def lane_layout(device: str) -> tuple[int, int] | None:
  """(lanes, rows) of the lane-major weights (lane_major) that `device`'s adapter asks for:
  q4_lanes with reduce_rows of its adapter table's row kernels (render/wgsl/adapters.py; not an
  option of the kernels themselves: lavapipe's 8 lanes of 256 bits), else None (every other
  device and adapter; SwiftShader's Subzero code loads each lane's words on its own wherever
  they lie: lane-major weights measured no faster there, see SWIFTSHADER above)."""
  table = row_defaults(device)
  lanes, rows = table.get("q4_lanes"), table.get("reduce_rows")
  return (int(lanes), int(rows)) if lanes and rows else None


def _lanes(ins, n: int, nbytes: int) -> tuple[int, int] | None:
  """lane_layout's (lanes, rows) for a weight of n rows and nbytes packed bytes, where it is at
  least LANE_MAJOR_BYTES and the rows divide into the groups; else None."""
  if nbytes < LANE_MAJOR_BYTES:
    return None
  lanes = lane_layout(ins.runner.device)
  return lanes if lanes and n % (lanes[0] * lanes[1]) == 0 else None


def _lane_scales(ins, lead: tuple, blocks: int) -> Tensor:
  """MatMulNBits' scales (float32) in the leading row axes `lead` of lane-major words: lane_major
  too where they are an initializer (kept per model and device), else a plain reshape."""
  runner, name = ins.runner, ins.names[2]
  scale = ins[2].reshape(-1, blocks).cast(dtypes.float32)
  if name not in runner.model.initializers:
    return scale.reshape(*lead, blocks)
  key = (runner.device, name + LANES)
  if key not in runner.model.uploads:
    runner.model.uploads[key] = lane_major(scale, lead[1], lead[2])
  return runner.model.uploads[key]


def _matmul_words(ins, a: Tensor, words: Tensor, dims: tuple, rows: int = 0) -> Tensor:
  """MatMulNBits with B as its 32-bit words (matmul_words; lane-major words take their scales
  and zero points in the same row axes; plain words, with `rows` > 1, their scales and zero
  points held grouped by `rows` rows: _grouped_params), bias added."""
  n, k, bits, block, blocks = dims
  zp = _zero_points(ins[3], bits, n, blocks, 1, blocks)
  if words.ndim == 2:
    scale, zp = _grouped_params(ins, zp, (n, bits, blocks), rows)
  else:
    lead = tuple(words.shape[:3])
    scale = _lane_scales(ins, lead, blocks)
    zp = zp.reshape(*lead, blocks) if isinstance(zp, Tensor) else zp
  lead = a.shape[:-1]
  x = a.reshape(-1, k).cast(dtypes.float32)
  if words.ndim == 2 and tiled_rows(x):
    y = matmul_dequant(own_rows(ins.runner, x), words, scale, zp, bits, block)
  else:
    y = matmul_words(x, words, scale, zp, bits, block)
  if words.ndim != 2:
    y = y.reshape(y.shape[0], n)
  if ins.has(5):
    y = y + ins[5].cast(dtypes.float32).reshape(1, n)
  return y.reshape(*lead, n).cast(a.dtype)


def group_rows(table: dict, n: int) -> int:
  """The rows a packed-weight matvec's scales and zero points are held grouped by (row_grouped)
  under the row defaults `table`: the outputs per thread (reduce_rows) of its stepped layout
  (reduce_step: lowering/threads.py), where they divide the n rows; else 0 (held as given)."""
  rows = int(table.get("reduce_rows", 0) or 0) if table.get("reduce_step") else 0
  return rows if rows > 1 and n % rows == 0 else 0


def _grouped_params(ins, zp, dims: tuple, rows: int) -> tuple:
  """MatMulNBits' (scale, zero points) as (N, blocks) float32 (zp: or one float), where they are
  initializers and `rows` > 1 as views of copies held grouped by `rows` rows (kept per model and
  device): the scales row_grouped, 4-bit packed zero points grouped_nibbles; else as given."""
  n, bits, blocks = dims
  scale = ins[2].reshape(n, blocks).cast(dtypes.float32)
  runner, inits = ins.runner, ins.runner.model.initializers
  if rows < 2 or runner.folding or ins.names[2] not in inits:
    return scale, zp
  scale = _held(ins, 2, rows, lambda: row_grouped(scale, rows, host_stored(ins, 2, (n, blocks, rows))))
  if not isinstance(zp, Tensor) or ins.names[3] not in inits:
    return scale, zp
  if zp.dtype.is_float() and ins[3].dtype.is_float():
    return scale, _held(ins, 3, rows, lambda: row_grouped(zp, rows))
  if bits == 4 and rows % 8 == 0:
    return scale, _held(ins, 3, rows, lambda: grouped_nibbles(
      zp, rows, host_stored(ins, 3, (n, blocks, rows), nibbles=True)))
  return scale, zp


def _held(ins, i: int, rows: int, make) -> Tensor:
  """Input i's copy grouped by `rows` rows, made by `make` once per model, device and rows."""
  key = (ins.runner.device, f"{ins.names[i]}{GROUPED}{rows}")
  uploads = ins.runner.model.uploads
  if key not in uploads:
    uploads[key] = make()
  return uploads[key]


def row_grouped(t: Tensor, rows: int, stored: Tensor | None = None) -> Tensor:
  """Per-block values t (N, blocks) held grouped by `rows` rows for a matrix-vector product that
  gives each thread `rows` consecutive rows (lowering/threads.py reduce_step): a realized copy
  ordered (N // rows, blocks, rows), so a thread's values of one block lie together (one run of
  memory, not `rows` loads a row apart); returned as its (N, blocks) view. N must divide by
  `rows`."""
  n, blocks = t.shape
  if n % rows:
    raise ShapeError(f"row_grouped: {n} rows do not divide into groups of {rows}")
  if stored is None:     # (or made on the host: regroup.host_stored)
    stored = t.reshape(n // rows, rows, blocks).permute(0, 2, 1).contiguous().realize()
  return stored.permute(0, 2, 1).reshape(n, blocks)


def grouped_nibbles(zp: Tensor, rows: int, stored: Tensor | None = None) -> Tensor:
  """Integer-valued per-block values zp (N, blocks) in 0..15 (4-bit zero points) held as
  row_grouped's order packed 8 to a 32-bit word (the first row lowest): a realized uint32 copy
  (N // rows, blocks, rows // 8), so a thread of `rows` rows loads one word per block for 8 of
  them; returned as its (N, blocks) float32 view. `rows` must divide N and be a multiple of 8."""
  n, blocks = zp.shape
  if n % rows or rows % 8:
    raise ShapeError(f"grouped_nibbles: {n} rows do not divide into groups of {rows}, a "
                     f"multiple of 8")
  if stored is None:     # (or made on the host: regroup.host_stored)
    grouped = zp.reshape(n // rows, rows, blocks).permute(0, 2, 1)
    nib = grouped.reshape(n // rows, blocks, rows // 8, 8).cast(dtypes.int32).cast(dtypes.uint32)
    shifts = (Tensor.arange(8, device=zp.device) * 4).cast(dtypes.uint32)
    stored = (nib << shifts.reshape(1, 1, 1, 8)).sum(-1).cast(dtypes.uint32).contiguous().realize()
  values = fields(stored, 4).cast(dtypes.int32).cast(dtypes.float32)
  return values.reshape(n // rows, blocks, rows).permute(0, 2, 1).reshape(n, blocks)


def placed_fields(words: Tensor, bits: int) -> tuple[Tensor, Tensor]:
  """(codes, factors) of uint32 `words` (...,): each `bits`-wide field masked where it lies (the
  top one shifted down by `bits` first, so every field is a positive int32) as float32, shape
  (..., 32 // bits), code * 2^pos; and the float32 2^-pos that undoes each (32 // bits,). A mask
  and a conversion per field, no shift: with constant field indices (unrolled) the masks and
  factors are constants. code * 2^pos times x * 2^-pos is exactly code * x (powers of two)."""
  per = 32 // bits
  f = Tensor.arange(per, device=words.device).cast(dtypes.uint32)
  down = (f == per - 1).cast(dtypes.uint32) * bits
  pos = f * bits - down
  mask = ((1 << bits) - 1) << pos
  shape = (*([1] * words.ndim), per)
  codes = ((words.unsqueeze(-1) >> down.reshape(*shape)) & mask.reshape(*shape))
  factors = ((127 - pos.cast(dtypes.int32)) << 23).bitcast(dtypes.float32)
  # to float through int32: a signed conversion (an unsigned one is several instructions on x86
  # without AVX-512: llvmpipe, SwiftShader)
  return codes.cast(dtypes.int32).cast(dtypes.float32), factors


def matmul_words(x: Tensor, words: Tensor, scale: Tensor, zp, bits: int, block: int) -> Tensor:
  """x @ dequant(B).T for a block-quantized B given as its 32-bit words: x (M, K) float32,
  words (N, blocks * block * bits // 32) uint32 (each row's `bits`-wide codes, the lowest field
  of a word first), scale (N, blocks) float32, zp (N, blocks) float32 or one float; (M, N)
  float32. y[m, n] = sum over blocks b of scale[n, b] * (sum over the block's words j and their
  fields f of x[m, k] * (field - zp[n, b])), k = (b * words per block + j) * fields + f, K padded
  with zeros to whole blocks; the fields taken in place (placed_fields: field * 2^pos times the
  constant 2^-pos, exact), the zero point subtracted in the same reduction (one kernel, not a
  dot and a zero-point term; the CPU adapters' unrolled step takes it once per block and row, as
  the block's sum of x times the zero point: lowering/combine.py pairwise; and x times each
  field's 2^-pos once per block for all the thread's rows: _scaled_first). So each value and row
  costs a mask, a conversion, a multiply and an add, and the reduction keeps the three axes, so a
  thread loads each word once for all its fields and each block's scale and zero point once
  (optimize.py's reduce_inner on CPU adapters, whose unrolled step multiplies a block's sum by
  its scale once: the scale is the products' last factor; lowering/threads.py's reduce_whole
  unrolls them all); nothing dequantized is written to memory. The rows may also come as
  several leading axes (lane_major's views: words (*rows, blocks, words per block), scale and
  zp (*rows, blocks)); the result is then (M, *rows)."""
  *lead, blocks = scale.shape
  nd, per = len(lead), 32 // bits
  wpb = block // per
  if tuple(words.shape) != (*lead, blocks, wpb):
    words = words.reshape(*lead, blocks, wpb)
  codes, factors = placed_fields(words, bits)
  m, k = x.shape
  if blocks * block != k:
    x = x.pad(((0, 0), (0, blocks * block - k)))
  ones = [1] * nd
  xb = x.reshape(m, *ones, blocks, wpb, per)
  s = scale.reshape(1, *lead, blocks, 1, 1)
  z = zp.reshape(1, *lead, blocks, 1, 1) if isinstance(zp, Tensor) else zp
  dq = codes.reshape(1, *lead, blocks, wpb, per) * factors.reshape(1, *ones, 1, 1, per) - z
  return ((xb * dq) * s).sum((nd + 1, nd + 2, nd + 3))


def tiled_rows(x: Tensor) -> bool:
  """Whether MatMulNBits over activations x (M, K) takes matmul_dequant (a register-tiled
  matmul) rather than matmul_words: M is at least TILED_ROWS (a prompt's rows). A symbolic M
  (the page bundle's `seq` new tokens, export/onnx_lm.py) counts at its top, the padded rows:
  its kernel is the tiled one, with a variant per range of bound counts (lowering/variants.py:
  one row a thread at M = 1, decoding; the wide tiles up to the top, a prompt of the bundle's
  step)."""
  m = x.shape[0]
  return isinstance(m, int) and m >= TILED_ROWS


def own_rows(runner, x: Tensor) -> Tensor:
  """Activations x (M, K) of a tiled matmul (matmul_dequant) in a buffer of their own where
  they are an elementwise expression (a norm's scaling, SwiGLU's silu(gate) * up, a gathered
  embedding's dequantization): a kernel boundary (contiguous), one per x per run of `runner`
  (the q, k and v projections share their norm's). The matmul would otherwise compute the
  expression as it reads x, in every thread of a row's tiles (N / tile columns times over).
  Native lavapipe, 128 x 576 @ 576 x 1536 f32, CPU ms per run (best of 3 interleaved, load
  ~14): plain 14.4 | RMS norm fused 24.2, realized first 15.0 | 1536-wide silu(h) fused 31.5,
  realized first 13.5 (matmul 14.1). Views of a buffer or a kernel's output, and expressions
  of a matrix product (_reads_a_product), are kept as they are."""
  base, views = x.node, []
  while base.op is L.VIEW and base.src:
    views.append(base.arg)
    base = base.src[0]
  if base.op not in (L.ALU, L.CAST, L.BITCAST, L.GATHER) or _reads_a_product(base, x.numel()):
    return x
  kept = runner.__dict__.setdefault("_own_rows", {})
  key = (id(base), tuple(views))
  if key not in kept:
    kept[key] = (base, x.contiguous())
  return kept[key][1]


def _reads_a_product(node, size: int) -> bool:
  """The elementwise expression `node` reads a reduction of at least `size` outputs (a matrix
  product: its kernel computes the expression as its epilogue and writes it, so the expression
  is in a buffer of its own already; a boundary there would instead join both of SwiGLU's
  products in one kernel). Symbolic sizes (a symbolic-step bundle's rows): at least `size` for
  every value of their dims."""
  stack, seen = [node], set()
  while stack:
    n = stack.pop()
    if id(n) in seen or n.realized:
      continue
    seen.add(id(n))
    if n.op is L.REDUCE and _at_least(n.size, size):
      return True
    if n.op in (L.ALU, L.CAST, L.BITCAST, L.VIEW, L.GATHER):
      stack.extend(n.src)
  return False


def _at_least(a, b) -> bool:
  """a >= b for every value of the symbolic dims in them (sizes: ints or graph.dims Syms)."""
  d = a - b
  return (d.lo if is_sym(d) else d) >= 0


def lane_major(t: Tensor, lanes: int, rows: int) -> Tensor:
  """Per-row data t (N, blocks, *tail) stored lane-major for a matrix-vector product that gives
  each thread `rows` consecutive rows and runs `lanes` consecutive threads as one SIMD group (a
  CPU adapter): a realized copy ordered (N // (lanes * rows), blocks, rows, lanes, *tail), so the
  lanes' loads of one block of one of their rows are consecutive in memory (one contiguous
  read, not a gather of rows far apart); returned as its view (N // (lanes * rows), lanes,
  rows, blocks, *tail), for matmul_words' leading row axes. N must divide by lanes * rows."""
  n, *rest = t.shape
  if n % (lanes * rows):
    raise ShapeError(f"lane_major: {n} rows do not divide into groups of {lanes} lanes x "
                     f"{rows} rows")
  tail = tuple(range(4, 3 + len(rest)))
  grouped = t.reshape(n // (lanes * rows), lanes, rows, *rest)
  stored = grouped.permute(0, 3, 2, 1, *tail).contiguous().realize()
  return stored.permute(0, 3, 2, 1, *tail)


# ---- GatherBlockQuantized --------------------------------------------------------------------

def _expand_blocks(p: Tensor, axis: int, block: int, size: int) -> Tensor:
  """Per-block values along `axis` repeated over their blocks, cut to `size`."""
  shape = p.shape
  wide = p.unsqueeze(axis + 1).expand(*shape[:axis + 1], block, *shape[axis + 1:])
  wide = wide.reshape(*shape[:axis], shape[axis] * block, *shape[axis + 1:])
  bounds = [(0, d) for d in wide.shape]
  bounds[axis] = (0, size)
  return wide.shrink(tuple(bounds))


def _unpacked(x: Tensor, packed: bool) -> Tensor:
  return nibbles(x) if packed else x.cast(dtypes.int32)


@domain_op(MS, "GatherBlockQuantized")
def _gather_block_quantized(ins, at):
  """Rows of a block-quantized table gathered, then dequantized (only the gathered rows)."""
  data, idx, scales, zp = ins[0], ins[1], ins[2], ins[3]
  bits = at.int("bits", 4)
  four_bit = ins.names[0] in getattr(ins.runner.model, "four_bit", ())
  packed = data.dtype == dtypes.uint8 and bits == 4 and not four_bit
  gaxis = axis_index(at.int("gather_axis", 0), data.ndim)
  qaxis = axis_index(at.int("quantize_axis", 1), data.ndim)
  block = at.int("block_size", 128)
  if packed and qaxis != data.ndim - 1:
    raise UnsupportedError(f"GatherBlockQuantized of domain {MS!r}: packed 4-bit uint8 data "
                           f"is quantized along its last axis")
  idx = idx.cast(dtypes.int32)
  idx = idx + (idx < 0).cast(dtypes.int32) * data.shape[gaxis]
  rows = take(data, idx, axis=gaxis)
  sidx = idx // block if gaxis == qaxis else idx
  s = take(scales, sidx, axis=gaxis).cast(dtypes.float32)
  out_q = qaxis + idx.ndim - 1 if qaxis > gaxis else qaxis
  codes = _unpacked(rows, packed).cast(dtypes.float32)
  if gaxis != qaxis:       # (when they are one axis, each gathered row has its own block)
    s = _expand_blocks(s, out_q, block, codes.shape[out_q])
  default = 0.0 if four_bit else {dtypes.uint8: 8.0 if packed else 128.0}.get(data.dtype, 0.0)
  if zp is None:
    return ((codes - default) * s).cast(scales.dtype)
  z = _unpacked(take(zp, sidx, axis=gaxis), packed).cast(dtypes.float32)
  if gaxis != qaxis:
    z = _expand_blocks(z, out_q, block, codes.shape[out_q])
  return ((codes - z) * s).cast(scales.dtype)
