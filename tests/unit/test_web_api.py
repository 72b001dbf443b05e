"""web_api (what the page's worker calls), in CPython: a run's result compared with the PYTHON
reference later (check_reference), the warm-up imports, and freeing the page GPU's buffers that no
tensor holds (release / BrowserWebGPU.release_unreachable, with a stand-in for gpu.js)."""
from __future__ import annotations

import struct
import sys

from kernelgen import web_api
from kernelgen.dtype import dtypes
from kernelgen.graph.lazy import Buffer
from kernelgen.runtime.webgpu_browser import BrowserWebGPU

CODE = "x = Tensor([1.0, 2.0, 3.0])\nout = (x * 3.0 - 1.0).relu()\n"


def _floats(result: dict) -> list[float]:
  data = bytes(result["data"])
  return list(struct.unpack(f"<{len(data) // 4}f", data))


def test_run_later_then_check_reference_matches():
  run = web_api.run_program(CODE, "PTXSIM", reference="later")
  assert run["ok"], run
  assert "reference" not in run["out"]
  assert _floats(run["out"]) == [2.0, 5.0, 8.0]
  checked = web_api.check_reference(CODE)
  assert checked["ok"] and checked["reference"]["ok"], checked
  assert checked["reference"]["match"] and checked["reference"]["mismatches"] == 0


def test_check_reference_without_a_run_of_that_program_says_what_to_do():
  web_api.run_program(CODE, "PTXSIM", reference="later")
  other = web_api.check_reference("out = Tensor([1.0])\n")
  assert not other["ok"] and other["error"]["type"] == "ProgramError"
  assert "run it" in other["error"]["message"]
  again = web_api.check_reference(CODE)  # the kept result was used up by the check above
  assert not again["ok"] and again["error"]["type"] == "ProgramError"


def test_reference_true_still_compares_in_the_same_call():
  run = web_api.run_program(CODE, "PTXSIM", reference=True)
  assert run["ok"] and run["out"]["reference"]["match"], run
  assert not web_api.check_reference(CODE)["ok"]  # nothing kept for later


def test_a_differing_result_is_reported_by_check_reference(monkeypatch):
  real = web_api.program._run_on

  def wrong_on_ptxsim(code, device):
    result = real(code, device)
    if device == "PTXSIM":
      result["data"] = struct.pack("<3f", 2.0, 5.0, 9.0)
    return result
  monkeypatch.setattr(web_api.program, "_run_on", wrong_on_ptxsim)
  web_api.run_program(CODE, "PTXSIM", reference="later")
  reference = web_api.check_reference(CODE)["reference"]
  assert reference["ok"] and not reference["match"]
  assert reference["mismatches"] == 1 and reference["first_mismatch"] == 2


def test_warm_imports_what_a_wgsl_compile_needs():
  assert web_api.warm() == {"ok": True}
  for name in web_api.WARM_MODULES:
    assert "kernelgen" + name in sys.modules


class _FakeGpu:
  """gpu.js's GpuExecutor, the part release_unreachable uses."""

  def __init__(self):
    self.freed = []

  def free(self, handle):
    self.freed.append(handle)


def test_release_unreachable_frees_only_buffers_no_tensor_holds():
  runtime = object.__new__(BrowserWebGPU)  # no Pyodide here: skip __init__'s js import
  runtime.gpu, runtime.handles = _FakeGpu(), {101, 102, 103}
  kept = Buffer("WEBGPU", dtypes.float32, 4)
  kept._handle = 102
  dropped = Buffer("WEBGPU", dtypes.float32, 4)
  dropped._handle = 103
  del dropped
  assert runtime.release_unreachable() == 2
  assert sorted(runtime.gpu.freed) == [101, 103] and runtime.handles == {102}
  assert runtime.release_unreachable() == 0  # nothing left to free while `kept` lives
  assert kept._handle == 102


def test_release_unreachable_passes_over_other_devices_buffers():
  runtime = object.__new__(BrowserWebGPU)
  runtime.gpu, runtime.handles = _FakeGpu(), {101}
  reference = Buffer("PYTHON", dtypes.float32, 4)
  reference._handle = bytearray(16)  # the PYTHON device's handle (unhashable)
  assert runtime.release_unreachable() == 1
  assert runtime.gpu.freed == [101] and reference._handle == bytearray(16)


def test_release_without_an_open_page_gpu_frees_nothing():
  assert web_api.release() == {"ok": True, "freed": 0}


def test_run_with_search_lists_what_it_chose_and_leaves_the_mode_off(monkeypatch):
  import os
  from kernelgen import search
  monkeypatch.delenv("KERNELGEN_SEARCH", raising=False)
  search.SEARCHED.clear()
  code = "x = Tensor.arange(64).cast(dtypes.float32)\nout = (x * 3.0 - 1.0).relu()\n"
  run = web_api.run_program(code, "PTXSIM", reference=True, search=True)
  assert run["ok"], run
  assert _floats(run["out"]) == [0.0] + [3.0 * i - 1 for i in range(1, 64)]
  assert run["out"]["reference"]["match"]
  (entry,) = run["out"]["search"]
  assert entry["cached"] is False and entry["candidates"] > 1 and entry["chosen"].startswith("local")
  assert "KERNELGEN_SEARCH" not in os.environ
  again = web_api.run_program(code, "PTXSIM", reference=False, search=True)
  assert [e["cached"] for e in again["out"]["search"]] == [True]
  assert "search" not in web_api.run_program(CODE, "PTXSIM", reference=False)["out"]
  search.SEARCHED.clear()
