"""Depthwise (groups == channels) convs and pools: register tiles one row of columns wide.

Their outputs share little (a thread's neighbouring windows overlap, nothing more), so an 8 x 8
register tile only repeated the window's code 64 times: ShuffleNet's 3x3 depthwise convs over a
fused batch norm + ReLU were 4000-6000 lines of WGSL each, which lavapipe took 20-50 s to compile
at their first dispatch (tile_shape.shared_only, TILE_SHARE_MAX). Counted here, never timed:
the tile the optimizer picks, the kernel's size, and the values against numpy on PYTHON, WEBGPU
and PTXSIM, on both sides of the thresholds (a conv whose outputs share whole operands keeps its
8 x 8 tile; a small output takes no tile at all).
"""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.graph.schedule import schedule
from kernelgen.lowering import optimize as opt
from kernelgen.render.targets import WGSL
from tools import DEVICES, device_runtime

EPS = 1e-5


def _data(c: int, side: int, groups: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((1, c, side, side)).astype(np.float32)
  stats = [rng.random(c).astype(np.float32) + 0.5 for _ in range(4)]    # mean, var, scale, bias
  w = rng.standard_normal((c, c // groups, 3, 3)).astype(np.float32)
  return x, stats, w


def _kg_conv(x, stats, w, groups, stride, device=None):
  """conv2d(relu(batch_norm(x)), w, padding 1): the batch norm fused into the conv's loads."""
  c = x.shape[1]
  on = (lambda a: Tensor(a)) if device is None else (lambda a: Tensor(a).to(device))
  mean, var, scale, bias = (on(s).reshape(1, c, 1, 1) for s in stats)
  t = ((on(x) - mean) * (var + EPS).rsqrt() * scale + bias).relu()
  return t.conv2d(on(w), stride=stride, padding=1, groups=groups)


def _np_conv(x, stats, w, groups, stride):
  c = x.shape[1]
  mean, var, scale, bias = (s.reshape(1, c, 1, 1) for s in stats)
  t = np.maximum((x - mean) / np.sqrt(var + EPS) * scale + bias, 0)
  t = np.pad(t, ((0, 0), (0, 0), (1, 1), (1, 1)))
  windows = np.lib.stride_tricks.sliding_window_view(t, (3, 3), axis=(2, 3))[:, :, ::stride,
                                                                             ::stride]
  per = c // groups
  out = [np.einsum("nchwij,ocij->nohw", windows[:, g * per:(g + 1) * per],
                   w[g * (w.shape[0] // groups):(g + 1) * (w.shape[0] // groups)])
         for g in range(groups)]
  return np.concatenate(out, axis=1)


def _opts(y: Tensor):
  (item,) = schedule([y.node])
  return opt.optimize(item, WGSL)


@pytest.mark.parametrize("stride,tile", [(1, (1, 8)), (2, (1, 4))])
def test_depthwise_conv_tiles_one_row_and_stays_small(stride, tile):
  x, stats, w = _data(32, 28, 32)
  y = _kg_conv(x, stats, w, 32, stride)
  got = _opts(y)
  assert got.tile == tile and got.tile_axes == (2, 3)     # one row of the output's columns
  (kernel,) = kg.compile(y, target="wgsl")
  # the 8 x 8 tile was 64 windows of code (about 3000 lines at these sizes); one row of 8, 600
  assert kernel.source.count("\n") < 1000
  forced = kg.compile(y, target="wgsl", tile=(8, 8))[0].source.count("\n")
  assert forced > 3 * kernel.source.count("\n")


def test_convs_whose_outputs_share_operands_keep_their_tiles():
  """The other side of TILE_SHARE_MAX: a full conv's output channels share its input loads and
  its columns the weights (a 2 x 2 probe under 2.4 times one output): it keeps 8 x 8."""
  x, stats, w = _data(32, 28, 1)
  got = _opts(_kg_conv(x, stats, w, 1, 1))
  assert got.tile == (8, 8) and got.tile_axes == (1, 3)


def test_max_pool_tiles_one_row():
  x = Tensor(np.random.default_rng(1).standard_normal((1, 32, 28, 28)).astype(np.float32))
  got = _opts(x.relu().max_pool2d(3, 1, 1))
  assert got.tile == (1, 8)


def test_small_depthwise_conv_takes_no_tile():
  """Below TILE_MIN_SIZE outputs there is no tile to shrink."""
  x, stats, w = _data(8, 6, 8)
  assert 8 * 6 * 6 < opt.TILE_MIN_SIZE and _opts(_kg_conv(x, stats, w, 8, 1)).tile == ()


@pytest.fixture(params=DEVICES)
def device(request):
  if request.param != "PYTHON":
    device_runtime(request.param)
  return request.param


# (channels, side, groups, stride): depthwise tiled one row (stride 1 and 2, a ragged last
# row of columns at 14 / 2 = 7), a grouped conv, a full conv (8 x 8) and a small one (no tile)
CASES = [(16, 28, 16, 1), (16, 14, 16, 2), (16, 16, 4, 1), (8, 16, 1, 1), (8, 6, 8, 1)]


@pytest.mark.parametrize("c,side,groups,stride", CASES)
def test_depthwise_and_grouped_convs_match_numpy(c, side, groups, stride, device):
  if device == "PYTHON":                   # the interpreter is slow (and PYTHON takes no tiles)
    c, side, groups = min(c, 8), min(side, 8), min(c, 8) if groups == c else groups
  x, stats, w = _data(c, side, groups, seed=side + groups)
  got = _kg_conv(x, stats, w, groups, stride, device).numpy()
  np.testing.assert_allclose(got, _np_conv(x, stats, w, groups, stride), rtol=1e-4, atol=1e-4)
