"""MatMulNBits' decode matrix-vector product unrolled whole (lowering/threads.py, option
reduce_whole; not the CPU adapters' default, which loops in steps: test_onnx_q4_stepped.py,
since lavapipe takes tens of seconds to build such a kernel): the reduction over the packed words unrolled whole where it holds at most
reduce_whole elements (looped over the blocks above that), reduce_rows outputs per thread in
workgroups that divide the outputs. Against onnxruntime on PYTHON, PTXSIM and WEBGPU on both
sides of the threshold and of the row split; the WGSL has no loop and no gate and loads the
activations once for all of a thread's outputs; the PTX assembles."""
from __future__ import annotations

import pytest

import kernelgen as kg
from onnx_contrib_util import DEVICES, check, options_forcer
from test_onnx_quant_nbits import nbits_model, q4_matvec_kernel
from tools import ptxas_check

# a threshold small enough for the interpreters (the adapters' own, 2048, below), no compile-cost
# cap (test_a_compile_cost_caps_one_off_runs)
WHOLE = {"reduce_inner": 32, "reduce_whole": 256, "reduce_rows": 2, "reduce_step": 0,
         "driver_cost": None}
# the whole form as a caller asks for it on a CPU adapter: up to 2048 elements, 4 rows a thread
ROWS = 4
ON = {"reduce_whole": 2048, "reduce_rows": ROWS}
# a step run many times (kg.generate's decode, kg.jit): compiled for this many runs
MANY = {"runs": 100}


@pytest.fixture
def whole_options(monkeypatch):
  """Each device's kernels compiled with WHOLE (as lavapipe and SwiftShader compile theirs)."""
  return options_forcer(monkeypatch, WHOLE)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n,k,zp,bias", [
  (64, 256, "uint8", True),      # at the threshold: unrolled whole, 2 rows per thread
  (96, 288, "none", False),      # past it: looped over the blocks
  (100, 224, "float", True),     # 100 rows: no workgroup of 8+ divides 50 or 100: looped
  (72, 128, "uint8", False)])    # 72 rows: no workgroup of 8+ divides 36: 1 row per thread
def test_q4_matvec_on_both_sides_of_the_threshold(whole_options, device, n, k, zp, bias):
  whole_options(device)
  model, feeds = nbits_model(1, n, k, 4, 32, zp, bias, seed=n + k)
  check(model, feeds, device, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_whole_matvec_wgsl_has_no_loop_no_gate_and_shares_the_vector(adapter):
  """Asked for (ON: K = 512 <= 2048, ROWS rows per thread): straight-line code, no
  `if` (every load of the activation vector outside control flow), each weight word loaded once
  (a vec4<u32> per block and row), each activation vec4 loaded once for all the thread's rows, at
  most a scale load per block and row."""
  n, k = 256, 512
  kern = q4_matvec_kernel(n, k, target="wgsl", adapter=adapter, **MANY, **ON)
  src = kern.source
  assert "for (" not in src and "if (" not in src, src[:3000]
  assert kern.local_size[0] * kern.global_size[0] * ROWS == n
  spec = {b.dtype.name + str(b.size): b for b in kern.buffers}
  w, x = spec[f"uint32{n * k // 8}"], spec[f"float32{k}"]
  scales = spec[f"float32{n * k // 32}"]
  assert src.count(f"b{w.slot}_{w.name}[") == ROWS * k // 32
  assert src.count(f"b{x.slot}_{x.name}[") == k // 4
  assert 0 < src.count(f"b{scales.slot}_{scales.name}[") <= ROWS * k // 32


def test_whole_matvec_threshold_on_the_adapters():
  """Past 2048 reduced elements the matvec loops over the blocks again."""
  assert "for (" not in q4_matvec_kernel(64, 2048, target="wgsl", adapter="lavapipe", **MANY,
                                       **ON).source
  assert "for (" in q4_matvec_kernel(64, 2080, target="wgsl", adapter="lavapipe", **MANY,
                                   **ON).source


def test_a_compile_cost_caps_one_off_runs():
  """With a measured driver cost (option driver_cost), a one-off run (runs=1) whose whole form
  would build past the budget takes the loop, marked capped (a replayed step compiles the whole
  form again); without one, or for many runs, the whole form."""
  cost = (1.0, 0.0)
  looped = q4_matvec_kernel(256, 512, target="wgsl", adapter="lavapipe", driver_cost=cost, **ON)
  assert "for (" in looped.source and looped.capped
  many = q4_matvec_kernel(256, 512, target="wgsl", adapter="lavapipe", driver_cost=cost, **MANY,
                        **ON)
  assert "for (" not in many.source and not many.capped
  assert "for (" not in q4_matvec_kernel(256, 512, target="wgsl", adapter="lavapipe", **ON).source


def test_long_reductions_take_fewer_rows_per_thread():
  """K = 2048: 2 rows per thread (threads.WHOLE_WORK), not 4."""
  kern = q4_matvec_kernel(256, 2048, target="wgsl", adapter="lavapipe", **ON)
  assert "for (" not in kern.source and kern.local_size[0] * kern.global_size[0] * 2 == 256


@pytest.mark.parametrize("k", [256, 288])
def test_whole_matvec_ptx_assembles(k):
  kern = q4_matvec_kernel(64, k, target="ptx", **WHOLE)
  ptxas_check(kern.source, "sm_80")
