"""Warp-collective mma.sync.aligned in the PTX simulator, checked against numpy A @ B + C.

The test kernels gather each lane's fragment elements through index tables that this file
computes from the PTX ISA's "Matrix Fragments for mma.m16n8kK" formulas (groupID = lane >> 2,
threadID_in_group = lane % 4), so the simulator's own layout table is checked, not reused.
"""
from __future__ import annotations

import numpy as np
import pytest

from kernelgen.uop import interpret
from kernelgen.ptxsim import mma as sim_mma
from test_ptxsim_kit import entry, run_buffers


# ---- the ISA's fragment layouts, restated ---------------------------------------------------------

def isa_position(shape: str, itype: str, operand: str, lane: int, i: int) -> tuple[int, int]:
  g, t = lane >> 2, lane % 4
  if operand == "c":          # C/D f32: row g for c0,c1, g+8 for c2,c3; col t*2 + (i & 1)
    return (g if i < 2 else g + 8, t * 2 + (i & 1))
  if itype == "tf32":         # m16n8k8 .tf32
    if operand == "a":        # row g for a0,a2, g+8 for a1,a3; col t for a0,a1, t+4 for a2,a3
      return (g if i in (0, 2) else g + 8, t if i < 2 else t + 4)
    return (t if i == 0 else t + 4, g)          # B: row t for b0, t+4 for b1; col g
  if shape == "m16n8k16":     # .f16 / .bf16
    if operand == "a":
      return (g if i in (0, 1, 4, 5) else g + 8, t * 2 + (i & 1) + (8 if i >= 4 else 0))
    return (t * 2 + (i & 1) + (8 if i >= 2 else 0), g)
  if operand == "a":          # m16n8k8 .f16 / .bf16
    return (g if i < 2 else g + 8, t * 2 + (i & 1))
  return (t * 2 + i, g)


DIMS = {"m16n8k16": (16, 8, 16), "m16n8k8": (16, 8, 8)}
COUNTS = {("m16n8k16", "f16"): (8, 4), ("m16n8k16", "bf16"): (8, 4), ("m16n8k8", "f16"): (4, 2),
          ("m16n8k8", "bf16"): (4, 2), ("m16n8k8", "tf32"): (4, 2)}


def index_table(shape, itype, operand, count, cols, position=isa_position) -> np.ndarray:
  """Flat row-major element index of every (lane, i) fragment element."""
  return np.array([[r * cols + c for r, c in (position(shape, itype, operand, lane, i)
                                               for i in range(count))] for lane in range(32)],
                  np.uint32).ravel()


# ---- a kernel that gathers fragments through the tables, runs mma, scatters D -----------------------

def _gather(name: str, table: str, count: int, itype: str, regs: list[str]) -> list[str]:
  lines = []
  for i in range(count):
    lines += [f"ld.param.u64 %rd1, [{table}]", f"mad.lo.s32 %r1, %r0, {count}, {i}",
              "mul.wide.u32 %rd2, %r1, 4", "add.s64 %rd1, %rd1, %rd2", "ld.global.u32 %r2, [%rd1]",
              f"ld.param.u64 %rd3, [{name}]"]
    if itype == "tf32":
      lines += ["mul.wide.u32 %rd2, %r2, 4", "add.s64 %rd3, %rd3, %rd2",
                "ld.global.f32 %f0, [%rd3]", f"cvt.rna.tf32.f32 {regs[i]}, %f0"]
    else:
      lines += ["mul.wide.u32 %rd2, %r2, 2", "add.s64 %rd3, %rd3, %rd2",
                f"ld.global.b16 %h{i % 2}, [%rd3]"]
      if i % 2:
        lines.append(f"mov.b32 {regs[i // 2]}, {{%h0, %h1}}")
  return lines


def mma_ptx(shape: str, itype: str) -> str:
  na, nb = COUNTS[(shape, itype)]
  per = 1 if itype == "tf32" else 2
  a = [f"%a{j}" for j in range(na // per)]
  b = [f"%b{j}" for j in range(nb // per)]
  c, d = [f"%c{j}" for j in range(4)], [f"%d{j}" for j in range(4)]
  body = ["mov.u32 %r0, %laneid"] + _gather("A", "IA", na, itype, a) + \
    _gather("B", "IB", nb, itype, b)
  for i in range(4):
    body += ["ld.param.u64 %rd1, [IC]", f"mad.lo.s32 %r1, %r0, 4, {i}", "mul.wide.u32 %rd2, %r1, 4",
             "add.s64 %rd1, %rd1, %rd2", "ld.global.u32 %r2, [%rd1]", "mul.wide.u32 %rd4, %r2, 4",
             "ld.param.u64 %rd3, [C]", "add.s64 %rd3, %rd3, %rd4", f"ld.global.f32 {c[i]}, [%rd3]"]
  groups = ", ".join("{" + ", ".join(g) + "}" for g in (d, a, b, c))
  body.append(f"mma.sync.aligned.{shape}.row.col.f32.{itype}.{itype}.f32 {groups}")
  for i in range(4):
    body += ["ld.param.u64 %rd1, [IC]", f"mad.lo.s32 %r1, %r0, 4, {i}", "mul.wide.u32 %rd2, %r1, 4",
             "add.s64 %rd1, %rd1, %rd2", "ld.global.u32 %r2, [%rd1]", "mul.wide.u32 %rd4, %r2, 4",
             "ld.param.u64 %rd3, [D]", "add.s64 %rd3, %rd3, %rd4", f"st.global.f32 [%rd3], {d[i]}"]
  regs = ("\t.reg .b32 %r<4>, %a<4>, %b<2>;\n\t.reg .b64 %rd<5>;\n\t.reg .b16 %h<2>;\n"
          "\t.reg .f32 %f<1>, %c<4>, %d<4>;")
  text = "".join(f"\t{ln};\n" for ln in body) + "\tret;"
  return entry("mma_test", ["D", "A", "B", "C", "IA", "IB", "IC"], text, regs)


def run_mma(shape: str, itype: str, position=isa_position, seed: int = 0):
  """(simulated D, numpy A @ B + C) for random A, B, C (values exact in the input type)."""
  M, N, K = DIMS[shape]
  rng = np.random.default_rng(seed)
  A = rng.integers(-8, 8, (M, K)).astype(np.float32) / 4
  B = rng.integers(-8, 8, (K, N)).astype(np.float32) / 4
  C = rng.standard_normal((M, N)).astype(np.float32)
  na, nb = COUNTS[(shape, itype)]
  mem = {"f16": A.astype(np.float16), "bf16": (A.view(np.uint32) >> 16).astype(np.uint16),
         "tf32": A}[itype], {"f16": B.astype(np.float16),
                             "bf16": (B.view(np.uint32) >> 16).astype(np.uint16), "tf32": B}[itype]
  tables = [index_table(shape, itype, "a", na, K, position),
            index_table(shape, itype, "b", nb, N, position),
            index_table(shape, itype, "c", 4, N, position)]
  D = np.zeros((M, N), np.float32)
  out = run_buffers(mma_ptx(shape, itype), [D, mem[0], mem[1], C] + tables, (1, 1, 1),
                    (32, 1, 1))[0]
  return out, (A.astype(np.float64) @ B.astype(np.float64) + C).astype(np.float32)


SHAPE_TYPES = sorted(COUNTS)


@pytest.mark.parametrize("shape,itype", SHAPE_TYPES)
def test_mma_matches_numpy(shape, itype):
  """mma.sync.aligned.{shape}.row.col.f32.{itype}.{itype}.f32 computes D = A @ B + C."""
  got, want = run_mma(shape, itype)
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _wrong_a_rows(shape, itype, operand, lane, i):
  """A deliberately wrong layout: A's row halves swapped (g <-> g + 8)."""
  r, c = isa_position(shape, itype, operand, lane, i)
  return ((r + 8) % 16, c) if operand == "a" else (r, c)


def _transposed_b(shape, itype, operand, lane, i):
  """A deliberately wrong layout: B read as if it were stored n-major (col.row confusion)."""
  r, c = isa_position(shape, itype, operand, lane, i)
  if operand != "b":
    return (r, c)
  K = DIMS[shape][2]
  flat = c * K + r           # B[n][k] order instead of B[k][n]
  return divmod(flat, DIMS[shape][1])


@pytest.mark.parametrize("wrong", [_wrong_a_rows, _transposed_b])
@pytest.mark.parametrize("shape,itype", [("m16n8k16", "f16"), ("m16n8k8", "tf32")])
def test_wrong_fragment_layout_gives_wrong_numbers(shape, itype, wrong):
  """Negative control: a kernel that packs fragments with the wrong layout must not match."""
  got, want = run_mma(shape, itype, position=wrong)
  assert not np.allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("shape,itype", SHAPE_TYPES)
def test_simulator_layouts_agree_with_the_interpreter(shape, itype):
  """The simulator's tables, this file's ISA formulas and interpret.wmma_layout all agree."""
  M, N, K = DIMS[shape]
  na, nb = COUNTS[(shape, itype)]
  dtype = {"f16": "float16", "bf16": "bfloat16", "tf32": "float32"}[itype]
  sim = sim_mma._tables(shape, itype)
  for operand, count, table in (("a", na, sim[0]), ("b", nb, sim[1]), ("c", 4, sim[2])):
    theirs = interpret.wmma_layout((M, N, K), operand, dtype)
    for lane, i, r, c in table:
      assert (r, c) == isa_position(shape, itype, operand, lane, i) == tuple(theirs[lane][i])
    assert len(table) == 32 * count


def test_mma_needs_the_whole_warp():
  """mma.sync.aligned is warp-collective: with only 16 threads it is an execution error."""
  from kernelgen.errors import ExecutionError
  src = mma_ptx("m16n8k8", "f16")
  zeros = [np.zeros(128, np.float32), np.zeros(128, np.float16), np.zeros(64, np.float16),
           np.zeros(128, np.float32)] + [np.zeros(128, np.uint32)] * 3
  with pytest.raises(ExecutionError, match="mma.sync needs all 32 lanes"):
    run_buffers(src, zeros, (1, 1, 1), (16, 1, 1))
