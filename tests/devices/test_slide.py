"""Depthwise convs slid down rows (lowering/slide.py; option slide, lavapipe's and SwiftShader's
default, render/wgsl/adapters.py): each thread computes C columns of one channel down a strip of
rows, each input row read once, in one loop whose body does not grow with the strip.

Counted here, never timed (bench/depthwise.py times it): which kernels slide (depthwise convs,
grouped convs with few channels per group, blurs; not dense convs, not a dilation that is not a
multiple of the stride, not small outputs, not other adapters), that the kernel stays small (a
loop; its WGSL a few KB where 8x8 unrolled windows were 140-330 KB), and the values against numpy
on PYTHON, PTXSIM and WEBGPU, forced strips covering ragged last rows and columns, strides 1 and 2
(and 1 x 2), padding 0-2, a channel multiplier, a non-square window, dilation 2 at stride 2,
batch 2, a bias and hard-swish after the sum and a batch norm + ReLU before it (and on CUDA
where a GPU is). WGSL checked with wgpu (naga) and Dawn's Tint, PTX with ptxas."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.graph.schedule import schedule
from kernelgen.lowering import optimize as opt
from kernelgen.lowering import slide
from kernelgen.lowering.compile_cost import RUNS_MANY
from kernelgen.render.targets import WGSL

from tools import ALL_DEVICES, forced_options, ptxas_check, tint_validate, wgsl_validate


def _conv_np(x, w, b, stride, padding, dilation, groups):
  """conv2d in float64 numpy, tap by tap."""
  n, c, h, wd = x.shape
  o, cg, kh, kw = w.shape
  (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
  oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
  out, og = np.zeros((n, o, oh, ow)), o // groups
  for i in range(kh):
    for j in range(kw):
      patch = xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
      for g in range(groups):
        out[:, g * og:(g + 1) * og] += np.einsum(
          "nchw,oc->nohw", patch[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og, :, i, j])
  return out if b is None else out + b.reshape(1, -1, 1, 1)


def _hswish(y):
  return y * (y + 3).clip(0, 6) / 6


# (x shape, window, stride, padding, dilation, channel multiplier, slide): forced strips of few
# rows and columns so that small inputs have ragged last strips and column blocks
CASES = [
  ((1, 4, 11, 13), (3, 3), (1, 1), (1, 1), (1, 1), 1, (4, 4)),
  ((1, 3, 11, 13), (5, 5), (1, 1), (2, 2), (1, 1), 1, (4, 4)),
  ((2, 3, 12, 12), (3, 3), (2, 2), (1, 1), (1, 1), 1, (4, 4)),
  ((1, 2, 15, 14), (5, 5), (2, 2), (2, 2), (1, 1), 2, (2, 3)),
  ((1, 2, 12, 16), (3, 5), (1, 2), (1, 2), (1, 1), 1, True),
  ((1, 2, 14, 14), (3, 3), (2, 2), (2, 2), (2, 2), 1, True),
  ((1, 3, 10, 10), (3, 3), (1, 1), (0, 0), (1, 1), 1, (3, 8)),
  ((1, 2, 9, 10), (5, 5), (1, 1), (0, 0), (1, 1), 1, (2, 4)),
]


def _case(shape, window, mult, seed):
  rng = np.random.default_rng(seed)
  c = shape[1]
  x = rng.standard_normal(shape).astype(np.float32)
  w = rng.standard_normal((c * mult, 1) + window).astype(np.float32)
  b = rng.standard_normal(c * mult).astype(np.float32)
  return x, w, b


_on = forced_options


def _spy(monkeypatch) -> list:
  """The Opts the optimizer returns from now on (the test checks a kernel slid)."""
  chosen, real = [], opt.optimize

  def spy(item, target, options=None):
    chosen.append(got := real(item, target, options))
    return got
  monkeypatch.setattr(opt, "optimize", spy)
  return chosen


@pytest.mark.parametrize("device", ALL_DEVICES)
@pytest.mark.parametrize("shape,window,stride,padding,dilation,mult,forced", CASES)
def test_slid_depthwise_convs_match_numpy(device, shape, window, stride, padding, dilation, mult,
                                          forced, monkeypatch):
  x, w, b = _case(shape, window, mult, seed=sum(shape) + window[0])
  dev = _on(device, monkeypatch, slide=forced)
  chosen = _spy(monkeypatch)
  y = Tensor(x).to(dev).conv2d(Tensor(w).to(dev), Tensor(b).to(dev), stride=stride,
                               padding=padding, dilation=dilation, groups=shape[1])
  got = _hswish(y).numpy()
  want = _hswish(_conv_np(x, w, b, stride, padding, dilation, shape[1]))
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  assert any(o.slide for o in chosen), "no kernel slid"
  if forced is not True:
    assert any(o.slide == tuple(forced) for o in chosen)


@pytest.mark.parametrize("device", ALL_DEVICES)
def test_a_prologue_before_the_window_and_a_blur_of_an_image(device, monkeypatch):
  """A batch norm + ReLU fused into the window's reads (computed once per read input, not per
  window element) and a blur of an (H, W, 3) image, which slides its (H, W) axes."""
  rng = np.random.default_rng(3)
  x = rng.standard_normal((1, 5, 13, 11)).astype(np.float32)
  w = rng.standard_normal((5, 1, 3, 3)).astype(np.float32)
  mean, scale = (rng.random(5).astype(np.float32) + 0.5 for _ in range(2))
  img = rng.random((12, 17, 3)).astype(np.float32)
  blur = rng.random((1, 1, 5, 5)).astype(np.float32)
  dev = _on(device, monkeypatch, slide=(4, 4))
  chosen = _spy(monkeypatch)
  t = ((Tensor(x).to(dev) - Tensor(mean).to(dev).reshape(1, 5, 1, 1)) *
       Tensor(scale).to(dev).reshape(1, 5, 1, 1)).relu()
  got = t.conv2d(Tensor(w).to(dev), padding=1, groups=5).numpy()
  t_np = np.maximum((x - mean.reshape(1, 5, 1, 1)) * scale.reshape(1, 5, 1, 1), 0)
  np.testing.assert_allclose(got, _conv_np(t_np, w, None, (1, 1), (1, 1), (1, 1), 5),
                             rtol=1e-4, atol=1e-4)
  im = Tensor(img).to(dev).permute(2, 0, 1).unsqueeze(1).conv2d(Tensor(blur).to(dev), padding=2)
  got = im.squeeze(1).permute(1, 2, 0).numpy()
  want = _conv_np(img.transpose(2, 0, 1)[:, None], blur, None, (1, 1), (2, 2), (1, 1), 1)
  np.testing.assert_allclose(got, want[:, 0].transpose(1, 2, 0), rtol=1e-4, atol=1e-4)
  assert sum(bool(o.slide) for o in chosen) >= 2


def _dw(c=96, side=80, k=5, stride=1, groups=None, dilation=1, mult=1):
  """PP-OCR's depthwise conv with bias and hard-swish (inputs on PYTHON: compile only)."""
  x = Tensor.empty(1, c, side, side, device="PYTHON")
  w = Tensor.empty(c * mult, c // (groups or c), k, k, device="PYTHON")
  b = Tensor.empty(c * mult, device="PYTHON")
  return _hswish(x.conv2d(w, b, stride=stride, padding=k // 2 * dilation, dilation=dilation,
                          groups=groups or c))


def _opts(y, **options):
  (item,) = schedule([y.node])
  return opt.optimize(item, WGSL, options)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
@pytest.mark.parametrize("k,stride", [(3, 1), (5, 1), (3, 2), (5, 2)])
def test_cpu_adapters_slide_depthwise_convs_in_a_small_kernel(adapter, k, stride):
  """The default on CPU adapters, one-off and for many runs alike (nothing to cap): C = 8
  columns (16 for a 3x3 window over 80 output columns, slide.SLIDE_WIDE: 16 divides them;
  tests/devices/test_slide_vec.py), a loop, a few KB of WGSL (PP-OCR's 5x5 in 8x8 unrolled tiles:
  140-330 KB)."""
  y = _dw(k=k, stride=stride)
  for runs in (1, RUNS_MANY):
    got = _opts(y, adapter=adapter, runs=runs)
    assert got.slide and got.slide[1] == (16 if (k, stride) == (3, 1) else 8)
    assert got.tile_axes == (2, 3) and not got.capped
  (kernel,) = kg.compile([y], target="wgsl", adapter=adapter)
  assert "loop {" in kernel.source or "for (" in kernel.source
  assert len(kernel.source) < 40_000
  unrolled = kg.compile([y], target="wgsl", adapter=adapter, runs=RUNS_MANY, slide=False)[0]
  assert len(kernel.source) * 3 < len(unrolled.source)


def test_what_does_not_slide():
  """Dense convs and grouped ones with more channels per group than the limits keep their tiles; a
  dilation that is not a multiple of the stride, a small output and adapters without the
  option (GPUs, unknown; PTX) do not slide; a given tile= wins over the adapter's default."""
  assert not _opts(_dw(c=16, groups=1), adapter="lavapipe").slide
  assert not _opts(_dw(c=80, groups=4), adapter="lavapipe").slide      # 20 channels per group
  assert not _opts(_dw(dilation=2), adapter="lavapipe").slide
  assert not _opts(_dw(c=4, side=16), adapter="lavapipe").slide      # 1024 outputs
  for adapter in ("discrete", "integrated", "unknown"):
    assert not _opts(_dw(), adapter=adapter).slide
  assert _opts(_dw(), slide=True).slide and not _opts(_dw()).slide
  assert _opts(_dw(), adapter="lavapipe", tile=(4, 4)).tile == (4, 4)
  assert _opts(_dw(mult=2), adapter="lavapipe").slide


@pytest.mark.parametrize("slide_opt", [(0, 4), (4,), "yes"])
def test_bad_slide_options_are_typed_errors(slide_opt):
  with pytest.raises(kg.UnsupportedError, match="slide="):
    kg.compile([_dw(c=8, side=16)], target="wgsl", slide=slide_opt)


@pytest.mark.parametrize("k,stride", [(3, 1), (5, 2)])
def test_slid_kernels_are_valid_wgsl_and_ptx(k, stride):
  y = _dw(c=8, side=20, k=k, stride=stride)
  for option in (True, (3, 4)):
    (kernel,) = kg.compile([y], target="wgsl", slide=option)
    wgsl_validate(kernel.source, kernel.launch.entry_point)
    tint_validate(kernel.source, kernel.launch.entry_point)
    (kernel,) = kg.compile([y], target="ptx", arch="sm_80", slide=option)
    ptxas_check(kernel.source, "sm_80")


def test_the_strip_rows_split_for_threads():
  """Few column blocks: the rows split into strips (at least SLIDE_MIN_STRIP * (q - 1) rows each)
  until SLIDE_MIN_THREADS threads; many: whole columns."""
  few = _opts(_dw(c=8, side=80), adapter="lavapipe").slide
  many = _opts(_dw(c=192, side=80), adapter="lavapipe").slide
  assert many == (80, 8)
  assert few[0] < 80 and few[0] >= slide.SLIDE_MIN_STRIP * 4


# grouped convs with cg > 1 input channels per group: (x shape, groups, output channels per
# group, window, stride, padding, forced strip, slides), both sides of SLIDE_MAX_CHANNELS and
# SLIDE_MAX_SHARED (above them: the register tiles as before)
MAXC, MAXS = slide.SLIDE_MAX_CHANNELS, slide.SLIDE_MAX_SHARED
GROUPED = [
  ((1, 8, 11, 13), 4, 1, (3, 3), (1, 1), (1, 1), (4, 4), True),         # cg 2
  ((1, 8, 12, 12), 2, 2, (3, 3), (2, 2), (1, 1), (4, 4), True),         # cg 4, stride 2
  ((2, 6, 10, 9), 2, MAXS, (5, 5), (1, 1), (2, 2), (3, 4), True),       # cg 3, og at the limit
  ((1, 2 * MAXC, 9, 9), 2, 1, (3, 3), (1, 1), (1, 1), (4, 4), True),   # cg at the limit
  ((1, 2 * (MAXC + 1), 9, 9), 2, 1, (3, 3), (1, 1), (1, 1), (4, 4), False),   # cg above it
  ((1, 4, 10, 10), 2, MAXS + 1, (3, 3), (1, 1), (1, 1), (4, 4), False),     # og above it
]


def _grouped(shape, groups, og, window, seed):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(shape).astype(np.float32)
  w = rng.standard_normal((groups * og, shape[1] // groups) + window).astype(np.float32)
  b = rng.standard_normal(groups * og).astype(np.float32)
  return x, w, b


@pytest.mark.parametrize("device", ALL_DEVICES)
@pytest.mark.parametrize("shape,groups,og,window,stride,padding,forced,slides", GROUPED)
def test_grouped_convs_with_several_channels_per_group(device, shape, groups, og, window, stride,
                                                       padding, forced, slides, monkeypatch):
  """Each thread sums cg input channels' windows (a loop over rows, the channels unrolled);
  above either limit the conv keeps its register tiles. Values against numpy either way."""
  x, w, b = _grouped(shape, groups, og, window, seed=sum(shape) + groups + og)
  dev = _on(device, monkeypatch, slide=forced)
  chosen = _spy(monkeypatch)
  y = Tensor(x).to(dev).conv2d(Tensor(w).to(dev), Tensor(b).to(dev), stride=stride,
                               padding=padding, groups=groups)
  got = _hswish(y).numpy()
  want = _hswish(_conv_np(x, w, b, stride, padding, (1, 1), groups))
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  assert any(o.slide == tuple(forced) for o in chosen) == slides


def test_cpu_adapters_slide_grouped_convs_with_few_channels_and_outputs_per_group():
  """The CPU adapters' default: a grouped conv slides with at most SLIDE_WORK products per trip
  (cg * kh * kw per column: C = 8 for 4 channels of 3x3, 2 for 16 run many times); a dense conv does not (its
  output channels all read each window), nor one with more outputs per group than the limit."""
  def grouped(c, groups, og, k=3):
    x = Tensor.empty(1, c, 40, 40, device="PYTHON")
    w = Tensor.empty(groups * og, c // groups, k, k, device="PYTHON")
    return _hswish(x.conv2d(w, padding=k // 2, groups=groups))
  for adapter in ("lavapipe", "swiftshader"):
    assert _opts(grouped(128, 32, 1), adapter=adapter).slide[1] == 8
    assert _opts(grouped(128, 32, MAXS), adapter=adapter).slide[1] == 8
    assert _opts(grouped(128, 8, 1), adapter=adapter, runs=RUNS_MANY).slide[1] == 2
    assert _opts(grouped(128, 8, 1), adapter=adapter).slide     # (C = 1 within a one-off's budget)
    assert not _opts(grouped(128, 32, MAXS + 1), adapter=adapter).slide
    assert not _opts(grouped(32, 1, 32), adapter=adapter).slide
    assert not _opts(grouped(128, 16, 8, k=1), adapter=adapter).slide   # 1x1: no window
  assert not _opts(grouped(128, 32, 1), adapter="discrete").slide


def test_slid_grouped_kernels_are_valid_wgsl_and_ptx():
  y = _hswish(Tensor.empty(1, 8, 20, 20, device="PYTHON").conv2d(
    Tensor.empty(4, 4, 3, 3, device="PYTHON"), stride=2, padding=1, groups=2))
  for option in (True, (3, 4)):
    (kernel,) = kg.compile([y], target="wgsl", slide=option)
    assert "loop {" in kernel.source or "for (" in kernel.source
    wgsl_validate(kernel.source, kernel.launch.entry_point)
    tint_validate(kernel.source, kernel.launch.entry_point)
    (kernel,) = kg.compile([y], target="ptx", arch="sm_80", slide=option)
    ptxas_check(kernel.source, "sm_80")
