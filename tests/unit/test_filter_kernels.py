"""The image-filter demo's kernels (issue 22): edge padding as a clamped index (MAX / MIN in the
index math, no compare, mask or select); register tiles that take a short output axis whole (a
pixel's 3 colour channels: (8, 3) tiles of columns x channels, so the channels share the pixel's
loads); and a tie between such a pair and two long axes going to the long ones (a blur's 8x8
tiles of rows x columns share the window's loads both ways). Values against numpy on the
interpreter and on wgpu, sizes on both sides of the tile thresholds."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.graph.schedule import schedule
from kernelgen.lowering import optimize as opt
from kernelgen.uop.ops import Ops
from kernelgen.render.targets import PTX, WGSL
from ops_util import same

SEPIA = np.float32([[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]])
GAUSS = np.outer([1, 4, 6, 4, 1], [1, 4, 6, 4, 1]).astype(np.float32) / 256


def item_of(t: Tensor):
  (item,) = schedule([t.node])
  return item


def uops(kernel) -> list:
  return kernel.kernel.uops


def blur_edge(img: Tensor) -> Tensor:
  """A 5x5 Gaussian blur of img (H, W, 3) over its edge-padded copy, back to (H, W, 3)."""
  x = img.permute(2, 0, 1).unsqueeze(1).pad(((0, 0), (0, 0), (2, 2), (2, 2)), mode="edge")
  return x.conv2d(Tensor(GAUSS.reshape(1, 1, 5, 5))).squeeze(1).permute(1, 2, 0)


def blur_edge_np(img: np.ndarray) -> np.ndarray:
  x = np.pad(img.astype(np.float64), ((2, 2), (2, 2), (0, 0)), mode="edge")
  win = np.lib.stride_tricks.sliding_window_view(x, (5, 5), axis=(0, 1))
  return np.einsum("hwcij,ij->hwc", win, GAUSS.astype(np.float64)).astype(np.float32)


def test_edge_pad_is_a_clamped_index_without_masks():
  """Every load of an edge-padded read is at MAX / MIN of the position: no compare, no select
  (the gather's own clamp and its 'inside' mask fold away: value ranges show the index is in)."""
  x = Tensor.empty(40, 30, name="x")
  for y in (x.pad(((2, 2), (2, 2)), mode="edge"), blur_edge(Tensor.empty(40, 30, 3))):
    (kernel,) = kg.compile(y, target="wgsl")
    ops = {u.op for u in uops(kernel)}
    assert Ops.WHERE not in ops and Ops.CMPEQ not in ops
    assert Ops.MAX in ops and Ops.MIN in ops
    # the only select left is the kernel's own bounds gate on a load (`if (g) { store }`), which
    # the WGSL writer renders as a select over a load at a safe index: no padding masks
    source = re.sub(r"select\(0\.0f, b\d+_\w+\[select\(0i, v\d+, (v\d+)\)\], \1\)", "",
                    kernel.source)
    assert "select(" not in source


@pytest.mark.parametrize("shape", [(3, 4), (1, 7), (5, 1)])
def test_edge_pad_values(device, shape):
  a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * 0.5 - 2
  same(Tensor(a).pad(((2, 3), (4, 1)), mode="edge"), np.pad(a, ((2, 3), (4, 1)), mode="edge"))


def test_short_channel_axis_is_tiled_whole():
  """A (H, W, 3) reduction (the sepia matrix per pixel) takes a tile of 8 columns x all 3
  channels: the pixel's 3 values are loaded once for its 3 outputs (it had no tile: a reduction
  of 3 is under TILE_MIN_REDUCE, and 3 channels under the smallest tile)."""
  img = Tensor.empty(64, 64, 3, name="img")
  y = img @ Tensor(SEPIA).T
  got = opt.optimize(item_of(y), WGSL)
  assert got.tile == (8, 3) and got.tile_axes == (1, 2) and not got.stage
  assert not opt.optimize(item_of(y), PTX).stage            # a clipped tile is never staged
  (tiled,) = kg.compile(y, target="wgsl")
  (plain,) = kg.compile(y, target="wgsl", local=64)
  # per step of the reduction: one value of each of the 8 pixels for their 24 outputs (8 x 3),
  # where one output per thread loads one value for 1
  assert [sum(u.op is Ops.LOAD and u.src[0].arg == 1 for u in uops(k))
          for k in (tiled, plain)] == [8, 1]
  # a reduction of 3 whose outputs share nothing (row sums over a short last axis) keeps no tile
  assert opt.optimize(item_of(Tensor.empty(64, 64, 3, 3).sum(-1)), WGSL).tile == ()
  # below TILE_MIN_SIZE outputs: no tile
  assert opt.optimize(item_of(Tensor.empty(8, 8, 3) @ Tensor(SEPIA).T), WGSL).tile == ()


def test_edge_blur_shares_window_loads():
  """The 5x5 blur of (H, W, 3) in 8x8 tiles of rows x columns (a tie in the probe's loads with
  columns x channels, which has a short axis): each step over the window's rows loads the 8 rows
  x 12 columns its 64 outputs need, not 64 x 5 (neighbouring outputs share them); a smaller
  image takes 4x4 tiles."""
  for (h, w), tile, loads in (((96, 128), (8, 8), 8 * 12), ((48, 64), (4, 4), 4 * 8)):
    y = blur_edge(Tensor.empty(h, w, 3, name="img"))
    got = opt.optimize(item_of(y), WGSL)
    assert got.tile == tile and got.tile_axes == (0, 1)
    (kernel,) = kg.compile(y, target="wgsl")
    assert sum(u.op is Ops.LOAD and u.src[0].arg == 1 for u in uops(kernel)) == loads
    (plain,) = kg.compile(y, target="wgsl", local=64)
    assert sum(u.op is Ops.LOAD and u.src[0].arg == 1 for u in uops(plain)) == 1   # in a loop


@pytest.mark.parametrize("size", [(6, 5), (40, 64)])     # under and over TILE_MIN_SIZE outputs
def test_filter_chain_values(device, size):
  """The demo's sepia and edge-padded blur (web/demos/filters_model.py) against numpy."""
  rng = np.random.default_rng(1)
  a = rng.random(size + (3,), dtype=np.float32)
  img = Tensor(a)
  sepia = img @ Tensor(SEPIA).T
  want_sepia = (a.astype(np.float64) @ SEPIA.T.astype(np.float64)).astype(np.float32)
  same(sepia, want_sepia, rtol=1e-5, atol=1e-6)
  same(1 - blur_edge(sepia), 1 - blur_edge_np(want_sepia), rtol=1e-5, atol=1e-5)
