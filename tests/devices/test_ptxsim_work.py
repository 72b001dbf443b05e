"""PTXSIM's work limit (issues 41, 40): a PTX loop whose exit depends on data that never lets it
end stops with a LimitError naming `ptxsim_work` and how to raise it, on both engines, instead of
running forever; the limit counts the loop trips (backward branches taken) of each warp, so a
launch's budget grows with its warps: a large legitimate launch runs under the default, and an
endless loop stops after the same number of trips whatever the size of its launch."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import ptxsim
from test_ptxsim_kit import entry, run_buffers

# out[i] (i the thread's index in the grid) counts down by out[i] % 2 per iteration until it is
# 0: a thread whose value is odd reaches 0 after that many trips, a thread whose value is even
# and non-zero spins forever (the data decides)
SPIN = """\
\tmov.u32 %r0, %tid.x;
\tmov.u32 %r3, %ctaid.x;
\tmov.u32 %r4, %ntid.x;
\tmad.lo.s32 %r0, %r3, %r4, %r0;
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
REGS = "\t.reg .pred %p<2>;\n\t.reg .b32 %r<6>;\n\t.reg .b64 %rd<4>;"
SRC = entry("spin", ["out"], SPIN, REGS)
OLD_FLAT_BUDGET = 1 << 22     # before issue 40: loop trips of all warps of a launch together


@pytest.fixture(params=["fast", "reference"])
def engine(request, monkeypatch):
  monkeypatch.setitem(ptxsim.machine.ENGINE, "name", request.param)
  return request.param


def _limit_error_says_how_to_raise(error, kernel: str) -> None:
  assert error.limit == "ptxsim_work"
  assert f"kernel {kernel}" in str(error)
  assert "kernelgen.limits.set(ptxsim_work=" in str(error)


def test_a_data_dependent_endless_loop_stops_with_a_limit_error(engine):
  with kg.limits.raised(ptxsim_work=5_000):
    with pytest.raises(kg.LimitError) as error:
      run_buffers(SRC, [np.full(64, 2, np.uint32)], (1, 1, 1), (64, 1, 1))
  _limit_error_says_how_to_raise(error.value, "spin")


def test_the_limit_counts_the_trips_of_each_warp(engine):
  start = np.array([1, 3, 0, 99] * 16, np.uint32)      # odd values count down to 0
  with kg.limits.raised(ptxsim_work=99):                # 2 warps of 99 trips each: 198 in all
    out = run_buffers(SRC, [start], (1, 1, 1), (64, 1, 1))[0]
  assert out.tolist() == [0] * 64
  with kg.limits.raised(ptxsim_work=98):                # each warp's last trip passes it
    with pytest.raises(kg.LimitError):
      run_buffers(SRC, [start], (1, 1, 1), (64, 1, 1))


def test_one_endless_warp_among_finished_ones_stops(engine):
  start = np.full(32 * 8, 5, np.uint32)
  start[7 * 32 + 3] = 4                                   # one lane of the last warp spins
  with kg.limits.raised(ptxsim_work=1_000):
    with pytest.raises(kg.LimitError) as error:
      run_buffers(SRC, [start], (2, 1, 1), (128, 1, 1))
  _limit_error_says_how_to_raise(error.value, "spin")


def test_a_launch_past_the_old_flat_budget_runs_under_the_default_limit():
  """2048 warps of 2101 trips each: more loop trips in all than the old per-launch budget, each
  warp well within the default per-warp limit (the default engine)."""
  warps, trips = 2048, 2101
  assert warps * trips > OLD_FLAT_BUDGET and trips < kg.limits.get("ptxsim_work")
  start = np.full(32 * warps, trips, np.uint32)
  out = run_buffers(SRC, [start], (warps * 32 // 256, 1, 1), (256, 1, 1))[0]
  assert not out.any()


def test_an_endless_loop_in_a_bundle_stops_under_the_default_limit(tmp_path):
  """A bundle whose kernel branches back to itself forever, run through the public API with the
  default limits: a LimitError naming the kernel and kg.limits.set(ptxsim_work=...)."""
  x = kg.Tensor.empty(2, 4, name="x")
  kg.export({"out": x * kg.Tensor([[3.0] * 4] * 2)}, str(tmp_path), format="ptx")
  bundle = kg.load_bundle(str(tmp_path))
  kernel = bundle.manifest["kernels"][0]
  path = tmp_path / kernel["file"]
  source = path.read_text()
  at = source.index("{", source.index(".entry")) + 1
  path.write_text(source[:at] + "\n$Lkg_spin:\n\tbra.uni $Lkg_spin;\n" + source[at:])
  with pytest.raises(kg.LimitError) as error:
    kg.load_bundle(str(tmp_path)).run({"x": np.ones((2, 4), np.float32)}, device="PTXSIM")
  _limit_error_says_how_to_raise(error.value, kernel["entry_point"])


def test_the_default_limit_is_named_in_kg_limits():
  assert kg.limits.get("ptxsim_work") == kg.limits.DEFAULTS["ptxsim_work"][0] >= 1 << 16
  assert "per warp" in kg.limits.DEFAULTS["ptxsim_work"][1] or \
    "of one warp" in kg.limits.DEFAULTS["ptxsim_work"][1]
