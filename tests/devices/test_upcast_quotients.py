"""A thread's upcast outputs share their base's quotients (rules/symbolic.py _drop_low_bits):
output j of a thread is base + j, and where every term of base is a multiple of g (the upcast)
and g divides c, (base + j) // c is base // c. PP-OCRv4 det's head input, the concat of four
24-channel maps upsampled x8, x4, x2 and x1 (nearest Resize) each scaled as x + x * s, is one
elementwise kernel of 8 outputs a thread; it divided each output's index again (79 divisions
and remainders a thread, where SwiftShader's Subzero divides lane by lane: 34 CPU ms natively
against 16 with them shared). The launch stays; the kernel's divisions, and its values on PYTHON
and WEBGPU (both CPU adapters' tables) against numpy, det's (maps of 10 to 80 columns: a thread's 8
outputs lie in one row) and 60 columns upsampled x4, x2, x1, x1 (a thread's outputs cross rows:
the column's and the row's quotients stay per output)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kernelgen as kg
from ops_util import on  # noqa: F401  (fixture)


def _up(t, f: int):
  if f == 1:
    return t
  b, c, h, w = t.shape
  return t.reshape(b, c, h, 1, w, 1).expand(b, c, h, f, w, f).reshape(b, c, h * f, w * f)


DET, CROSSING = (80, (8, 4, 2, 1)), (60, (4, 2, 1, 1))


def _head_input(xs, ss, factors):
  """det's concat: cat([up8(x5 + x5*s5), up4(..), up2(..), x2 + x2*s2], channels)."""
  return kg.cat([_up(x + x * s, f) for x, s, f in zip(xs, ss, factors)], axis=1)


def _operands(n: int, factors, c: int = 24):
  rng = np.random.default_rng(3)
  xs = [rng.standard_normal((1, c, n // f, n // f)).astype(np.float32) for f in factors]
  ss = [rng.standard_normal((1, c, 1, 1)).astype(np.float32) for _ in factors]
  return xs, ss


def _want(xs, ss, factors):
  return np.concatenate([(x + x * s).repeat(f, 2).repeat(f, 3)
                         for x, s, f in zip(xs, ss, factors)], axis=1)


def _kernel(n: int, factors, adapter: str):
  xs = [kg.Tensor.empty(1, 24, n // f, n // f, name=f"x{i}") for i, f in enumerate(factors)]
  ss = [kg.Tensor.empty(1, 24, 1, 1, name=f"s{i}") for i in range(len(factors))]
  (kernel,) = kg.compile(_head_input(xs, ss, factors), target="wgsl", adapter=adapter)
  return kernel


def _divisions(source: str) -> int:
  return len(re.findall(r" [/%] ", source))


@pytest.mark.parametrize("adapter", ["swiftshader", "lavapipe"])
def test_det_concat_divides_once_per_thread(adapter):
  """80x80: 8 outputs a thread in one row; 26 divisions and remainders (95 before), the same
  launch (600 workgroups of 128, 8 outputs each)."""
  k = _kernel(*DET, adapter)
  assert k.global_size == (600, 1, 1) and k.local_size == (128, 1, 1)
  assert _divisions(k.source) < 32, _divisions(k.source)


@pytest.mark.parametrize("case", [DET, CROSSING])
def test_det_concat_on_python(on, case):
  on("PYTHON")
  xs, ss = _operands(*case)
  got = _head_input([kg.Tensor(x) for x in xs], [kg.Tensor(s) for s in ss], case[1]).numpy()
  np.testing.assert_array_equal(got, _want(xs, ss, case[1]))


@pytest.mark.parametrize("adapter", ["swiftshader", "lavapipe"])
@pytest.mark.parametrize("case", [DET, CROSSING])
def test_det_concat_on_webgpu(on, adapter, case):
  on("WEBGPU", adapter=adapter)
  xs, ss = _operands(*case)
  got = _head_input([kg.Tensor(x) for x in xs], [kg.Tensor(s) for s in ss], case[1]).numpy()
  np.testing.assert_array_equal(got, _want(xs, ss, case[1]))
