"""Issue 43's kernel choices (render/wgsl/adapters.py): option tile_unroll (register tiles whose
reduction loop unrolls 4 times, a row operand's 4 consecutive elements read as one vector load:
SwiftShader's matmul) and option row_thread_rows (a thread per row from that many rows: lavapipe's
4096x1024 layernorm and softmax). What each option changes in the WGSL, that the adapters' table
turns them on where measured, and that the kernels compute numpy's values, run natively (wgpu on
lavapipe) under each option, also where the operand's rows do not start at a multiple of 4."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.compile_cost import RUNS_MANY
from ops_util import on  # noqa: F401  (fixture)


def kernel(tensor, **options):
  (k,) = kg.compile(tensor, target="wgsl", **options)
  return k


def test_tile_unroll_reads_a_row_as_vectors():
  """tile_unroll=4: A's loads are vec4 loads (its buffer an array of vec4), 4 per 4 steps where
  the default reads 8 scalars per 2 steps; SwiftShader's and lavapipe's tables take it (the same
  16x16 kernel on both), another adapter's not."""
  a, b = kg.Tensor.empty(1024, 1024, name="a"), kg.Tensor.empty(1024, 1024, name="b")
  plain = kernel(a @ b, adapter="swiftshader", tile_unroll=0).launch.source
  vec = kernel(a @ b, adapter="swiftshader", tile_unroll=4).launch.source
  assert "b1_a: array<f32>" in plain and "b1_a: array<vec4<f32>>" in vec
  assert vec.count("b1_a[") == 16 and plain.count("b1_a[") == 32
  assert kernel(a @ b, adapter="swiftshader").launch.source == vec
  assert kernel(a @ b, adapter="lavapipe", runs=RUNS_MANY).launch.source == vec   # (one-off: 8x8)
  assert "b1_a: array<f32>" in kernel(a @ b, adapter="discrete").launch.source
  with pytest.raises(kg.UnsupportedError, match="tile_unroll"):
    kernel(a @ b, tile_unroll="four")


@pytest.mark.parametrize("k, offset", [(256, 0), (256, 1), (250, 0), (64, 3)])
def test_tile_unroll_computes_right(on, k, offset):
  """Natively (lavapipe) with SwiftShader's table and tile_unroll 4 and 8: A's rows from column
  `offset` of a wider array (its 4-runs then start off a multiple of 4), K not a multiple of 4."""
  on("WEBGPU", adapter="swiftshader")
  rng = np.random.default_rng(4)
  wide = rng.standard_normal((96, k + offset), np.float32)
  bm = rng.standard_normal((k, 80), np.float32)
  want = wide[:, offset:].astype(np.float64) @ bm
  for unroll in (4, 8):
    on("WEBGPU", adapter="swiftshader", tile_unroll=unroll)
    got = (kg.Tensor(wide)[:, offset:] @ kg.Tensor(bm)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_row_thread_rows_moves_the_layout():
  """row_thread_rows=4096: 4096 rows of 1024 take a thread each (lavapipe's table), 2048 rows
  keep lanes; without it (another adapter) the default threshold holds."""
  def threads(rows, **options):
    x = kg.Tensor.empty(rows, 1024, name="x")
    launch = kernel(x.layernorm(-1, eps=1e-5), **options).launch
    return launch.workgroup_size[0] * launch.dispatch[0]
  assert threads(4096, adapter="lavapipe") == threads(4096, row_lanes=1) == 4096
  assert threads(4096, row_thread_rows=4096) == 4096
  assert threads(2048, adapter="lavapipe") > 2048
  assert threads(4096) > 4096 and threads(4096, adapter="discrete") > 4096


def test_row_thread_rows_computes_right(on):
  """Layernorm and softmax rows with a thread per row from row_thread_rows, natively."""
  on("WEBGPU", adapter="lavapipe", row_thread_rows=64)
  x = np.random.default_rng(5).standard_normal((64, 1024)).astype(np.float32)
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  got = kg.Tensor(x).layernorm(-1, eps=1e-5).numpy()
  np.testing.assert_allclose(got, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-4)
  e = np.exp(x - x.max(-1, keepdims=True))
  np.testing.assert_allclose(kg.Tensor(x).softmax(-1).numpy(), e / e.sum(-1, keepdims=True),
                             rtol=1e-5, atol=1e-6)


def test_tile_unroll_reads_conv_weights_as_vectors():
  """A 3x3 conv2d's loop over (input channel, window row) unrolls 4 times around the unrolled
  window columns, so an output channel's 12 weights of a step are 3 vec4 loads."""
  x, w = kg.Tensor.empty(1, 64, 56, 56, name="x"), kg.Tensor.empty(64, 64, 3, 3, name="w")
  conv = x.conv2d(w, padding=1)
  plain = kernel(conv, adapter="swiftshader", tile_unroll=0, runs=RUNS_MANY).launch.source
  vec = kernel(conv, adapter="swiftshader", runs=RUNS_MANY).launch.source   # (one-off: plain)
  assert "b2_w: array<f32>" in plain and "b2_w: array<vec4<f32>>" in vec
  assert plain.count("b2_w[") == vec.count("b2_w[") == 16 * 3      # per step of 1 and of 4
  assert plain.count("b1_x[") * 4 == vec.count("b1_x[")


@pytest.mark.parametrize("adapter", ["swiftshader", "lavapipe"])
@pytest.mark.parametrize("channels", [8, 6, 32])
def test_tile_unroll_conv_computes_right(on, channels, adapter):
  """Natively (lavapipe) with SwiftShader's and lavapipe's tables: 3x3 convs with padding (gated
  input loads), input channels x window rows a multiple of 4 (8 x 3) or not (6 x 3 = 18), or 32
  channels (288 reduced elements: a long reduction, the weights read as vec4)."""
  on("WEBGPU", adapter=adapter, runs=RUNS_MANY)     # lavapipe: its long tiles (not capped)
  rng = np.random.default_rng(6)
  x = rng.standard_normal((1, channels, 20, 24), np.float32)
  w = rng.standard_normal((16, channels, 3, 3), np.float32)
  if channels == 32:
    (k,) = kg.compile(kg.Tensor.empty(*x.shape, name="x").conv2d(
      kg.Tensor.empty(*w.shape, name="w"), padding=1), target="wgsl", adapter=adapter,
      runs=RUNS_MANY)
    assert "b2_w: array<vec4<f32>>" in k.launch.source
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
  want = np.einsum("nchwij,ocij->nohw", win, w)
  got = kg.Tensor(x).conv2d(kg.Tensor(w), padding=1).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_lavapipe_long_tiles_fit_a_one_off_compile_budget():
  """Option long_tiles_cost (lavapipe's table): a one-off run takes the long tiles and
  tile_unroll only where the unrolled kernel's estimated build fits its budget (compile_cost.py):
  matmul 1024^3's 16x16 tile (1127 UOps) does; conv2d 3x3 64ch's 16x8 (2197 UOps) does not and
  keeps the 8x8 scalar tile (capped: realized again, a plan takes the unrolled one); many runs,
  or the options given, take them."""
  a, b = kg.Tensor.empty(1024, 1024, name="a"), kg.Tensor.empty(1024, 1024, name="b")
  assert "b1_a: array<vec4<f32>>" in kernel(a @ b, adapter="lavapipe").launch.source
  x, w = kg.Tensor.empty(1, 64, 56, 56, name="x"), kg.Tensor.empty(64, 64, 3, 3, name="w")
  conv = x.conv2d(w, padding=1)
  one_off = kernel(conv, adapter="lavapipe")
  assert one_off.capped and "b2_w: array<f32>" in one_off.launch.source
  assert one_off.launch.source == kernel(conv, adapter="lavapipe", long_tiles_cost=False,
                                         long_tiles=None, tile_unroll=0).launch.source
  many = kernel(conv, adapter="lavapipe", runs=RUNS_MANY)
  assert not many.capped and \
    many.launch.source == kernel(conv, adapter="swiftshader", runs=RUNS_MANY).launch.source
  given = kernel(conv, adapter="lavapipe", tile_unroll=4, long_tiles=((16, 8),))
  assert given.launch.source == many.launch.source


@pytest.mark.parametrize("adapter", ["swiftshader", "lavapipe"])
def test_a_one_off_conv_over_budget_computes_right(on, adapter):
  """A 64 -> 64 3x3 conv of 16x16 realized once with the CPU adapters' tables: its plain 8x8
  tile is over the one-off budget, so optimize() takes it without lowering the long tile
  (tile_budget.plain_over_budget); run natively (wgpu on lavapipe) against numpy."""
  on("WEBGPU", adapter=adapter)
  rng = np.random.default_rng(5)
  x = rng.standard_normal((1, 64, 16, 16)).astype(np.float32)
  w = (rng.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float32)
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
  want = np.einsum("nchwij,ocij->nohw", win, w)
  got = kg.Tensor(x).conv2d(kg.Tensor(w), padding=1).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
