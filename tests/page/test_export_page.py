"""The page's "bundles .zip" download (web/downloads.js, web_api.export_bundles): kg.export runs
in the page's Pyodide worker and the zip holds the program's webgpu bundle (model.js, WGSL,
weights, manifest) and ptx bundle. The webgpu bundle then runs in a fresh page with no Pyodide
and matches numpy; the ptx bundle assembles with ptxas and runs on PTXSIM like numpy."""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

import kernelgen as kg
from browser_util import local_page
from test_browser import app, boot, examples_of, numpy_expected, site  # noqa: F401 (fixtures)
from tools import ptxas_check

pytestmark = pytest.mark.timeout(900)

# JS: load the bundle under /webgpu/ (no inputs: the page's programs hold their data) and run it
RUN = """async () => {
  const { load } = await import('/webgpu/model.js');
  const model = await load();
  const out = await model.run({});
  const result = {outputs: model.outputs, out: Array.from(out.out)};
  model.destroy();
  return result;
}"""


def test_page_downloads_both_bundles_of_the_program_and_they_run(app, chromium, serve, tmp_path):
  code = examples_of(app)["matmul"]
  app.evaluate("async (code) => { kgApp.setCode(code); await kgApp.compile(); }", code)
  with app.expect_download() as info:
    app.click("#download-bundles")
  assert info.value.suggested_filename == "bundles.zip"
  archive = zipfile.ZipFile(io.BytesIO(info.value.path().read_bytes()))
  assert archive.testzip() is None
  names = archive.namelist()
  for fmt in ("webgpu", "ptx"):
    assert f"{fmt}/manifest.json" in names and f"{fmt}/weights.safetensors" in names
  assert "webgpu/model.js" in names and "ptx/model.js" not in names
  archive.extractall(tmp_path)
  expected = numpy_expected("matmul", code)

  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  with local_page(chromium) as page:
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(server.url("index.html"))
    result = page.evaluate(RUN)
  assert not [u for u in requests if "pyodide" in u.lower() or u.endswith(".whl")], requests
  assert result["outputs"] == [{"name": "out", "shape": list(expected.shape), "dtype": "float32"}]
  got = np.array(result["out"], np.float32).reshape(expected.shape)
  np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)

  manifest = json.loads((tmp_path / "ptx" / "manifest.json").read_text())
  arch = app.evaluate("kgApp.state.arch()")
  assert manifest["options"]["arch"] == arch
  for kernel in manifest["kernels"]:
    ptxas_check((tmp_path / "ptx" / kernel["file"]).read_text(), arch)
  out = kg.load_bundle(str(tmp_path / "ptx")).run({}, device="PTXSIM")["out"].numpy()
  np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_digits_demo_runs_its_exported_bundle_without_pyodide(site, chromium):  # noqa: F811
  from test_demos import WEIGHTS, digits_forward
  with local_page(chromium, service_workers="block") as page:
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(site.url("web/demos/digits.html"))
    page.wait_for_selector("body[data-ready]", timeout=120_000)
    assert page.get_attribute("body", "data-ready") == "true", page.inner_text("#notice")
    page.click("button[data-sample='3']")
    page.wait_for_function("Number(document.body.dataset.runs || 0) > 0 && "
                           "!digitsDemo.state.busy", timeout=120_000)
    ms = page.evaluate("performance.now()")
    state = page.evaluate("({probs: digitsDemo.state.probs, error: digitsDemo.state.error})")
    assert page.inner_text("#device") == "WEBGPU" and "exported bundle" in page.inner_text(
      "#run-info")
  assert state["error"] is None, state["error"]
  np.testing.assert_allclose(state["probs"], digits_forward(WEIGHTS["samples"][3]["pixels"]),
                             rtol=1e-4, atol=1e-6)
  assert any(u.endswith("/digits_bundle/model.js") for u in requests)
  assert not [u for u in requests if "pyodide" in u.lower() or u.endswith(".whl")], requests
  print(f"\ndigits demo from its bundle: navigation -> first result {ms:.0f} ms")


def test_filters_demo_runs_its_exported_stage_bundles_without_pyodide(site, chromium):  # noqa: F811
  from test_demos import filters_np, page_images
  with local_page(chromium, service_workers="block") as page:
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(site.url("web/demos/filters.html"))
    page.wait_for_selector("body[data-ready]", timeout=120_000)
    assert page.get_attribute("body", "data-ready") == "true", page.inner_text("#notice")
    ms = page.evaluate("performance.now()")    # the default chain has run on the sample
    specs = page.evaluate("filtersDemo.chain()")
    rgb, out = page_images(page)
    chain = [{"name": "sepia"}, {"name": "conv", "weights": [[0, 0, 0], [0, 0.5, 0], [1, 0, 0]]},
             {"name": "invert"}]
    page.evaluate("async (specs) => await filtersDemo.setChain(specs)", chain)
    page.wait_for_function("!filtersDemo.state.busy")
    _, chained = page_images(page)
    assert page.inner_text("#device") == "WEBGPU"
    assert "exported bundles" in page.inner_text("#run-info")
    assert "invert: E_120_160_3" in page.inner_text("#timings")
  np.testing.assert_allclose(out, filters_np(rgb, specs), rtol=1e-4, atol=2e-5)
  np.testing.assert_allclose(chained, filters_np(rgb, chain), rtol=1e-4, atol=2e-5)
  assert any(u.endswith("/filters_bundles/conv/manifest.json") for u in requests)
  assert not [u for u in requests if "pyodide" in u.lower() or u.endswith(".whl")], requests
  print(f"\nfilters demo from its bundles: navigation -> first result {ms:.0f} ms")
