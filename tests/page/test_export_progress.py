"""model.js load({onProgress}): an exported bundle's pipelines are created all at once, and
load() reports each one made (done 0..n of n, in increasing order), in headless Chromium; the
bundle still runs like numpy."""
from __future__ import annotations

import json

import numpy as np
import pytest

import kernelgen as kg
from browser_util import local_page

pytestmark = pytest.mark.timeout(600)

# JS: load the bundle under /NAME/ with an onProgress that records its calls, then run it
LOAD = """async ([name, x]) => {
  const { load } = await import(`/${name}/model.js`);
  const calls = [];
  const model = await load({onProgress: (p) => calls.push([p.done, p.total])});
  const kernels = model.manifest.kernels.length;
  const out = await model.run({x: new Float32Array(x)});
  let badType = null;
  try { await load({onProgress: 3}); } catch (error) { badType = error.message; }
  model.destroy();
  return {calls, kernels, y: Array.from(out.y), badType};
}"""


def test_load_reports_each_pipeline_made_and_the_bundle_runs(chromium, tmp_path, serve):
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  x = kg.Tensor.empty(4, 8, name="x")
  w = kg.Tensor.randn(8, 16, seed=3).realize()
  y = ((x @ w).relu().contiguous() * 2).exp().contiguous().sum(axis=1)
  kg.export({"y": y}, str(tmp_path / "prog"), format="webgpu")
  xv = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    info = page.evaluate(LOAD, ["prog", xv.ravel().tolist()])
    assert page.console_errors == [], page.console_errors
  n = info["kernels"]
  assert n >= 2, info
  assert info["calls"] == [[i, n] for i in range(n + 1)], info["calls"]
  want = np.exp(np.maximum(xv @ w.numpy(), 0) * 2).sum(axis=1)
  np.testing.assert_allclose(np.array(info["y"], np.float32), want, rtol=1e-4, atol=1e-5)
  assert info["badType"] is not None and "onProgress" in info["badType"], info["badType"]


def test_layers_of_one_kernel_make_one_pipeline_and_run(chromium, tmp_path, serve):
  """Kernels of a model's layers that share a file and entry point (export's share_sources)
  are made as one pipeline each: load() reports the distinct pipelines, fewer than the kernels,
  and every layer still runs like numpy."""
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  x = kg.Tensor.empty(4, 8, name="x")
  ws = [kg.Tensor.randn(8, 8, seed=s).realize() for s in range(3)]
  h = x
  for w in ws:
    h = ((h @ w).relu().contiguous() * 2).contiguous()
  kg.export({"y": h}, str(tmp_path / "prog"), format="webgpu")
  kernels = json.loads((tmp_path / "prog" / "manifest.json").read_text())["kernels"]
  distinct = len({(k["file"], k["entry_point"]) for k in kernels})
  xv = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    info = page.evaluate(LOAD, ["prog", xv.ravel().tolist()])
    assert page.console_errors == [], page.console_errors
  assert distinct < info["kernels"] == 6, kernels
  assert info["calls"] == [[i, distinct] for i in range(distinct + 1)], info["calls"]
  want = xv
  for w in ws:
    want = np.maximum(want @ w.numpy(), 0) * 2
  np.testing.assert_allclose(np.array(info["y"], np.float32).reshape(4, 8), want, rtol=1e-4,
                             atol=1e-4)
