"""A bundle's per-call time in the page under two loaders (issue 42's fixed cost per call):
model.js as a git ref has it (default main) against the worktree's (export/scripts.py), each
loading the same exported bundles on one shared device of the page's adapter, interleaved
round after round (bench/peers.round_order). A call is what bench/pypi_page.py times: a pause
(a page calling every 32 ms), then wall time from typed arrays on the CPU to the outputs read
(a bundle with state reads back only its other outputs). With no --bundle, a trivial one-kernel
bundle (64 floats + 1) is exported and timed: the loader's fixed cost. Prints each loader's
median and quartiles per bundle, the calls a warm run counted (model.calls), and the load.

Not a test (nothing is asserted); say the load when quoting it.

    python bench/bundle_call_ab.py [--bundle DIR ...] [--old REF] [--adapter swiftshader|lavapipe]
                                   [--rounds 30] [--pause-ms 30] [--profile RUNS] [--one-loader]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from peers import round_order  # noqa: E402

# cross-origin isolated: performance.now() to 5 us, not 100 us
ISOLATED = {"Cross-Origin-Opener-Policy": "same-origin",
            "Cross-Origin-Embedder-Policy": "require-corp"}
EXPORT = "core/kernelgen/export"

PAGE = """<!doctype html><title>bundle call A/B</title><script type="module">
const ARRAYS = { float32: Float32Array, int32: Int32Array, uint32: Uint32Array,
  uint8: Uint8Array, int8: Int8Array, int16: Int16Array, uint16: Uint16Array, bool: Uint8Array,
  float16: Uint16Array };
const state = { device: null, runs: {} };
async function device() {
  if (state.device) return state.device;
  const compat = location.search.includes('compat');
  const adapter = await navigator.gpu.requestAdapter(compat ? { featureLevel: 'compatibility' }
    : {});
  const limits = {};
  for (const name of ['maxStorageBuffersPerShaderStage', 'maxComputeInvocationsPerWorkgroup',
    'maxComputeWorkgroupSizeX', 'maxStorageBufferBindingSize']) limits[name] = adapter.limits[name];
  const stamps = adapter.features.has('timestamp-query') ? ['timestamp-query'] : [];
  state.device = await adapter.requestDevice({ requiredLimits: limits,
    requiredFeatures: stamps });
  return state.device;
}
// key: loader/bundle; the bundle loaded by that loader, its inputs random (seeded), run once
async function prepare(key, loader, base) {
  const { load } = await import(loader);
  const model = await load({ device: await device(), base });
  let seed = 1;
  const inputs = Object.fromEntries(model.inputs.map((i) => {
    const n = i.shape.reduce((a, b) => a * b, 1);
    const data = new ARRAYS[i.dtype](n);
    for (let k = 0; k < n; k++) { seed = (seed * 16807) % 2147483647; data[k] = seed % 7; }
    return [i.name, data];
  }));
  const kept = new Set((model.manifest.state || []).map((s) => s.output));
  const read = model.outputs.map((o) => o.name).filter((n) => !kept.has(n));
  const run = () => model.run(inputs, { outputs: read });
  const first = await run();
  await run();
  state.runs[key] = run;
  return { calls: model.calls, first: Object.fromEntries(Object.entries(first).map(([k, v]) =>
    [k, Array.from(v).slice(0, 8)])) };
}
async function time(key, pauseMs) {
  await new Promise((resolve) => setTimeout(resolve, pauseMs));
  const start = performance.now();
  await state.runs[key]();
  return performance.now() - start;
}
// the bundle loaded again with GPU timestamps per kernel: the best of `runs` runs (or null)
async function profile(loader, base, runs) {
  const dev = await device();
  if (!dev.features.has('timestamp-query')) return null;
  const { load } = await import(loader);
  const model = await load({ device: dev, base, timings: true });
  const inputs = Object.fromEntries(model.inputs.map((i) => [i.name,
    new ARRAYS[i.dtype](i.shape.reduce((a, b) => a * b, 1))]));
  let best = null;
  for (let r = 0; r < runs; r++) {
    await model.run(inputs);
    const total = model.timings.reduce((s, t) => s + t.ms, 0);
    if (!best || total < best.total) best = { total, kernels: model.timings };
  }
  model.destroy();
  return best;
}
window.ab = { prepare, time, profile };
document.body.dataset.ready = 'true';
</script>"""


def model_js(ref: str | None) -> str:
  """model.js as git ref `ref` has it (export/scripts.py joins loader.js and its parts; before
  the split, loader.js alone), or as the worktree has it (ref None)."""
  sys.path.insert(0, str(ROOT / "core"))
  from kernelgen.export import scripts
  if ref is None:
    return scripts.model_js()
  return scripts.model_js(lambda name: subprocess.run(
    ["git", "show", f"{ref}:{EXPORT}/{name}"], cwd=ROOT, check=True, capture_output=True,
    encoding="utf-8").stdout)


def trivial_bundle(folder: Path) -> Path:
  """A one-kernel bundle (y = x * 2 + 1 over 64 floats): nothing but the loader's fixed cost."""
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  x = kg.Tensor.empty(64, name="x")
  kg.export({"y": x * 2 + 1}, str(folder), format="webgpu")
  return folder


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--bundle", action="append", type=Path, default=[],
                      help="an exported WebGPU bundle folder (repeatable)")
  parser.add_argument("--old", default="main", help="git ref of the old loader (or a loader file)")
  parser.add_argument("--adapter", default="swiftshader", choices=("swiftshader", "lavapipe"))
  parser.add_argument("--rounds", type=int, default=30)
  parser.add_argument("--one-loader", action="store_true",
                      help="only the worktree's loader (to compare bundles, e.g. a branch's "
                           "kernels against main's, exported with bench/pypi_page.py --keep)")
  parser.add_argument("--pause-ms", type=int, default=30)
  parser.add_argument("--profile", type=int, default=0, metavar="RUNS",
                      help="also time each bundle's kernels (new loader, GPU timestamps: "
                           "SwiftShader), best of RUNS runs")
  args = parser.parse_args(argv)
  from playwright.sync_api import sync_playwright

  from browser_util import StaticServer, launch_chromium, local_page
  with tempfile.TemporaryDirectory(prefix="kg-call-ab-") as tmp:
    root = Path(tmp)
    (root / "index.html").write_text(PAGE)
    (root / "old.js").write_text(Path(args.old).read_text() if Path(args.old).is_file()
                                 else model_js(args.old), encoding="utf-8")
    (root / "new.js").write_text(model_js(None), encoding="utf-8")
    bundles = args.bundle or [trivial_bundle(root / "trivial")]
    mounts = {f"/b{i}/": b for i, b in enumerate(bundles)}
    with StaticServer(root, mounts=mounts, headers=ISOLATED) as server, sync_playwright() as pw:
      browser = launch_chromium(pw, lavapipe=args.adapter == "lavapipe")
      with local_page(browser) as page:
        page.set_default_timeout(600_000)
        page.goto(server.url("index.html" + ("?compat" if args.adapter == "lavapipe" else "")))
        page.wait_for_selector("body[data-ready]", state="attached")
        keys, info = [], {}
        for i, bundle in enumerate(bundles):
          for loader in ("new",) if args.one_loader else ("old", "new"):
            key = f"{loader} {i}:{bundle.name}"
            info[key] = page.evaluate("([k, l, b]) => window.ab.prepare(k, l, b)",
                                      [key, server.url(f"{loader}.js"), server.url(f"b{i}/")])
            keys.append(key)
          a, b = (info.get(f"{x} {i}:{bundle.name}", {}).get("first") for x in ("old", "new"))
          if a and a != b:
            print(f"  {bundle.name}: outputs differ: old {a} new {b}", file=sys.stderr)
        profiles = {f"{i}:{b.name}": page.evaluate("([l, b, r]) => window.ab.profile(l, b, r)",
                                          [server.url("new.js"), server.url(f"b{i}/"),
                                           args.profile])
                    for i, b in enumerate(bundles)} if args.profile else {}
        samples = {k: [] for k in keys}
        load_start = os.getloadavg()
        for r in range(args.rounds):
          for key in round_order(keys, r):
            samples[key].append(page.evaluate("([k, p]) => window.ab.time(k, p)",
                                              [key, args.pause_ms]))
      browser.close()
  print(f"{'bundle / loader':40} {'median':>7} {'q1':>6} {'q3':>6} {'best':>6}  calls")
  for key in keys:
    s = sorted(samples[key])
    q = statistics.quantiles(s, n=4)
    calls = "/".join(str(info[key]["calls"].get(k)) for k in
                     ("dispatches", "submits", "writes", "copies", "reads"))
    print(f"{key:40} {statistics.median(s):7.3f} {q[0]:6.3f} {q[2]:6.3f} {s[0]:6.3f}  {calls}")
  for name, best in profiles.items():
    if best:
      print(f"{name}: GPU {best['total']:.3f} ms in {len(best['kernels'])} kernels (best of "
            f"{args.profile} runs, one pass each): " + ", ".join(
              f"{k['name']} {k['ms']:.3f}" for k in best["kernels"]))
  print(f"\n{args.adapter}; {args.rounds} interleaved rounds, one call each after a "
        f"{args.pause_ms} ms pause; wall ms, typed arrays in to outputs on the CPU; calls: "
        f"dispatches/submits/writes/copies/reads; load {load_start} -> {os.getloadavg()}")
  print(json.dumps({k: [round(v, 4) for v in s] for k, s in samples.items()}), file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
