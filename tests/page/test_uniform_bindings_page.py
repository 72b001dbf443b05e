"""Small read-only inputs bound as uniform buffers in the page (Pyodide + WEBGPU on SwiftShader
through web/gpu.js, headless Chromium): the device's storage buffers forced down to 4, a sum of
twelve small inputs (float32, uint8 and float16: 32-bit words and packed ones) stays one kernel
whose eight smallest inputs are `var<uniform>` arrays (render/wgsl/target.py uniform_slots),
bound by gpu.js with the 'uniform' layout type; values numpy's."""
from __future__ import annotations

import numpy as np
import pytest

from test_demos import run_in_demo, site  # noqa: F401 (site: a fixture)

pytestmark = pytest.mark.timeout(600)

PROGRAM = """
import kernelgen as kg
rt = kg.Device["WEBGPU"]
base = rt.render_options
rt.render_options = lambda: {**base(), "max_storage_buffers": 4}
dtypes = ["float32", "uint8", "float16"]
xs = [kg.Tensor([float((i * 7 + j) % 11) for j in range(5)], dtype=dtypes[i % 3])
      for i in range(12)]
total = xs[0].cast("float32")
for i, x in enumerate(xs[1:], 1):
  total = total + x.cast("float32") * float(i + 1)
kernels = kg.compile(total, **rt.render_options())
uniform = sum(b.kind == "uniform" for k in kernels for b in k.launch.bindings)
out = kg.Tensor([float(len(kernels)), float(uniform)] + [float(v) for v in total.tolist()])
"""


def test_a_kernel_binding_uniform_buffers_runs_in_the_page(site, chromium):  # noqa: F811
  got = run_in_demo(chromium, site, "digits", PROGRAM)
  assert got[:2] == [1, 9], got[:2]     # one kernel: the output, 3 storage inputs, 9 uniform
  xs = [np.array([(i * 7 + j) % 11 for j in range(5)], np.float64) for i in range(12)]
  want = sum(x * (i + 1) for i, x in enumerate(xs))
  np.testing.assert_allclose(np.array(got[2:]), want, rtol=1e-6)
