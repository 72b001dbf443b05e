"""PTXSIM's work limit (issue 41): a PTX loop whose exit depends on data that never lets it end
stops with a LimitError naming `ptxsim_work` on both engines, instead of running forever; a loop
that ends within the limit runs, and the limit counts backward branches per warp."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import ptxsim
from test_ptxsim_kit import entry, run_buffers

# out[tid] counts down by out[tid] % 2 per iteration until it is 0: a thread whose value is odd
# reaches 0, a thread whose value is even and non-zero spins forever (the data decides)
SPIN = """\
\tmov.u32 %r0, %tid.x;
\tld.param.u64 %rd0, [out];
\tcvta.to.global.u64 %rd0, %rd0;
\tmul.wide.u32 %rd1, %r0, 4;
\tadd.s64 %rd2, %rd0, %rd1;
\tld.global.u32 %r1, [%rd2];
\tand.b32 %r2, %r1, 1;
$Lloop:
\tsetp.eq.u32 %p0, %r1, 0;
\t@%p0 bra $Ldone;
\tsub.u32 %r1, %r1, %r2;
\tbra $Lloop;
$Ldone:
\tst.global.u32 [%rd2], %r1;
\tret;"""
REGS = "\t.reg .pred %p<2>;\n\t.reg .b32 %r<4>;\n\t.reg .b64 %rd<4>;"
SRC = entry("spin", ["out"], SPIN, REGS)


@pytest.fixture(params=["fast", "reference"])
def engine(request, monkeypatch):
  monkeypatch.setitem(ptxsim.machine.ENGINE, "name", request.param)
  return request.param


def test_a_data_dependent_endless_loop_stops_with_a_limit_error(engine):
  with kg.limits.raised(ptxsim_work=5_000):
    with pytest.raises(kg.LimitError) as error:
      run_buffers(SRC, [np.full(64, 2, np.uint32)], (1, 1, 1), (64, 1, 1))
  assert error.value.limit == "ptxsim_work"
  assert "spin" in str(error.value)
  assert "kernelgen.limits.set(ptxsim_work=" in str(error.value)


def test_a_loop_that_ends_within_the_limit_runs(engine):
  start = np.array([1, 3, 0, 99] * 16, np.uint32)      # odd values count down to 0
  with kg.limits.raised(ptxsim_work=2 * 100):           # 2 warps, at most 100 trips each
    out = run_buffers(SRC, [start], (1, 1, 1), (64, 1, 1))[0]
  assert out.tolist() == [0] * 64
  with kg.limits.raised(ptxsim_work=2 * 90):            # the last trips pass it
    with pytest.raises(kg.LimitError):
      run_buffers(SRC, [start], (1, 1, 1), (64, 1, 1))


def test_the_default_limit_is_named_in_kg_limits():
  assert kg.limits.get("ptxsim_work") == kg.limits.DEFAULTS["ptxsim_work"][0] > 1 << 20
