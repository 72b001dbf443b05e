"""A bundle whose outputs have floored sizes (a slice with a step along a symbolic dim, issue 34):
model.js `run()` (headless Chromium) takes any length in range and gives each output at its
floored size ((n + 1) // 2 rows of x[::2], (n + 2) // 3 of x[::3]); a length out of range is
rejected with the dim and its range."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from browser_util import local_page
from test_export_symbolic import RUN

pytestmark = pytest.mark.timeout(600)


def test_model_js_gives_floored_outputs_at_every_length(chromium, serve, tmp_path):
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  x = kg.Tensor.empty(kg.Dim("n", 1, 32), 6, name="x")
  kg.export({"even": x[::2] * 2, "third": x[::3] + 1, "odd": x[1::2].sum(0)},
            str(tmp_path / "floored"), format="webgpu")
  feeds = [np.random.default_rng(r).standard_normal((r, 6)).astype(np.float32)
           for r in (1, 2, 13, 32)]
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    info = page.evaluate(RUN, ["floored", [f.ravel().tolist() for f in feeds], 33 * 6])
    assert page.console_errors == [], page.console_errors
  for a, out in zip(feeds, info["outs"]):
    for name, want in {"even": a[::2] * 2, "third": a[::3] + 1, "odd": a[1::2].sum(0)}.items():
      got = np.array(out[name], np.float32)
      assert got.size == want.size, (name, len(a), got.size, want.shape)
      np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-6)
  assert "n in 1..32" in info["error"]
