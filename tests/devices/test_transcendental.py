"""float64 exp2/log2/sin/cos decompositions (rules/transcendental.py), run on PTXSIM, vs numpy."""
from __future__ import annotations

import numpy as np
import pytest

from kernelgen import Tensor

RNG = np.random.default_rng(8)
SPECIAL = [0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, 0.5, 2.0, 5e-324, 1e-310, 2.2250738585072014e-308,
           1.797e308]


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
  """Distance in units of the last place (0 where both are the same NaN/inf)."""
  same = (got == want) | (np.isnan(got) & np.isnan(want))
  spacing = np.spacing(np.abs(np.where(np.isfinite(want), want, 1.0)))
  with np.errstate(invalid="ignore"):
    return np.where(same, 0.0, np.abs(got - want) / spacing)


def test_exp2_float64_is_within_2_ulp_over_its_whole_range():
  x = np.concatenate([RNG.uniform(-1100, 1100, 300), RNG.uniform(-1, 1, 100), SPECIAL,
                      [1023.99, 1024.0, -1022.5, -1074.0, -1075.0, -1080.0, 0.5e-300]])
  with np.errstate(over="ignore"):
    assert ulps(Tensor(x, device="PTXSIM").exp2().numpy(), np.exp2(x)).max() <= 2


def test_log2_float64_is_within_2_ulp_including_subnormals_and_specials():
  x = np.concatenate([np.exp(RNG.uniform(-700, 700, 300)), RNG.uniform(0.5, 2, 100), SPECIAL,
                      [-1.0, -np.inf, 1.4142135623730951, 1.4142135623730954]])
  with np.errstate(divide="ignore", invalid="ignore"):
    assert ulps(Tensor(x, device="PTXSIM").log2().numpy(), np.log2(x)).max() <= 2


def test_sin_float64_is_within_1e_15_absolute_below_2_pow_30():
  x = np.concatenate([RNG.uniform(-10, 10, 300), RNG.uniform(-1e8, 1e8, 50),
                      [0.0, -0.0, np.pi, np.pi / 2, -np.pi / 4, 1e-300]])
  got = Tensor(x, device="PTXSIM").sin().numpy()
  np.testing.assert_allclose(got, np.sin(x), rtol=0, atol=1e-15 * (1 + np.abs(x).max() / 1e7))
  assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 3e9, -2.0 ** 31])
def test_sin_float64_outside_the_reduction_range_falls_back_to_float32(value):
  # known limit: beyond float32's range (|x| > 3.4e38) the fallback gives NaN, not sin(x)
  got = Tensor(np.array([value]), device="PTXSIM").sin().numpy()[0]
  want = np.sin(np.float32(value)) if np.isfinite(value) else np.nan
  np.testing.assert_allclose(got, want, atol=2.0 ** -20)


def test_cos_float64_is_within_1e_15_absolute_below_2_pow_30():
  x = np.concatenate([RNG.uniform(-10, 10, 300), RNG.uniform(-1e8, 1e8, 50),
                      [0.0, -0.0, np.pi, np.pi / 2, -np.pi / 4, 1e-300]])
  got = Tensor(x, device="PTXSIM").cos().numpy()
  np.testing.assert_allclose(got, np.cos(x), rtol=0, atol=1e-15 * (1 + np.abs(x).max() / 1e7))
  assert got[x == 0].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 3e9, -2.0 ** 31])
def test_cos_float64_outside_the_reduction_range_falls_back_to_float32(value):
  got = Tensor(np.array([value]), device="PTXSIM").cos().numpy()[0]
  want = np.cos(np.float32(value)) if np.isfinite(value) else np.nan
  np.testing.assert_allclose(got, want, atol=2.0 ** -20)
