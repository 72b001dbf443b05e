"""Reading tensors back in the page (Pyodide + WEBGPU on SwiftShader, headless Chromium): the
page's Python has no numpy, so kg.numpy_of raises the typed DeviceError that names what works
there (.tolist(), .data()), and .tolist() of tensors from the creation functions reads each
through one map of web/gpu.js readMany (stats.maps), its values numpy's."""
from __future__ import annotations

import numpy as np
import pytest

from test_demos import run_in_demo, site  # noqa: F401 (site: a fixture)

pytestmark = pytest.mark.timeout(600)

PROGRAM = """
import kernelgen as kg
gpu = kg.Device["WEBGPU"].gpu
a = kg.Tensor.arange(6).reshape(2, 3) * 2 + 1
b = kg.Tensor.full((4,), 2.5) * kg.Tensor.ones(4)
c = kg.Tensor.eye(3).sum(0)
try:
  kg.numpy_of(a, b, c)
  typed = 0.0
except kg.DeviceError as e:
  typed = float("needs numpy" in str(e) and ".tolist()" in str(e))
before = gpu.stats.maps
lists = [t.tolist() for t in (a, b, c)]
maps = gpu.stats.maps - before
values = [float(v) for row in lists[0] for v in row] + [float(v) for v in lists[1] + lists[2]]
out = kg.Tensor([typed, float(maps)] + values)
"""


def test_reading_back_in_the_page_maps_once_a_read_and_numpy_of_says_why_not(site, chromium):  # noqa: F811
  got = run_in_demo(chromium, site, "digits", PROGRAM)
  assert got[0] == 1, "kg.numpy_of in the page did not raise the typed error naming .tolist()"
  assert got[1] == 3, got[:2]   # a map per tensor read
  want = np.concatenate([np.arange(6) * 2 + 1, np.full(4, 2.5), np.ones(3)])
  np.testing.assert_array_equal(np.array(got[2:]), want)
