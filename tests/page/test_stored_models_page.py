"""The Models view after a browser restart on the same profile compiles nothing (headless
Chromium, SwiftShader, a persistent profile: the browser closed and started again, as a user's
reload is): the model's WGSL and PTX (load_model) and the kernels of its run come back from the
browser's store (IndexedDB, core/kernelgen/stored.py), the view says so, and the output is the
same and matches onnxruntime. Spoiled stored records (each under another kernel's key, one also
corrupted) are rejected and everything is compiled again, with the right output; after
kg.clear_cache() the next start compiles everything too."""
from __future__ import annotations

import numpy as np
import pytest

from browser_util import LocalOnly, chromium_args, chromium_env, chromium_path
from test_browser import BOOT_MS, RUN_MS, site  # noqa: F401 (site: a fixture)

pytestmark = pytest.mark.timeout(1200)

# JS: open the model's bytes in the Models view and run it on its random inputs (seed 0), let
# the worker go idle (the store is written after each command's reply); the counts and texts
OPEN_AND_RUN = """async (bytes) => {
  const view = kgApp.models;
  const model = await view.open(new File([new Uint8Array(bytes)], 'small.onnx'));
  if (!model || model.error) return { error: model?.error || 'busy' };
  const meta = document.querySelector('#model-meta').textContent;
  const run = await view.run();
  if (!run || run.error) return { error: run?.error || 'busy' };
  await kgApp.state.kg.call('info');
  return { modelStored: Boolean(model.stored), wgsl: model.wgsl.kernels.map((k) => k.source),
    compiled: run.compiled, stored: run.stored, device: run.device, meta,
    facts: document.querySelector('#model-run-facts').textContent,
    data: Array.from(run.outputs[0].data, Number) };
}"""

# JS: every stored record put under the next record's key, the first one's text also changed
SPOIL = """async () => {
  const db = await new Promise((resolve, reject) => {
    const req = indexedDB.open('kernelgen-kernels', 1);
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
  const tx = db.transaction('kernels', 'readwrite');
  const store = tx.objectStore('kernels');
  const all = (req) => new Promise((resolve) => { req.onsuccess = () => resolve(req.result); });
  const [keys, values] = [await all(store.getAllKeys()), await all(store.getAll())];
  values[0] = { ...values[0], text: values[0].text.replace('1', '2') };
  keys.forEach((key, i) => store.put(values[(i + 1) % keys.length], key));
  await new Promise((resolve) => { tx.oncomplete = resolve; });
  return keys.length;
}"""


def _model() -> bytes:
  """Conv 3->4 (3x3) + Relu, global average pool, Gemm 4->5, Softmax: a few kernels."""
  from onnx import TensorProto, helper, numpy_helper
  rng = np.random.default_rng(3)
  w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
  g = numpy_helper.from_array(rng.standard_normal((5, 4)).astype(np.float32), "g")
  nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
           helper.make_node("Relu", ["c"], ["r"]),
           helper.make_node("GlobalAveragePool", ["r"], ["p"]),
           helper.make_node("Flatten", ["p"], ["f"]),
           helper.make_node("Gemm", ["f", "g"], ["s"], transB=1),
           helper.make_node("Softmax", ["s"], ["y"], axis=1)]
  graph = helper.make_graph(
    nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], [w, g])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _reference(data: bytes) -> np.ndarray:
  """onnxruntime's output on the page's random inputs for seed 0 (web_api.random_inputs)."""
  import onnxruntime as ort

  import kernelgen as kg
  from kernelgen.web_api import random_inputs
  feed = random_inputs(kg.onnx.load(data), 0)["x"]
  x = np.array(feed["values"], np.float32).reshape(feed["shape"])
  session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
  return session.run(None, {"x": x})[0].ravel()


def _start(playwright, site, profile, js: str, *args, page: str = "index.html"):  # noqa: F811
  """Start Chromium on `profile`, boot `page` (the app), evaluate `js`, close Chromium: its
  result."""
  context = playwright.chromium.launch_persistent_context(
    str(profile), executable_path=chromium_path(), headless=True, args=chromium_args(),
    env=chromium_env(), service_workers="block", viewport={"width": 1440, "height": 900})
  guard = LocalOnly(context)
  try:
    tab = context.pages[0] if context.pages else context.new_page()
    errors = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.goto(site.url(page))
    tab.wait_for_selector("body[data-ready]", timeout=BOOT_MS)
    tab.set_default_timeout(RUN_MS)
    result = tab.evaluate(js, *args)
    assert errors == [], errors
    return result
  finally:
    context.close()
    guard.check()


def test_the_models_view_after_a_restart_takes_its_kernels_from_the_store(
    site, playwright, tmp_path):  # noqa: F811
  data = _model()
  want = _reference(data)
  profile = tmp_path / "profile"
  first = _start(playwright, site, profile, OPEN_AND_RUN, list(data))
  assert first.get("device") == "WEBGPU", first
  assert not first["modelStored"] and first["compiled"] >= 2 and first["stored"] == 0, first
  np.testing.assert_allclose(first["data"], want, rtol=1e-4, atol=1e-6)

  again = _start(playwright, site, profile, OPEN_AND_RUN, list(data))
  assert again["modelStored"] and again["wgsl"] == first["wgsl"], again     # no compile pass
  assert again["compiled"] == 0 and again["stored"] == first["compiled"], again
  assert "browser's store" in again["meta"] and "from the browser's store" in again["facts"]
  assert again["data"] == first["data"]

  assert _start(playwright, site, profile, SPOIL) >= 3
  spoiled = _start(playwright, site, profile, OPEN_AND_RUN, list(data))
  assert not spoiled["modelStored"] and spoiled["wgsl"] == first["wgsl"], spoiled
  assert spoiled["compiled"] == first["compiled"] and spoiled["stored"] == 0, spoiled
  assert spoiled["data"] == first["data"]

  clear = "async () => (await kgApp.state.kg.run('import kernelgen as kg\\nkg.clear_cache()\\n" \
          "out = Tensor([1.0])', {device: 'PYTHON'}), await kgApp.state.kg.call('info'), 1)"
  _start(playwright, site, profile, clear)
  cleared = _start(playwright, site, profile, OPEN_AND_RUN, list(data))
  assert not cleared["modelStored"] and cleared["stored"] == 0, cleared
  assert cleared["compiled"] == first["compiled"] and cleared["data"] == first["data"]
