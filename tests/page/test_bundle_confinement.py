"""model.js in headless Chromium fetches only files inside its bundle folder (issue 41): a
manifest that names `../`, an absolute path, an absolute URL on another origin, a
protocol-relative URL, a percent-encoded `..` or a backslash path (for a kernel file or the
weights file) fails load() with an Error saying the file is not inside the bundle folder, and
request interception sees no request leave the folder (none at all reaches the other origin);
the untouched bundle loads and runs from the same server."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import kernelgen as kg
from browser_util import local_page

pytestmark = pytest.mark.timeout(300)

# JS: import the bundle under /NAME/ and load it; the Error's message, or the run's output
LOAD = """async ([name, x]) => {
  const { load } = await import(`/${name}/model.js`);
  try {
    const model = await load();
    const out = await model.run({ x: new Float32Array(x) });
    model.destroy();
    return { out: Array.from(out.out) };
  } catch (error) {
    return { error: error instanceof Error ? error.message : `not an Error: ${error}` };
  }
}"""


def _edits(other: str) -> dict:
  """name -> how it changes the manifest (`other`: a URL on another origin)."""
  def kernel(file):
    return lambda m: m["kernels"][0].update(file=file)

  def weights(file):
    return lambda m: m.update(weights_file=file)
  return {"dotdot": kernel("../secret.wgsl"), "absolute_path": kernel("/secret.wgsl"),
          "other_origin": kernel(f"{other}x.wgsl"), "protocol_relative":
          kernel("//" + other.split("//", 1)[1] + "x.wgsl"), "encoded": kernel("%2e%2e/secret.wgsl"),
          "backslash": kernel("..\\secret.wgsl"), "weights_dotdot": weights("../w.safetensors"),
          "weights_other_origin": weights(f"{other}w.safetensors")}


def test_model_js_fetches_nothing_outside_its_folder(chromium, tmp_path, serve):
  root, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
  root.mkdir()
  elsewhere.mkdir()
  (root / "index.html").write_text("<!doctype html><title>bundle</title>")
  (root / "secret.wgsl").write_text("// outside the bundle")
  (elsewhere / "x.wgsl").write_text("// on another origin")
  server, other = serve(root), serve(elsewhere)
  other_url = other.url("")
  x = kg.Tensor.empty(2, 4, name="x")
  kg.export({"out": x * kg.Tensor([[1.0, 2.0, 3.0, 4.0]] * 2)}, str(root / "good"),
            format="webgpu")
  good = json.loads((root / "good" / "manifest.json").read_text())
  assert good["weights"], "the bundle must have a weights file for the weights cases"
  edits = _edits(other_url)
  for name, edit in edits.items():
    shutil.copytree(root / "good", root / name)
    manifest = json.loads(json.dumps(good))
    edit(manifest)
    (root / name / "manifest.json").write_text(json.dumps(manifest))
  xv = np.arange(8, dtype=np.float32)
  with local_page(chromium) as page:
    requests = []
    page.context.route("**/*", lambda route: (requests.append(route.request.url),
                                              route.continue_()))
    page.goto(server.url("index.html"))
    for name in edits:
      requests.clear()
      got = page.evaluate(LOAD, [name, xv.tolist()])
      assert "not a file inside the bundle folder" in got.get("error", ""), (name, got)
      folder = server.url(f"{name}/")
      assert requests and all(u.startswith(folder) for u in requests), (name, requests)
    requests.clear()
    got = page.evaluate(LOAD, ["good", xv.tolist()])
    assert all(u.startswith(server.url("good/")) for u in requests), requests
  np.testing.assert_allclose(got["out"], xv * np.tile([1.0, 2.0, 3.0, 4.0], 2))
  assert not any(u.startswith(other_url) for u in requests)
