"""The q4 GEMM of a prompt (MatMulNBits at M = 128, quant_tiled.matmul_dequant) in a one-off
run (option runs 1, what realize and the page's prefill bundle get) on lavapipe: its 8x8
register tile fits the compile budget (its fields taken as unsigned division and remainder by
powers of two, joined on the tile's column vector: lowering/regtile.py), where a guarded shift
per value and scalar dequantization held it to 4x4 (issue 35); and its values in register tiles
against onnxruntime (CPU) on PTXSIM and WEBGPU."""
from __future__ import annotations

import pytest

import kernelgen as kg
from onnx_contrib_util import check

from test_onnx_quant_nbits import nbits_model


def _tiled_kernel(m: int, n: int, k: int):
  model, feeds = nbits_model(m, n, k, 4, 32, "uint8", seed=3)
  out = kg.onnx.load(model.SerializeToString()).run(feeds, device="PYTHON")
  kernels = kg.compile(list(out.values()), target="wgsl", adapter="lavapipe", runs=1)
  return next(kern for kern in kernels if kern.name.startswith("r_"))


@pytest.mark.parametrize("n,k", [(1536, 576), (576, 1536)])     # SmolLM2's MLP up and down
def test_one_off_q4_gemm_at_128_rows_takes_the_8x8_tile(n, k):
  m = 128
  kern = _tiled_kernel(m, n, k)
  threads = kern.global_size[0] * kern.local_size[0]
  assert threads * 64 == m * n, (kern.name, kern.global_size, kern.local_size)


@pytest.mark.parametrize("device", ["PTXSIM", "WEBGPU"])
@pytest.mark.parametrize("bits,block", [(4, 32), (8, 16)])
def test_q4_gemm_in_register_tiles_matches_onnxruntime(device, bits, block):
  """Prompt rows in register tiles whose columns are vectors: the fields' shift and mask on
  vectors of words (a vector's lanes: four columns' words)."""
  model, feeds = nbits_model(64, 64, 96, bits, block, "uint8", bias=True, seed=7)
  check(model, feeds, device, rtol=1e-4, atol=1e-4)
