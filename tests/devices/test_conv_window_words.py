"""A dense conv's register tile reading its padded input windows as vec4 words on WGSL (issue 42,
lowering/regtile.py ALIGNED_WINDOWS): a row of taps' loads of the tile's columns, gated by the
padding, in aligned runs of 4 (vector.aligned_loads) where the option upcast_vec (the WGSL
target's default) holds; PTX and PYTHON keep scalar loads. Counted here, never timed
(bench/conv_window_ab.py times it): the input buffer's declaration and its reads in the kernel,
and values against numpy on PYTHON and WEBGPU on both sides of the rule (widths a multiple of 4
or not, padding or none, stride 1 and 2, channel counts that fill no tile, 5x5 windows)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.lowering import regtile

from tools import forced_options


def _want(x, w, stride, pad):
  """numpy's correlation in float64, tap by tap."""
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  _, _, kh, kw = w.shape
  oh, ow = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
  out = 0
  for i in range(kh):
    for j in range(kw):
      win = xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
      out = out + np.einsum("nchw,oc->nohw", win, w[:, :, i, j])
  return out


def _input_reads(source: str) -> tuple[bool, int]:
  """(the input b1 declared as vec4 words, how often the kernel indexes it)."""
  decl = dict(re.findall(r"var<storage, [a-z_]+> (b\d)_\w+: (array<[^;]+>);", source))
  return decl["b1"] == "array<vec4<f32>>", len(re.findall(r"\bb1_\w+\[", source))


def _conv(x_shape, w_shape, stride, pad):
  return Tensor.empty(*x_shape).conv2d(Tensor.empty(*w_shape), stride=stride, padding=pad)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_ppocr_dense_conv_reads_its_windows_as_words(adapter):
  """PP-OCRv4 det's 3x3 96 -> 24 conv at 80x80: a row of taps of a 16-column tile reads 18 input
  columns; as words, 4 aligned vec4 loads and the 2 halo columns alone (18 scalar loads before)."""
  y = _conv((1, 96, 80, 80), (24, 96, 3, 3), 1, 1)
  (kernel,) = kg.compile([y], target="wgsl", adapter=adapter)
  (scalar,) = kg.compile([y], target="wgsl", adapter=adapter, upcast_vec=False)
  words, reads = _input_reads(kernel.source)
  assert words and reads <= scalar.source.count("b1_in1[") // 2
  assert _input_reads(scalar.source)[0] is False


def test_ddddocr_ragged_conv_reads_its_windows_as_words(monkeypatch):
  """ddddocr common_det's 3x3 48 -> 48 conv at 52x52 in 8-column tiles: the last block of
  columns starts at 44 (regtile.py FITTED_BLOCKS), not at 48 with its columns clamped, so every
  block's window reads aligned words, and the clamps' selects are gone."""
  y = _conv((1, 48, 52, 52), (48, 48, 3, 3), 1, 1)
  (kernel,) = kg.compile([y], target="wgsl", tile=(8, 8))
  (scalar,) = kg.compile([y], target="wgsl", tile=(8, 8), upcast_vec=False)
  words, reads = _input_reads(kernel.source)
  assert words and reads <= scalar.source.count("b1_in1[") // 2
  monkeypatch.setattr(regtile, "FIT_RAGGED", False)
  (clamped,) = kg.compile([y], target="wgsl", tile=(8, 8))
  assert _input_reads(clamped.source)[0] is False
  assert reads <= _input_reads(clamped.source)[1] // 2
  assert kernel.source.count("select(") <= clamped.source.count("select(") // 2


# (x shape, w shape, stride, padding, input read as words on WGSL)
CASES = [
  ((1, 5, 9, 16), (7, 5, 3, 3), 1, 1, True),       # 7 output channels fill no tile's rows
  ((1, 5, 9, 18), (7, 5, 3, 3), 1, 1, False),      # rows of 18: no index a multiple of 4
  ((1, 3, 8, 20), (6, 3, 3, 3), 1, 1, True),       # 20 % 8: the last block starts at 12
  ((1, 3, 5, 13), (4, 3, 3, 3), 1, 1, False),      # 13 % 8: the last block at 5, rows of 13
  ((1, 2, 6, 10), (3, 2, 3, 3), 2, 1, False),      # 5 outputs of 8-column tiles: clamped
  ((1, 2, 8, 16), (5, 2, 5, 5), 1, 2, True),       # 5x5 window, padding 2
  ((1, 4, 16, 16), (6, 4, 3, 3), 2, 1, True),      # stride 2
  ((1, 4, 10, 16), (6, 4, 3, 3), 1, 0, False),     # no padding: ungated loads, read as before
]


@pytest.mark.parametrize("x_shape,w_shape,stride,pad,words", CASES)
def test_which_dense_convs_read_words(x_shape, w_shape, stride, pad, words):
  y = _conv(x_shape, w_shape, stride, pad)
  (kernel,) = kg.compile([y], target="wgsl", tile=(4, 8))
  assert _input_reads(kernel.source)[0] is words
  (scalar,) = kg.compile([y], target="wgsl", tile=(4, 8), upcast_vec=False)
  assert _input_reads(scalar.source)[0] is False
  for target, extra in (("ptx", {"arch": "sm_80"}), ("python", {})):    # scalar there
    (kernel,) = kg.compile([y], target=target, tile=(4, 8), **extra)
    (scalar,) = kg.compile([y], target=target, tile=(4, 8), upcast_vec=False, **extra)
    assert kernel.source == scalar.source


@pytest.mark.parametrize("device,vec", [("PYTHON", True), ("WEBGPU", True), ("WEBGPU", False)])
@pytest.mark.parametrize("x_shape,w_shape,stride,pad,words", CASES)
def test_dense_conv_words_match_numpy(device, vec, x_shape, w_shape, stride, pad, words,
                                      monkeypatch):
  rng = np.random.default_rng(sum(x_shape) + sum(w_shape) + stride + pad)
  x = rng.standard_normal(x_shape).astype(np.float32)
  w = rng.standard_normal(w_shape).astype(np.float32)
  dev = forced_options(device, monkeypatch, upcast_vec=vec, tile=(4, 8))
  y = Tensor(x).to(dev).conv2d(Tensor(w).to(dev), stride=stride, padding=pad)
  np.testing.assert_allclose(y.numpy(), _want(x, w, stride, pad), rtol=1e-4, atol=1e-4)
