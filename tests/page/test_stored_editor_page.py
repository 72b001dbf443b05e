"""The editor page's Run after a reload compiles nothing (headless Chromium, SwiftShader): the
program's WGSL and PTX (compile_program) and its WEBGPU kernels come back from the browser's
store (IndexedDB, core/kernelgen/stored.py), the page says so, and the result is the same."""
from __future__ import annotations

import pytest

from browser_util import local_page
from test_browser import boot, site  # noqa: F401 (site: a fixture)

pytestmark = pytest.mark.timeout(900)

CODE = '''x = (Tensor.arange(40).cast(dtypes.float32) * 0.05).reshape(4, 10)
out = (x @ x.T).relu().sum(axis=1) + x.max(axis=1)
'''

# JS: Run in the editor (awaiting its PTX and reference check), then let the worker go idle
# (the store is written after each command's reply); the run's counts and the page's text
RUN_AND_SETTLE = """async (code) => {
  kgApp.setCode(code);
  const r = await kgApp.run();
  if (!r || r.error) return r || {error: {type: 'busy'}};
  const reference = await r.checked;
  const wgsl = await kgApp.state.kg.compileAll(code, {targets: 'wgsl'});
  await kgApp.state.kg.call('info');
  return {device: r.device, data: Array.from(r.data, Number), reference,
          compiled: r.compiled, stored: r.stored, wgslStored: Boolean(wgsl.stored),
          meta: document.querySelector('#result-meta').textContent};
}"""


def test_the_editor_run_after_a_reload_takes_its_kernels_from_the_store(site, chromium):  # noqa: F811
  with local_page(chromium, viewport={"width": 1440, "height": 900},
                  service_workers="block") as page:
    boot(page, site.url("index.html"))
    first = page.evaluate(RUN_AND_SETTLE, CODE)
    assert first["device"] == "WEBGPU" and first["reference"]["match"], first
    assert first["compiled"] > 0 and "browser's store" not in first["meta"], first
    assert not first["wgslStored"], first        # kept for the next load, not served in this one
    boot(page, site.url("index.html"))          # a reload: same context, same IndexedDB
    again = page.evaluate(RUN_AND_SETTLE, CODE)
    assert again["data"] == first["data"] and again["reference"]["match"], again
    assert again["compiled"] == 0 and again["stored"] > 0, again
    assert again["wgslStored"], again            # the WGSL shown: no compile pass
    assert "from the browser's store" in again["meta"], again["meta"]
    assert page.console_errors == [], page.console_errors
