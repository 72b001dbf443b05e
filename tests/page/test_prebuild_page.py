"""A warm start's pipeline prebuild (web/worker.js prebuildStored; headless Chromium, SwiftShader,
a persistent profile closed and started again as a user's reload is): after the page's first
WEBGPU run the store holds the order its pipelines were first launched in, and the next start
builds those pipelines while Python boots in that very order (the order the next run launches
them in), none twice; a spoiled store (every kernel record under another kernel's key, the
launch order garbled) still gives the right output, its kernels compiled again."""
from __future__ import annotations

import numpy as np
import pytest

from test_browser import site  # noqa: F401 (site: a fixture)
from test_stored_models_page import OPEN_AND_RUN, _model, _reference, _start

pytestmark = pytest.mark.timeout(1200)

# JS: open and run the model as OPEN_AND_RUN does; then the boot's prebuild (the pipeline hashes
# it started, in order; compile() calls; pipelines held) and the launch order this run stored
RUN_AND_PREBUILT = """async (bytes) => {
  const run = await (%s)(bytes);
  const prebuilt = await kgApp.state.kg.call('prebuilt');
  const db = await new Promise((resolve, reject) => {
    const req = indexedDB.open('kernelgen-kernels', 1);
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
  const req = db.transaction('kernels').objectStore('kernels').get('launch-order');
  const order = await new Promise((resolve) => { req.onsuccess = () => resolve(req.result); });
  return { ...run, prebuilt, order: order?.pipelines ?? null };
}""" % OPEN_AND_RUN

# JS: every stored kernel record put under the next one's key (the launch order left as it is),
# the first one's checksum also spoiled: Python rejects them all (stored.py unsealed)
SPOIL_KERNELS = """async () => {
  const db = await new Promise((resolve) => {
    const req = indexedDB.open('kernelgen-kernels', 1);
    req.onsuccess = () => resolve(req.result);
  });
  const tx = db.transaction('kernels', 'readwrite');
  const store = tx.objectStore('kernels');
  const all = (req) => new Promise((resolve) => { req.onsuccess = () => resolve(req.result); });
  const [keys, values] = [await all(store.getAllKeys()), await all(store.getAll())];
  const kernels = keys.map((key, i) => [key, values[i]]).filter(([, v]) => v.kind === 'kernel');
  kernels[0][1] = { ...kernels[0][1], sum: '0'.repeat(64) };
  kernels.forEach(([key], i) => store.put(kernels[(i + 1) % kernels.length][1], key));
  await new Promise((resolve) => { tx.oncomplete = resolve; });
  return kernels.length;
}"""

# JS: the stored launch order replaced by something that is not a list of hashes
GARBLE_ORDER = """async () => {
  const db = await new Promise((resolve) => {
    const req = indexedDB.open('kernelgen-kernels', 1);
    req.onsuccess = () => resolve(req.result);
  });
  const tx = db.transaction('kernels', 'readwrite');
  tx.objectStore('kernels').put({ kind: 'order', pipelines: { 0: 'not a list' } }, 'launch-order');
  await new Promise((resolve) => { tx.oncomplete = resolve; });
  return 1;
}"""


def _run(playwright, site, profile, data):  # noqa: F811
  return _start(playwright, site, profile, RUN_AND_PREBUILT, list(data),
                page="index.html?prebuild=1")


def _first_run(playwright, site, tmp_path):  # noqa: F811
  """(model bytes, its reference output, the profile, the first page load's run) of a fresh
  profile; the run's output checked."""
  data = _model()
  want = _reference(data)
  profile = tmp_path / "profile"
  first = _run(playwright, site, profile, data)
  assert first.get("device") == "WEBGPU", first
  np.testing.assert_allclose(first["data"], want, rtol=1e-4, atol=1e-6)
  return data, want, profile, first


def test_a_warm_start_prebuilds_the_first_runs_pipelines_in_launch_order_none_twice(
    site, playwright, tmp_path):  # noqa: F811
  data, _, profile, first = _first_run(playwright, site, tmp_path)
  assert first["prebuilt"]["started"] == []                         # nothing stored yet
  assert first["order"] and len(first["order"]) == len(set(first["order"])) >= 2, first

  again = _run(playwright, site, profile, data)
  assert again["compiled"] == 0 and again["data"] == first["data"], again
  assert again["prebuilt"]["started"] == first["order"] == again["order"], again
  built = again["prebuilt"]
  assert built["builds"] == built["pipelines"] == len(first["order"]), built   # none twice


def test_a_spoiled_store_still_compiles_and_gives_the_right_output(
    site, playwright, tmp_path):  # noqa: F811
  data, want, profile, first = _first_run(playwright, site, tmp_path)
  assert _start(playwright, site, profile, SPOIL_KERNELS) >= 2
  spoiled = _run(playwright, site, profile, data)
  assert spoiled["compiled"] == first["compiled"] and spoiled["stored"] == 0, spoiled
  assert spoiled["data"] == first["data"]
  np.testing.assert_allclose(spoiled["data"], want, rtol=1e-4, atol=1e-6)
  built = spoiled["prebuilt"]     # the moved records' launches are still this model's pipelines
  assert built["started"] and built["builds"] == built["pipelines"], built

  assert _start(playwright, site, profile, GARBLE_ORDER) == 1
  garbled = _run(playwright, site, profile, data)
  assert garbled["prebuilt"]["started"] == [] and garbled["data"] == first["data"], garbled
  assert garbled["order"] == first["order"]      # stored again by this run
