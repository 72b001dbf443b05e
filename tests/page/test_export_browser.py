"""Exported WebGPU bundles (kg.export, export/loader.js) in headless Chromium (SwiftShader): the
bundle's model.js loads from a local static server with no request for any Pyodide file, runs,
and matches numpy; wrong inputs, a device without a needed feature, and device loss are Errors
that say what to do."""
from __future__ import annotations

import base64
import json

import numpy as np
import pytest

import kernelgen as kg
from browser_util import local_page
from tools import REPO_ROOT

pytestmark = pytest.mark.timeout(600)

# JS: load the bundle under /NAME/, run it on `inputs` ({name: [numbers]}), and time it
RUN = """async ([name, inputs, runs]) => {
  const t0 = performance.now();
  const { load } = await import(`/${name}/model.js`);
  const model = await load({timings: true});
  const feed = {};
  for (const spec of model.inputs) feed[spec.name] = new Float32Array(inputs[spec.name]);
  const t1 = performance.now();
  let out = await model.run(feed);
  const t2 = performance.now();
  for (let i = 1; i < runs; i++) out = await model.run(feed);
  const t3 = performance.now();
  const plain = {};
  for (const [k, v] of Object.entries(out)) plain[k] = Array.from(v);
  const timed = (await navigator.gpu.requestAdapter()).features.has('timestamp-query');
  const info = {inputs: model.inputs, outputs: model.outputs, out: plain, timed,
                timings: model.timings, kernels: model.manifest.kernels.map((k) => k.name),
                load_ms: t1 - t0, first_run_ms: t2 - t1, run_ms: (t3 - t2) / Math.max(1, runs - 1)};
  model.destroy();
  return info;
}"""

# JS: the message of the Error that `body` throws (`model` there is the bundle, loaded; with
# `fresh`, `model` is null and `load` is the bundle's load)
ERROR = """async ([name, body, fresh]) => {
  const { load } = await import(`/${name}/model.js`);
  try {
    const model = fresh ? null : await load();
    await (new Function('model', 'load', `return (async () => { ${body} })();`))(model, load);
  } catch (error) {
    return error instanceof Error ? error.message : `not an Error: ${error}`;
  }
  return null;
}"""


def _program():
  """A hand-written two-layer program with a shared-storage chain: x -> 8x16 -> 16x3 softmax."""
  x = kg.Tensor.empty(4, 8, name="x")
  w1 = kg.Tensor.randn(8, 16, seed=1).realize()
  w2 = kg.Tensor.randn(16, 3, seed=2).realize()
  h = ((x @ w1).relu().contiguous() * 0.5).exp().contiguous()
  y = (h @ w2).softmax(axis=-1)
  s = (x * x).sum(axis=1)
  ref = lambda xv: _ref(xv, w1.numpy(), w2.numpy())
  return {"y": y, "s": s}, ref


def _ref(xv, w1, w2):
  h = np.exp(np.maximum(xv @ w1, 0) * 0.5)
  z = h @ w2
  e = np.exp(z - z.max(-1, keepdims=True))
  return {"y": e / e.sum(-1, keepdims=True), "s": (xv * xv).sum(1)}


def _digits():
  """The digits demo's MLP (web/demos/digits_weights.json), input `pixels` (1, 64)."""
  spec = json.loads((REPO_ROOT / "web" / "demos" / "digits_weights.json").read_text())
  arr = {k: np.frombuffer(base64.b64decode(spec[k]["data"]), np.float32).reshape(spec[k]["shape"])
         for k in ("w1", "b1", "w2", "b2")}
  pixels = kg.Tensor.empty(1, 64, name="pixels")
  t = {k: kg.Tensor(v) for k, v in arr.items()}
  hidden = ((pixels / 16) @ t["w1"] + t["b1"]).relu()
  probs = (hidden @ t["w2"] + t["b2"]).contiguous().softmax(axis=-1)

  def ref(p):
    h = np.maximum((p / 16) @ arr["w1"] + arr["b1"], 0)
    z = h @ arr["w2"] + arr["b2"]
    e = np.exp(z - z.max(-1, keepdims=True))
    return {"probs": e / e.sum(-1, keepdims=True)}
  sample = np.array(spec["samples"][0]["pixels"], np.float32).reshape(1, 64)
  return {"probs": probs}, ref, sample


@pytest.fixture
def site(tmp_path, serve):
  """A static server whose root holds an empty page; bundles are exported under it."""
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  return tmp_path, serve(tmp_path)


def _run_in_page(chromium, server, name, inputs, runs=1):
  with local_page(chromium) as page:
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(server.url("index.html"))
    info = page.evaluate(RUN, [name, {k: v.ravel().tolist() for k, v in inputs.items()}, runs])
    assert page.console_errors == [], page.console_errors
  assert not [u for u in requests if "pyodide" in u.lower()], requests
  assert not [u for u in requests if u.endswith((".whl", ".py"))], requests
  return info


def test_hand_written_program_runs_in_chromium_like_numpy(chromium, site):
  root, server = site
  outputs, ref = _program()
  kg.export(outputs, str(root / "prog"), format="webgpu")
  xv = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
  info = _run_in_page(chromium, server, "prog", {"x": xv}, runs=3)
  assert info["inputs"] == [{"name": "x", "shape": [4, 8], "dtype": "float32"}]
  assert [o["name"] for o in info["outputs"]] == ["y", "s"]
  want = ref(xv)
  for name in ("y", "s"):
    got = np.array(info["out"][name], np.float32).reshape(want[name].shape)
    np.testing.assert_allclose(got, want[name], rtol=1e-4, atol=1e-5)
  if info["timed"]:          # GPU time per kernel of the last run, in launch order
    assert [t["name"] for t in info["timings"]] == info["kernels"]
    assert all(t["ms"] >= 0 for t in info["timings"])
  print(f"\nprog bundle: load {info['load_ms']:.1f} ms, first run {info['first_run_ms']:.1f} ms, "
        f"run {info['run_ms']:.2f} ms; GPU {sum(t['ms'] for t in info['timings']):.3f} ms "
        f"(timestamp queries: {info['timed']})")


def test_a_joined_kernel_writes_both_outputs_in_chromium(chromium, site):
  """An LSTM cell's c' and h' (graph/join.py: one kernel, two storage bindings written) in a
  bundle: both outputs as numpy's."""
  root, server = site
  hidden = 16
  gates, c = kg.Tensor.empty(2, 4 * hidden, name="gates"), kg.Tensor.empty(2, hidden, name="c")
  i, f, g, o = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
  c2 = i.sigmoid() * g.tanh() + f.sigmoid() * c
  kg.export({"c_next": c2, "h_next": o.sigmoid() * c2.tanh()}, str(root / "cell"),
            format="webgpu")
  rng = np.random.default_rng(5)
  gv, cv = rng.standard_normal((2, 4 * hidden), np.float32), rng.standard_normal((2, hidden),
                                                                                np.float32)
  info = _run_in_page(chromium, server, "cell", {"gates": gv, "c": cv})
  assert len(info["kernels"]) == 1
  sig = lambda v: 1 / (1 + np.exp(-v.astype(np.float64)))
  iv, fv, zv, ov = np.split(gv, 4, axis=1)
  want_c = sig(iv) * np.tanh(zv) + sig(fv) * cv
  for name, want in (("c_next", want_c), ("h_next", sig(ov) * np.tanh(want_c))):
    got = np.array(info["out"][name], np.float32).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_digits_mlp_bundle_runs_in_chromium_like_numpy(chromium, site):
  root, server = site
  outputs, ref, sample = _digits()
  bundle = kg.export(outputs, str(root / "digits"), format="webgpu")
  info = _run_in_page(chromium, server, "digits", {"pixels": sample}, runs=5)
  got = np.array(info["out"]["probs"], np.float32).reshape(1, 10)
  np.testing.assert_allclose(got, ref(sample)["probs"], rtol=1e-4, atol=1e-6)
  size = sum(p.stat().st_size for p in (root / "digits").iterdir())
  print(f"\ndigits bundle: {size} bytes, load {info['load_ms']:.1f} ms, first run "
        f"{info['first_run_ms']:.1f} ms, run {info['run_ms']:.2f} ms; memory "
        f"{bundle.manifest['memory']}")


@pytest.mark.parametrize("body,message", [
  ("await model.run({x: new Float32Array(32), z: new Float32Array(1)});",
   'unknown input "z": this model\'s inputs are x (float32 [4,8])'),
  ("await model.run({});", 'missing input "x": pass x (float32 [4,8])'),
  ("await model.run({x: new Float32Array(31)});",
   'input "x" has 31 elements; this model takes 32 (float32 [4,8])'),
  ("await model.run({x: new Int32Array(32)});",
   'input "x" is Int32Array; this model takes float32: pass a Float32Array'),
  ("model.destroy(); await model.run({x: new Float32Array(32)});",
   "run() after destroy(): load() the model again"),
  ("model.device.destroy(); await model.device.lost; await model.run({x: new Float32Array(32)});",
   "the WebGPU device was lost"),
  ("const d = await (await navigator.gpu.requestAdapter()).requestDevice();"
   "await load({device: d});", None),
])
def test_wrong_inputs_and_lost_devices_are_errors_that_say_what_to_do(chromium, site, body,
                                                                       message):
  root, server = site
  x = kg.Tensor.empty(4, 8, name="x")
  kg.export({"y": (x * 2).sum(axis=1)}, str(root / "small"), format="webgpu")
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    got = page.evaluate(ERROR, ["small", body, False])
  if message is None:
    assert got is None
  else:
    assert got is not None and got.startswith("kernelgen model: ") and message in got, got


def test_missing_feature_is_an_error_that_says_what_to_do(chromium, site):
  root, server = site
  x = kg.Tensor.empty(64, name="x", dtype="float16")
  kg.export({"y": (x * 2).exp()}, str(root / "half"), format="webgpu", f16=True)
  given = ("const d = await (await navigator.gpu.requestAdapter()).requestDevice();"
           "await load({device: d});")
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    has_f16 = page.evaluate("async () => (await navigator.gpu.requestAdapter())"
                            ".features.has('shader-f16')")
    own = page.evaluate(ERROR, ["half", "await load();", True])
    shared = page.evaluate(ERROR, ["half", given, True])
  assert shared is not None and "needs the WebGPU feature(s) shader-f16: create the device " \
    'with requiredFeatures: ["shader-f16"]' in shared, shared
  if has_f16:
    assert own is None, own
  else:
    assert own is not None and "shader-f16, which this adapter lacks: export it without" in own


def test_a_bundle_without_kernels_returns_its_input_and_weight(chromium, site):
  root, server = site
  x = kg.Tensor.empty(2, 3, name="x")
  kg.export({"same": x, "w": kg.Tensor([[1.0, 2.0, 3.0]])}, str(root / "none"))
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    info = page.evaluate(RUN, ["none", {"x": [1, 2, 3, 4, 5, 6]}, 2])
  assert info["out"] == {"same": [1, 2, 3, 4, 5, 6], "w": [1, 2, 3]}
  assert info["timings"] == []


def test_an_onnx_model_exported_by_the_cli_runs_in_chromium(chromium, site):
  """Once kg.onnx is there (issue 20); until then the CLI says it cannot read ONNX yet."""
  import importlib.util
  onnx = pytest.importorskip("onnx")
  from onnx import TensorProto, helper, numpy_helper
  from kernelgen.__main__ import main
  root, server = site
  w = (np.arange(24, dtype=np.float32).reshape(8, 3) - 12) / 10
  graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Softmax", ["h"], ["y"])],
    "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
    [numpy_helper.from_array(w, "w")])
  path = root / "mm.onnx"
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
  code = main(["export", str(path), "--out", str(root / "onnx")])
  if importlib.util.find_spec("kernelgen.onnx") is None:
    assert code == 1
    return
  assert code == 0
  xv = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
  info = _run_in_page(chromium, server, "onnx", {"x": xv})
  z = xv @ w
  e = np.exp(z - z.max(-1, keepdims=True))
  got = np.array(info["out"]["y"], np.float32).reshape(4, 3)
  np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
