"""A default webgpu export carries each kernel's subgroups form beside its plain one
(export/alternates.py); model.js runs that form on SwiftShader (which has `subgroups` and passes
the quad probe), the plain form on lavapipe through ANGLE (compatibility mode: no `subgroups`)
and where the probe fails; each matches numpy. A damaged form is an Error naming it."""
from __future__ import annotations

import json

import numpy as np
import pytest

import kernelgen as kg
from browser_util import launch_chromium, local_page

pytestmark = pytest.mark.timeout(900)

# JS: load the bundle under /NAME/ and run it on x: the outputs, which forms ran, what ran
RUN = """async ([name, x]) => {
  const { load } = await import(`/${name}/model.js`);
  const model = await load();
  const out = await model.run({ x: new Float32Array(x) });
  const info = { forms: model.forms, out: Object.fromEntries(Object.entries(out)
      .map(([k, v]) => [k, Array.from(v)])),
    files: model.manifest.kernels.map((k) => k.file),
    features: Array.from(model.device.features).sort() };
  model.destroy();
  return info;
}"""
# JS: the Error's message when loading /NAME/ fails, else null
LOAD_ERROR = """async (name) => {
  const { load } = await import(`/${name}/model.js`);
  try { (await load()).destroy(); } catch (error) { return error.message; }
  return null;
}"""
# a probe whose quadBroadcast reads lane j ^ 1 of the quad: not the layout quad_share assumes
SWAPPED = """enable subgroups;
@group(0) @binding(0) var<storage, read_write> seen: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) i: u32, @builtin(workgroup_id) g: vec3<u32>) {
  let at = (g.x * 64u + i) * 4u;
  seen[at] = quadBroadcast(i, 1u);
  seen[at + 1u] = quadBroadcast(i, 0u);
  seen[at + 2u] = quadBroadcast(i, 3u);
  seen[at + 3u] = quadBroadcast(i, 2u);
}"""
# compatibility mode for every adapter request (as bench/web/pypi_page.js on lavapipe)
COMPAT = """(() => { const ask = navigator.gpu.requestAdapter.bind(navigator.gpu);
  navigator.gpu.requestAdapter = (o) => ask({ ...(o || {}), featureLevel: 'compatibility' }); })()"""


def _program():
  """A 3x3 convolution (a register tile whose weight loads a quad shares) and a long sum."""
  x = kg.Tensor.empty(1, 8, 32, 32, name="x")
  w = kg.Tensor.randn(16, 8, 3, 3, seed=1).realize()
  y = x.conv2d(w, padding=1).relu()
  return {"y": y, "s": x.reshape(1, 8192).sum(axis=1)}, w.numpy()


def _want(xv: np.ndarray, wv: np.ndarray) -> dict:
  padded = np.pad(xv.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
  y = np.einsum("ncijkl,ockl->noij", windows, wv.astype(np.float64))
  return {"y": np.maximum(y, 0), "s": xv.reshape(1, -1).sum(axis=1)}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
  """The program exported for each CPU adapter with the default options, and its input."""
  root = tmp_path_factory.mktemp("forms")
  (root / "index.html").write_text("<!doctype html><title>forms</title>")
  outputs, wv = _program()
  for adapter in ("swiftshader", "lavapipe"):
    kg.export(outputs, str(root / adapter), format="webgpu", adapter=adapter)
  xv = np.random.default_rng(0).standard_normal((1, 8, 32, 32)).astype(np.float32)
  return root, xv, _want(xv, wv)


@pytest.fixture(scope="module")
def lavapipe(playwright):
  browser = launch_chromium(playwright, lavapipe=True)
  yield browser
  browser.close()


def _run(browser, server, name, xv, init: str | None = None):
  with local_page(browser) as page:
    if init:
      page.add_init_script(init)
    page.goto(server.url("index.html"))
    info = page.evaluate(RUN, [name, xv.ravel().tolist()])
    assert page.console_errors == [], page.console_errors
  return info


def _matches(info: dict, want: dict) -> None:
  for name, value in want.items():
    got = np.asarray(info["out"][name]).reshape(value.shape)
    np.testing.assert_allclose(got, value, rtol=1e-4, atol=1e-4)


def test_bundle_lists_its_subgroup_forms(bundles):
  root, _, _ = bundles
  manifest = json.loads((root / "swiftshader" / "manifest.json").read_text())
  forms = [k["subgroups"] for k in manifest["kernels"] if "subgroups" in k]
  assert manifest["optional_features"] == ["subgroups"] and manifest["features"] == []
  assert forms and all(f["features"] == ["subgroups"] for f in forms)
  assert any("quadBroadcast" in (root / "swiftshader" / f["file"]).read_text() for f in forms)


def test_swiftshader_runs_the_subgroup_forms(chromium, serve, bundles):
  root, xv, want = bundles
  info = _run(chromium, serve(root), "swiftshader", xv)
  assert info["forms"] == {"form": "subgroups", "probe": "passed"}, info["forms"]
  assert "subgroups" in info["features"]
  assert any(f.endswith("_sg.wgsl") for f in info["files"]), info["files"]
  _matches(info, want)


def test_lavapipe_runs_the_plain_forms(lavapipe, serve, bundles):
  root, xv, want = bundles
  info = _run(lavapipe, serve(root), "lavapipe", xv, COMPAT)
  assert info["forms"] == {"form": "plain", "probe": "not run"}, info["forms"]
  assert "subgroups" not in info["features"]
  assert not any(f.endswith("_sg.wgsl") for f in info["files"]), info["files"]
  _matches(info, want)


def test_failed_probe_falls_back_to_the_plain_forms(chromium, serve, bundles):
  root, xv, want = bundles
  hook = f"globalThis.kernelgenTestHooks = {{ quadProbe: {json.dumps(SWAPPED)} }};"
  info = _run(chromium, serve(root), "swiftshader", xv, hook)
  assert info["forms"] == {"form": "plain", "probe": "failed"}, info["forms"]
  assert not any(f.endswith("_sg.wgsl") for f in info["files"]), info["files"]
  _matches(info, want)


@pytest.mark.parametrize("field,value", [("workgroup_size", [0, 1, 1]), ("file", 7),
                                         ("bindings", []), ("features", "subgroups")])
def test_damaged_form_is_an_error(chromium, serve, bundles, tmp_path, field, value):
  root, _, _ = bundles
  manifest = json.loads((root / "swiftshader" / "manifest.json").read_text())
  at = next(i for i, k in enumerate(manifest["kernels"]) if "subgroups" in k)
  manifest["kernels"][at]["subgroups"][field] = value
  (tmp_path / "index.html").write_text("<!doctype html><title>damaged</title>")
  (tmp_path / "b").mkdir()
  for f in (root / "swiftshader").iterdir():
    (tmp_path / "b" / f.name).write_bytes(f.read_bytes())
  (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
  with local_page(chromium) as page:
    page.goto(serve(tmp_path).url("index.html"))
    message = page.evaluate(LOAD_ERROR, "b")
  assert message == (f"kernelgen model: the manifest's kernels[{at}].subgroups is damaged: "
                     "re-export the bundle")
