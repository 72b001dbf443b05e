"""The pure-Python fast engine (ptxsim/fused.py: runs of straight-line instructions fused into
generated Python): its errors name the same instruction and thread as the reference engine's
when the failing instruction sits inside a fused run, and a renderer's loop body becomes one
fused run. (Bit-identity over the bench kernels, the fuzz corpus and the ISA tests is in
test_ptxsim_fast.py, with the "fused" engine against the reference.)"""
from __future__ import annotations

import numpy as np
import pytest

from kernelgen import ptxsim
from kernelgen.errors import ExecutionError
from kernelgen.ptxsim.machine import program
from kernelgen.ptxsim.steps import SEGMENT
import test_ptxsim
from test_ptxsim_kit import entry


def _messages(src: str, sizes: list[int], grid=(1, 1, 1), block=(32, 1, 1)) -> list[str]:
  """The ExecutionError message of the launch on the python and on the reference engine."""
  out = []
  for engine in ("fused", "reference"):
    mem = ptxsim.GlobalMemory()
    bufs = [mem.alloc(n) for n in sizes]
    with pytest.raises(ExecutionError) as err:
      ptxsim.run(src, grid, block, [b.base for b in bufs], mem, engine=engine)
    out.append(str(err.value))
  return out


def _segments(src: str) -> list[tuple[int, int]]:
  code = program(src).fused()
  return [(pc, step[2]) for pc, step in enumerate(code) if step[0] == SEGMENT]


def test_out_of_bounds_inside_a_fused_run_names_its_instruction():
  """The store sits between inlined integer instructions: the fault names the store's line and
  the first thread past the end, as the reference engine does."""
  body = test_ptxsim.TID + ("\tadd.s32 %r4, %r3, 7;\n\tst.global.u32 [%rd2], %r4;\n"
                            "\tadd.s32 %r5, %r4, 1;\n\tret;")
  src = entry("oob_in_run", ["out"], body, test_ptxsim.REGS)
  fused, reference = _messages(src, [4 * 40], grid=(2, 1, 1))
  assert fused == reference
  assert "out-of-bounds global store" in fused and "ctaid=(1, 0, 0) tid=(8, 0, 0)" in fused
  assert "`st.global.u32 [%rd2], %r4`" in fused
  assert any(pc <= 8 < pc + n for pc, n in _segments(src))    # the store is inside a run


def test_uninitialised_read_by_an_inlined_instruction():
  """An inlined add reads a register some lanes never wrote: the run falls back to the
  reference steps, which name the add and the first such lane."""
  body = test_ptxsim.TID + ("\tsetp.lt.u32 %p0, %r0, 4;\n\t@%p0 bra $Lskip;\n"
                            "\tmov.u32 %r6, 5;\n$Lskip:\n\tadd.s32 %r7, %r6, %r3;\n"
                            "\tst.global.u32 [%rd2], %r7;\n\tret;")
  src = entry("uninit_inlined", ["out"], body, test_ptxsim.REGS)
  fused, reference = _messages(src, [4 * 32])
  assert fused == reference
  assert "read of uninitialised register %r6" in fused and "tid=(0, 0, 0)" in fused


def test_a_loop_body_is_one_fused_run():
  """The renderer's inner loop (the editor's matmul example fused with its random inputs) runs
  as one generated function per iteration."""
  import re
  from pathlib import Path
  import kernelgen as kg
  code = re.search(r"matmul: `(.*?)`", (Path(__file__).parents[2] / "web" /
                                         "examples.js").read_text(), re.S).group(1)
  names = {"Tensor": kg.Tensor}
  exec(code, names)
  kernels = kg.compile(names["out"], target="ptx", arch="sm_80")
  src = kernels[-1].source
  runs = _segments(src)
  assert max(n for _, n in runs) >= 30, runs
  mem = ptxsim.GlobalMemory()
  out = mem.alloc(32 * 48 * 4)
  launch = kernels[-1].launch
  assert not launch.uniforms and len(launch.bindings) == 1
  for engine in ("fused", "reference"):
    ptxsim.run(src, launch.dispatch, launch.workgroup_size, [out.base], mem, engine=engine)
    if engine == "fused":
      got = bytes(out.data)
  assert got == bytes(out.data)
  values = np.frombuffer(got, np.float32)
  assert np.isfinite(values).all() and (values >= 0).all() and values.max() > 0


def test_a_translation_error_leaves_the_entry_to_the_reference_steps(monkeypatch):
  """Should writing an entry's Python fail (a bug), the entry still runs, on the reference's
  steps, and fused.FALLBACKS says why."""
  from kernelgen.ptxsim import fused

  def broken(prog, start, end, private):
    raise RuntimeError("planted")
  monkeypatch.setattr(fused, "_segment", broken)
  monkeypatch.setattr(fused, "FALLBACKS", {})
  src = entry("fill_fallback", ["out"], test_ptxsim.TID + "\tst.global.u32 [%rd2], %r3;\n\tret;",
              test_ptxsim.REGS)
  mem = ptxsim.GlobalMemory()
  out = mem.alloc(4 * 32)
  assert ptxsim.run(src, (1, 1, 1), (32, 1, 1), [out.base], mem, engine="fused") == "fused"
  assert np.frombuffer(out.data, np.uint32).tolist() == list(range(32))
  assert "planted" in fused.FALLBACKS["fill_fallback"]


def _fused_and_reference(src: str, arrays: list, n: int) -> list[bytes]:
  """The output buffer's bytes after the launch on the fused and on the reference engine."""
  out = []
  for engine in ("fused", "reference"):
    mem = ptxsim.GlobalMemory()
    bufs = [mem.alloc(max(a.nbytes, 4 * n)) for a in arrays]
    for buf, arr in zip(bufs, arrays):
      buf.data[:arr.nbytes] = arr.tobytes()
    ptxsim.run(src, (-(-n // 64), 1, 1), (64, 1, 1), [b.base for b in bufs] + [n], mem,
               engine=engine)
    out.append(bytes(bufs[0].data))
  return out


def _f32_inputs(n: int, seed: int) -> np.ndarray:
  """Random f32 bit patterns mixed with NaNs (payloads, sNaN), infs, zeros, subnormals and
  values next to the overflow and normal limits."""
  rng = np.random.default_rng(seed)
  bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
  specials = np.array([0x7FC00000, 0xFFC00001, 0x7F800001, 0x7F800000, 0xFF800000, 0, 1 << 31,
                       1, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000,
                       0x4B800000, 0x33800000, 0x00400000], np.uint32)
  bits[rng.integers(0, n, n // 3)] = rng.choice(specials, n // 3)
  values = np.frombuffer(bits.tobytes(), np.float32).copy()
  values[: n // 4] = rng.integers(-1 << 25, 1 << 25, n // 4).astype(np.float32) * 2.0 ** -24
  return values


@pytest.mark.parametrize("lines", [
  # f32 results rounded inside the lane loop: a literal addend, a power-of-two factor
  "add.rn.f32 %d, %a, 0f3F000000", "sub.rn.f32 %d, %a, 0f3F000000",
  "sub.rn.f32 %d, 0f3F800000, %a", "add.rn.f32 %d, %a, 0f00000001",
  "mul.rn.f32 %d, %a, 0f33800000", "mul.rn.f32 %d, 0f7F000000, %a",
  "mul.rn.f32 %d, %a, 0fBF000000", "mul.rn.f32 %d, %a, 0f3E99999A",
  "mul.rn.f32 %e, %a, 0f3F000000; mul.rn.f32 %d, %e, 0f4B000000",
  "add.rn.f32 %e, %a, 0f80000001; mul.rn.f32 %d, %e, 0f4B000000",
  # chains whose results the segment proves exact (no rounding at all), then one that is not
  "cvt.rzi.u32.f32 %x, %a; shr.u32 %y, %x, 8; cvt.rn.f32.u32 %e, %y; "
  "mul.rn.f32 %e, %e, 0f33800000; sub.rn.f32 %e, %e, 0f3F000000; add.rn.f32 %d, %e, %e",
  "cvt.rzi.u32.f32 %x, %a; shr.u32 %y, %x, 4; cvt.rn.f32.u32 %e, %y; "
  "mul.rn.f32 %e, %e, 0f33800000; mul.rn.f32 %d, %e, %a",
  # integer -> f32 conversions of any size
  "cvt.rzi.s32.f32 %x, %a; cvt.rn.f32.s32 %d, %x",
  "mov.b32 %x, %a; cvt.rn.f32.u32 %d, %x", "mov.b32 %x, %a; cvt.rn.f32.s32 %d, %x",
  "fma.rn.f32 %d, %a, %a, 0f3F800000",
])
def test_f32_rounding_in_lane_loops_is_bit_identical(lines):
  """The fused engine rounds some f32 results one lane at a time inside its lane loops (kept
  where already an f32, or proven exact) instead of rounding lists: the same bits as the
  reference's rounding, over random bit patterns, NaN payloads, infs, -0 and subnormals."""
  from test_ptxsim_kit import elementwise_ptx
  n = 512
  a = _f32_inputs(n, len(lines))
  src = elementwise_ptx(lines, ["f32"], "f32", "\t.reg .b32 %x, %y;\n\t.reg .f32 %e;")
  fused, reference = _fused_and_reference(src, [np.zeros(n, np.float32), a], n)
  assert fused == reference
  assert any(pc for pc, _ in _segments(src))
  from kernelgen.ptxsim import fused as fused_engine
  assert not fused_engine.FALLBACKS


@pytest.mark.parametrize("lines", [
  # the renderer's NaN-propagating max, and guarded ops of each kind, on special inputs
  "max.f32 %d, %a, 0f00000000; setp.nan.f32 %p, %a, 0f00000000; @%p add.rn.f32 %d, %a, %a",
  "mov.f32 %d, %a; setp.lt.f32 %p, %a, 0f00000000; @!%p mul.rn.f32 %d, %a, 0f3DCCCCCD",
  "mov.b32 %x, %a; xor.b32 %y, %x, 5; setp.ne.b32 %p, %x, 0; @%p div.u32 %y, %x, 7; "
  "@!%p rem.s32 %y, %y, 3; "
  "cvt.rn.f32.u32 %d, %y",
  "setp.gtu.f32 %p, %a, 0f3F000000; setp.num.f32 %q, %a, %a; and.pred %p, %p, %q; "
  "not.pred %q, %p; selp.f32 %d, %a, 0f7FC00000, %q",
  "ex2.approx.f32 %e, %a; sqrt.rn.f32 %d, %e; neg.f32 %d, %d; div.rn.f32 %d, %d, %a",
])
def test_guarded_and_called_instructions_in_lane_loops_are_bit_identical(lines):
  """Guarded instructions (d keeps its value where the guard fails), predicate logic, float
  comparisons and the ops called through their reference lane function, inside lane loops:
  the reference's bits."""
  from test_ptxsim_kit import elementwise_ptx
  n = 512
  a = _f32_inputs(n, len(lines))
  src = elementwise_ptx(lines, ["f32"], "f32", "\t.reg .b32 %x, %y;\n\t.reg .f32 %e;")
  fused, reference = _fused_and_reference(src, [np.zeros(n, np.float32), a], n)
  assert fused == reference


def test_a_guarded_write_to_an_unwritten_register_reads_alike():
  """`@%p add` writes %r6 only where %p holds; the later read by the other lanes is an
  uninitialised read on both engines, naming the same instruction and thread."""
  body = test_ptxsim.TID + ("\tsetp.lt.u32 %p0, %r0, 4;\n\t@%p0 add.s32 %r6, %r3, 1;\n"
                            "\tadd.s32 %r7, %r6, %r3;\n\tst.global.u32 [%rd2], %r7;\n\tret;")
  src = entry("guarded_uninit", ["out"], body, test_ptxsim.REGS)
  fused, reference = _messages(src, [4 * 32])
  assert fused == reference
  assert "read of uninitialised register %r6" in fused and "tid=(4, 0, 0)" in fused


def test_lane_rounding_to_f32_matches_the_reference_rounding():
  """The lane loop's f32 rounding of a double (fused_ops' Veltkamp split, with the reference's
  conversion for the lanes it leaves) gives the bits round_f32s gives: exact ties (ties to
  even), near-ties, 48-bit products, any double, across the subnormal and overflow limits,
  zeros of both signs, infs and NaNs."""
  import math
  import random
  import struct
  from kernelgen.ptxsim import fused_ops, numeric
  fn = eval(f"lambda x: {fused_ops._ROUND_F32.format(x='x', slow='R1(x_)')}", {"R1": numeric.round_to_f32})
  rng = random.Random(7)
  xs = [0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan, 2.0 ** -149, 2.0 ** -150,
        3.4028235677973366e38, 3.4028234663852886e38 * (1 + 2.0 ** -25), 1.5 * 2.0 ** -149]
  for k in range(60000):
    e = rng.choice([rng.randint(-152, 130), rng.randint(-130, -122), rng.randint(124, 129)])
    mantissa, bits = [(rng.randrange(1 << 24, 1 << 25) | 1, 24),
                      (rng.randrange(1 << 47, 1 << 48), 47), (rng.randrange(1 << 52, 1 << 53), 52),
                      ((rng.randrange(1 << 23, 1 << 24) << 29) + rng.choice(
                        [1 << 28, (1 << 28) + 1, (1 << 28) - 1, 1, -1]), 52)][k % 4]
    xs.append(math.ldexp(mantissa, e - bits) * rng.choice([1, -1]))
  got = struct.pack(f"<{len(xs)}f", *map(fn, xs))
  assert got == struct.pack(f"<{len(xs)}f", *numeric.round_f32s(xs))
  assert [math.copysign(1, v) for v in map(fn, xs[:2])] == [1, -1]


@pytest.mark.parametrize("block", [48, 20, 7])
def test_partial_warps_and_divergence_leave_the_reference_memory(block):
  """Blocks whose last warp has fewer than 32 threads (the fused engine treats "every live
  lane active" as a full warp), with per-thread loop trips and an if/else inside the loop,
  and a guarded early exit: the same memory as the reference engine."""
  loop = test_ptxsim.TID + (
    "\tmov.u32 %r4, 0;\n\tmov.u32 %r5, 0;\n\trem.u32 %r6, %r3, 5;\n$Lloop:\n"
    "\tsetp.ge.u32 %p0, %r4, %r6;\n\t@%p0 bra $Lloop_end;\n\tand.b32 %r7, %r4, 1;\n"
    "\tsetp.eq.u32 %p1, %r7, 0;\n\t@!%p1 bra $Lelse;\n\tadd.s32 %r5, %r5, %r3;\n"
    "\tbra $Lendif;\n$Lelse:\n\tadd.s32 %r5, %r5, 1000;\n$Lendif:\n\tadd.s32 %r4, %r4, 1;\n"
    "\tbra $Lloop;\n$Lloop_end:\n\tst.global.u32 [%rd2], %r5;\n\tret;")
  src = entry("divergent", ["out"], loop, test_ptxsim.REGS)
  exits = test_ptxsim.TID + ("\tsetp.lt.u32 %p0, %r3, 10;\n\t@%p0 ret;\n"
                             "\tadd.s32 %r4, %r3, 3;\n\tst.global.u32 [%rd2], %r4;\n\tret;")
  for kernel in (src, entry("exits", ["out"], exits, test_ptxsim.REGS)):
    got = []
    for engine in ("fused", "reference"):
      mem = ptxsim.GlobalMemory()
      out = mem.alloc(4 * 3 * block)
      ptxsim.run(kernel, (3, 1, 1), (block, 1, 1), [out.base], mem, engine=engine)
      got.append(bytes(out.data))
    assert got[0] == got[1] and any(got[0])
