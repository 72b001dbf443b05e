"""The PTX simulator as a machine: control flow and divergence, memory spaces, barriers, and the
sanitizer (out-of-bounds, uninitialised registers, shared-memory races). Kernels are written by
hand in the style our renderer emits; results are compared with numpy."""
from __future__ import annotations

import re

import numpy as np
import pytest

from kernelgen import ptxsim
from kernelgen.errors import CompileError, ExecutionError
from test_ptxsim_kit import entry, run_buffers

TID = """\
\tmov.u32 %r0, %tid.x;
\tmov.u32 %r1, %ctaid.x;
\tmov.u32 %r2, %ntid.x;
\tmad.lo.s32 %r3, %r1, %r2, %r0;
\tld.param.u64 %rd0, [out];
\tcvta.to.global.u64 %rd0, %rd0;
\tmul.wide.s32 %rd1, %r3, 4;
\tadd.s64 %rd2, %rd0, %rd1;
"""
REGS = "\t.reg .pred %p<4>;\n\t.reg .b32 %r<16>;\n\t.reg .b64 %rd<8>;\n\t.reg .f32 %f<8>;"


def test_divergent_loops_and_branches_reconverge():
  """Each thread loops tid % 5 times and takes an if/else on its parity inside the loop:
  per-thread trip counts and both sides of the branch must run, then all threads store."""
  body = TID + """\
\tmov.u32 %r4, 0;
\tmov.u32 %r5, 0;
\trem.u32 %r6, %r3, 5;
$Lloop:
\tsetp.ge.u32 %p0, %r4, %r6;
\t@%p0 bra $Lloop_end;
\tand.b32 %r7, %r4, 1;
\tsetp.eq.u32 %p1, %r7, 0;
\t@!%p1 bra $Lelse;
\tadd.s32 %r5, %r5, %r3;
\tbra $Lendif;
$Lelse:
\tadd.s32 %r5, %r5, 1000;
$Lendif:
\tadd.s32 %r4, %r4, 1;
\tbra $Lloop;
$Lloop_end:
\tst.global.u32 [%rd2], %r5;
\tret;"""
  src = entry("divergent", ["out"], body, REGS)
  out = run_buffers(src, [np.zeros(96, np.uint32)], (2, 1, 1), (48, 1, 1))[0]
  t = np.arange(96)
  trips = t % 5
  want = (trips + 1) // 2 * t + trips // 2 * 1000
  assert out.tolist() == want.tolist()


def test_early_exit_of_some_lanes():
  """`@%p ret` retires the lanes whose guard holds; the others go on."""
  body = TID + """\
\tsetp.lt.u32 %p0, %r3, 10;
\t@%p0 ret;
\tst.global.u32 [%rd2], %r3;
\tret;"""
  out = run_buffers(entry("exits", ["out"], body, REGS), [np.zeros(32, np.uint32)],
                    (1, 1, 1), (32, 1, 1))[0]
  assert out.tolist() == [0] * 10 + list(range(10, 32))


SHARED_SUM = """\
\t.shared .align 16 .b8 smem0[512];
""" + TID + """\
\tmov.u64 %rd3, smem0;
\tmul.wide.u32 %rd4, %r0, 4;
\tadd.s64 %rd5, %rd3, %rd4;
\tst.shared.u32 [%rd5], %r3;
{barrier}
\tsetp.ne.u32 %p0, %r0, 0;
\t@%p0 bra $Ldone;
\tmov.u32 %r4, 0;
\tmov.u32 %r5, 0;
$Lloop:
\tsetp.ge.u32 %p1, %r4, %r2;
\t@%p1 bra $Lloop_end;
\tmul.wide.u32 %rd6, %r4, 4;
\tadd.s64 %rd6, %rd3, %rd6;
\tld.shared.u32 %r6, [%rd6];
\tadd.s32 %r5, %r5, %r6;
\tadd.s32 %r4, %r4, 1;
\tbra $Lloop;
$Lloop_end:
\tst.global.u32 [%rd2], %r5;
$Ldone:
\tret;"""


def test_shared_memory_with_bar_sync_across_warps():
  """Threads of 4 warps store to shared memory, bar.sync, then thread 0 sums what all wrote."""
  src = entry("block_sum", ["out"], SHARED_SUM.replace("{barrier}", "\tbar.sync 0;"), REGS)
  out = run_buffers(src, [np.zeros(256, np.uint32)], (2, 1, 1), (128, 1, 1))[0]
  assert out[0] == sum(range(128)) and out[128] == sum(range(128, 256))


def test_missing_bar_sync_is_reported_as_a_race():
  """Negative control: the same kernel without bar.sync reads other threads' shared writes."""
  src = entry("block_sum", ["out"], SHARED_SUM.replace("{barrier}", ""), REGS)
  with pytest.raises(ExecutionError, match=r"shared-memory race.*thread 0 reads.*thread 1 wrote"
                                           r".*tid=\(0, 0, 0\) at line \d+: `ld.shared.u32"):
    run_buffers(src, [np.zeros(256, np.uint32)], (2, 1, 1), (128, 1, 1))


BOUNDED_COPY = TID + """\
\tld.param.s32 %r8, [n];
\tsetp.{cmp}.s32 %p0, %r3, %r8;
\t@%p0 bra $Ldone;
\tld.param.u64 %rd3, [inp];
\tcvta.to.global.u64 %rd3, %rd3;
\tadd.s64 %rd3, %rd3, %rd1;
\tld.global.f32 %f0, [%rd3];
\tst.global.f32 [%rd2], %f0;
$Ldone:
\tret;"""


def _copy(cmp: str, n: int):
  src = entry("copy", ["out", "inp", "\t.param .s32 n"], BOUNDED_COPY.replace("{cmp}", cmp), REGS)
  x = np.arange(n, dtype=np.float32)
  return run_buffers(src, [np.zeros(n, np.float32), x], (1, 1, 1), (64, 1, 1), [n])[0]


def test_bounded_copy_is_correct():
  assert _copy("ge", 50).tolist() == list(range(50))


def test_off_by_one_bound_is_reported_as_out_of_bounds():
  """Negative control: `setp.gt` instead of `setp.ge` lets thread n read one past the end."""
  with pytest.raises(ExecutionError) as info:
    _copy("gt", 50)
  msg = str(info.value)
  assert re.search(r"out-of-bounds global load of 4 bytes at 0x[0-9a-f]+ \(0 bytes past the end "
                   r"of buffer1 of 200 bytes\) by thread ctaid=\(0, 0, 0\) tid=\(50, 0, 0\) "
                   r"at line \d+: `ld.global.f32 %f0, \[%rd3\]`", msg), msg


def test_uninitialised_register_read_is_reported():
  """Reading a register no instruction wrote (in that lane) is an error naming the register."""
  body = TID + """\
\tsetp.lt.u32 %p0, %r0, 4;
\t@%p0 mov.f32 %f1, 0f3F800000;
\tst.global.f32 [%rd2], %f1;
\tret;"""
  src = entry("uninit", ["out"], body, REGS)
  with pytest.raises(ExecutionError, match=r"read of uninitialised register %f1 by thread "
                                           r"ctaid=\(0, 0, 0\) tid=\(4, 0, 0\)"):
    run_buffers(src, [np.zeros(32, np.float32)], (1, 1, 1), (32, 1, 1))


def test_gated_load_idiom_and_predicated_store():
  """`@%g ld ...; @!%g mov ..., alt` gives the loaded value or the fallback; `@%p st` only
  stores where %p holds."""
  body = TID + """\
\tsetp.lt.u32 %p0, %r3, 8;
\tld.param.u64 %rd3, [inp];
\tadd.s64 %rd3, %rd3, %rd1;
\t@%p0 ld.global.f32 %f0, [%rd3];
\t@!%p0 mov.f32 %f0, 0fBF800000;
\tsetp.ne.u32 %p1, %r3, 3;
\t@%p1 st.global.f32 [%rd2], %f0;
\tret;"""
  src = entry("gated", ["out", "inp"], body, REGS)
  out = run_buffers(src, [np.full(16, 9.0, np.float32), np.arange(8, dtype=np.float32)],
                    (1, 1, 1), (16, 1, 1))[0]
  assert out.tolist() == [0, 1, 2, 9, 4, 5, 6, 7] + [-1.0] * 8


def test_vector_loads_and_stores():
  """ld.global.v4.f32 / st.global.v2.f32 move consecutive elements through a register list."""
  body = """\
\tmov.u32 %r0, %tid.x;
\tld.param.u64 %rd0, [out];
\tld.param.u64 %rd1, [inp];
\tmul.wide.u32 %rd2, %r0, 16;
\tadd.s64 %rd1, %rd1, %rd2;
\tadd.s64 %rd0, %rd0, %rd2;
\tld.global.v4.f32 {%f0, %f1, %f2, %f3}, [%rd1];
\tst.global.v2.f32 [%rd0], {%f3, %f2};
\tst.global.v2.f32 [%rd0+8], {%f1, %f0};
\tret;"""
  x = np.arange(32, dtype=np.float32)
  out = run_buffers(entry("vec", ["out", "inp"], body, REGS), [np.zeros(32, np.float32), x],
                    (1, 1, 1), (8, 1, 1))[0]
  assert out.tolist() == x.reshape(8, 4)[:, ::-1].ravel().tolist()


def test_misaligned_vector_access_is_reported():
  body = """\
\tld.param.u64 %rd0, [out];
\tld.global.v4.f32 {%f0, %f1, %f2, %f3}, [%rd0+4];
\tret;"""
  with pytest.raises(ExecutionError, match="misaligned global load of 16 bytes"):
    run_buffers(entry("vec", ["out"], body, REGS), [np.zeros(32, np.float32)], (1, 1, 1),
                (1, 1, 1))


def test_special_registers_in_a_2d_grid():
  """%tid/%ntid/%ctaid/%nctaid in x and y: each thread stores its global (row, col) index."""
  body = """\
\tmov.u32 %r0, %tid.x;
\tmov.u32 %r1, %tid.y;
\tmov.u32 %r2, %ctaid.x;
\tmov.u32 %r3, %ctaid.y;
\tmov.u32 %r4, %ntid.x;
\tmov.u32 %r5, %ntid.y;
\tmov.u32 %r6, %nctaid.x;
\tmad.lo.s32 %r7, %r2, %r4, %r0;
\tmad.lo.s32 %r8, %r3, %r5, %r1;
\tmul.lo.s32 %r9, %r6, %r4;
\tmad.lo.s32 %r10, %r8, %r9, %r7;
\tmul.lo.s32 %r11, %r8, 1000;
\tadd.s32 %r11, %r11, %r7;
\tld.param.u64 %rd0, [out];
\tmul.wide.u32 %rd1, %r10, 4;
\tadd.s64 %rd0, %rd0, %rd1;
\tst.global.u32 [%rd0], %r11;
\tret;"""
  out = run_buffers(entry("grid2d", ["out"], body, REGS), [np.zeros((6, 8), np.uint32)],
                    (2, 3, 1), (4, 2, 1))[0]
  rows, cols = np.meshgrid(np.arange(6), np.arange(8), indexing="ij")
  assert out.tolist() == (rows * 1000 + cols).tolist()


def test_barrier_in_divergent_code_is_an_error():
  body = TID + """\
\tsetp.lt.u32 %p0, %r0, 4;
\t@%p0 bra $Lskip;
\tbar.sync 0;
$Lskip:
\tret;"""
  with pytest.raises(ExecutionError, match="bar.sync reached by only part of a warp"):
    run_buffers(entry("divbar", ["out"], body, REGS), [np.zeros(32, np.float32)], (1, 1, 1),
                (32, 1, 1))


@pytest.mark.parametrize("line,message", [
  ("\tvote.all.pred %p0, %p1;", r"unsupported instruction vote.all.pred at line 13"),
  ("\tadd.rn.f32 %f0, %f1, %nosuch;", r"register %nosuch is not declared"),
  ("\tadd.f32 %rd0, %f1, %f2;", r"register type .b64 does not fit the instruction type .f32"),
  ("\tbra $Lmissing;", r"branch to unknown label \$Lmissing"),
  ("\tatom.global.add.f32 %f0, [%rd0], %f1;", r"unsupported instruction atom.global.add.f32"),
])
def test_unsupported_or_wrong_ptx_is_rejected_with_its_line(line, message):
  src = entry("bad", ["out"], line + "\n\tret;", REGS)
  with pytest.raises(CompileError, match=message):
    ptxsim.program(src)


def test_modules_are_parsed_once_per_source():
  src = entry("copy", ["out", "inp", "\t.param .s32 n"], BOUNDED_COPY.replace("{cmp}", "ge"), REGS)
  assert ptxsim.program(src) is ptxsim.program(src)
