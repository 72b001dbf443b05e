"""Tensor cores from the front end (core/kernelgen/tensorcore.py): matmul-shaped kernels become
WMMA tiles (PTX mma.sync) for f16/bf16 (and tf32 when asked) on the archs that have the shape;
the PTX assembles, runs on the PTX simulator like numpy, and matches the PYTHON interpreter
running the same WMMA lowering."""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import dtypes
from kernelgen.errors import UnsupportedError
from kernelgen.ptxsim import GlobalMemory  # noqa: F401  (PTXSIM must import here)
from kernelgen.runtime.ptxsim import PTXSimRuntime
from kernelgen.graph.schedule import schedule
from kernelgen.lowering.tensorcore import match_matmul
from tools import ptxas12, ptxas_check

ARCHS_12 = ("sm_80", "sm_86", "sm_89", "sm_90")
ARCHS_13 = ("sm_90", "sm_100", "sm_120")


def _f16(rng, *shape):
  return rng.standard_normal(shape).astype(np.float16)


def _bf16_bits(x: np.ndarray) -> np.ndarray:
  """float32 values rounded to bfloat16 (nearest even), as the uint16 bits kernelgen stores."""
  bits = x.astype(np.float32).view(np.uint32)
  return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16_bits(bits: np.ndarray) -> np.ndarray:
  return (bits.astype(np.uint32) << 16).view(np.float32)


def _bf16_tensor(x: np.ndarray, device: str = "PYTHON") -> kg.Tensor:
  return kg.Tensor(_bf16_bits(x), device=device).bitcast(dtypes.bfloat16)


def _matmul_source(a, b, arch: str, **options) -> str:
  kernels = kg.compile(a @ b, target="ptx", arch=arch, **options)
  assert len(kernels) == 1
  return kernels[0].source


def _run_ptxsim(kernel, inputs: list[np.ndarray], out_dtype) -> np.ndarray:
  """Run one compiled PTX kernel on a fresh simulator; inputs in slot order 1, 2, ..."""
  runtime = PTXSimRuntime()
  handles = []
  for binding in kernel.launch.bindings:
    handle = runtime.alloc(binding.nbytes)
    if binding.slot > 0:
      runtime.copyin(handle, np.ascontiguousarray(inputs[binding.slot - 1]).tobytes())
    handles.append(handle)
  runtime.run(kernel, handles, {})
  out = next(h for h, b in zip(handles, kernel.launch.bindings) if b.slot == 0)
  return np.frombuffer(runtime.copyout(out), out_dtype)[:kernel.buffers[0].size].copy()


def _f16_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """a @ b exactly (float64), then rounded to float16 as the kernel's output is."""
  return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16)


def _assert_f16_close(got, a, b):
  """Within 1 float16 ulp of the exactly rounded result (the f32 accumulation may differ)."""
  want = _f16_reference(a, b).astype(np.float64)
  ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
  scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
  err = np.abs(got.astype(np.float64).reshape(want.shape) - want)
  assert np.all(err <= ulp + scale * 2.0 ** -22), f"max error {err.max()} (ulp {ulp.max()})"


# ---- PTX source: the shape per arch, and ptxas ---------------------------------------------

@pytest.mark.parametrize("arch,which",
                         [(a, "12") for a in ARCHS_12] + [(a, "13") for a in ARCHS_13])
def test_f16_matmul_uses_m16n8k16_and_assembles(arch, which):
  rng = np.random.default_rng(0)
  a, b = kg.Tensor(_f16(rng, 64, 32)), kg.Tensor(_f16(rng, 32, 48))
  source = _matmul_source(a, b, arch)
  assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in source
  ptxas_check(source, arch, which)


def test_f16_matmul_on_sm75_uses_m16n8k8():
  rng = np.random.default_rng(1)
  a, b = kg.Tensor(_f16(rng, 32, 32)), kg.Tensor(_f16(rng, 32, 16))
  source = _matmul_source(a, b, "sm_75")
  assert "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" in source
  assert "m16n8k16" not in source
  ptxas_check(source, "sm_75", "12")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_bf16_matmul_uses_m16n8k16_on_sm80_and_newer(arch):
  rng = np.random.default_rng(2)
  a = _bf16_tensor(rng.standard_normal((32, 32)))
  b = _bf16_tensor(rng.standard_normal((32, 24)))
  source = _matmul_source(a, b, arch)
  assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in source
  ptxas_check(source, arch)


def test_bf16_matmul_on_sm75_falls_back_to_the_normal_path():
  rng = np.random.default_rng(3)
  a = _bf16_tensor(rng.standard_normal((32, 32)))
  b = _bf16_tensor(rng.standard_normal((32, 16)))
  source = _matmul_source(a, b, "sm_75")
  assert "mma.sync" not in source
  ptxas_check(source, "sm_75", "12")


def test_bf16_matmul_on_sm75_forced_raises_the_renderers_typed_error():
  rng = np.random.default_rng(3)
  a = _bf16_tensor(rng.standard_normal((32, 32)))
  b = _bf16_tensor(rng.standard_normal((32, 16)))
  with pytest.raises(UnsupportedError, match=r"needs sm_80 or newer"):
    kg.compile(a @ b, target="ptx", arch="sm_75", tensor_cores=True)


def test_f32_matmul_uses_tf32_only_when_asked():
  rng = np.random.default_rng(4)
  a = kg.Tensor(rng.standard_normal((32, 16)).astype(np.float32))
  b = kg.Tensor(rng.standard_normal((16, 8)).astype(np.float32))
  assert "mma.sync" not in _matmul_source(a, b, "sm_80")
  source = _matmul_source(a, b, "sm_80", tf32=True)
  assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in source
  ptxas_check(source, "sm_80")
  assert "mma.sync" not in _matmul_source(a, b, "sm_75", tf32=True)


def test_tensor_cores_off_when_disabled_and_never_on_wgsl():
  rng = np.random.default_rng(5)
  a, b = kg.Tensor(_f16(rng, 32, 16)), kg.Tensor(_f16(rng, 16, 8))
  assert "mma.sync" not in _matmul_source(a, b, "sm_80", tensor_cores=False)
  assert "WMMA" not in kg.compile(a @ b, target="python")[0].source.upper()
  with pytest.raises(UnsupportedError, match="no tensor cores"):
    kg.compile(a @ b, target="wgsl", tensor_cores=True)


def test_large_matmul_keeps_registers_bounded():
  """A 4096^3 f16 matmul: the warp tile count (and so the registers) stays fixed."""
  a = kg.Tensor(np.ones((4096, 4096), np.float16) * np.float16(0.5))
  b = kg.Tensor(np.ones((4096, 4096), np.float16) * np.float16(0.25))
  kernels = kg.compile(a @ b, target="ptx", arch="sm_80")
  source = kernels[0].source
  assert source.count("mma.sync") == 8               # 2 x 4 tiles of 16x8 per warp
  assert kernels[0].local_size == (128, 1, 1) and kernels[0].global_size[:2] == (64, 64)
  ptxas_check(source, "sm_80")
  with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "matmul.ptx"
    path.write_text(source)
    info = subprocess.run([ptxas12(), "-v", "-arch=sm_80", "-o", os.devnull, str(path)],
                          capture_output=True, text=True, timeout=120).stderr
  registers = int(re.search(r"Used (\d+) registers", info).group(1))
  assert registers <= 128 and "0 bytes spill stores" in info, info


# ---- detection ----------------------------------------------------------------------------

def _item(t: kg.Tensor):
  items = schedule([t.node])
  assert len(items) == 1
  return items[0]


def test_match_finds_m_n_k_axes_of_a_matmul():
  rng = np.random.default_rng(6)
  a, b = kg.Tensor(_f16(rng, 20, 24)), kg.Tensor(_f16(rng, 24, 12))
  mm = match_matmul(_item(a @ b))
  assert (mm.m_axis, mm.n_axis, mm.k_axis, mm.batch, mm.shape) == (0, 1, 2, (), (20, 12, 24))
  assert mm.dtype_in == "float16"


@pytest.mark.parametrize("program", [
  lambda x: (x * x).sum(axis=1),                     # both factors vary along the same axes
  lambda x: x.sum(axis=1),                           # no product
  lambda x: (x.unsqueeze(1) * x.unsqueeze(0)).max(axis=2),   # not a sum
])
def test_match_rejects_kernels_that_are_not_matmuls(program):
  x = kg.Tensor(_f16(np.random.default_rng(7), 16, 16))
  assert match_matmul(_item(program(x))) is None


# ---- numbers: PTXSIM and the PYTHON interpreter vs numpy -----------------------------------

@pytest.mark.parametrize("m,n,k", [(32, 48, 64), (20, 12, 24), (16, 8, 16), (33, 17, 5)])
def test_f16_matmul_on_ptxsim_matches_numpy(m, n, k):
  rng = np.random.default_rng(m * 1000 + n * 10 + k)
  a, b = _f16(rng, m, k), _f16(rng, k, n)
  kernel = kg.compile(kg.Tensor(a) @ kg.Tensor(b), target="ptx", arch="sm_80")[0]
  assert "mma.sync" in kernel.source
  got = _run_ptxsim(kernel, [a, b], np.float16)
  _assert_f16_close(got, a, b)


@pytest.mark.parametrize("m,n,k", [(32, 48, 64), (20, 12, 24)])
def test_f16_matmul_on_python_with_tensor_cores_matches_ptxsim(m, n, k):
  rng = np.random.default_rng(m + n + k)
  a, b = _f16(rng, m, k), _f16(rng, k, n)
  ta, tb = kg.Tensor(a), kg.Tensor(b)
  python = kg.compile(ta @ tb, target="python", tensor_cores=True)[0]
  assert "wmma" in python.source
  from kernelgen.runtime.python import PythonRuntime
  runtime = PythonRuntime()
  handles = [runtime.alloc(bd.nbytes) for bd in python.launch.bindings]
  for bd, h in zip(python.launch.bindings, handles):
    if bd.slot:
      runtime.copyin(h, [a, b][bd.slot - 1].tobytes())
  runtime.run(python, handles, {})
  got_python = np.frombuffer(runtime.copyout(handles[0]), np.float16)[:m * n]
  ptx = kg.compile(ta @ tb, target="ptx", arch="sm_80")[0]
  got_ptx = _run_ptxsim(ptx, [a, b], np.float16)
  _assert_f16_close(got_python, a, b)
  np.testing.assert_array_equal(got_python, got_ptx)


def test_f16_matmul_on_sm75_shape_matches_numpy():
  rng = np.random.default_rng(8)
  a, b = _f16(rng, 24, 20), _f16(rng, 20, 10)
  kernel = kg.compile(kg.Tensor(a) @ kg.Tensor(b), target="ptx", arch="sm_75")[0]
  assert "m16n8k8" in kernel.source
  _assert_f16_close(_run_ptxsim(kernel, [a, b], np.float16), a, b)


def test_bf16_matmul_on_ptxsim_matches_numpy():
  rng = np.random.default_rng(9)
  a_bits = _bf16_bits(rng.standard_normal((20, 40)))
  b_bits = _bf16_bits(rng.standard_normal((40, 24)))
  ta = kg.Tensor(a_bits).bitcast(dtypes.bfloat16)
  tb = kg.Tensor(b_bits).bitcast(dtypes.bfloat16)
  kernel = kg.compile((ta @ tb).cast(dtypes.float32), target="ptx", arch="sm_80")[0]
  assert "mma.sync" in kernel.source
  got = _run_ptxsim(kernel, [a_bits, b_bits], np.float32)
  exact = _from_bf16_bits(a_bits).astype(np.float64) @ _from_bf16_bits(b_bits).astype(np.float64)
  want = _from_bf16_bits(_bf16_bits(exact.astype(np.float32)))
  scale = np.abs(_from_bf16_bits(a_bits)) @ np.abs(_from_bf16_bits(b_bits))
  ulp = np.abs(want) * 2.0 ** -7
  assert np.all(np.abs(got.reshape(want.shape) - want) <= ulp + scale * 2.0 ** -22)


def test_tf32_matmul_on_ptxsim_matches_numpy_at_tf32_precision():
  rng = np.random.default_rng(10)
  a = rng.standard_normal((24, 20)).astype(np.float32)
  b = rng.standard_normal((20, 16)).astype(np.float32)
  kernel = kg.compile(kg.Tensor(a) @ kg.Tensor(b), target="ptx", arch="sm_80", tf32=True)[0]
  assert "tf32" in kernel.source
  got = _run_ptxsim(kernel, [a, b], np.float32).reshape(24, 16)
  scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
  err = np.abs(got - a.astype(np.float64) @ b.astype(np.float64))
  assert np.all(err <= scale * 2.0 ** -10)           # tf32 keeps 10 mantissa bits
  assert np.any(err > scale * 2.0 ** -20)            # ... and really drops the rest


def test_fused_epilogue_and_transposed_operand_match_numpy():
  """relu(a.T @ b + bias) in one kernel: a read transposed, bias added after the tile."""
  rng = np.random.default_rng(11)
  a, b, bias = _f16(rng, 24, 40), _f16(rng, 24, 16), _f16(rng, 16)
  out = ((kg.Tensor(a).T @ kg.Tensor(b)) + kg.Tensor(bias)).relu()
  kernels = kg.compile(out, target="ptx", arch="sm_80")
  assert len(kernels) == 1 and "mma.sync" in kernels[0].source
  got = _run_ptxsim(kernels[0], [a, b, bias], np.float16).reshape(40, 16).astype(np.float64)
  mm = _f16_reference(a.T, b)
  want = np.maximum((mm + bias).astype(np.float16), 0).astype(np.float64)
  assert np.allclose(got, want, rtol=2e-3, atol=2e-3)


def test_batched_matmul_on_ptxsim_matches_numpy():
  rng = np.random.default_rng(12)
  a, b = _f16(rng, 3, 20, 16), _f16(rng, 3, 16, 12)
  kernels = kg.compile(kg.Tensor(a) @ kg.Tensor(b), target="ptx", arch="sm_80")
  assert len(kernels) == 1 and "mma.sync" in kernels[0].source
  got = _run_ptxsim(kernels[0], [a, b], np.float16).reshape(3, 20, 12)
  for i in range(3):
    _assert_f16_close(got[i], a[i], b[i])


def test_matmul_realized_on_ptxsim_device_uses_tensor_cores_and_matches_numpy():
  rng = np.random.default_rng(13)
  a, b = _f16(rng, 20, 36), _f16(rng, 36, 28)
  out = kg.Tensor(a, device="PTXSIM") @ kg.Tensor(b, device="PTXSIM")
  _assert_f16_close(out.numpy(), a, b)


def test_fused_operands_are_zero_past_the_end_of_k():
  """exp(a) @ (b + 1) with k = 20 (not a multiple of 16): in the padded k steps both operands
  must be 0, not exp(0) = 1 and 0 + 1 = 1."""
  rng = np.random.default_rng(14)
  a, b = _f16(rng, 16, 20) * np.float16(0.5), _f16(rng, 20, 8)
  kernel = kg.compile(kg.Tensor(a).exp() @ (kg.Tensor(b) + 1), target="ptx", arch="sm_80")[0]
  assert "mma.sync" in kernel.source
  got = _run_ptxsim(kernel, [a, b], np.float16)
  _assert_f16_close(got, np.exp(a.astype(np.float32)).astype(np.float16), b + np.float16(1))


@pytest.mark.parametrize("n,paired", [(64, True), (48, False), (17, False)])
def test_d_fragment_column_pairs_store_as_two_lanes(n, paired):
  """d0,d1 (and d2,d3) sit in consecutive columns: one 2-lane store each where no column gate
  is needed; an N that the workgroup's 64 columns do not divide keeps one gated store per
  element. Values checked on PTXSIM."""
  rng = np.random.default_rng(n)
  a, b = _f16(rng, 32, 24), _f16(rng, 24, n)
  kernel = kg.compile(kg.Tensor(a) @ kg.Tensor(b), target="ptx", arch="sm_80")[0]
  stores = re.findall(r"st\.global(\.v2)?\.b16", kernel.source)
  assert stores and all(bool(v) == paired for v in stores)
  ptxas_check(kernel.source, "sm_80")
  _assert_f16_close(_run_ptxsim(kernel, [a, b], np.float16), a, b)
