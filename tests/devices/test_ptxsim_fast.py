"""The PTX simulator's fast engines (numpy over batches of CTAs; and the pure-Python one, fused.py,
that runs where numpy is missing) against its reference engine (warp by warp, pure Python):
bit-identical memory after every launch of the bench kernels (with NaN, inf,
-0.0, subnormal and signalling-NaN inputs), of the seeded fuzz corpus's PTX on every arch it
uses, and of the ISA tests' kernels; the per-entry fallback to the reference engine; the race
checker and the other typed errors on the fast engine; progress and Stop for launches and for
bundles (`kg.load_bundle(...).run(..., device="PTXSIM", progress=...)`)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import ptxsim
from kernelgen.errors import ExecutionError, StoppedError
from kernelgen.ptxsim import fast_machine, machine
import ptxsim_differential as diff
import test_ptxsim
import test_ptxsim_isa
from test_ptxsim_kit import entry, run_buffers


@pytest.fixture(params=["fast", "fused"])
def compare(monkeypatch, request):
  """Every launch runs on the reference and on the engine of the param ("fast": numpy;
  "fused": fused.py) and must leave memory identical (or fail alike)."""
  monkeypatch.setitem(machine.ENGINE, "name", "compare")
  monkeypatch.setitem(machine.ENGINE, "compare", request.param)
  for key in machine.COMPARED:
    monkeypatch.setitem(machine.COMPARED, key, 0)
  return machine.COMPARED


def _all_alike(c: dict) -> None:
  """No fused translation failed, and every compared launch ended byte-identical, NaN signs and
  payloads included (a difference raises in the launch), or failed alike on both."""
  from kernelgen.ptxsim import fused
  assert c["launches"] > 0 and c["reference_only"] == 0
  assert not fused.FALLBACKS      # no entry left to the reference steps by a translation error
  assert c["identical"] + c["both_failed"] == c["launches"]


def test_bench_kernels_are_bit_identical_with_special_inputs(compare):
  for name, *launch in diff.bench_launches():
    diff.run_launch(*launch)
  _all_alike(compare)
  assert compare["identical"] == compare["launches"] == 4


def test_fuzz_corpus_ptx_is_bit_identical_on_every_arch(compare):
  totals = diff.fuzz_programs(33, 0)
  assert totals["archs"] == set(diff_archs())
  assert totals["errors"] == 0 and totals["ran"] >= 25
  _all_alike(compare)
  assert compare["identical"] >= compare["launches"] - 2


def diff_archs():
  import fuzz_runner
  return fuzz_runner.PTX_ARCHS


def test_isa_test_kernels_are_bit_identical(compare):
  """Every argument-less test of test_ptxsim_isa.py (each instruction family, with its edge
  values) and test_ptxsim.py (control flow, memory, sanitizer) run with both engines."""
  ran = 0
  for module in (test_ptxsim_isa, test_ptxsim):
    for name, fn in inspect.getmembers(module, inspect.isfunction):
      if name.startswith("test_") and not inspect.signature(fn).parameters:
        fn()
        ran += 1
  assert ran >= 40
  _all_alike(compare)
  assert compare["both_failed"] >= 3      # the sanitizer's tests: both engines raised alike


def test_an_entry_the_fast_engine_does_not_cover_runs_on_the_python_engine(monkeypatch):
  """A handler raising NotFast sends its whole entry to the pure-Python engine, counted."""
  def refuse(ins, ctx):
    raise fast_machine.NotFast("selp is left to the reference engine in this test")
  monkeypatch.setitem(fast_machine.HANDLERS, "selp", refuse)
  monkeypatch.setattr(fast_machine, "FALLBACKS", {})
  src = entry("picks", ["out"], test_ptxsim.TID + "\tsetp.lt.u32 %p0, %r3, 5;\n"
              "\tselp.b32 %r4, 1, 2, %p0;\n\tst.global.u32 [%rd2], %r4;\n\tret;",
              test_ptxsim.REGS + "\n// fallback test")
  mem = ptxsim.GlobalMemory()
  out = mem.alloc(4 * 32)
  assert ptxsim.run(src, (1, 1, 1), (32, 1, 1), [out.base], mem) == "fused"
  assert list(fast_machine.FALLBACKS) == ["picks"]
  assert np.frombuffer(out.data, np.uint32).tolist() == [1] * 5 + [2] * 27
  mem2 = ptxsim.GlobalMemory()
  out2 = mem2.alloc(4 * 32)
  assert ptxsim.run(test_ptxsim.entry("plain", ["out"], test_ptxsim.TID + "\tst.global.u32 "
                                      "[%rd2], %r3;\n\tret;", test_ptxsim.REGS),
                    (1, 1, 1), (32, 1, 1), [out2.base], mem2) == "fast"


def test_race_checker_on_the_fast_engine():
  """The planted race (no bar.sync) is caught by the fast engine with the reference's message;
  with the barrier the same kernel runs clean."""
  racy = entry("block_sum", ["out"], test_ptxsim.SHARED_SUM.replace("{barrier}", ""),
               test_ptxsim.REGS)
  messages = []
  for engine in ("fast", "fused", "reference"):
    mem = ptxsim.GlobalMemory()
    out = mem.alloc(256 * 4)
    with pytest.raises(ExecutionError, match=r"shared-memory race") as err:
      ptxsim.run(racy, (2, 1, 1), (128, 1, 1), [out.base], mem, engine=engine)
    messages.append(str(err.value))
  assert messages[0] == messages[1] == messages[2]
  fixed = racy.replace("block_sum", "block_sum_ok").replace(
    "\tst.shared.u32 [%rd5], %r3;\n", "\tst.shared.u32 [%rd5], %r3;\n\tbar.sync 0;\n")
  mem = ptxsim.GlobalMemory()
  out = mem.alloc(256 * 4)
  assert ptxsim.run(fixed, (2, 1, 1), (128, 1, 1), [out.base], mem) == "fast"
  assert np.frombuffer(out.data, np.uint32)[0] == sum(range(128))


def test_launch_progress_and_stop():
  src = entry("fill", ["out"], test_ptxsim.TID + "\tst.global.u32 [%rd2], %r3;\n\tret;",
              test_ptxsim.REGS)
  seen = []
  for engine in ("fast", "fused", "reference"):
    mem = ptxsim.GlobalMemory()
    out = mem.alloc(4 * 64 * 1024)
    ptxsim.run(src, (1024, 1, 1), (64, 1, 1), [out.base], mem, engine=engine,
               progress=lambda done, total, secs: seen.append((done, total)))
    assert seen[-1] == (1024, 1024) and all(t == 1024 for _, t in seen)
    with pytest.raises(StoppedError, match="stopped after"):
      ptxsim.run(src, (1024, 1, 1), (64, 1, 1), [out.base], mem, engine=engine,
                 progress=lambda done, total, secs: False)


def test_bundle_progress_reports_kernel_i_of_n_and_stops(tmp_path):
  x = kg.Tensor.empty(64, name="x")
  t = x
  for i in range(3):
    t = (t * (i + 1.5)).sin().contiguous()
  kg.export({"y": t.sum()}, str(tmp_path), format="ptx")
  bundle = kg.load_bundle(str(tmp_path))
  xv = np.linspace(-2, 2, 64, dtype=np.float32)
  infos = []
  out = bundle.run({"x": xv}, device="PTXSIM", progress=infos.append)["y"].numpy()
  n = len(bundle.manifest["kernels"])
  starts = [i for i in infos if i["blocks"] is None]
  assert [i["kernel"] for i in starts] == list(range(1, n + 1)) and n >= 4
  assert all(i["kernels"] == n and i["name"] for i in infos)
  assert starts[0]["estimate"] is None and all(i["estimate"] >= 0 for i in starts[1:])
  assert any(i["blocks"] is not None for i in infos)      # within kernels, on PTXSIM
  want = xv
  for i in range(3):
    want = np.sin(want * np.float32(i + 1.5))
  np.testing.assert_allclose(out, want.sum(dtype=np.float64), atol=1e-5)
  with pytest.raises(StoppedError, match=f"stopped at kernel 2 of {n}"):
    bundle.run({"x": xv}, device="PTXSIM", progress=lambda info: info["kernel"] < 2)


def test_without_numpy_the_python_engine_runs(tmp_path):
  """Where numpy does not import (Pyodide without it), launches run on the pure-Python fast
  engine (fused.py)."""
  import os
  import subprocess
  import sys
  ptx = tmp_path / "fill.ptx"
  ptx.write_text(entry("fill", ["out"], test_ptxsim.TID + "\tst.global.u32 [%rd2], %r3;\n\tret;",
                       test_ptxsim.REGS))
  script = tmp_path / "no_numpy.py"
  script.write_text(
    "import sys\n"
    "class Block:\n"
    "  def find_spec(self, name, path=None, target=None):\n"
    "    if name == 'numpy' or name.startswith('numpy.'):\n"
    "      raise ImportError('numpy is blocked in this test')\n"
    "sys.meta_path.insert(0, Block())\n"
    "from kernelgen import ptxsim\n"
    f"src = open({str(ptx)!r}).read()\n"
    "mem = ptxsim.GlobalMemory()\n"
    "out = mem.alloc(4 * 64)\n"
    "print(ptxsim.run(src, (2, 1, 1), (32, 1, 1), [out.base], mem))\n"
    "print(list(out.data[4 * 63:4 * 64]))\n")
  core = os.path.join(os.path.dirname(ptxsim.__file__), "..", "..")
  env = dict(os.environ, PYTHONPATH=os.path.abspath(core))
  done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                        timeout=120)
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == ["fused", "[63,", "0,", "0,", "0]"]


def test_a_fault_inside_a_fused_run_names_its_instruction():
  """The numpy engine runs straight-line code as one fused run of direct steps
  (fast_direct.py); a load past the end in the middle of such a run (a misaligned one, and an
  out-of-bounds one) is still reported at that load's line with the reference's message."""
  body = test_ptxsim.TID + ("\tadd.s32 %r4, %r3, {k};\n\tmul.wide.s32 %rd3, %r4, {scale};\n"
                            "\tadd.s64 %rd4, %rd0, %rd3;\n\tld.global.u32 %r5, [%rd4];\n"
                            "\tadd.s32 %r6, %r5, 1;\n\tst.global.u32 [%rd2], %r6;\n\tret;")
  src = entry("shifted", ["out"], body.format(k=0, scale=4), test_ptxsim.REGS)
  fp = ptxsim.program(src).fast()
  assert fp is not None and fp.runs[0] is not None and fp.runs[0][1] >= 10
  assert fp.code[8][1].__code__.co_filename == "<string>"    # add.s32: a direct step
  assert run_buffers(src, [np.arange(64, dtype=np.uint32)], (2, 1, 1), (32, 1, 1))[0].tolist() \
    == list(range(1, 65))
  for k, scale, what in ((1, 4, "out-of-bounds global load"), (0, 2, "misaligned global load")):
    bad = entry(f"shifted_{k}_{scale}", ["out"], body.format(k=k, scale=scale), test_ptxsim.REGS)
    messages = []
    for engine in ("fast", "reference"):
      mem = ptxsim.GlobalMemory()
      out = mem.alloc(64 * 4, "out")
      with pytest.raises(ExecutionError, match=what) as err:
        ptxsim.run(bad, (2, 1, 1), (32, 1, 1), [out.base], mem, engine=engine)
      messages.append(str(err.value))
    assert messages[0] == messages[1] and "`ld.global.u32 %r5, [%rd4]`" in messages[0]


def test_shfl_in_a_partial_warp_is_reported_alike():
  """shfl.sync run by half of each warp (the other half branched away) with a full member mask
  faults on the fast engine (the warp check over every warp at once) with the reference's
  message; the converged version runs, a CTA's partial last warp included."""
  body = test_ptxsim.TID + ("{branch}\tshfl.sync.bfly.b32 %r4, %r3, 1, 31, 0xffffffff;\n"
                            "\tst.global.u32 [%rd2], %r4;\n$Lskip:\n\tret;")
  bad = entry("half_shfl", ["out"], body.format(branch="\tsetp.lt.u32 %p0, %r0, 16;\n"
                                                "\t@%p0 bra $Lskip;\n"), test_ptxsim.REGS)
  messages = []
  for engine in ("fast", "reference"):
    mem = ptxsim.GlobalMemory()
    out = mem.alloc(4 * 96, "out")
    with pytest.raises(ExecutionError, match="converged warp") as err:
      ptxsim.run(bad, (3, 1, 1), (32, 1, 1), [out.base], mem, engine=engine)
    messages.append(str(err.value))
  assert messages[0] == messages[1]
  good = entry("full_shfl", ["out"], body.format(branch=""), test_ptxsim.REGS)
  got = run_buffers(good, [np.zeros(96, np.uint32)], (2, 1, 1), (48, 1, 1))[0]
  want = [t ^ 1 if t % 48 < 32 or (t % 48) ^ 1 < 48 else t for t in range(96)]
  assert got.tolist() == want
