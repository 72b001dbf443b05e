"""model.js builds a symbolic kernel's variants lazily (issue 37: the first result waits only for
what it needs): load() makes each kernel's own pipeline, not its variants' (lowering/variants.py);
a run whose bound value a variant not built yet would take runs the kernel itself (never the
unbuilt variant); a variant is built in the background once the runs that asked for it have
taken its build's cost (ski rental, export/loader_builds.js DEFAULT_MS_PER_BYTE: its bytes x the
build rate: what background builds added to the runs they overlapped, before any the wall rate
measured at load), and taken by the runs after; buildVariants() builds the rest. The decision is
checked by structure: a fake clock makes each run take RUN_MS and a fixed rate makes n = 100's
variant cost 2.5 runs, so its build starts after the third run asking for it, not before. Every
run equals numpy, in headless Chromium."""
from __future__ import annotations

import json

import numpy as np
import pytest

import kernelgen as kg
from browser_util import COUNTED_DEVICE, local_page

pytestmark = pytest.mark.timeout(600)

# JS: load the bundle under /NAME/ on a device that counts the pipelines made
# (createComputePipelineAsync resolved); stand in a clock on which each run takes `ms` and a build
# rate of `rate` ms per byte; run `early` (lists of x), wait for a background build, run `late`,
# build every variant, run `late` again; each run's y, workgroups, pipelines made and builds
# started (made or under way); the rate and bytes that load() measured
LAZY = """async ([name, early, late, ms, rate]) => {
  const { load } = await import(`/${name}/model.js`);
""" + COUNTED_DEVICE + """  const calls = [];
  const model = await load({ device, onProgress: (p) => calls.push([p.done, p.total]) });
  const atLoad = made;
  const measured = { rate: model.msPerByte(), bytes: model.busy.bytes };
  let now = 0;
  model.clock = () => (now += ms);     // runNow reads it twice: each run takes `ms`
  model.msPerByte = () => rate;
  model.buildRate = () => rate;        // (what the builds cost the runs: not measured here)
  const runs = [];
  const go = async (feeds, phase) => {
    for (const rows of feeds) {
      const out = await model.run({ x: new Float32Array(rows) });
      const started = [...model.builds.values()].filter((e) => e.building).length;
      runs.push({ phase, y: Array.from(out.y), workgroups: model.workgroups, made, started });
    }
  };
  await go(early, 'early');
  for (let i = 0; i < 600 && made === atLoad; i++) {
    await new Promise((done) => setTimeout(done, 50));
  }
  await new Promise((done) => setTimeout(done, 50));
  const background = made;
  await go(late, 'background');
  await model.buildVariants?.();     // (model.js before issue 37 built every variant in load())
  const pipelines = model.pipelines ?? null;
  await go(late, 'all');
  model.destroy();
  return { atLoad, calls, runs, background, pipelines, made, measured };
}"""


def test_model_js_builds_variants_on_demand_and_every_run_is_exact(chromium, serve, tmp_path):
  from kernelgen.uop.program import launch_dispatch, variant_for
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  a = np.random.default_rng(3).standard_normal((32, 8)).astype(np.float32)
  n = kg.Dim("n", 1, 4096)
  y = kg.Tensor(a).realize() @ kg.Tensor.empty(8, n, name="x")
  kg.export({"y": y}, str(tmp_path / "cols"), format="webgpu")
  (kernel,) = kg.compile(y, target="wgsl")
  manifest = json.loads((tmp_path / "cols" / "manifest.json").read_text())
  (k,) = manifest["kernels"]
  distinct = len({(v["file"], v["entry_point"]) for v in [k, *k["variants"]]})
  assert kernel.variants[0][:2] == ("n", 1) and distinct >= 3, k["variants"]
  x = {c: np.random.default_rng(c).standard_normal((8, c)).astype(np.float32)
       for c in (1, 2, 100, 1000, 4096)}
  # n = 100 takes the variant of n <= 504 (smaller tiles): 4 workgroups, where the kernel
  # itself launches 1. Its build costs 2.5 runs: n = 100's third run starts it; n = 1's and
  # n = 2's own variants (shorter than n = 100's, more than 2/5 of it) are asked once each:
  # a run's time is less than their cost
  source = {v["most"]: (tmp_path / "cols" / v["file"]).read_text() for v in k["variants"]}
  run_ms, rate = 1000.0, 2.5 * 1000.0 / len(source[504])
  assert all(run_ms < rate * len(source[most]) for most in (1, 2)), {m: len(t) for m, t in
                                                                      source.items()}
  early, late = [100, 1000, 100, 100, 4096], [100, 1, 2, 1000, 4096]
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    info = page.evaluate(LAZY, ["cols", [x[c].ravel().tolist() for c in early],
                                [x[c].ravel().tolist() for c in late], run_ms, rate])
    assert page.console_errors == [], page.console_errors
  # load() made the kernel's own pipeline only, and said so; it timed that build: the rate
  assert info["atLoad"] == 1 < distinct, info
  assert info["calls"] == [[0, 1], [1, 1]], info["calls"]
  own = len((tmp_path / "cols" / k["file"]).read_text())
  assert info["measured"]["bytes"] == own and info["measured"]["rate"] > 0, info["measured"]
  sizes = early + late + late
  for c, run in zip(sizes, info["runs"]):
    np.testing.assert_allclose(np.array(run["y"], np.float32).reshape(32, -1), a @ x[c],
                               rtol=1e-4, atol=1e-4, err_msg=f"n = {c}, {run['phase']}")

  def dispatched(c, variant=True):
    chosen = variant_for(kernel, {"n": c}) if variant else kernel
    return launch_dispatch(chosen.launch, {"n": c})[0]
  # before any variant is built, n = 100 runs the kernel itself (its grid cut to what it needs)
  runs = info["runs"]
  assert [r["workgroups"] for r in runs[:5]] == [dispatched(c, False) for c in early], runs[:5]
  assert dispatched(100) == 4 != dispatched(100, False)
  # n = 100's variant, charged 1, 2, 3 runs (1000 takes the kernel: charges nothing), starts
  # building once the third reaches its cost of 2.5 runs, not before
  assert [r["started"] for r in runs[:5]] == [1, 1, 1, 2, 2], runs[:5]
  # built in the background and taken by the next run; n = 1 and 2 then take it, their own
  # variants (asked once) not built
  assert info["background"] == 2, info
  assert runs[5]["workgroups"] == dispatched(100), runs[5]
  assert [r["started"] for r in runs[5:10]] == [2] * 5, runs[5:10]
  # after buildVariants() every size runs its own variant, as the native runtime picks it
  assert info["made"] == distinct, info
  assert info["pipelines"] == {"built": distinct, "total": distinct}, info
  assert [r["workgroups"] for r in runs[10:]] == [dispatched(c) for c in late], runs[10:]


# JS: load the bundle under /NAME/, each run taking `ms` on a fake clock and builds priced out of
# reach; run `feeds` (each {input: rows}); each variant's charges by its file, and the outputs
SHARES = """async ([name, feeds, ms]) => {
  const { load } = await import(`/${name}/model.js`);
  const model = await load();
  let now = 0;
  model.clock = () => (now += ms);
  model.msPerByte = () => 1e12;
  const outs = [];
  for (const feed of feeds) {
    const inputs = Object.fromEntries(Object.entries(feed).map(([k, v]) => [k, new Float32Array(v)]));
    const out = await model.run(inputs);
    outs.push(Object.fromEntries(Object.entries(out).map(([k, v]) => [k, Array.from(v)])));
  }
  const lost = Object.fromEntries([...model.builds].map(([key, e]) => [JSON.parse(key)[0], e.lost]));
  model.destroy();
  return { lost, outs };
}"""


def test_model_js_charges_each_variant_its_kernels_share_of_the_run(chromium, serve, tmp_path):
  """One run of a big matmul (32 x 512 x n) and a small one (32 x 8 x n), both asking their
  variants for n = 100: the run's time is shared out by the manifest's work estimates (about
  512 : 8), not charged whole to each (issue 37; webgpu_browser.py's rule, tests/unit
  test_browser_lazy_variants.py)."""
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  n = kg.Dim("n", 1, 4096)
  rng = np.random.default_rng(5)
  a, b = (rng.standard_normal((32, k)).astype(np.float32) for k in (512, 8))
  ys = {"big": kg.Tensor(a).realize() @ kg.Tensor.empty(512, n, name="x1"),
        "small": kg.Tensor(b).realize() @ kg.Tensor.empty(8, n, name="x2")}
  kg.export(ys, str(tmp_path / "two"), format="webgpu")
  manifest = json.loads((tmp_path / "two" / "manifest.json").read_text())
  assert len(manifest["kernels"]) == 2 and all("work" in k for k in manifest["kernels"])
  x1, x2 = (rng.standard_normal((k, 100)).astype(np.float32) for k in (512, 8))
  run_ms = 1000.0
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    info = page.evaluate(SHARES, ["two", [{"x1": x1.ravel().tolist(), "x2": x2.ravel().tolist()}] * 2,
                                  run_ms])
    assert page.console_errors == [], page.console_errors
  for out in info["outs"]:
    np.testing.assert_allclose(np.array(out["big"], np.float32).reshape(32, 100), a @ x1,
                               rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(np.array(out["small"], np.float32).reshape(32, 100), b @ x2,
                               rtol=1e-4, atol=1e-4)
  from kernelgen.uop.program import Launch, grid_from_json, launch_work, work_from_json
  asked = {}    # each variant asked for: its kernel's work at n = 100 (as webgpu_browser.py's)
  for k in manifest["kernels"]:
    v = next(v for v in k["variants"] if v["most"] >= 100)
    launch = Launch("wgsl", "", k["entry_point"], (), tuple(k["workgroup_size"]),
                    tuple(k["dispatch"]), (), (), grid_from_json(k.get("grid")),
                    work_from_json(k["work"]))
    asked[v["file"]] = launch_work(launch, {"n": 100})
  total = sum(asked.values())
  assert max(asked.values()) > 0.9 * total, asked       # about 512 : 8
  for file, work in asked.items():    # two runs, each charged work / total of its time
    assert info["lost"][file] == pytest.approx(2 * run_ms * work / total), (file, info["lost"])
  assert sum(info["lost"].values()) == pytest.approx(2 * run_ms), info["lost"]


# JS: load the bundle under /NAME/ with its variants' pipelines held back until released, the
# wall build rate 1000 ms per byte and a fake clock (each run takes `ms`, which the steps set);
# one run at n = 4096 (100 ms, no variant), the variant with the smallest range built in the
# background during a second (100 + held ms), a third after it (100 ms), then a 50 ms run at
# n = 100: the build rate measured, the variants' builds started during and after
MEASURE = """async ([name, wide, narrow, held]) => {
  const { load } = await import(`/${name}/model.js`);
  const device = await (await navigator.gpu.requestAdapter()).requestDevice();
  let release = null;
  const gate = new Promise((done) => { release = done; });
  let gated = false;
  const create = device.createComputePipelineAsync.bind(device);
  device.createComputePipelineAsync = async (descriptor) => {
    const pipeline = await create(descriptor);
    if (gated) await gate;
    return pipeline;
  };
  const model = await load({ device });
  gated = true;
  let now = 0;
  let ms = 100;
  model.clock = () => (now += ms);     // runNow reads it twice: each run takes `ms`
  model.msPerByte = () => 1000;
  const atLoad = [...model.builds.values()].filter((e) => e.building).length;
  const started = () => [...model.builds.values()].filter((e) => e.building).length - atLoad;
  const step = model.steps[0];
  const first = step.variants.reduce((a, b) => (b.most < a.most ? b : a));
  await model.run({ x: new Float32Array(wide) });
  model.queued.add(first.key);
  model.startBuilds();
  ms = 100 + held;
  await model.run({ x: new Float32Array(wide) });
  const during = started();
  release();
  await model.background;
  ms = 100;
  await model.run({ x: new Float32Array(wide) });
  const rate = model.buildRate();
  ms = 50;
  await model.run({ x: new Float32Array(narrow) });
  const out = { during, rate, bytes: model.builds.get(first.key).source.length,
    after: started(), most: first.most };
  model.destroy();
  return out;
}"""


def test_model_js_prices_a_variant_at_what_the_background_builds_cost_the_runs(chromium, serve,
                                                                                tmp_path):
  """The build rate is what a background build added to the runs it overlapped, per byte (issue
  37: lavapipe builds beside the runs, SwiftShader holds them up): a build during which the run
  took as long as before costs nothing, and the variant a 50 ms run at n = 100 asks for is bought
  at once where the wall rate (1000 ms per byte) never would; one that held the run up 3 s
  prices bytes at 3 s over its own (n = 100's not bought by one 50 ms run), as webgpu_browser.py (tests/unit
  test_browser_lazy_variants.py)."""
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  n = kg.Dim("n", 1, 4096)
  y = kg.Tensor(np.ones((32, 8), np.float32)).realize() @ kg.Tensor.empty(8, n, name="x")
  kg.export({"y": y}, str(tmp_path / "one"), format="webgpu")
  wide, narrow = np.ones(8 * 4096).tolist(), np.ones(8 * 100).tolist()
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    beside, held = (page.evaluate(MEASURE, ["one", wide, narrow, ms]) for ms in (0.0, 3000.0))
    assert page.console_errors == [], page.console_errors
  assert beside["most"] < 100 and beside["during"] == 1, beside
  assert beside["rate"] == 0 and beside["after"] == 2, beside     # n = 100's bought at once
  assert held["rate"] == pytest.approx(3000.0 / held["bytes"]) and held["after"] == 1, held


# JS: load the bundle under /NAME/, build the first step's variant for its dim at 1 (the LM
# head's, bought by the decode), then one run of `feed` taking `ms` on a fake clock, builds
# priced out of reach: each variant's charges by its file, the output
BUILT = """async ([name, feed, ms]) => {
  const { load } = await import(`/${name}/model.js`);
  const model = await load();
  const head = model.steps.find((s) => s.variants.some((v) => v.dim === 'm'));
  await model.build(head.variants.find((v) => v.most >= 1).key);
  let now = 0;
  model.clock = () => (now += ms);
  model.msPerByte = () => 1e12;
  const inputs = Object.fromEntries(Object.entries(feed).map(([k, v]) => [k, new Float32Array(v)]));
  const out = await model.run(inputs);
  const lost = Object.fromEntries([...model.builds].map(([key, e]) => [JSON.parse(key)[0], e.lost]));
  model.destroy();
  return { lost, out: Object.fromEntries(Object.entries(out).map(([k, v]) => [k, Array.from(v)])) };
}"""


# JS: load the bundle under /NAME/; runs of `feed` on a fake clock taking `times` ms each, the
# first step's variant for its dim at `value` built after the first run, builds priced out of
# reach: each variant's charges by its file after each run, and the rates measured
RATED = """async ([name, feed, times, value]) => {
  const { load } = await import(`/${name}/model.js`);
  const model = await load();
  const head = model.steps.find((s) => s.variants.some((v) => v.dim === 'm'));
  let now = 0;
  let ms = 0;
  model.clock = () => (now += ms);     // runNow reads it twice: each run takes `ms`
  model.msPerByte = () => 1e12;
  const inputs = Object.fromEntries(Object.entries(feed).map(([k, v]) => [k, new Float32Array(v)]));
  const lost = [];
  for (const [i, time] of times.entries()) {
    if (i === 1) await model.build(head.variants.find((v) => v.most >= value).key);
    ms = time;
    await model.run(inputs, { outputs: [] });
    lost.push(Object.fromEntries([...model.builds].map(([key, e]) => [JSON.parse(key)[0], e.lost])));
  }
  const rates = Object.fromEntries([...model.rates].map(([key, r]) => [JSON.parse(key)[0], r]));
  model.destroy();
  return { lost, rates };
}"""


def test_model_js_weighs_a_built_variant_by_its_own_launch(chromium, serve, tmp_path):
  """Issue 37, lavapipe's prefill: a head matmul at m = 1 runs its built variant (fast), whose
  base kernel counts whole tiles of padding; the run's time is shared out by the work of the
  launches that run, so the body's unbuilt variant at n = 100 is charged nearly all of it, as
  webgpu_browser.py (tests/unit test_browser_lazy_variants.py)."""
  from kernelgen.uop.program import Launch, grid_from_json, launch_work, work_from_json
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  m, n = kg.Dim("m", 1, 4096), kg.Dim("n", 1, 4096)
  rng = np.random.default_rng(6)
  a, b = (rng.standard_normal((32, k)).astype(np.float32) for k in (512, 64))
  ys = {"head": kg.Tensor(a).realize() @ kg.Tensor.empty(512, m, name="x1"),
        "body": kg.Tensor(b).realize() @ kg.Tensor.empty(64, n, name="x2")}
  kg.export(ys, str(tmp_path / "two"), format="webgpu")
  manifest = json.loads((tmp_path / "two" / "manifest.json").read_text())
  x1, x2 = rng.standard_normal((512, 1)).astype(np.float32), rng.standard_normal((64, 100))
  x2 = x2.astype(np.float32)
  run_ms = 1000.0
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    info = page.evaluate(BUILT, ["two", {"x1": x1.ravel().tolist(), "x2": x2.ravel().tolist()},
                                 run_ms])
    assert page.console_errors == [], page.console_errors
  np.testing.assert_allclose(np.array(info["out"]["head"], np.float32).reshape(32, 1), a @ x1,
                             rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(np.array(info["out"]["body"], np.float32).reshape(32, 100), b @ x2,
                             rtol=1e-4, atol=1e-3)

  def work(k, v, c):          # the launch's work at c (webgpu_browser.py's launch_work)
    launch = Launch("wgsl", "", k["entry_point"], (), tuple(v["workgroup_size"]),
                    tuple(v["dispatch"]), (), (), grid_from_json(v.get("grid")),
                    work_from_json(k["work"]))
    return launch_work(launch, {k["variants"][0]["dim"]: c})
  head, body = sorted(manifest["kernels"], key=lambda k: k["variants"][0]["dim"])
  fast = next(v for v in head["variants"] if v["most"] >= 1)
  wanted = next(v for v in body["variants"] if v["most"] >= 100)
  own, padded, asked = work(head, fast, 1), work(head, head, 1), work(body, body, 100)
  assert padded > 5 * asked > 5 * own, (padded, asked, own)
  assert info["lost"][wanted["file"]] == pytest.approx(run_ms * asked / (asked + own)), info
  assert info["lost"][fast["file"]] == 0, info
  # measured: at m = n = 100 (no padding saved) a 1000 ms run, then with the head's variant
  # built 1100 ms (its first use), then 400 ms: the variant takes its kernel's share less the
  # 600 ms saved (its rate, measured again at each run), and the next run charges the body's
  # variant its share under that rate
  x1 = rng.standard_normal((512, 100)).astype(np.float32)
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    rated = page.evaluate(RATED, ["two", {"x1": x1.ravel().tolist(), "x2": x2.ravel().tolist()},
                                  [1000.0, 1100.0, 400.0, 400.0], 100])
    assert page.console_errors == [], page.console_errors
  built = next(v for v in head["variants"] if v["most"] >= 100)
  kernel, variant = work(head, head, 100), work(head, built, 100)
  took = 1000.0 * kernel / (kernel + asked)
  rate = (took - 600.0) / took * kernel / variant
  assert rated["rates"] == {built["file"]: pytest.approx(rate)}, rated
  charged = [r[wanted["file"]] for r in rated["lost"]]
  assert charged[:2] == pytest.approx(np.cumsum([1000.0, 1100.0]) * asked / (kernel + asked))
  assert charged[3] - charged[2] == pytest.approx(400.0 * asked / (asked + rate * variant))
