"""The tensor-core fragment layouts, defined here once as the PTX ISA documents them for
mma.sync.aligned.m16n8k16 / m16n8k8 (.row.col): which (row, col) of each WMMA operand every lane
of a warp holds in each element of its fragment. Facts about the WMMA op, read by the
interpreter (which runs it), the tensor-core lowering (which builds the fragments) and the
renderers and simulators.
"""
from __future__ import annotations

from ..errors import ExecutionError

# (M, N, K, input dtype name) -> (elements of A, of B, of C/D) per thread; tf32 is float32 input
WMMA_SHAPES = {(16, 8, 16, "float16"): (8, 4, 4), (16, 8, 16, "bfloat16"): (8, 4, 4),
               (16, 8, 8, "float16"): (4, 2, 4), (16, 8, 8, "bfloat16"): (4, 2, 4),
               (16, 8, 8, "float32"): (4, 2, 4)}


def fragment_position(shape: tuple, dtype_in: str, operand: str, g: int, t: int, i: int):
  """(row, col) of element i of lane (g = lane >> 2, t = lane % 4), per the PTX ISA's "Matrix
  Fragments for mma.m16n8kK" sections."""
  k = shape[2]
  if operand in ("c", "d"):            # row g for c0,c1 else g+8; col t*2 + (i & 1)
    return g + 8 * (i >> 1), t * 2 + (i & 1)
  if dtype_in == "float32":            # tf32 m16n8k8
    if operand == "a":                 # row g for a0,a2 else g+8; col t for a0,a1 else t+4
      return g + 8 * (i & 1), t + 4 * (i >> 1)
    return t + 4 * i, g                # b: row t for b0, t+4 for b1; col g
  if operand == "a":                   # row g for a0,a1(,a4,a5) else g+8; col t*2+(i&1) (+8, i>=4)
    return g + 8 * ((i >> 1) & 1), t * 2 + (i & 1) + 8 * (i >> 2)
  if k == 16:                          # b m16n8k16: row t*2+(i&1), +8 for i >= 2; col g
    return t * 2 + (i & 1) + 8 * (i >> 1), g
  return t * 2 + i, g                  # b m16n8k8: row t*2+i; col g


def wmma_layout(shape: tuple[int, int, int], operand: str, dtype_in="float16") -> list[list]:
  """For one operand ("a", "b", "c" or "d") of WMMA `shape` (M, N, K) with inputs of `dtype_in`:
  `layout[lane][i]` = (row, col) in the operand's matrix of element i of that lane's fragment."""
  name = getattr(dtype_in, "name", dtype_in)
  counts = WMMA_SHAPES.get((*shape, name))
  if counts is None:
    known = ", ".join(f"m{m}n{n}k{k} {d}" for m, n, k, d in WMMA_SHAPES)
    raise ExecutionError(f"no tensor-core shape m{shape[0]}n{shape[1]}k{shape[2]} for {name}: "
                         f"use one of {known}")
  count = counts["abcd".index(operand) if operand != "d" else 2]
  return [[fragment_position(shape, name, operand, lane >> 2, lane % 4, i) for i in range(count)]
          for lane in range(32)]
