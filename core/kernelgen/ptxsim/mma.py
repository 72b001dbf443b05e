"""Warp-collective `mma.sync.aligned` with the fragment layouts of the PTX ISA.

Each layout rule maps (lane, element index i) to (row, col) of the operand matrix, with
groupID = lane >> 2 and threadID_in_group = lane % 4, exactly as the ISA's "Matrix Fragments for
mma.m16n8kK" sections write them. Half-precision elements are packed two per .b32 register,
element 2j in the low 16 bits of register j; tf32 and f32 elements take one register each.
"""
from __future__ import annotations

from . import numeric as nm


def _a_k16(g, t, i):
  # A m16n8k16 f16/bf16: row g for a0,a1,a4,a5 else g+8; col t*2+(i&1), +8 for i >= 4
  return (g if i in (0, 1, 4, 5) else g + 8, t * 2 + (i & 1) + (8 if i >= 4 else 0))


def _b_k16(g, t, i):
  # B m16n8k16 f16/bf16: row t*2+(i&1), +8 for i >= 2; col g
  return (t * 2 + (i & 1) + (8 if i >= 2 else 0), g)


def _a_k8(g, t, i):
  # A m16n8k8 f16/bf16: row g for a0,a1 else g+8; col t*2+(i&1)
  return (g if i < 2 else g + 8, t * 2 + (i & 1))


def _b_k8(g, t, i):
  # B m16n8k8 f16/bf16: row t*2+i; col g
  return (t * 2 + i, g)


def _a_tf32(g, t, i):
  # A m16n8k8 tf32: row g for a0,a2 else g+8; col t for a0,a1 else t+4
  return (g + 8 * (i & 1), t + 4 * (i >> 1))


def _b_tf32(g, t, i):
  # B m16n8k8 tf32: row t for b0, t+4 for b1; col g
  return (t + 4 * i, g)


def _cd(g, t, i):
  # C/D f32 (both shapes): row g for c0,c1 else g+8; col t*2+(i&1)
  return (g + 8 * (i >> 1), t * 2 + (i & 1))


# (shape, input type) -> (M, N, K, A rule, A elements, B rule, B elements, elements per register)
SHAPES = {
  ("m16n8k16", "f16"): (16, 8, 16, _a_k16, 8, _b_k16, 4, 2),
  ("m16n8k16", "bf16"): (16, 8, 16, _a_k16, 8, _b_k16, 4, 2),
  ("m16n8k8", "f16"): (16, 8, 8, _a_k8, 4, _b_k8, 2, 2),
  ("m16n8k8", "bf16"): (16, 8, 8, _a_k8, 4, _b_k8, 2, 2),
  ("m16n8k8", "tf32"): (16, 8, 8, _a_tf32, 4, _b_tf32, 2, 1),
}
DECODE = {"f16": nm.f16_from_bits, "bf16": nm.bf16_value, "tf32": nm.tf32_value}


def fragment_table(rule, count: int) -> list[tuple[int, int, int, int]]:
  """(lane, element index, row, col) for every element of one operand's fragments."""
  return [(lane, i) + rule(lane >> 2, lane % 4, i) for lane in range(32) for i in range(count)]


def gather(regs: list, table, per_reg: int, decode, rows: int, cols: int) -> list:
  """The operand matrix from the warp's registers (`regs[j][lane]`: register j of a lane)."""
  mat = [[0.0] * cols for _ in range(rows)]
  for lane, i, r, c in table:
    word = regs[i // per_reg][lane]
    if per_reg == 2:
      word = word >> 16 if i & 1 else word & 0xFFFF
    mat[r][c] = decode(word)
  return mat


def mma(shape: str, itype: str, a_regs, b_regs, c_regs) -> list:
  """D = A @ B + C for one warp; returns the four D registers as 32-lane f32 lists."""
  M, N, K, a_rule, na, b_rule, nb, per_reg = SHAPES[(shape, itype)]
  decode = DECODE[itype]
  A = gather(a_regs, _tables(shape, itype)[0], per_reg, decode, M, K)
  B = gather(b_regs, _tables(shape, itype)[1], per_reg, decode, K, N)
  C = gather(c_regs, _tables(shape, itype)[2], 1, float, M, N)
  cols = [[B[k][n] for k in range(K)] for n in range(N)]
  D = [[sum(x * y for x, y in zip(A[m], cols[n])) + C[m][n] for n in range(N)] for m in range(M)]
  out = [[0.0] * 32 for _ in range(4)]
  for lane, i, r, c in _tables(shape, itype)[2]:
    out[i][lane] = D[r][c]
  return [nm.round_f32s(o) for o in out]


_TABLES: dict = {}


def _tables(shape: str, itype: str):
  key = (shape, itype)
  if key not in _TABLES:
    _, _, _, a_rule, na, b_rule, nb, _ = SHAPES[key]
    _TABLES[key] = (fragment_table(a_rule, na), fragment_table(b_rule, nb),
                    fragment_table(_cd, 4))
  return _TABLES[key]
