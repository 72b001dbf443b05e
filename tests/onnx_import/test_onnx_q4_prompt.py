"""MatMulNBits over a prompt's rows (quant_nbits.TILED_ROWS and more): a register-tiled matmul
of the weights dequantized in registers (matmul_dequant), checked against onnxruntime (CPU) on
both sides of the row threshold, on PYTHON, PTXSIM and WEBGPU; and its kernel: a reduction over
K as (words, fields) in register tiles (several rows and columns per thread), the packed words
read, no dequantized weight written."""
from __future__ import annotations

import pytest

import kernelgen as kg
from kernelgen.onnx.operators.quant_nbits import TILED_ROWS
from onnx_contrib_util import check

from test_onnx_quant_nbits import nbits_model

SIDES = [TILED_ROWS - 1, TILED_ROWS]     # one row (decoding) and two


@pytest.mark.parametrize("m", SIDES + [32])
@pytest.mark.parametrize("bits,block,zp,bias", [
  (4, 32, "none", False), (4, 32, "uint8", True), (4, 64, "float", False), (8, 16, "uint8", True)])
def test_prompt_rows_match_onnxruntime_on_python(m, bits, block, zp, bias):
  model, feeds = nbits_model(m, 40, 96, bits, block, zp, bias)
  check(model, feeds, "PYTHON", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m", SIDES)
def test_prompt_rows_k_not_a_multiple_of_the_block(m):
  model, feeds = nbits_model(m, 24, 40, 4, 16, "uint8")
  check(model, feeds, "PYTHON", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", ["PTXSIM", "WEBGPU"])
@pytest.mark.parametrize("m", SIDES)
def test_prompt_rows_match_onnxruntime_on_devices(device, m):
  model, feeds = nbits_model(m, 32, 64, 4, 32, "uint8", bias=True, lead=(2,))
  check(model, feeds, device, rtol=1e-4, atol=1e-4)


def _word_kernel(m: int, n: int, k: int, adapter: str):
  model, feeds = nbits_model(m, n, k, 4, 32, "uint8", bias=True, seed=3)
  out = kg.onnx.load(model.SerializeToString()).run(feeds, device="PYTHON")
  kernels = kg.compile(list(out.values()), target="wgsl", adapter=adapter)
  words = [kern for kern in kernels for b in kern.buffers if b.dtype == kg.dtypes.uint32]
  assert len(words) == 1
  floats = [b.size for kern in kernels for b in kern.buffers
            if b.access != "read" and b.dtype == kg.dtypes.float32]
  assert max(floats) <= m * n, f"float buffers written {floats}: a dequantized weight?"
  return words[0]


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader", "discrete"])
def test_prompt_rows_are_one_register_tiled_reduction_over_k(adapter):
  """From TILED_ROWS rows the kernel reading the packed words reduces over K as (words, fields)
  (its name ends in K / 8 and 8; not blocks x words x fields) with several outputs per thread;
  one row fewer keeps the matrix-vector form over the blocks' words and fields."""
  m, n, k = 16, 256, 512
  tiled = _word_kernel(max(m, TILED_ROWS), n, k, adapter)
  assert tiled.name.split("__")[-1].split("_")[:2] == [str(k // 8), "8"], tiled.name
  threads = tiled.global_size[0] * tiled.local_size[0]
  assert threads * 4 <= max(m, TILED_ROWS) * n, (tiled.name, tiled.global_size, tiled.local_size)
  rows = _word_kernel(TILED_ROWS - 1, n, k, adapter)
  assert rows.name.split("__")[-1].split("_")[0] == str(k // 32), rows.name


def _normed_model(m: int, n: int, k: int):
  """SimplifiedLayerNormalization (an elementwise scaling of each row by its statistic) feeding
  a MatMulNBits (block 32, uint8 zero points): (model, feeds)."""
  from onnx import TensorProto, helper, numpy_helper
  import numpy as np
  base, feeds = nbits_model(m, n, k, 4, 32, "uint8", seed=5)
  g = base.graph
  gamma = np.random.default_rng(6).standard_normal(k).astype(np.float32)
  norm = helper.make_node("SimplifiedLayerNormalization", ["X", "gamma"], ["A"], axis=-1,
                          epsilon=1e-5)
  x = helper.make_tensor_value_info("X", TensorProto.FLOAT, feeds["A"].shape)
  graph = helper.make_graph([norm, *g.node], "g", [x], list(g.output),
                            [*g.initializer, numpy_helper.from_array(gamma, "gamma")])
  return helper.make_model(graph, opset_imports=list(base.opset_import), ir_version=10), \
    {"X": feeds["A"]}


@pytest.mark.parametrize("m", SIDES)
def test_normed_prompt_rows_match_onnxruntime(m):
  model, feeds = _normed_model(m, 48, 96)
  check(model, feeds, "PYTHON", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m", SIDES)
def test_normed_prompt_rows_are_realized_once_before_the_tiled_matmul(m):
  """From TILED_ROWS rows a norm's scaled rows feeding the tiled matmul are written once by a
  kernel of their own (own_rows: M x K floats), not recomputed as the matmul reads them; one
  row (decoding) keeps them in the matmul (nothing M x K is written)."""
  n, k = 64, 128
  model, feeds = _normed_model(m, n, k)
  out = kg.onnx.load(model.SerializeToString()).run(feeds, device="PYTHON")
  kernels = kg.compile(list(out.values()), target="wgsl", adapter="lavapipe")
  written = [b.size for kern in kernels for b in kern.buffers
             if b.access != "read" and b.dtype == kg.dtypes.float32]
  assert (m * k in written) == (m >= TILED_ROWS), written
