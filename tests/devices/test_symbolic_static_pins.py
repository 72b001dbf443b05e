"""A symbolic register tile's variants for the few smallest values of its dim's range (m = 1, 2,
3: lowering/variants.py STATIC_VALUES) are the static kernels of those sizes (graph/at_value.py,
pinned.STATIC), with option static_low_end (set here on lavapipe's options, where the m = 2 and
3 tile variants ran 1.61x and 1.44x the static kernels' GPU time; no adapter sets it by default:
lowering/variants.py). Each is pinned to its one value (its stores gated by m == value: at any other value it
writes nothing), so every runtime's pick takes it only at that value (uop/program.py serves,
CompiledKernel.exact): natively, in the page (webgpu_browser.py pick: a fallback to a built
variant never takes a pin of another value) and in model.js (export/loader_builds.js pick,
the manifest's `exact`), checked here by structure and under Node; values against numpy at m = 1 ..
5 and values that divide no tile, the padding NaN, on PYTHON and WEBGPU."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.export import scripts
from kernelgen.export.plan import make_plan
from kernelgen.lowering.compile_cost import RUNS_MANY
from kernelgen.runtime.webgpu_browser import BrowserWebGPU
from kernelgen.uop.program import serves, variant_for
from tools import device_runtime, run_named

NODE = shutil.which("node")


def _compile(m, k=512, n=512, hi=2048, **options):
  x = kg.Tensor.empty(kg.Dim("m", 1, hi) if m is None else m, k, name="x")
  (kernel,) = kg.compile(x @ kg.Tensor.empty(k, n, name="w"), "wgsl", adapter="lavapipe",
                         static_low_end=True, **options)
  return kernel


def _unnamed(source: str) -> str:
  return re.sub(r"\bfn \w+\(", "fn kernel(", source)


def test_small_values_run_the_static_kernels_of_their_sizes_and_only_those():
  kernel = _compile(None)
  for m in (1, 2, 3):
    static = _compile(m, runs=RUNS_MANY)      # (a kernel run many times, as a symbolic one)
    picked = variant_for(kernel, {"m": m})
    assert kernel.variants[m - 1][:2] == ("m", m) and picked is kernel.variants[m - 1][2], m
    assert picked.exact and not picked.launch.grid, m
    assert _unnamed(picked.source) == _unnamed(static.source), m
    assert (picked.local_size, picked.global_size) == (static.local_size, static.global_size)
    assert picked.launch.bindings == kernel.launch.bindings
  above = variant_for(kernel, {"m": 4})
  assert above.launch.grid and not above.exact         # the ladder's tile from m = 4 up


def _fake_page(kernel, built):
  """The page's runtime (webgpu_browser.py) with only `built` variants' pipelines ready."""
  runtime = object.__new__(BrowserWebGPU)        # no Pyodide: only what pick reads
  ready = {v.launch.entry_point + v.launch.source for v in built}
  runtime.gpu = SimpleNamespace(pipelineState=lambda launch: "ready" if launch in ready else "none")
  runtime._launch = lambda k: (None, k.launch.entry_point + k.launch.source)
  runtime.asked, runtime.asking, runtime.background, runtime.since = {}, {}, None, None
  runtime.work, runtime.time, runtime.rates = 0.0, 0.0, {}
  runtime.clock = lambda: 0.0
  return runtime


def test_a_fallback_never_takes_a_pin_of_another_value():
  kernel = _compile(None)
  (_, _, one), (_, _, two), (_, _, three), (_, most, tile) = kernel.variants[:4]
  assert not serves("m", 2, two, {"m": 1}) and serves("m", most, tile, {"m": 1})
  assert serves("m", 2, two, {"m": 2}) and not serves("m", 2, two, {"m": 3})
  # m = 1's pin not built: the first built variant that serves 1 is the tile, not m = 2's pin
  assert _fake_page(kernel, [two, three, tile]).pick(kernel, {"m": 1}) is tile
  assert _fake_page(kernel, [two, three]).pick(kernel, {"m": 1}) is kernel
  assert _fake_page(kernel, [two, three]).pick(kernel, {"m": 2}) is two
  assert _fake_page(kernel, [one, three]).pick(kernel, {"m": 2}) is kernel
  # natively, the first that serves: with the pins in reverse order, each still its own value
  reordered = dataclasses.replace(kernel, variants=kernel.variants[2::-1] + kernel.variants[3:])
  assert [variant_for(reordered, {"m": m}) for m in (1, 2, 3, 4)] == [one, two, three, tile]


# Node: model.js's Model.prototype.pick (export/loader_builds.js) over a step whose variants are
# the manifest's entries
PICK = """
const { Model } = await import(process.argv[2]);
const { step, cases } = JSON.parse(process.argv[3]);
process.stdout.write(JSON.stringify(cases.map(([built, m]) => {
  const builds = new Map([step, ...step.variants].map((v) => [v.key,
    { made: built.includes(v.key) || v === step ? { pipeline: v.key } : null }]));
  const self = { builds, rates: new Map(), asking: new Map(), work: 0, time: 0, ran: [],
    picked: [] };
  return [Model.prototype.pick.call(self, step, { m }).pipeline, [...self.asking.keys()]];
})));
"""


@pytest.mark.skipif(NODE is None, reason="needs node")
def test_model_js_takes_a_pin_only_at_its_value(tmp_path):
  entry = make_plan({"y": kg.Tensor.empty(kg.Dim("m", 1, 64), 64, name="x") @
                     kg.Tensor.empty(64, 64, name="w")}, "wgsl",
                    {"adapter": "lavapipe", "static_low_end": True}, ".wgsl").manifest["kernels"][0]
  pins = [v for v in entry["variants"] if v.get("exact")]
  assert [v["most"] for v in pins] == [1, 2, 3] and not any(v.get("grid") for v in pins)
  keys = [f"v{v['most']}" for v in entry["variants"]]
  step = {"key": "kernel", "dispatch": entry["dispatch"], "threads": 1, "variants": [
    {"dim": v["dim"], "most": v["most"], "exact": bool(v.get("exact")), "key": key,
     "dispatch": v["dispatch"], "threads": 1} for v, key in zip(entry["variants"], keys)]}
  tile = keys[3]
  cases = [[["v2", "v3", tile], 1], [["v2", "v3"], 1], [["v2"], 2], [["v1", "v3"], 2],
           [["v1", "v2", tile], 3], [["v1", "v2", "v3"], 4]]
  (tmp_path / "model.mjs").write_text(scripts.model_js() + "\nexport { Model };\n")
  (tmp_path / "pick.mjs").write_text(PICK)
  done = subprocess.run([NODE, str(tmp_path / "pick.mjs"), (tmp_path / "model.mjs").as_uri(),
                         json.dumps({"step": step, "cases": cases})],
                        capture_output=True, text=True, timeout=120, check=True)
  assert json.loads(done.stdout) == [[tile, ["v1"]], ["kernel", ["v1"]], ["v2", []],
                                     ["kernel", ["v2"]], [tile, ["v3"]], ["kernel", [tile]]]


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_symbolic_m_matmul_is_right_at_the_pinned_values_and_past_them(device):
  runtime = device_runtime(device)
  hi, k, n = 64, 64, 64        # variants: pins at 1, 2, 3, tiles up to 7 and 60, the kernel
  kernel = _compile(None, k, n, hi)
  assert [m for _, m, v in kernel.variants if v.exact] == [1, 2, 3]
  w = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
  for m in (1, 2, 3, 4, 5, 7, 13):
    x = np.full((hi, k), np.nan, np.float32)
    x[:m] = np.random.default_rng(m).standard_normal((m, k))
    got = run_named(runtime, kernel, {"x": x, "w": w}, {"m": m}, out_fill=np.nan)
    np.testing.assert_allclose(got.reshape(hi, n)[:m], x[:m] @ w, rtol=1e-4, atol=1e-4,
                               err_msg=f"m = {m}")


def test_a_bundle_keeps_its_pins_exact(tmp_path):
  """manifest.json marks the pins `exact`; a bundle loaded from it picks them as compiled."""
  x, w = kg.Tensor.empty(kg.Dim("m", 1, 64), 64, name="x"), kg.Tensor.empty(64, 64, name="w")
  rng = np.random.default_rng(0)
  weights = rng.standard_normal((64, 64)).astype(np.float32)
  kg.export({"y": x @ kg.Tensor(weights).realize()}, str(tmp_path), adapter="lavapipe",
            static_low_end=True)
  manifest = json.loads((tmp_path / "manifest.json").read_text())
  assert [v.get("exact", False) for v in manifest["kernels"][0]["variants"]][:4] == \
      [True, True, True, False]
  bundle = kg.load_bundle(str(tmp_path))
  kernel = bundle._kernel(manifest["kernels"][0])
  assert [v.exact for _, _, v in kernel.variants][:4] == [True, True, True, False]
  assert [variant_for(kernel, {"m": m}) for m in (1, 2, 3)] == \
      [v for _, _, v in kernel.variants[:3]]
  for m in (1, 2, 3, 5):
    rows = rng.standard_normal((m, 64)).astype(np.float32)
    got = bundle.run({"x": rows}, device="WEBGPU")["y"].numpy()
    np.testing.assert_allclose(got, rows @ weights, rtol=1e-4, atol=1e-4, err_msg=f"m = {m}")
