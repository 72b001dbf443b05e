"""Prologues: a matmul kernel computes the row normalization it reads (the LayerNorm or RMSNorm of
a decode step's one row, read by the QKV projection or the MLP's up projection) instead of
reading it from a row kernel of its own.

The pattern (graph/schedule.py's _walk): a reduction computed once per output of its kernel (the
kernel's own, or one at its output side: the matmul under its bias epilogue) whose source reads
an elementwise row expression S (what a row kernel computes: an output that reads reductions
along its own rows only through broadcasts back along them, the mean and variance of a norm)
through a view that walks exactly one whole row of S along the kernel's reduced axes for each
output (`reads_whole_rows`). Then S and its row reductions fuse into the kernel: the row's
statistics are nested reductions read per output, loop-invariant, so each output (each workgroup
of a grouped reduction, its lanes sharing the pass) computes them once before its loop
(lowering/lowerer.py), and each element read is normalized as it is read.

That saves the row kernel's dispatch and the write and read of the normalized row; it costs each
output one more pass over its row, and the normalization of every element it reads. So it
applies (`worth_it`) to one row read by all of a kernel's outputs (staged, below), and otherwise
while the kernel's outputs times the row's length are at most PROLOGUE_WORK
(decoding a small model: one row of 32 read by a few hundred outputs; not a prompt's many rows,
whose row kernel runs once per row where the matmul would repeat it per output; not d = 256 on
lavapipe, where the extra passes cost more than the dispatch saved), and only to rows whose
per-element part is cheap: no transcendental op of a value that varies per element (a norm's
rsqrt is of the broadcast variance; a softmax's exp would run once per output per element).

Staged (lowering/staged.py): where the kernel reads one row for all its outputs (a decode step),
each workgroup of a thread-per-output layout computes the row's statistics and the normalized row
once, into workgroup memory, and its outputs read it from there: the prologue then costs a pass
per workgroup, not per output, and applies at any size (up to STAGED_MAX elements a row).
"""
from __future__ import annotations

from .lazy import L, LazyOp
from .view import prod

# the most (kernel outputs x row length) a prologue may add: the extra passes over the row that
# its outputs make. Each output's extra pass costs about what its own dot product does, which a
# compute-bound CPU adapter pays in full against one dispatch saved. Set on lavapipe natively,
# bench/decode.py --quick (4 layers, symbolic way; per token, load 1-3 on 2 CPUs, 2-3 runs, before
# -> after with every norm a prologue, 8 -> 6 dispatches a layer): d = 32 (QKV 96 x 32, MLP up
# 128 x 32, head 256 x 32; all at most 8192) wall 3.5-7.0 -> 2.7-3.4 ms, GPU 0.65-1.03 -> 0.55-
# 0.61 ms; d = 64 (12288-16384) wall 3.6-4.0 -> 3.7-5.7, GPU 1.05-1.17 -> 1.45-1.93; d = 128
# (32768-65536) wall 5.4-5.7 -> 7.0-10.0, GPU 2.8-3.2 -> 4.8-6.9; d = 256 (65536-262144) wall
# 13.6-17.2 -> 20.1-25.6, GPU 8.9-10.3 -> 16.7-17.8. bench/prologue_ab.py (d = 256, one norm
# and projection, GPU ms) agrees: n = 64 0.098 against 0.059, n = 768 1.15 against 0.45. A GPU
# whose matmul waits on memory (the weights), not on arithmetic, may well gain at larger sizes:
# not measured here. Symbolic rows (a causal LM bundle's seq 1..128, export/onnx_lm.py) stay
# under it too: raised to take the q4 SmolLM2 2-layer bundle's norms (23 -> 20 dispatches a step),
# its projections lose their q4 tiles and few-row variants for a thread per output of every row:
# lavapipe natively, load 7-10, prefill of 128 CPU 0.26 -> 2.8 s, decode 26 -> 1220 ms a token.
# Such a prologue needs a layout that computes each row's norm once per workgroup of its rows.
PROLOGUE_WORK = 1 << 13
# ... and whatever that work, a kernel that reads ONE row of at most STAGED_MAX elements for all
# its outputs (a decode step's) takes it: it stages the row (lowering/staged.py: each workgroup
# computes it once into workgroup memory, 4 bytes an element; WebGPU guarantees 16 KiB of it),
# so no output makes another pass over it. STAGED = False: no staging (bench/prologue_ab.py)
STAGED_MAX, STAGED = 2048, True
# a fused attention (L.ATTENTION) read whole as one row by a kernel of at most
# STAGED_ATTENTION_OUTPUTS outputs (a decode step's output projection, one workgroup) is computed
# by that kernel, staged (lowering/staged.py), with at most that many query rows: the attention's
# dispatch saved, its rows computed once. STAGED_ATTENTION = False: never.
STAGED_ATTENTION, STAGED_ATTENTION_OUTPUTS = True, 256


def worth_it(outputs: int, length: int, rows: int = 0) -> bool:
  """Whether a kernel of `outputs` outputs should recompute rows of `length` elements, `rows`
  of them in all (0: unknown; see the module docstring)."""
  return length > 1 and (outputs * length <= PROLOGUE_WORK or
                         STAGED and rows == 1 and length <= STAGED_MAX)


def staged_attention(outputs: int, attention: LazyOp) -> bool:
  """Whether a kernel of `outputs` outputs that reads ATTENTION node `attention` whole, as one
  row, for each output computes it (see STAGED_ATTENTION)."""
  rows = prod(attention.shape[:-1])
  return STAGED and STAGED_ATTENTION and outputs <= STAGED_ATTENTION_OUTPUTS and \
    rows <= STAGED_ATTENTION_OUTPUTS and attention.size <= STAGED_MAX


def reads_whole_rows(view: LazyOp, red: LazyOp, axes: tuple) -> bool:
  """Whether VIEW `view`, shaped like reduction `red`'s source, reads its source's rows (the
  trailing axes `axes`, not symbolic) only along red's reduced axes: for each output of red, its
  reduced elements walk one whole row, each element once, and its other axes move by whole
  rows (or not at all: a broadcast)."""
  src, v = view.src[0], view.arg
  n = len(src.shape)
  if v.shape != red.src[0].shape or v.mask is not None or not isinstance(v.offset, int) or \
     tuple(axes) != tuple(range(n - len(axes), n)) or \
     src.sym is not None and any(not isinstance(src.sym[a], int) for a in axes):
    return False
  length = prod(src.shape[a] for a in axes)
  reduced = red.arg[1]
  expect = 1
  for stride, size in sorted((v.strides[a], v.shape[a]) for a in reduced if v.shape[a] > 1):
    if stride != expect:
      return False
    expect *= size
  return expect == length and v.offset % length == 0 and \
    all(isinstance(v.strides[a], int) and v.strides[a] % length == 0
        for a in range(len(v.shape)) if a not in reduced)
