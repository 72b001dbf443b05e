"""Adapter classes and their measured option defaults (render/wgsl/adapters.py): what each
adapter description is classified as, what the table gives each class and shape, and that the
defaults reach the compiled WGSL through `kg.compile(..., target="wgsl", adapter=...)`."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.compile_cost import RUNS_MANY
from kernelgen.render.wgsl.adapters import CLASSES, SOFTWARE, TABLE, classify, defaults
from ops_util import on
from tools import missing_tool, wgpu_adapter

# what real adapters say about themselves (Chromium's GPUAdapterInfo, wgpu's adapter.info)
DESCRIBED = [
  ({"vendor": "google", "architecture": "swiftshader", "isFallbackAdapter": True}, "swiftshader"),
  ({"vendor": "SwiftShader driver", "device": "SwiftShader Device (Subzero)",
    "adapter_type": "CPU"}, "swiftshader"),
  ({"vendor": "llvmpipe", "device": "llvmpipe (LLVM 15.0.6, 256 bits)",
    "description": "Mesa 22.3.6 (LLVM 15.0.6)", "adapter_type": "CPU"}, "lavapipe"),
  ({"vendor": "mesa", "architecture": "", "description": "ANGLE (Mesa, llvmpipe (LLVM 15.0.6, "
    "256 bits), OpenGL ES 3.2)"}, "lavapipe"),
  ({"vendor": "", "isFallbackAdapter": True}, "swiftshader"),
  ({"vendor": "someone", "device": "soft gpu", "isFallbackAdapter": True}, "software"),
  ({"vendor": "Microsoft", "description": "Microsoft Basic Render Driver"}, "software"),
  ({"vendor": "nvidia", "architecture": "ada-lovelace"}, "discrete"),
  ({"vendor": "intel", "architecture": "gen-12lp"}, "integrated"),
  ({"vendor": "apple", "architecture": "metal-3"}, "integrated"),
  ({"vendor": "arm", "architecture": "valhall"}, "integrated"),
  ({"vendor": "amd", "architecture": "rdna-3"}, "discrete"),
  ({"vendor": "x", "adapter_type": "IntegratedGPU"}, "integrated"),
  ({"vendor": "x", "adapter_type": "DiscreteGPU"}, "discrete"),
  ({"vendor": "x", "adapter_type": "CPU"}, "software"),
  ({}, "unknown"),
  (None, "unknown"),
  ("lavapipe", "lavapipe"),
  ("SwiftShader Device (Subzero)", "swiftshader"),
  ("charming gpu", "unknown"),      # "arm" only as a word, not inside another one
]


@pytest.mark.parametrize("info,expected", DESCRIBED)
def test_classify(info, expected):
  assert classify(info) == expected


def test_classify_rejects_other_types():
  with pytest.raises(kg.UnsupportedError, match="adapter="):
    classify(42)


def test_table_lookup():
  for klass in SOFTWARE:          # CPU adapters: each lane of a grouped reduction reads a run
    assert defaults(klass, "rows")["group_chunk"] is True
  assert defaults("discrete", "rows") == {} and defaults("unknown", "tile") == {}
  assert defaults({"vendor": "llvmpipe"}, "rows") == TABLE[("lavapipe", "rows")]
  assert all(k in CLASSES for k, _ in TABLE)
  defaults("lavapipe", "rows")["group_chunk"] = False     # a copy: the table stays as it is
  assert TABLE[("lavapipe", "rows")]["group_chunk"] is True
  with pytest.raises(kg.UnsupportedError, match="shape class"):
    defaults("lavapipe", "row")


def sources(tensor, **options) -> list[str]:
  return [k.source for k in kg.compile(tensor, target="wgsl", **options)]


def test_defaults_reach_the_kernel():
  """Rows long enough for a grouped reduction: a CPU adapter's kernel reads chunks (as
  group_chunk=True forces), a discrete GPU's strided lanes (as by default); an explicit option
  wins over the table."""
  x = kg.Tensor.randn(64, 4096, seed=1)
  rows = x.sum(axis=1)
  strided, chunked = sources(rows), sources(rows, group_chunk=True)
  assert strided != chunked
  assert sources(rows, adapter="lavapipe") == chunked
  assert sources(rows, adapter={"vendor": "google", "architecture": "swiftshader"}) == chunked
  assert sources(rows, adapter="discrete") == strided
  assert sources(rows, adapter="lavapipe", group_chunk=False) == strided
  assert sources(x.sum(), adapter="swiftshader") == sources(x.sum(), group_chunk=True)


def test_fused_row_kernels_take_the_adapters_layout():
  """A fused softmax row kernel: a thread per row on SwiftShader (measured fastest there, see the
  table) and on lavapipe from 4096 rows (row_thread_rows), lanes per row on lavapipe for fewer
  rows (rows.py's default); explicit row_lanes wins."""
  x = kg.Tensor.empty(4096, 1024, name="x")
  def launch(x=x, **options):
    (kernel,) = kg.compile(x.softmax(-1), target="wgsl", **options)
    return kernel.launch.workgroup_size[0] * kernel.launch.dispatch[0]
  assert launch(adapter="swiftshader") == launch(row_lanes=1) == launch(adapter="lavapipe") == 4096
  half = kg.Tensor.empty(2048, 1024, name="x")
  assert launch(half, adapter="lavapipe") == launch(half) > 2048
  assert launch(adapter="swiftshader", row_lanes=32) == launch(row_lanes=32)


def test_short_rows_are_the_same_everywhere():
  """Rows too short for a grouped reduction (below GROUP_MIN_REDUCE): no layout to choose."""
  rows = kg.Tensor.randn(64, 64, seed=1).max(axis=1)
  assert sources(rows, adapter="lavapipe") == sources(rows, adapter="discrete") == sources(rows)


def test_adapter_option_on_other_targets():
  """`adapter` is a front-end option: PTX and PYTHON take it and ignore the WGSL table."""
  rows = kg.Tensor.randn(64, 4096, seed=1).sum(axis=1)
  plain = [k.source for k in kg.compile(rows, target="ptx", arch="sm_80")]
  assert [k.source for k in kg.compile(rows, target="ptx", arch="sm_80",
                                       adapter="lavapipe")] == plain
  with pytest.raises(kg.UnsupportedError, match="adaptr"):
    kg.compile(rows, target="wgsl", adaptr="lavapipe")


def test_native_device_names_its_adapter_and_computes_right():
  """The native WEBGPU device (wgpu; lavapipe here) classifies its adapter into the options it
  compiles with, and the rows its table's layout reads match numpy."""
  wgpu_adapter()
  try:
    device = kg.Device["WEBGPU"]
  except kg.DeviceError as error:
    missing_tool("device WEBGPU", f"pip install wgpu; apt-get install mesa-vulkan-drivers ({error})")
  assert device.render_options()["adapter"] == classify(dict(device.adapter.info)) == "lavapipe"
  data = np.random.default_rng(0).standard_normal((16, 3000)).astype(np.float32)
  got = kg.Tensor(data, device="WEBGPU").softmax(axis=1).max(axis=1).numpy()
  e = np.exp(data - data.max(axis=1, keepdims=True))
  np.testing.assert_allclose(got, (e / e.sum(axis=1, keepdims=True)).max(axis=1), rtol=1e-5)


def tile_threads(tensor, **options) -> int:
  (kernel,) = kg.compile(tensor, target="wgsl", **options)
  return kernel.launch.workgroup_size[0] * kernel.launch.dispatch[0]


def test_swiftshader_prefers_wider_tiles_where_they_divide():
  """The CPU adapters' table prefers 8x16 register tiles (measured, see TABLE) where they divide
  both tiled axes, and 16x16 then 16x8 for long reductions (long_tiles, SwiftShader and
  lavapipe: 56 columns take 16x8; a one-off conv keeps 8x8, test_adapter_choices.py);
  a GPU keeps the default; bad tiles are refused."""
  a, b = kg.Tensor.empty(1024, 1024, name="a"), kg.Tensor.empty(1024, 1024, name="b")
  assert tile_threads(a @ b, adapter="swiftshader") == 1024 * 1024 // 256
  # (lavapipe's one-off matmul takes the tile quickest to a first result: 8x8, tile_rate;
  # test_quickest_first_tile.py)
  assert tile_threads(a @ b, adapter="lavapipe", runs=RUNS_MANY) == 1024 * 1024 // 256
  assert tile_threads(a @ b, adapter="lavapipe") == 1024 * 1024 // 64
  assert tile_threads(a @ b, adapter="discrete") == tile_threads(a @ b) == 1024 * 1024 // 64
  x, w = kg.Tensor.empty(1, 64, 56, 56, name="x"), kg.Tensor.empty(64, 64, 3, 3, name="w")
  conv = x.conv2d(w, padding=1)
  # (many runs: a one-off run's conv, 116 M multiply-adds, keeps plain 8x8 tiles on both)
  assert tile_threads(conv, adapter="swiftshader", runs=RUNS_MANY) == 64 * 56 * 56 // 128  # 16x8
  assert sources(conv, adapter="lavapipe", runs=RUNS_MANY) == \
    sources(conv, adapter="swiftshader", runs=RUNS_MANY) != sources(conv)
  short_lp = kg.Tensor.empty(1024, 32, name="s") @ kg.Tensor.empty(32, 1024, name="t")
  assert tile_threads(short_lp, adapter="lavapipe") == 1024 * 1024 // 128      # 8x16
  # given tiles win over long_tiles; a short reduction (K=32 < LONG_TILE_REDUCE) keeps tiles
  assert tile_threads(a @ b, adapter="swiftshader", tiles=((8, 8),)) == 1024 * 1024 // 64
  short = kg.Tensor.empty(1024, 32, name="s") @ kg.Tensor.empty(32, 1024, name="t")
  assert tile_threads(short, adapter="swiftshader") == 1024 * 1024 // 128
  with pytest.raises(kg.UnsupportedError, match=r"long_tiles=.*give \(rows, cols\) pairs"):
    kg.compile(a @ b, target="wgsl", adapter="swiftshader", long_tiles=((32, 16),))
  for bad in (((32, 16),), ((0, 4),), ((8, 16, 2),), ("x",), "abc", ((8.0, 8),)):
    with pytest.raises(kg.UnsupportedError, match=r"tiles=.*give \(rows, cols\) pairs"):
      kg.compile(a @ b, target="wgsl", tiles=bad)


@pytest.mark.parametrize("adapter", ["swiftshader", "lavapipe"])
@pytest.mark.parametrize("n", [256, 72])
def test_swiftshader_tiles_compute_right(on, n, adapter):
  """SwiftShader's and lavapipe's tile choice, run natively (lavapipe, with each table's
  options): over a long reduction (256), 16x16 tiles where 16 divides the rows and columns
  (256), 8x8 where it does not (72)."""
  on("WEBGPU", adapter=adapter)
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((n, 256), np.float32), rng.standard_normal((256, n), np.float32)
  got = (kg.Tensor(a) @ kg.Tensor(b)).numpy()
  np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
