"""MatMulNBits over a prompt's rows as a register-tiled matmul (quant_nbits.TILED_ROWS): the
packed words dequantized elementwise as the tile's column operand, in registers, so each of a
thread's columns dequantizes a value once for all the tile's rows and nothing dequantized is
written to memory.

The dequantization is written so that its lowered graph is short per value: each field taken
by an unsigned division and remainder by constant powers of two (no guarded shift: Tensor `>>`
adds a select for shift amounts past the word, one per value), which the register tile
computes on the column vector's lanes at once (lowering/regtile.py: its column operand's
lane-wise ops joined into vector ops). That keeps the 8x8 tile within a one-off run's compile
budget (lowering/compile_cost.py) on the CPU adapters, where the 4x4 tile ran 1.6-3.1x slower
(issue 35). SmolLM2's q4 MLP GEMMs at 128 rows, one-off, lavapipe natively, main (4x4) / this
(8x8), two rounds alternated, load 6-7 on 2 shared CPUs: 8x8 lowered UOps 1301 -> 1073 (gate and
up with SwiGLU's epilogue) and 1201 -> 973 (down); CPU ms per run (median of 5) 55-70 / 20-26;
its build (Mesa's cache off: pipeline and first dispatch) costs more, 0.66-1.12 / 1.09-1.80 s
wall, 138-270 / 248-356 ms of CPU. Against compile_cost.estimate_ms (bench/compile_cost.py's q4
rows, Mesa's cache off, load 5-6, driver CPU ms / estimate, two rounds): rolled 4x4 307 UOps
64-82 / 210, 8x8 (the one-off choice) 742 UOps 183-207 / 576, 8x16 1264 UOps 353-393 / 1119;
matmul 512^3 and conv2d 3x3 64ch in 8x8 140 / 249, 130 / 272. The estimate overstates these
kernels more than those it was fitted on (the vec4 loads and the fields' shifts and masks cost
lavapipe less per UOp, not more), and orders their tiles as their builds: no recalibration (an
estimate nearer their cost would admit 8x16: ~170 ms more build, where the 8x8 kernel's whole
run is 13-19 ms at load 2-4).
SwiftShader natively (load ~7) takes rolled 8x16: 1264 UOps 325-509 / 455 (matmul 135 / 129).
"""
from __future__ import annotations

from ...dtype import dtypes
from ...tensor.tensor import Tensor

# Tried (issue 35), not kept: each workgroup's dequantized columns staged in workgroup memory, so
# a word is dequantized once per workgroup, not once per row block (workgroups of 16 row blocks x
# 4 column blocks, row blocks innermost; steps of up to 8 KB between two barriers; branch pf63's
# commit 1d69fc2, lowering/col_stage.py, option stage_cols). bench/q4_prompt_gemms.py (there:
# --form 'staged={"stage_cols": 16}'), SmolLM2-135M's GEMMs at 128 rows, one-off, GPU ms best of
# 5, two rounds alternated in one process, plain -> staged: lavapipe (load 1.9-6.3)
# qkv 7.97 / 12.70 -> 40.1 / 112.4, up 6.90 / 23.25 -> 150.5 / 149.1, down 12.75 / 33.42 ->
# 123.2 / 72.4, driver build 136-277 -> 385-668 ms; SwiftShader (load 6.6-7.9) 212 / 96 -> 144 /
# 164, 135 / 151 -> 253 / 242, 69 / 164 -> 139 / 295. The threads' order alone (row blocks
# innermost, nothing staged) lavapipe 8.1 / 12.1 -> 12.2 / 24.7, 26.7 / 28.4 -> 31.3 / 37.2,
# 29.2 / 18.8 -> 29.4 / 44.1 (load 6.5-8.7), SwiftShader 89 / 129 -> 108 / 149, 187 / 103 ->
# 276 / 145, 227 / 100 -> 232 / 154 (load 7.6-8.3): lavapipe's barriers cost 5-20x, and the
# dequantization is not what these kernels wait on: the f32 matmul of each shape in the same
# runs took lavapipe 5.7-16.5, 19.4-42.1, 16.9-42.2 ms, SwiftShader 96-155, 126-275, 112-237 ms,
# within the q4 kernels' spread (per FLOP the q4 GEMM is at the f32 GEMM's rate: the tile the
# compile budget allows bounds both). Whole prefill (bench/lm_bundle_native.py, 2 layers, 128
# tokens, main -> staged): lavapipe (load 6.5-12.6) best CPU 0.254 / 0.348 s -> 0.665 / 0.706 s,
# its first prefill 1.1-1.3 -> 1.7-7.7 s; SwiftShader (one run each, load 16-19) 1.076 -> 1.245
# s (rounds 1.12 / 1.08 -> 1.25 / 1.27), first prefill CPU 7.5 -> 7.9 s; decode unchanged.


def field_codes(words: Tensor, bits: int) -> Tensor:
  """The `bits`-wide fields of uint32 `words` (...,) as float32 (..., 32 // bits), the lowest
  field first: (word // 2^(f * bits)) % 2^bits (unsigned: a plain division and remainder, which
  simplify to a shift and a mask), converted through int32 (a signed conversion: an unsigned
  one is several instructions on x86 without AVX-512)."""
  per = 32 // bits
  places = Tensor.ones(per, dtype=dtypes.uint32, device=words.device) << \
    (Tensor.arange(per, device=words.device) * bits).cast(dtypes.uint32)
  fields = (words.unsqueeze(-1) // places.reshape(*([1] * words.ndim), per)) % (1 << bits)
  return fields.cast(dtypes.int32).cast(dtypes.float32)


def matmul_dequant(x: Tensor, words: Tensor, scale: Tensor, zp, bits: int, block: int) -> Tensor:
  """x @ dequant(B).T as a matmul whose B operand is the packed words dequantized elementwise:
  x (M, K) float32, words (N, blocks * block * bits // 32) uint32, scale (N, blocks) float32,
  zp (N, blocks) float32 or one float; (M, N) float32. The reduction runs over (words, fields):
  a thread's register tile loads each of its columns' words once for the word's fields,
  dequantizes each value once in registers (field_codes, minus the zero point, times the
  scale) for all the tile's rows, and multiply-adds it into them; K padded with zeros to whole
  blocks. Nothing dequantized is written to memory. quant_nbits.matmul_words instead costs a
  mask, a conversion and a scaling per product (its thread per output suits one row:
  decoding); for a prompt's rows this is a matmul's tiles (TILED_ROWS)."""
  n, blocks = scale.shape
  per = 32 // bits
  wpb = block // per
  m, k = x.shape
  codes = field_codes(words.reshape(n, blocks, wpb), bits)
  if isinstance(zp, Tensor):
    codes = codes - zp.reshape(n, blocks, 1, 1)
  else:
    codes = codes - zp
  w = (codes * scale.reshape(n, blocks, 1, 1)).reshape(1, n, blocks * wpb, per)
  if blocks * block != k:
    x = x.pad(((0, 0), (0, blocks * block - k)))
  return (x.reshape(m, 1, blocks * wpb, per) * w).sum((2, 3))
