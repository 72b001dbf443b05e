"""A streaming model's bundle in headless Chromium (issue 42): a recurrent ONNX model exported
with its hidden state as bundle state (test_bundle_fixed_state.py's model) runs chunk after chunk
in model.js, matching onnxruntime fed its own state back; each warm call is one submit, one
dispatch per kernel, one write (the chunk), one copy (the state, on the GPU) and one read (the
output asked for), nothing else (model.calls). Without state, a call reading both outputs maps
one buffer once, and one reading only the second output still gets it. A bundle compiled for more storage buffers per
kernel than WebGPU's default asks the adapter for them (manifest.limits), and a device passed in
without them is an Error that says what to do."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import kernelgen as kg
from browser_util import local_page
from test_bundle_fixed_state import CHUNK, HIDDEN, recurrent_onnx, reference, wide_program

pytestmark = pytest.mark.timeout(600)

# JS: load the bundle under /NAME/, run each chunk reading back only `output`, reset, run the
# first again; every call's outputs and model.calls
STREAM = """async ([name, chunks]) => {
  const { load } = await import(`/${name}/model.js`);
  const model = await load();
  const runs = [];
  const call = async (chunk) => {
    const out = await model.run({ x: new Float32Array(chunk) }, { outputs: ['output'] });
    runs.push({ out: Object.fromEntries(Object.entries(out).map(([k, v]) => [k, Array.from(v)])),
      calls: { ...model.calls } });
  };
  for (const chunk of chunks) await call(chunk);
  model.reset();
  await call(chunks[0]);
  const kernels = model.manifest.kernels.length;
  model.destroy();
  return { runs, kernels, inputs: model.inputs.map((i) => i.name) };
}"""


@pytest.fixture
def site(tmp_path, serve):
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  return tmp_path, serve(tmp_path)


def test_a_streaming_bundle_keeps_its_state_on_the_gpu_one_submit_per_call(chromium, site):
  root, server = site
  raw = recurrent_onnx()
  chunks = [np.random.default_rng(i).standard_normal((1, CHUNK)).astype(np.float32)
            for i in range(4)]
  want = reference(raw, chunks)
  kg.export(kg.onnx.load(raw), str(root / "vad"), format="webgpu", state={"state": "stateN"})
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    info = page.evaluate(STREAM, ["vad", [c.ravel().tolist() for c in chunks]])
    assert page.console_errors == [], page.console_errors
  assert info["inputs"] == ["x"]
  for run, w in zip(info["runs"], want + [want[0]]):
    assert list(run["out"]) == ["output"]
    np.testing.assert_allclose(np.array(run["out"]["output"], np.float32).reshape(w.shape), w,
                               rtol=1e-5, atol=1e-6)
  warm = {"submits": 1, "dispatches": info["kernels"], "writes": 1, "copies": 1, "reads": 1,
          "maps": 1}
  assert all(run["calls"] == warm for run in info["runs"]), [r["calls"] for r in info["runs"]]


# JS: load the bundle under /NAME/ and run one chunk twice, reading every output, then only
# `stateN`: each call's outputs and model.calls
BOTH = """async ([name, x, state]) => {
  const { load } = await import(`/${name}/model.js`);
  const model = await load();
  const feed = { x: new Float32Array(x), state: new Float32Array(state) };
  const runs = [];
  for (const outputs of [null, ['stateN']]) {
    const out = await model.run(feed, outputs ? { outputs } : {});
    runs.push({ out: Object.fromEntries(Object.entries(out).map(([k, v]) => [k, Array.from(v)])),
      calls: { ...model.calls } });
  }
  model.destroy();
  return runs;
}"""


def test_a_call_reading_two_outputs_maps_one_buffer_once(chromium, site):
  root, server = site
  raw = recurrent_onnx()
  rng = np.random.default_rng(7)
  x = rng.standard_normal((1, CHUNK)).astype(np.float32)
  state = rng.standard_normal((2, 1, HIDDEN)).astype(np.float32)
  want = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(
    None, {"x": x, "state": state})
  kg.export(kg.onnx.load(raw), str(root / "both"), format="webgpu")
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    runs = page.evaluate(BOTH, ["both", x.ravel().tolist(), state.ravel().tolist()])
    assert page.console_errors == [], page.console_errors
  both, second = runs
  assert list(both["out"]) == ["output", "stateN"] and list(second["out"]) == ["stateN"]
  for got, name, w in [(both, "output", want[0]), (both, "stateN", want[1]),
                       (second, "stateN", want[1])]:
    np.testing.assert_allclose(np.array(got["out"][name], np.float32).reshape(w.shape), w,
                               rtol=1e-5, atol=1e-6)
  assert both["calls"]["reads"] == 2 and both["calls"]["maps"] == 1, both["calls"]
  assert second["calls"]["reads"] == 1 and second["calls"]["maps"] == 1, second["calls"]


# JS: the adapter's storage buffers per stage; load() of /NAME/ on its own device and on a
# default device: {limit, own: outputs or error, given: error or null}
LIMITS = """async ([name, inputs]) => {
  const { load } = await import(`/${name}/model.js`);
  const adapter = await navigator.gpu.requestAdapter();
  const result = { limit: adapter.limits.maxStorageBuffersPerShaderStage };
  try {
    const model = await load();
    const feed = Object.fromEntries(Object.entries(inputs).map(([k, v]) => [k,
      new Float32Array(v)]));
    result.own = Array.from((await model.run(feed)).y);
    result.calls = model.calls;
    model.destroy();
  } catch (error) {
    result.own = error.message;
  }
  try {
    await load({ device: await adapter.requestDevice() });
    result.given = null;
  } catch (error) {
    result.given = error.message;
  }
  return result;
}"""


@pytest.mark.parametrize("inputs", [8, 12])
def test_a_bundle_for_more_storage_buffers_asks_the_adapter_for_them(chromium, site, inputs):
  """9 buffers fit SwiftShader's 10 (the bundle runs in one kernel); 13 do not (an Error)."""
  root, server = site
  outputs, xs = wide_program(inputs)
  bundle = kg.export(outputs, str(root / "wide"), format="webgpu", max_storage_buffers=16)
  need = bundle.manifest["limits"]["maxStorageBuffersPerShaderStage"]
  assert need == inputs + 1
  rng = np.random.default_rng(0)
  feed = {f"x{i}": rng.standard_normal(64).astype(np.float32) for i in range(len(xs))}
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    got = page.evaluate(LIMITS, ["wide", {k: v.tolist() for k, v in feed.items()}])
  print(f"\nthe adapter's maxStorageBuffersPerShaderStage: {got['limit']}, the bundle's {need}")
  assert got["given"] is not None and (
    f"this model was exported for maxStorageBuffersPerShaderStage {need}; the device has 8: "
    "create the device with requiredLimits") in got["given"], got["given"]
  if got["limit"] >= need:
    want = sum(feed[f"x{i}"] * (i + 1) for i in range(len(xs)))
    np.testing.assert_allclose(np.array(got["own"], np.float32), want, rtol=1e-5, atol=1e-5)
    assert got["calls"]["dispatches"] == 1
  else:
    assert (f"this model was exported for maxStorageBuffersPerShaderStage {need}; this adapter "
            f"gives {got['limit']}: export it for this adapter") in got["own"], got["own"]


def test_a_bundle_binding_small_inputs_as_uniform_buffers_runs_on_a_default_device(chromium,
                                                                                    site):
  """At WebGPU's default 8 storage buffers the 12-input kernel keeps one kernel, five of its
  small inputs bound as uniform buffers (render/wgsl/target.py uniform_slots; within the default
  12, so the manifest asks for no limits): model.js runs it, on its own device and on a default
  one passed in, one dispatch, values numpy's."""
  root, server = site
  outputs, xs = wide_program(12)
  bundle = kg.export(outputs, str(root / "narrow"), format="webgpu")
  kinds = [b.get("kind", "storage") for k in bundle.manifest["kernels"] for b in k["bindings"]]
  assert "limits" not in bundle.manifest and len(bundle.manifest["kernels"]) == 1
  assert (kinds.count("storage"), kinds.count("uniform")) == (8, 5)
  rng = np.random.default_rng(0)
  feed = {f"x{i}": rng.standard_normal(64).astype(np.float32) for i in range(len(xs))}
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    got = page.evaluate(LIMITS, ["narrow", {k: v.tolist() for k, v in feed.items()}])
    assert page.console_errors == [], page.console_errors
  want = sum(feed[f"x{i}"] * (i + 1) for i in range(len(xs)))
  assert not isinstance(got["own"], str), got["own"]
  np.testing.assert_allclose(np.array(got["own"], np.float32), want, rtol=1e-5, atol=1e-5)
  assert got["calls"]["dispatches"] == 1 and got["given"] is None, got
