"""Symbolic sizes in the editor (headless Chromium, the page's own Run): the kernel list shows
which symbolic dims (kg.Dim) each kernel reads as a uniform or launches by, with their ranges
(web_api.kernel_dims, views.js showKernels); the result has the bound size, not the padded one."""
from __future__ import annotations

import pytest

from test_browser import RUN, app, site  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(900)

PROGRAM = ("import kernelgen as kg\n"
           "n = kg.Dim('n', 1, 4096)\n"
           "x = Tensor.rand(37, 8).symbolic(n.bind(37), 8)\n"
           "out = x - x.mean(0)\n")


def test_the_kernel_list_shows_each_kernels_symbolic_dims(app):  # noqa: F811
  result = app.evaluate(RUN, PROGRAM)
  assert "error" not in result, result
  assert result["shape"] == [37, 8] and len(result["data"]) == 37 * 8, result["shape"]
  assert result["reference"]["ok"] and result["reference"]["match"], result["reference"]
  items = app.eval_on_selector_all("#kernels li", "(lis) => lis.map((li) => li.innerText)")
  symbolic = [text for text in items if "symbolic n ∈ 1..4096" in text]
  assert symbolic, items
  assert any("(uniform" in text for text in symbolic), items     # the mean reads n
  assert any("grid)" in text for text in symbolic), items        # launched by n's value
  title = app.get_attribute("#kernels li .symdims", "title")
  assert "kg.Dim" in title
