"""A q4 prompt GEMM's dequantized weights staged in workgroup memory (lowering/col_stage.py,
option stage_cols of both CPU adapters' tile tables; issue 35): each workgroup dequantizes its
columns' packed words once per trip of the reduction loop, for all its row blocks' threads, where
each thread dequantized them for its own rows. The kernel (workgroup memory and barriers on the
CPU adapters only, never for a loaded operand, never in the variants a symbolic kernel runs for
few rows), and its values against onnxruntime's MatMulNBits on PYTHON (the staging forced on the
interpreter) and WEBGPU (wgpu natively: lavapipe's table) at 1, 17, 128 and 129 rows, K not a
multiple of the block, with and without zero points, 4- and 8-bit weights."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.uop.program import variant_for
from onnx_contrib_util import check, options_forcer
from tools import device_runtime

from test_onnx_quant_nbits import nbits_model

ROWS = (1, 17, 128, 129)
# (bits, block, zero points, K): K = 72 is 2.25 blocks of 32, 4.5 of 16
CASES = [(4, 32, "none", 72), (4, 32, "uint8", 72), (8, 16, "uint8", 72), (4, 16, "float", 64)]
# the interpreter has no adapter table: the staging forced on its register tiles
PYTHON_STAGED = {"tile": (4, 4), "stage_cols": 16}


def _words_kernel(m: int, n: int, k: int, target: str = "wgsl", **options):
  """The kernel reading the packed words of an (n, k) q4 MatMulNBits over m rows (block 32,
  uint8 zero points), as kg.compile(**options) gives it."""
  model, feeds = nbits_model(m, n, k, 4, 32, "uint8", seed=3)
  out = kg.onnx.load(model.SerializeToString()).run(feeds, device="PYTHON")
  kernels = kg.compile(list(out.values()), target=target, **options)
  return next(kern for kern in kernels if any(b.dtype == kg.dtypes.uint32 for b in kern.buffers))


def _staged(kern) -> bool:
  return "var<workgroup>" in kern.source and "workgroupBarrier()" in kern.source


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
@pytest.mark.parametrize("n,k", [(960, 576), (1536, 576), (576, 1536)])   # SmolLM2-135M's
def test_cpu_adapters_dequantize_a_q4_prompt_gemm_once_per_workgroup(adapter, n, k):
  """At 128 rows (a one-off run, as the page's prefill) the workgroup is 16 row blocks x 4
  column blocks; its staged copy holds 4 blocks' columns of one trip's elements in f32."""
  kern = _words_kernel(128, n, k, adapter=adapter, runs=1)
  assert _staged(kern), kern.name
  assert kern.local_size == (64, 1, 1)
  assert "array<f32" in kern.source.split("var<workgroup>")[1].splitlines()[0]


@pytest.mark.parametrize("adapter", ["discrete", "integrated"])
def test_gpus_keep_the_plain_register_tile(adapter):
  assert not _staged(_words_kernel(128, 576, 576, adapter=adapter, runs=1))


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_a_loaded_operand_is_not_staged(adapter):
  """An f32 matmul of the same shape: its columns are loads, nothing to share."""
  a = kg.Tensor.empty(128, 576, device="PYTHON")
  b = kg.Tensor.empty(576, 960, device="PYTHON")
  kernels = kg.compile(a @ b, target="wgsl", adapter=adapter, runs=1)
  assert not any("var<workgroup>" in kern.source for kern in kernels)


def test_a_symbolic_prompts_variants_for_few_rows_stay_plain():
  """The page's bundle: seq rows 1..128; the top (a prompt of 128) runs the staged kernel, the
  one-row variant (decoding) the plain one."""
  model, _ = nbits_model(1, 576, 576, 4, 32, "uint8", seed=3)
  a = kg.Tensor.empty(1, kg.Dim("seq", 1, 128).bind(1), 576, name="A", device="PYTHON")
  out = kg.onnx.load(model.SerializeToString()).run({"A": a}, device="PYTHON", replay=False)
  kernels = kg.compile(list(out.values()), target="wgsl", adapter="lavapipe", runs=1)
  (kern,) = [k for k in kernels if any(b.dtype == kg.dtypes.uint32 for b in k.buffers)]
  assert _staged(variant_for(kern, {"seq": 128}))
  assert not _staged(variant_for(kern, {"seq": 1}))


def _rows(m: int, k: int, seed: int) -> dict:
  return {"A": np.random.default_rng(seed).standard_normal((1, m, k)).astype(np.float32)}


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("bits,block,zp,k", CASES)
def test_staged_values_match_onnxruntime_on_python(monkeypatch, m, bits, block, zp, k):
  model, _ = nbits_model(m, 32, k, bits, block, zp, bias=True, seed=m)
  if m == 128:      # (129 rows: 33 row blocks of 4, no two of the workgroup's to share)
    assert "define_local" in _words_kernel(m, 32, k, "python", **PYTHON_STAGED).source
  options_forcer(monkeypatch, PYTHON_STAGED)("PYTHON")
  check(model, _rows(m, k, m), "PYTHON", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("bits,block,zp,k", CASES)
def test_staged_values_match_onnxruntime_on_webgpu(m, bits, block, zp, k):
  rt = device_runtime("WEBGPU")
  model, _ = nbits_model(m, 96, k, bits, block, zp, bias=True, seed=m)
  if m == 128 and rt.render_options().get("adapter") in ("lavapipe", "swiftshader"):
    assert _staged(_words_kernel(m, 96, k, **rt.render_options()))
  check(model, _rows(m, k, m), "WEBGPU", rtol=1e-4, atol=1e-4)
