"""The page runs kernels tiled through workgroup memory (2-D workgroups, barriers) on its WebGPU
(SwiftShader): web/gpu.js dispatches them and the values match the PYTHON interpreter's."""
from __future__ import annotations

import pytest

from browser_util import local_page
from test_browser import RUN, boot, site  # noqa: F401 - site: the assembled page, served

pytestmark = pytest.mark.timeout(900)

# forces stage= on the page's WEBGPU device and fails the run if a matmul-like kernel (one with
# two output axes to tile) was not staged
STAGED = """import kernelgen as kg
from kernelgen.lowering import optimize as _opt
from kernelgen.lowering import tile_shape as _shape
_rt = kg.Device["WEBGPU"]
_base = _rt.render_options
_rt.render_options = lambda: {**_base(), "stage": True}
_real = _opt.optimize


def _staged_only(item, target, options=None):
  got = _real(item, target, options)
  forced = (options or {}).get("stage")   # the run's kernels (the page's compile view is not)
  if target == "wgsl" and forced and _shape.best_tile_axes(item) and not got.stage:
    raise RuntimeError(f"kernel {item.name} was not tiled through workgroup memory")
  return got


_opt.optimize = _staged_only
# exact inputs (quarters): randn runs transcendental kernels whose last bits differ by device


def grid(*shape, k=1):
  n = 1
  for s in shape:
    n *= s
  return Tensor([((i * 7 * k + 3) % 11 - 5) / 4 for i in range(n)]).reshape(*shape)


a, b, x, w = grid(33, 17), grid(17, 65, k=2), grid(1, 3, 9, 11, k=3), grid(5, 3, 3, 3, k=5)
out = (a @ b).sum(axis=1) + x.conv2d(w, padding=1).relu().sum()
"""


def test_staged_kernels_run_on_the_page(site, chromium):  # noqa: F811
  with local_page(chromium, service_workers="block") as page:
    boot(page, site.url("index.html"))
    result = page.evaluate(RUN, STAGED)
    assert "error" not in result, result
    assert result["device"] == "WEBGPU" and result["shape"] == [33]
    assert result["reference"]["ok"] and result["reference"]["match"], result["reference"]
