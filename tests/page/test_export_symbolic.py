"""Bundles keep their symbolic sizes (kg.Dim; issue 34): the manifest lists each dim and its
range; `Bundle.run` (natively, WEBGPU) and model.js `run()` (headless Chromium) take any input
length in range, give outputs at the bound sizes, and reject other lengths with an error naming
the dim and its range. A dim no input carries is refused at export, never turned into 1."""
from __future__ import annotations

import json

import numpy as np
import pytest

import kernelgen as kg
from browser_util import local_page

pytestmark = pytest.mark.timeout(600)
W = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)


def _program():
  n = kg.Dim("n", 1, 32)
  x = kg.Tensor.empty(n, 8, name="x")
  y = (x @ kg.Tensor(W).realize()).softmax(0)
  return {"y": y, "s": y.sum(0), "p": y.pad(((1, 0), (0, 0)), value=2.0)}


def _want(a):
  h = a @ W
  e = np.exp(h - h.max(0))
  y = e / e.sum(0)
  return {"y": y, "s": y.sum(0), "p": np.pad(y, ((1, 0), (0, 0)), constant_values=2.0)}


def test_the_manifest_lists_dims_and_symbolic_shapes(tmp_path):
  kg.export(_program(), str(tmp_path), format="webgpu")
  m = json.loads((tmp_path / "manifest.json").read_text())
  assert m["dims"] == [{"name": "n", "lo": 1, "hi": 32}]
  n = {"terms": [["n", 1]], "const": 0}
  assert m["inputs"][0]["symbolic_shape"] == [n, 8] and m["inputs"][0]["shape"] == [32, 8]
  outs = {o["name"]: o for o in m["outputs"]}
  assert outs["y"]["symbolic_shape"] == [n, 4] and "symbolic_shape" not in outs["s"]
  assert outs["p"]["symbolic_shape"] == [{"terms": [["n", 1]], "const": 1}, 4]
  assert {tuple(map(tuple, k["uniforms"])) for k in m["kernels"]} <= {(), (("n", "int32"),)}
  assert any(k["uniforms"] for k in m["kernels"])


def test_a_dim_no_input_carries_is_refused(tmp_path):
  n = kg.Dim("n", 1, 32)
  table = kg.Tensor.empty(32, 4, name="t")
  with pytest.raises(kg.UnsupportedError, match="no input has as its size"):
    kg.export(table[:n].sum(0), str(tmp_path), format="webgpu")


@pytest.mark.parametrize("fmt, device", [("webgpu", "WEBGPU"), ("ptx", "PTXSIM")])
def test_a_bundle_runs_at_every_length_in_range(tmp_path, fmt, device):
  bundle = kg.export(_program(), str(tmp_path), format=fmt)
  for rows in (1, 13, 32):
    a = np.random.default_rng(rows).standard_normal((rows, 8)).astype(np.float32)
    got = bundle.run({"x": a}, device=device)
    for name, want in _want(a).items():
      np.testing.assert_allclose(got[name].numpy(), want, rtol=1e-4, atol=1e-5)
  with pytest.raises(kg.ShapeError, match=r"n = 33, outside the bundle's range 1\.\.32"):
    bundle.run({"x": np.zeros((33, 8), np.float32)}, device=device)


# model.js run() at each of `feeds` (flat rows), then with `tooLong` floats (out of range)
RUN = """async ([name, feeds, tooLong]) => {
  const { load } = await import(`/${name}/model.js`);
  const model = await load();
  const outs = [];
  for (const rows of feeds) {
    const out = await model.run({x: new Float32Array(rows)});
    outs.push(Object.fromEntries(Object.entries(out).map(([k, v]) => [k, Array.from(v)])));
  }
  let error = null;
  try { await model.run({x: new Float32Array(tooLong)}); } catch (e) { error = e.message; }
  model.destroy();
  return {outs, error};
}"""


def test_model_js_runs_at_every_length_in_range(chromium, serve, tmp_path):
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  kg.export(_program(), str(tmp_path / "sym"), format="webgpu")
  feeds = [np.random.default_rng(r).standard_normal((r, 8)).astype(np.float32) for r in (1, 13, 32)]
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    info = page.evaluate(RUN, ["sym", [f.ravel().tolist() for f in feeds], 33 * 8])
    assert page.console_errors == [], page.console_errors
  for a, out in zip(feeds, info["outs"]):
    for name, want in _want(a).items():
      np.testing.assert_allclose(np.array(out[name], np.float32).reshape(want.shape), want,
                                 rtol=1e-4, atol=1e-5)
  assert "n in 1..32" in info["error"]


# (every variant built first: load() leaves them to later runs, test_export_lazy_variants.py)
GRID = """async ([name, feeds]) => {
  const { load } = await import(`/${name}/model.js`);
  const model = await load();
  await model.buildVariants();
  const runs = [];
  for (const rows of feeds) {
    const out = await model.run({x: new Float32Array(rows)});
    runs.push({y: Array.from(out.y), workgroups: model.workgroups});
  }
  model.destroy();
  return runs;
}"""


def test_model_js_launches_only_the_workgroups_the_bound_size_needs(chromium, serve, tmp_path):
  from kernelgen.uop.program import launch_dispatch
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  n = kg.Dim("n", 1, 1024)
  y = kg.Tensor.empty(n, 8, name="x") * 2 + 1
  kg.export({"y": y}, str(tmp_path / "grid"), format="webgpu")
  (kernel,) = kg.compile(y, target="wgsl")
  feeds = [np.random.default_rng(r).standard_normal((r, 8)).astype(np.float32)
           for r in (1, 77, 1024)]
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    runs = page.evaluate(GRID, ["grid", [f.ravel().tolist() for f in feeds]])
    assert page.console_errors == [], page.console_errors
  for a, run in zip(feeds, runs):
    np.testing.assert_allclose(np.array(run["y"], np.float32).reshape(a.shape), a * 2 + 1)
  want = [launch_dispatch(kernel.launch, {"n": len(a)})[0] for a in feeds]
  assert [run["workgroups"] for run in runs] == want
  assert want[0] < want[1] < want[2] == kernel.launch.dispatch[0]


def test_model_js_launches_only_the_tiles_a_symbolic_n_needs(chromium, serve, tmp_path):
  """A matmul with symbolic N, (32, 8) @ (8, n): its register tiles run with n outermost
  (lowering/tile_grid.py tile_threads), so model.js cuts its grid as the bound value shrinks, and
  runs the kernel's variant for n = 1 (a 4 x 1 tile, lowering/variants.py) from the bundle."""
  from kernelgen.uop.program import launch_dispatch, variant_for
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  a = np.random.default_rng(3).standard_normal((32, 8)).astype(np.float32)
  n = kg.Dim("n", 1, 4096)
  y = kg.Tensor(a).realize() @ kg.Tensor.empty(8, n, name="x")
  kg.export({"y": y}, str(tmp_path / "cols"), format="webgpu")
  (kernel,) = kg.compile(y, target="wgsl")
  assert kernel.launch.grid and kernel.variants[0][:2] == ("n", 1)
  manifest = json.loads((tmp_path / "cols" / "manifest.json").read_text())
  assert [(v["dim"], v["most"]) for v in manifest["kernels"][0]["variants"]] == \
      [(d, most) for d, most, _ in kernel.variants]
  feeds = [np.random.default_rng(c).standard_normal((8, c)).astype(np.float32)
           for c in (1, 1000, 4096)]
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    runs = page.evaluate(GRID, ["cols", [f.ravel().tolist() for f in feeds]])
    assert page.console_errors == [], page.console_errors
  for x, run in zip(feeds, runs):
    np.testing.assert_allclose(np.array(run["y"], np.float32).reshape(32, -1), a @ x,
                               rtol=1e-4, atol=1e-4)
  want = [launch_dispatch(variant_for(kernel, {"n": x.shape[1]}).launch, {"n": x.shape[1]})[0]
          for x in feeds]
  assert [run["workgroups"] for run in runs] == want
  assert want[0] < want[1] < want[2] == kernel.launch.dispatch[0]
