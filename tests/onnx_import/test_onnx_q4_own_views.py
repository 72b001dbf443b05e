"""A prompt's q4 GEMM (MatMulNBits, quant_tiled.matmul_dequant) over a reordered view of its
activations, as a transformer's output projection reads the attention's heads-first output
(Transpose 0,2,1,3 and Reshape): with the adapter option tile_own_views (SwiftShader's table)
the view is copied into a buffer of its own first, so the GEMM reads its rows as vec4s, not a
scalar per value at a computed index (quant_nbits.own_rows, issue 35); and its values against
onnxruntime (CPU) on PYTHON and WEBGPU with the option on, at M from one row to past the tile."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.onnx.operators import quant_nbits
from onnx_contrib_util import check, elem, onnx
from test_onnx_quant_nbits import quantize_nbits

from onnx import helper, numpy_helper  # noqa: E402

HEADS, DIM = 3, 24    # K = 72: not a multiple of the block (32), nor of a 4-word step
WHOLE = 32            # K = 96: whole blocks (SmolLM2's 576), so the GEMM's row loads are vec4s


def heads_model(m: int, n: int, zp: str, seed: int = 0, dim: int = DIM):
  """X (1, HEADS, m, dim) -> Transpose(0, 2, 1, 3) -> Reshape (1, m, K) -> MatMulNBits (4 bits,
  block 32, N = n): the model and its feeds."""
  k = HEADS * dim
  packed, scales, zps = quantize_nbits(n, k, 4, 32, seed, zp)
  inits = {"B": packed, "scales": scales, "shape": np.array([1, m, k], np.int64)}
  names = ["T", "B", "scales"] + (["zp"] if zps is not None else [])
  if zps is not None:
    inits["zp"] = zps
  x = np.random.default_rng(seed + 2).standard_normal((1, HEADS, m, dim)).astype(np.float32)
  nodes = [helper.make_node("Transpose", ["X"], ["P"], perm=[0, 2, 1, 3]),
           helper.make_node("Reshape", ["P", "shape"], ["T"]),
           helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", K=k, N=n,
                            bits=4, block_size=32)]
  graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", elem(x), x.shape)],
                            [onnx.ValueInfoProto(name="Y")],
                            [numpy_helper.from_array(v, name) for name, v in inits.items()])
  imports = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
  return helper.make_model(graph, opset_imports=imports, ir_version=10), {"X": x}


def _kernels(adapter: str, m: int = 128, n: int = 64):
  model, feeds = heads_model(m, n, "uint8", dim=WHOLE)
  loaded = kg.onnx.load(model.SerializeToString())
  loaded.row_adapter = adapter             # traced for the adapter, as export/onnx_lm.py does
  out = loaded.run(feeds, device="PYTHON")
  return kg.compile(list(out.values()), target="wgsl", adapter=adapter, runs=1)


def _gemm(kernels):
  return next(k for k in kernels if any(b.dtype == kg.dtypes.uint32 for b in k.buffers))


def _declaration(kern, size: int) -> str:
  """The WGSL declaration of the buffer of `size` elements that kernel `kern` reads."""
  slot = next(b.slot for b in kern.buffers if b.size == size and b.access == "read")
  return next(line for line in kern.source.splitlines() if f"@binding({slot})" in line)


def test_swiftshader_q4_gemm_reads_reordered_rows_from_a_buffer_of_their_own():
  rows = 128 * HEADS * WHOLE
  kernels = _kernels("swiftshader")
  gemm = _gemm(kernels)
  copies = [k for k in kernels if k is not gemm]
  assert [k.buffers[0].size for k in copies] == [rows], [(k.name, k.buffers) for k in kernels]
  assert "array<vec4<f32>>" in _declaration(gemm, rows)


def test_lavapipe_q4_gemm_keeps_reading_the_view():
  assert len(_kernels("lavapipe")) == 1


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("m", [1, 2, 17, 128, 200])
@pytest.mark.parametrize("zp", ["none", "uint8"])
def test_q4_gemm_over_heads_first_rows_matches_onnxruntime(monkeypatch, device, m, zp):
  monkeypatch.setattr(quant_nbits, "matmul_rows", lambda runner: {"tile_own_views": True})
  model, feeds = heads_model(m, 8 if device == "PYTHON" else 40, zp, seed=m)
  check(model, feeds, device, rtol=1e-4, atol=1e-4)
