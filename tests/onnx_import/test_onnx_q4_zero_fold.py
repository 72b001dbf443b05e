"""MatMulNBits' decode matvec with each block's zero point folded out of its values
(quant_nbits.matmul_words, lowering/combine.py pairwise): where a block's words are unrolled
(reduce_inner, the CPU adapters' layout) its sum is sum x * code minus the zero point times the
block's sum of x, made once for all of a thread's rows, so a value costs no subtraction. The
WGSL at both CPU adapters' defaults: one float subtraction per block and row, not one per value.
Values against a float64 numpy reference on PYTHON and WEBGPU with the unrolled layout and
without it (both sides of where the fold applies), with activations far from zero (block sums
that nearly cancel), every zero-point form, 4 and 8 bits."""
from __future__ import annotations

import re

import numpy as np
import pytest

from kernelgen.render.wgsl.adapters import TABLE
from onnx_contrib_util import kg_run, options_forcer
from test_onnx_q4_stepped import STEPPED
from test_onnx_quant_nbits import nbits_model, q4_matvec_kernel, quantize_nbits

LOOPED = {"reduce_inner": 0, "reduce_whole": 0, "reduce_step": 0}


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_zero_point_subtracted_once_per_block_and_row(adapter):
  """At the adapter's defaults the q4 matvec's float subtractions are the folded zero points'
  (one per block and row a trip): values cost no subtraction of their own; each value still has
  its own conversion (none is dropped)."""
  defaults = TABLE[(adapter, "rows")]
  step, rows = defaults["reduce_step"], defaults["reduce_rows"]
  n, k = 256, 576
  src = q4_matvec_kernel(n, k, target="wgsl", adapter=adapter).source
  per_trip = max(b for b in range(1, step // 32 + 1) if (k // 32) % b == 0)
  subs = re.findall(r": f32 = v\d+ - v\d+;", src)
  assert 0 < len(subs) <= rows * per_trip, (len(subs), src[:3000])
  # each value: one conversion of its masked field
  conversions = re.findall(r": f32 = f32\(v\d+\);", src)
  assert len(conversions) >= rows * per_trip * 32


def _reference(n, k, bits, zp, seed, a):
  """float64 x @ dequant(B).T of nbits_model's weight, and the sum of the terms' magnitudes."""
  packed, scales, zps = quantize_nbits(n, k, bits, 32, seed, zp)
  blocks = -(-k // 32)
  if bits == 4:
    codes = np.stack([packed & 15, packed >> 4], -1).reshape(n, blocks * 32)
  else:
    codes = packed.reshape(n, blocks * 32)
  if zp == "uint8" and bits == 4:
    z = np.stack([zps & 15, zps >> 4], -1).reshape(n, -1)[:, :blocks]
  elif zp == "uint8":
    z = zps.reshape(n, blocks)
  elif zp == "float":
    z = zps.reshape(n, blocks)
  else:
    z = np.full((n, blocks), 1 << (bits - 1))
  z = np.repeat(z.astype(np.float64), 32, 1)[:, :k]
  s = np.repeat(scales.reshape(n, blocks).astype(np.float64), 32, 1)[:, :k]
  c = codes[:, :k].astype(np.float64)
  x = a.reshape(-1, k).astype(np.float64)
  return x @ ((c - z) * s).T, np.abs(x) @ ((c + z) * s).T


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("layout", ["unrolled", "looped"])
@pytest.mark.parametrize("n,k,bits,zp", [
  (64, 576, 4, "uint8"),     # 18 blocks: trips of the adapters' step
  (32, 100, 4, "none"),      # K short of a whole block (padded): the zero point 8
  (32, 256, 4, "float"),     # float zero points
  (16, 128, 8, "uint8")])    # 8-bit fields
def test_folded_zero_points_match_numpy(monkeypatch, device, layout, n, k, bits, zp):
  if layout == "unrolled" and device == "PYTHON":
    options_forcer(monkeypatch, STEPPED)(device)
  elif layout == "looped":
    options_forcer(monkeypatch, LOOPED)(device)
  seed = n + k + bits
  model, feeds = nbits_model(1, n, k, bits, 32, zp, seed=seed)
  # activations far from zero: each block's sum of x * code and its zero point's term nearly cancel
  feeds["A"] = (feeds["A"] * 0.5 + 40.0).astype(np.float32)
  got = kg_run(model, feeds, device)[0].reshape(1, n)
  want, size = _reference(n, k, bits, zp, seed, feeds["A"])
  # float32 sums: a few ulps of the terms' magnitudes (a wrong zero point is off by ~40 * scale)
  assert np.all(np.abs(got - want) <= 2e-6 * size + 1e-6), np.abs(got - want).max()
