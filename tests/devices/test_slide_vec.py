"""A slid depthwise conv's memory as vec4 words on WGSL (issue 42): each trip's window row read as
aligned runs of 4 columns (vector.aligned_loads) and each finished output row stored 4 columns at
a time (lowering/slide.py with `upcast_vec`, the WGSL target's default; PTX and PYTHON keep
scalar accesses). On lavapipe the scalar kernel was bound by its per-lane loads and stores: 3x3
convs ran at a third of a dense conv's GFLOP/s (bench/depthwise.py).

Both sides of each limit, values against numpy on every device and the WGSL's buffer
declarations: the input's width a multiple of 4 or not (its rows as words), C a multiple of 4 or
not, the output's columns a multiple of C or not (a ragged last block stores scalars), strides 1
and 2, option upcast_vec=False (the scalar kernel), an image's (H, W) with channels last (its
columns not contiguous: scalar stores). With words, a 3x3 window takes C = 16 columns
(slide.SLIDE_WIDE) where 16 divides the output's columns (else 8; 5x5 windows 8)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.graph.schedule import schedule
from kernelgen.lowering import optimize as opt
from kernelgen.lowering import slide
from kernelgen.render.targets import WGSL

from tools import ALL_DEVICES, forced_options, tint_validate, wgsl_validate


def _conv_np(x, w, b, stride, padding):
  """A depthwise conv2d in float64 numpy, tap by tap."""
  n, c, h, wd = x.shape
  _, _, kh, kw = w.shape
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  oh, ow = (h + 2 * padding - kh) // stride + 1, (wd + 2 * padding - kw) // stride + 1
  out = np.zeros((n, c, oh, ow))
  for i in range(kh):
    for j in range(kw):
      patch = xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
      out += patch * w[:, 0, i, j].reshape(1, c, 1, 1)
  return out + b.reshape(1, -1, 1, 1)


def _hswish(y):
  return y * (y + 3).clip(0, 6) / 6


# (x shape, k, stride, padding, forced (R, C), input read as words, output stored as words)
CASES = [
  ((1, 3, 12, 16), 3, 1, 1, (4, 8), True, True),      # W 16, C 8, 16 columns: both
  ((1, 3, 12, 18), 3, 1, 1, (4, 8), False, False),    # W 18: no words; 18 % 8: ragged block
  ((1, 3, 12, 16), 3, 1, 1, (4, 6), False, False),    # C 6: blocks start at 6k, not words
  ((1, 3, 12, 16), 3, 1, 1, (5, 4), True, True),      # C 4, ragged last strip (12 % 5)
  ((1, 2, 16, 16), 3, 2, 1, (3, 4), True, True),      # stride 2: 8 output columns
  ((1, 2, 15, 20), 5, 2, 2, (3, 8), True, False),     # stride 2, 10 output columns % 8
  ((1, 2, 12, 16), 5, 1, 2, (4, 8), True, True),
]


def _case(shape, k, seed):
  rng = np.random.default_rng(seed)
  c = shape[1]
  return (rng.standard_normal(shape).astype(np.float32),
          rng.standard_normal((c, 1, k, k)).astype(np.float32),
          rng.standard_normal(c).astype(np.float32))


_on = forced_options


def _words(source: str) -> tuple:
  """(input read as vec4 words, output stored as words) of a conv kernel's WGSL."""
  decl = dict(re.findall(r"var<storage, [a-z_]+> (b\d)_\w+: (array<[^;]+>);", source))
  return decl["b1"] == "array<vec4<f32>>", decl["b0"] == "array<vec4<f32>>"


def _dw(shape, k, stride, padding, device="PYTHON"):
  c = shape[1]
  x = Tensor.empty(*shape, device=device)
  return _hswish(x.conv2d(Tensor.empty(c, 1, k, k, device=device),
                          Tensor.empty(c, device=device), stride=stride, padding=padding,
                          groups=c))


@pytest.mark.parametrize("shape,k,stride,padding,forced,words_in,words_out", CASES)
def test_which_slid_kernels_read_and_store_words(shape, k, stride, padding, forced, words_in,
                                                  words_out):
  y = _dw(shape, k, stride, padding)
  (kernel,) = kg.compile([y], target="wgsl", slide=forced)
  assert _words(kernel.source) == (words_in, words_out)
  wgsl_validate(kernel.source, kernel.launch.entry_point)
  tint_validate(kernel.source, kernel.launch.entry_point)
  (scalar,) = kg.compile([y], target="wgsl", slide=forced, upcast_vec=False)
  assert _words(scalar.source) == (False, False)
  for target, extra in (("ptx", {"arch": "sm_80"}), ("python", {})):   # scalar there
    (kernel,) = kg.compile([y], target=target, slide=forced, **extra)
    (scalar,) = kg.compile([y], target=target, slide=forced, upcast_vec=False, **extra)
    assert kernel.source == scalar.source


@pytest.mark.parametrize("device", ALL_DEVICES)
@pytest.mark.parametrize("vec", [True, False])
@pytest.mark.parametrize("shape,k,stride,padding,forced,words_in,words_out", CASES)
def test_slid_words_match_numpy(device, vec, shape, k, stride, padding, forced, words_in,
                                words_out, monkeypatch):
  x, w, b = _case(shape, k, seed=sum(shape) + k + stride)
  dev = _on(device, monkeypatch, slide=forced, upcast_vec=vec)
  y = Tensor(x).to(dev).conv2d(Tensor(w).to(dev), Tensor(b).to(dev), stride=stride,
                               padding=padding, groups=shape[1])
  np.testing.assert_allclose(_hswish(y).numpy(), _hswish(_conv_np(x, w, b, stride, padding)),
                             rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
@pytest.mark.parametrize("k,stride,side", [(3, 1, 80), (5, 1, 80), (3, 2, 160), (5, 2, 80)])
def test_cpu_adapters_read_and_store_ppocr_depthwise_convs_as_words(adapter, k, stride, side):
  """bench/depthwise.py's depthwise convs (PP-OCRv4's) by the CPU adapters' defaults."""
  y = _dw((1, 96, side, side), k, stride, k // 2)
  (kernel,) = kg.compile([y], target="wgsl", adapter=adapter)
  assert _words(kernel.source) == (True, True)


def test_an_image_with_channels_last_stores_scalars(monkeypatch):
  """A blur of an (H, W, 3) image slides (H, W), whose columns are 3 apart in the output: each
  column stored alone (the input's rows, 3-strided too, are not words either); values on WEBGPU."""
  rng = np.random.default_rng(5)
  img = rng.random((12, 16, 3)).astype(np.float32)
  blur = rng.random((1, 1, 3, 3)).astype(np.float32)

  def blurred(device):
    t = Tensor(img).to(device).permute(2, 0, 1).unsqueeze(1)
    return t.conv2d(Tensor(blur).to(device), padding=1).squeeze(1).permute(1, 2, 0)
  (kernel,) = kg.compile([blurred("PYTHON")], target="wgsl", slide=(4, 4))
  assert "for (" in kernel.source and "vec4" not in kernel.source
  dev = _on("WEBGPU", monkeypatch, slide=(4, 4))
  want = np.stack([_conv_np(img[None, None, :, :, ch], blur, np.zeros(1), 1, 1)[0, 0]
                   for ch in range(3)], axis=-1)
  np.testing.assert_allclose(blurred(dev).numpy(), want, rtol=1e-5, atol=1e-5)


def _plan(y, **options):
  (item,) = schedule([y.node])
  return opt.optimize(item, WGSL, {"adapter": "lavapipe", **options}).slide


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_a_3x3_window_takes_16_columns_where_they_divide_the_row(adapter):
  """C = SLIDE_WIDE for 3x3 windows (strips of 40 rows: as many output columns in flight as 8
  columns' 1024 threads) where 16 divides the output's columns; 8 where not, for a 5x5 window
  (2.8x the products) and without words."""
  wide = slide.SLIDE_WIDE
  assert _plan(_dw((1, 96, 80, 80), 3, 1, 1), adapter=adapter) == (40, wide)
  assert _plan(_dw((1, 96, 160, 160), 3, 2, 1), adapter=adapter) == (40, wide)
  assert _plan(_dw((1, 96, 72, 72), 3, 1, 1), adapter=adapter)[1] == 8      # 72 % 16
  assert _plan(_dw((1, 96, 80, 80), 5, 1, 2), adapter=adapter) == (40, 8)
  assert _plan(_dw((1, 96, 80, 80), 3, 1, 1), adapter=adapter, upcast_vec=False) == (40, 8)


@pytest.mark.parametrize("device", ALL_DEVICES)
@pytest.mark.parametrize("shape,stride,cols", [((1, 4, 34, 32), 1, 16), ((1, 4, 34, 40), 1, 8),
                                               ((1, 4, 64, 64), 2, 16), ((1, 4, 64, 72), 2, 8)])
def test_the_default_columns_match_numpy(device, shape, stride, cols, monkeypatch):
  """slide=True: C = 16 or 8 as the CPU adapters' default on WEBGPU (words), 8 on PYTHON and
  PTXSIM (scalar)."""
  x, w, b = _case(shape, 3, seed=sum(shape) + stride)
  dev = _on(device, monkeypatch, slide=True)
  chosen, real = [], opt.optimize

  def spy(item, target, options=None):
    chosen.append(got := real(item, target, options))
    return got
  monkeypatch.setattr(opt, "optimize", spy)
  y = Tensor(x).to(dev).conv2d(Tensor(w).to(dev), Tensor(b).to(dev), stride=stride, padding=1,
                               groups=shape[1])
  np.testing.assert_allclose(_hswish(y).numpy(), _hswish(_conv_np(x, w, b, stride, 1)),
                             rtol=1e-4, atol=1e-4)
  slid = [o.slide for o in chosen if o.slide]
  assert slid and slid[0][1] == (cols if device == "WEBGPU" else 8)
