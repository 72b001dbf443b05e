"""MatMulNBits' decode matrix-vector product in the CPU adapters' default layout
(lowering/threads.py, option reduce_step): a loop over the blocks in steps of reduce_step reduced
elements (several blocks per trip: Opts.reduce_unroll), reduce_rows outputs per thread in
workgroups that divide the outputs, so each trip's activation loads serve all of a thread's
outputs, and the driver builds a short loop body, not a whole unrolled reduction (issue 37).
Against onnxruntime on PYTHON, PTXSIM and WEBGPU where the step divides the blocks and where it
does not, with and without zero points and bias, K short of a whole block; the WGSL's one loop and
its loads at the adapters' defaults; naga and ptxas accept the kernels."""
from __future__ import annotations

import pytest

from kernelgen.render.wgsl.adapters import TABLE
from onnx_contrib_util import DEVICES, check, options_forcer
from test_onnx_quant_nbits import nbits_model, q4_matvec_kernel
from tools import ptxas_check, wgsl_validate

# 4 blocks a trip, 4 rows a thread, no whole unrolling (small enough for the interpreters)
STEPPED = {"reduce_inner": 32, "reduce_whole": 0, "reduce_step": 128, "reduce_rows": 4,
           "driver_cost": None}


@pytest.fixture
def stepped_options(monkeypatch):
  """Each device's kernels compiled with STEPPED (the CPU adapters' layout)."""
  return options_forcer(monkeypatch, STEPPED)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n,k,zp,bias", [
  (64, 512, "uint8", True),      # 16 blocks, 4 a trip; 4 rows a thread, 16-thread workgroups
  (96, 288, "none", False),      # 9 blocks: 3 a trip (the most below 4 that divides 9)
  (100, 224, "float", True),     # no workgroup of 8+ divides 25, 50 or 100: a row a thread
  (72, 100, "uint8", False),     # K = 100: 4 blocks, the last one padded; 1 row a thread
  (64, 64, "none", True)])       # 2 blocks: one trip of both
def test_q4_stepped_matvec_matches_onnxruntime(stepped_options, device, n, k, zp, bias):
  stepped_options(device)
  model, feeds = nbits_model(1, n, k, 4, 32, zp, bias, seed=n + k)
  check(model, feeds, device, rtol=1e-4, atol=1e-4)


def test_q4_stepped_prefill_rows_match_onnxruntime(stepped_options):
  """M = 3 activation rows (a prompt's): each output still reads its own row of A."""
  stepped_options("PYTHON")
  model, feeds = nbits_model(3, 64, 256, 4, 32, "uint8", True, seed=5)
  check(model, feeds, "PYTHON", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
@pytest.mark.parametrize("k", [576, 1536, 4864])
def test_stepped_matvec_wgsl_at_the_adapters_defaults(adapter, k):
  """One loop; reduce_rows outputs per thread; per trip each weight word loaded once (a
  vec4<u32> per block and row), each activation vec4 once for all the thread's rows, at most a
  scale load per block and row; the same kernel for a one-off run and a replayed step (no
  capped kernel that grows at a decode's second step); naga accepts it."""
  defaults = TABLE[(adapter, "rows")]
  step, rows = defaults["reduce_step"], defaults["reduce_rows"]
  n = 256
  kern = q4_matvec_kernel(n, k, target="wgsl", adapter=adapter)
  src = kern.source
  assert src.count("for (") == 1, src[:3000]
  assert kern.local_size[0] * kern.global_size[0] * rows == n
  blocks = k // 32
  per_trip = max(b for b in range(1, step // 32 + 1) if blocks % b == 0)
  spec = {b.dtype.name + str(b.size): b for b in kern.buffers}
  w, x = spec[f"uint32{n * k // 8}"], spec[f"float32{k}"]
  scales = spec[f"float32{n * blocks}"]
  assert src.count(f"b{w.slot}_{w.name}[") == rows * per_trip
  assert src.count(f"b{x.slot}_{x.name}[") == per_trip * 8
  assert 0 < src.count(f"b{scales.slot}_{scales.name}[") <= rows * per_trip
  assert not kern.capped
  assert q4_matvec_kernel(n, k, target="wgsl", adapter=adapter, runs=100).source == src
  wgsl_validate(src)


def test_stepped_matvec_ptx_assembles():
  kern = q4_matvec_kernel(64, 288, target="ptx", **STEPPED)
  ptxas_check(kern.source, "sm_80")
