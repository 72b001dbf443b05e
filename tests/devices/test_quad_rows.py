"""A register tile's quads over row blocks whose threads are no multiple of 4 (tile_grid.py
QUAD_ROWS): each row block takes up to 3 more threads, which compute its last block again, so the
4 lanes of a quad stay in one row block and share its loads (quad_share.py). PP-OCRv4 rec's
480 -> 480 1x1 convs at 3x80 (3 x 5 blocks of pixels a row block, 15 threads) shared nothing.

Values against numpy on the reference interpreter (subgroups of 4, 8 and 32 lanes) and against
onnxruntime on WEBGPU (rec's hardswish epilogue, as the adapter's table compiles it), at sizes
that divide no tile; the quads and the padded grid checked on the kernels.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kernelgen as kg
from kernelgen.lowering.tile_grid import tiled_threads
from onnx_contrib_util import check
from test_quad_share import interpreter_check, quads_on_python
from tools import device_runtime

TILE = {"tile": (4, 4)}
# (exact_local as the CPU adapters: 200 threads in workgroups of 40, not gated 64s)
QUAD = {"subgroups": True, "quad_weights": True, "exact_local": 8, **TILE}


def conv_case(rng):
  """1x1 conv 13 -> 37 channels over 3 x 21: 10 row blocks of 3 x 6 = 18 threads (padded 20)."""
  x = rng.standard_normal((1, 13, 3, 21)).astype(np.float32)
  w = rng.standard_normal((37, 13, 1, 1)).astype(np.float32)
  return (x, w), lambda a, b: a.conv2d(b), np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0])


def matmul_case(rng):
  """(37, 29) @ (29, 70): 10 row blocks of 18 column blocks (padded 20)."""
  a = rng.standard_normal((37, 29)).astype(np.float32)
  b = rng.standard_normal((29, 70)).astype(np.float32)
  return (a, b), lambda p, q: p @ q, a @ b


CASES = {"conv": conv_case, "matmul": matmul_case}


def test_row_blocks_pad_to_quads_where_it_costs_an_eighth_at_most():
  # (shape, tile, axes) -> threads without quads, with quads
  assert tiled_threads((1, 480, 3, 80), (8, 16), (1, 3)) == 900
  assert tiled_threads((1, 480, 3, 80), (8, 16), (1, 3), quad=True) == 960
  assert tiled_threads((1, 480, 3, 80), (16, 16), (1, 3), quad=True) == 30 * 16
  assert tiled_threads((1, 240, 12, 80), (8, 8), (1, 3), quad=True) == 30 * 120  # a multiple
  assert tiled_threads((37, 70), (4, 4), (0, 1), quad=True) == 10 * 20
  assert tiled_threads((37, 21), (4, 4), (0, 1), quad=True) == 10 * 6    # 6 -> 8: too many
  assert tiled_threads((1, 480, 3, 80), (8, 16), (1, 3), quad=True, first=1) == 900


@pytest.mark.parametrize("tile", [(8, 16), (16, 16)])
def test_rec_3x80_pointwise_conv_shares_quads(tile):
  """rec's 480 -> 480 1x1 conv at 3x80 with hardswish, lavapipe's table: quads share loads, in
  whole workgroups (no gate, whose clamped thread id would hide the quads)."""
  rng = np.random.default_rng(0)
  x = kg.Tensor(rng.standard_normal((1, 480, 3, 80)).astype(np.float32))
  w = kg.Tensor(rng.standard_normal((480, 480, 1, 1)).astype(np.float32))
  y = x.conv2d(w)
  y = y * (y + 3).clip(0, 6) / 6
  (kernel,) = kg.compile(y, target="wgsl", adapter="lavapipe", subgroups=True, tile=tile,
                         runs=100)
  assert "quadBroadcast" in kernel.source
  threads = kernel.global_size[0] * kernel.local_size[0]
  assert threads == 480 // tile[0] * 16, (kernel.global_size, kernel.local_size)


@pytest.fixture
def python_quads(monkeypatch):
  """PYTHON with this file's QUAD options; returns a setter for the subgroup size."""
  with quads_on_python(monkeypatch, QUAD) as configure:
    yield configure


@pytest.mark.parametrize("size", [4, 8, 32])
@pytest.mark.parametrize("case", list(CASES))
def test_interpreter_matches_numpy(python_quads, case, size):
  interpreter_check(python_quads, CASES[case], QUAD, size)


def _scalar(name: str, value: float):
  return numpy_helper.from_array(np.array([value], np.float32), name)


def _pointwise_hardswish(cin: int, cout: int, h: int, w: int, seed: int = 0):
  """(model, feeds): Conv 1x1 (bias) -> x * s + t -> hardswish (Add, Clip, Mul, Div, as rec's
  export spells it) -> x * s2 + t2."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((1, cin, h, w)).astype(np.float32)
  inits = [numpy_helper.from_array((rng.standard_normal((cout, cin, 1, 1)) * 0.3)
                                   .astype(np.float32), "w"),
           numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b"),
           _scalar("s", 1.3), _scalar("t", 0.2), _scalar("three", 3.0), _scalar("zero", 0.0),
           _scalar("six", 6.0), _scalar("s2", 0.7), _scalar("t2", -0.1)]
  nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1]),
           helper.make_node("Mul", ["s", "c"], ["m"]),
           helper.make_node("Add", ["m", "t"], ["y"]),
           helper.make_node("Add", ["y", "three"], ["y3"]),
           helper.make_node("Clip", ["y3", "zero", "six"], ["r6"]),
           helper.make_node("Mul", ["y", "r6"], ["p"]),
           helper.make_node("Div", ["p", "six"], ["a"]),
           helper.make_node("Mul", ["s2", "a"], ["o1"]),
           helper.make_node("Add", ["o1", "t2"], ["o"])]
  graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      x.shape)],
                            [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)], inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
  return model, {"x": x}


# (in, out, height, width): rec's 3x80 row blocks (15 threads) and sizes dividing no tile
@pytest.mark.parametrize("cin,cout,h,w", [(480, 480, 3, 80), (37, 90, 3, 79), (29, 70, 5, 13)])
def test_webgpu_hardswish_pointwise_matches_onnxruntime(cin, cout, h, w):
  device_runtime("WEBGPU")
  model, feeds = _pointwise_hardswish(cin, cout, h, w)
  check(model, feeds, "WEBGPU", rtol=1e-4, atol=1e-4)
