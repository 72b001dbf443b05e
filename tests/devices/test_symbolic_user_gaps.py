"""Gaps a new user of symbolic dims hit (issue 34), closed, on PYTHON, PTXSIM and WEBGPU against
numpy at the range's ends and at values that divide no tile or vector size, one compiled program
for every value: `kg.cat` of the two halves of a stepped slice (a sum of floored sizes that is
the whole length), the slice the halves' error message suggests, `pad` by a symbolic width, a
bundle whose outputs have floored sizes, and an index tensor on another device (a DeviceError
before anything runs, WEBGPU included)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import kernelgen as kg
from test_symbolic_dims import close, runs_once

HI = 77
VALUES = (1, 2, 3, 17, HI)
RNG = np.random.default_rng(3434)
ROWS = RNG.standard_normal((HI, 6)).astype(np.float32)
STATIC = RNG.standard_normal((5, 6)).astype(np.float32)


def _rows(n, v):
  return kg.Tensor(ROWS[:v]).symbolic(n.bind(v), 6)


def test_cat_of_the_halves_of_a_stepped_slice(device):
  n = kg.Dim("n", 1, HI)

  def want(v):
    x = ROWS[:v]
    return np.concatenate([x[1::2], x[::2]]) * 2 + x
  runs_once(lambda v: kg.cat([_rows(n, v)[1::2], _rows(n, v)[::2]]) * 2 + _rows(n, v),
            lambda v, got: close(got, want(v), 1e-5), VALUES)


def test_cat_of_a_half_and_the_whole(device):
  n = kg.Dim("n", 1, HI)
  runs_once(lambda v: kg.cat([_rows(n, v)[::2], _rows(n, v)]).sum(0),
            lambda v, got: close(got, np.concatenate([ROWS[:v][::2], ROWS[:v]]).sum(0), 1e-4),
            VALUES)


def test_the_even_and_odd_rows_cut_to_one_length(device):
  n = kg.Dim("n", 1, HI)
  runs_once(lambda v: _rows(n, v)[:n.bind(v) - 1:2] + _rows(n, v)[1::2],
            lambda v, got: close(got, ROWS[:v][:v - 1:2] + ROWS[:v][1::2], 1e-6), VALUES)


def test_pad_by_a_symbolic_width(device):
  n = kg.Dim("n", 1, HI)

  def build(v):
    nb = n.bind(v)
    x, s = _rows(n, v), kg.Tensor(STATIC)
    return (x.pad(((nb, 2), (1, 0)), value=7.0).sum(0) +
            s.pad(((0, nb), (0, 1)), value=-1.0).sum(0) + x.pad(((0, nb), (0, 1))).max(0))

  def want(v):
    x = ROWS[:v]
    return (np.pad(x, ((v, 2), (1, 0)), constant_values=7.0).sum(0) +
            np.pad(STATIC, ((0, v), (0, 1)), constant_values=-1.0).sum(0) +
            np.pad(x, ((0, v), (0, 1))).max(0))
  runs_once(build, lambda v, got: close(got, want(v), 1e-4), VALUES)


@pytest.mark.parametrize("fmt, run_on", [("webgpu", "WEBGPU"), ("ptx", "PTXSIM")])
def test_a_bundle_with_floored_sizes(tmp_path, fmt, run_on):
  if run_on == "WEBGPU":
    kg.Device["WEBGPU"]             # a missing WEBGPU fails here under KERNELGEN_REQUIRE_ALL
  n = kg.Dim("n", 1, 32)
  x = kg.Tensor.empty(n, 6, name="x")
  bundle = kg.export({"even": x[::2] * 2, "third": x[::3].exp(), "odd": x[1::2].sum(0)},
                     str(tmp_path), format=fmt)
  m = json.loads((tmp_path / "manifest.json").read_text())
  assert m["dims"] == [{"name": "n", "lo": 1, "hi": 32}]
  outs = {o["name"]: o for o in m["outputs"]}
  assert outs["even"]["symbolic_shape"] == [{"terms": [["n", 1]], "const": 1, "div": 2}, 6]
  assert outs["third"]["symbolic_shape"] == [{"terms": [["n", 1]], "const": 2, "div": 3}, 6]
  for v in (1, 2, 3, 13, 32):
    a = ROWS[:v]
    got = bundle.run({"x": a}, device=run_on)
    np.testing.assert_allclose(got["even"].numpy(), a[::2] * 2, rtol=1e-6)
    np.testing.assert_allclose(got["third"].numpy(), np.exp(a[::3]), rtol=1e-5)
    np.testing.assert_allclose(got["odd"].numpy(), a[1::2].sum(0), rtol=1e-5, atol=1e-6)
  with pytest.raises(kg.ShapeError, match=r"n = 33, outside the bundle's range 1\.\.32"):
    bundle.run({"x": np.zeros((33, 6), np.float32)}, device=run_on)


@pytest.mark.parametrize("other", ["PYTHON", "PTXSIM"])
def test_an_index_on_another_device_than_webgpu(other):
  kg.Device["WEBGPU"]
  table = np.arange(12, dtype=np.float32).reshape(4, 3)
  idx = np.array([2, 0, 3], dtype=np.int32)
  for t_on, i_on in (("WEBGPU", other), (other, "WEBGPU")):
    t, i = kg.Tensor(table, device=t_on), kg.Tensor(idx, device=i_on)
    with pytest.raises(kg.DeviceError, match=rf"a tensor on {t_on} indexed with an index tensor "
                                             rf"on {i_on}: .*index\.to\('{t_on}'\)"):
      t[i]
    np.testing.assert_array_equal(t[i.to(t_on)].numpy(), table[idx])
