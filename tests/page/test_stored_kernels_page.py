"""A warm reload compiles nothing (headless Chromium, SwiftShader, the kernelgen worker the digits
demo boots): a program's compiled kernels are kept in the browser (IndexedDB, web/store.js and
core/kernelgen/stored.py), so after a page reload in the same browser context the same program
runs with no kernel compiled (the run's `compiled` count is 0, its `stored` count is its kernels)
and gives the same result; kg.clear_cache() empties the store, so the next reload compiles."""
from __future__ import annotations

import numpy as np
import pytest

from test_demos import BOOT_MS, open_demo, site  # noqa: F401 (site: a fixture)

pytestmark = pytest.mark.timeout(900)

PROGRAM = '''
x = (Tensor.arange(60).cast(dtypes.float32) * 0.07).reshape(5, 12)
h = (x @ x.T).relu().contiguous()
out = (h * 0.1).softmax(axis=1).sum(axis=0) + h.max(axis=1)
'''

# JS: boot kernelgen.js's worker, run `code` on WEBGPU and wait until the worker is idle (the
# store is written after a command's reply, before the next command)
RUN = """async (code) => {
  const { createKernelgen } = await import('/web/kernelgen.js');
  const kg = await createKernelgen({ base: '/', webgpu: true });
  const r = await kg.run(code, {device: 'WEBGPU'});
  await kg.call('info');
  return {data: Array.from(r.data, Number), compiled: r.compiled, stored: r.stored,
          device: r.device};
}"""


def _reload(page):
  page.reload()
  page.wait_for_selector("body[data-ready]", timeout=BOOT_MS)


def test_a_reloaded_page_runs_the_same_program_with_no_compile(site, chromium):  # noqa: F811
  manager, page = open_demo(chromium, site, "digits")
  try:
    first = page.evaluate(RUN, PROGRAM)
    assert first["device"] == "WEBGPU" and first["compiled"] >= 2, first
    _reload(page)
    again = page.evaluate(RUN, PROGRAM)
    assert again["compiled"] == 0, again                  # nothing compiled in Python
    assert again["stored"] == first["compiled"], again    # every kernel from the store
    assert again["data"] == first["data"]
    x = (np.arange(60, dtype=np.float32) * np.float32(0.07)).reshape(5, 12)
    h = np.maximum(x @ x.T, 0)
    e = np.exp(h * 0.1 - (h * 0.1).max(1, keepdims=True))
    want = (e / e.sum(1, keepdims=True)).sum(0) + h.max(1)
    assert np.isfinite(want).all()
    np.testing.assert_allclose(np.array(again["data"], np.float32), want, rtol=1e-4)
    page.evaluate(RUN, "import kernelgen as kg\nkg.clear_cache()\nout = Tensor([1.0])")
    _reload(page)
    cleared = page.evaluate(RUN, PROGRAM)
    assert cleared["compiled"] == first["compiled"] and cleared["stored"] == 0, cleared
    assert cleared["data"] == first["data"]
    assert page.console_errors == [], page.console_errors
  finally:
    manager.__exit__(None, None, None)
