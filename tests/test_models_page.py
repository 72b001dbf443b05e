"""The page's Models view (index.html, web/models.js, web_api.load_model / run_model /
compare_model): a small ONNX model built here with the `onnx` package is opened through the file
input; the view lists its inputs, outputs, operator histogram and WGSL + PTX kernels, downloads
them as a zip, runs the model on SwiftShader WebGPU with seeded random inputs that match
onnxruntime, and compares with PYTHON. A truncated file shows a ModelError and the page goes on
working."""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from test_browser import app, site  # noqa: F401 (fixtures)

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.timeout(600)

STATE = "kgApp.models.state"
IDLE = f"window.kgApp?.models && !{STATE}.busy && !document.querySelector('#model-file').disabled"


def tiny_model() -> bytes:
  """Conv + Relu + MaxPool + Reshape + Gemm + Softmax on an (N, 1, 8, 8) input, a few KB."""
  from onnx import TensorProto, helper, numpy_helper
  rng = np.random.default_rng(1)
  init = lambda name, a: numpy_helper.from_array(a, name)  # noqa: E731
  weights = [init("w", rng.standard_normal((4, 1, 3, 3)).astype(np.float32)),
             init("b", rng.standard_normal(4).astype(np.float32)),
             init("g", rng.standard_normal((10, 64)).astype(np.float32)),
             init("gb", rng.standard_normal(10).astype(np.float32)),
             init("shape", np.array([0, -1], np.int64))]
  nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
           helper.make_node("Relu", ["c"], ["r"]),
           helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
           helper.make_node("Reshape", ["p", "shape"], ["f"]),
           helper.make_node("Gemm", ["f", "g", "gb"], ["logits"], transB=1),
           helper.make_node("Softmax", ["logits"], ["probs"], axis=1)]
  graph = helper.make_graph(
    nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
    [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10])], weights)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
  onnx.checker.check_model(model)
  return model.SerializeToString()


def unsupported_model() -> bytes:
  from onnx import TensorProto, helper
  value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])  # noqa: E731
  graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [value("x")],
                            [value("y")])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
  model.graph.node[0].op_type = "NotAnOp"
  return model.SerializeToString()


# ---- web_api in CPython ----

def test_web_api_model_functions_in_cpython():
  import kernelgen as kg
  from kernelgen import web_api
  data = tiny_model()
  assert web_api.compare_model()["ok"] in (True, False)   # whatever an earlier test left
  loaded = web_api.load_model(data, "sm_86", seed=3)
  assert loaded["ok"] and loaded["inputs"] == [{"name": "x", "shape": ["N", 1, 8, 8],
                                                "dtype": "float32"}]
  assert loaded["ptx"]["ok"] and ".target sm_86" in loaded["ptx"]["kernels"][0]["source"]
  assert web_api.compare_model()["error"]["type"] == "ModelError"   # nothing ran yet
  model = kg.onnx.load(data)
  a, b = web_api.random_inputs(model, 3), web_api.random_inputs(model, 4)
  assert a == web_api.random_inputs(model, 3) and a["x"]["values"] != b["x"]["values"]
  assert a["x"]["shape"] == [1, 1, 8, 8] and all(-1 <= v < 1 for v in a["x"]["values"])
  run = web_api.run_model(3, "PYTHON")
  assert run["ok"], run
  x = np.frombuffer(run["inputs"][0]["data"], np.float32).reshape(1, 1, 8, 8)
  np.testing.assert_array_equal(x.ravel(), np.array(a["x"]["values"], np.float32))
  want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  got = np.frombuffer(run["outputs"][0]["data"], np.float32).reshape(run["outputs"][0]["shape"])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  compared = web_api.compare_model()
  assert compared["ok"] and [c["match"] for c in compared["comparisons"]] == [True]
  bad = web_api.load_model(unsupported_model())
  assert bad["error"]["type"] == "UnsupportedError" and "NotAnOp" in bad["error"]["message"]
  assert web_api.run_model(0, "PYTHON")["error"]["type"] == "ModelError"  # the bad one unloaded
  cut = web_api.load_model(data[:100])
  assert cut["error"]["type"] == "ModelError"


# ---- the page ----

def open_model(page, path) -> None:
  page.wait_for_function(IDLE)
  page.set_input_files("#model-file", str(path))
  page.wait_for_function(f"{STATE}.busy === false && " +
                         "['load', 'error'].includes(document.querySelector('#models-view')"
                         ".dataset.last)", timeout=300_000)


def test_bad_models_show_typed_errors_and_the_page_keeps_working(app, tmp_path):  # noqa: F811
  app.click("#models-tab")
  assert app.is_visible("#models-view") and not app.is_visible("#editor")
  path = tmp_path / "cut.onnx"
  path.write_bytes(tiny_model()[:200])
  open_model(app, path)
  assert app.get_attribute("#models-view", "data-last") == "error"
  error = app.inner_text("#model-error")
  assert error.startswith("ModelError") and "truncated" in error, error
  assert app.evaluate(f"{STATE}.model") is None
  assert not app.is_disabled("#model-file") and not app.is_disabled("#run")

  # an unsupported operator, dropped on the view: UnsupportedError naming it
  app.evaluate("""(bytes) => { const files = new DataTransfer();
    files.items.add(new File([new Uint8Array(bytes)], 'odd.onnx'));
    document.querySelector('#models-view').dispatchEvent(new DragEvent('drop',
      { dataTransfer: files, bubbles: true, cancelable: true })); }""", list(unsupported_model()))
  app.wait_for_function(f"{STATE}.busy === false && {STATE}.name === 'odd.onnx'")
  error = app.inner_text("#model-error")
  assert error.startswith("UnsupportedError") and "NotAnOp" in error, error

  # over the size limit: refused before it is read (the limit lowered for the test)
  app.evaluate(f"{STATE}.maxBytes = 100")
  path.write_bytes(tiny_model())
  open_model(app, path)
  error = app.inner_text("#model-error")
  assert error.startswith("LimitError") and "was not read" in error, error
  app.evaluate(f"{STATE}.maxBytes = 2 ** 30")
  app.click("#models-tab")   # back to the editor, which still compiles
  assert app.is_visible("#editor")
  result = app.evaluate("async () => { const c = await kgApp.compile(); "
                        "return c && {wgsl: c.wgsl.ok, ptx: c.ptx.ok}; }")
  assert result == {"wgsl": True, "ptx": True}


def test_model_loads_lists_kernels_runs_on_webgpu_like_onnxruntime(app, tmp_path):  # noqa: F811
  import kernelgen as kg
  from kernelgen import web_api
  data = tiny_model()
  path = tmp_path / "tiny.onnx"
  path.write_bytes(data)
  if not app.is_visible("#models-view"):
    app.click("#models-tab")
  open_model(app, path)
  assert app.get_attribute("#models-view", "data-last") == "load", app.inner_text("#model-error")
  rows = lambda table: app.evaluate(  # noqa: E731
    f"Array.from(document.querySelectorAll('#model-{table} tr')).slice(1)"
    ".map((r) => Array.from(r.cells, (c) => c.textContent))")
  assert rows("inputs") == [["x", "(N, 1, 8, 8)", "float32"]]
  assert rows("outputs") == [["probs", "(N, 10)", "float32"]]
  histogram = kg.onnx.load(data).op_histogram()
  assert rows("histogram") == [[op, str(n)] for op, n in histogram.items()]
  assert sorted(histogram) == ["Conv", "Gemm", "MaxPool", "Relu", "Reshape", "Softmax"]

  # the kernels: as many as CPython compiles for the same inputs, WGSL and PTX for the arch
  arch = app.evaluate("kgApp.state.arch()")
  local = web_api.load_model(data, arch)
  assert local["ok"] and local["wgsl"]["ok"] and local["ptx"]["ok"]
  count = len(local["wgsl"]["kernels"])
  assert count >= 3 and app.locator("#model-kernels li").count() == count
  assert "@compute" in app.inner_text("#model-wgsl")
  assert f".target {arch}" in app.inner_text("#model-ptx")
  app.locator("#model-kernels li").nth(count - 1).click()
  assert app.inner_text("#model-wgsl") == local["wgsl"]["kernels"][-1]["source"]

  with app.expect_download() as info:
    app.click("#model-zip")
  archive = zipfile.ZipFile(io.BytesIO(info.value.path().read_bytes()))
  manifest = json.loads(archive.read("manifest.json"))
  assert len(manifest["kernels"]) == 2 * count
  assert {k["target"] for k in manifest["kernels"]} == {"wgsl", "ptx"}

  # run on WebGPU with the seed's random inputs: they are what CPython makes for that seed, and
  # the outputs match onnxruntime on them
  app.fill("#model-seed", "7")
  app.click("#model-run")
  app.wait_for_function(f"{STATE}.busy === false && "
                        "document.querySelector('#models-view').dataset.last !== 'load'",
                        timeout=300_000)
  assert app.get_attribute("#models-view", "data-last") == "run", app.inner_text("#model-error")
  run = app.evaluate(f"""() => {{ const r = {STATE}.run; const plain = (t) => ({{name: t.name,
    shape: t.shape, dtype: t.dtype, data: Array.from(t.data)}});
    return {{device: r.device, inputs: r.inputs.map(plain), outputs: r.outputs.map(plain),
      timings: r.timings}}; }}""")
  assert run["device"] == "WEBGPU"
  expected_inputs = web_api.random_inputs(kg.onnx.load(data), 7)
  assert [i["name"] for i in run["inputs"]] == ["x"] and run["inputs"][0]["shape"] == [1, 1, 8, 8]
  x = np.array(run["inputs"][0]["data"], np.float32).reshape(1, 1, 8, 8)
  np.testing.assert_array_equal(x.ravel(), np.array(expected_inputs["x"]["values"], np.float32))
  want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  out = run["outputs"][0]
  assert out["name"] == "probs" and out["shape"] == [1, 10] and out["dtype"] == "float32"
  np.testing.assert_allclose(np.array(out["data"], np.float32).reshape(1, 10), want,
                             rtol=1e-4, atol=1e-5)
  assert len(run["timings"]) == count, run["timings"]
  shown = app.inner_text("#model-results")
  assert "probs" in shown and "(1, 10)" in shown and "seed 7" in shown

  app.click("#model-compare")
  app.wait_for_function(f"{STATE}.busy === false && "
                        "document.querySelector('#models-view').dataset.last !== 'run'",
                        timeout=300_000)
  assert "✓ probs matches the PYTHON reference" in app.inner_text("#model-reference")


def test_stop_ends_a_model_load_and_the_view_forgets_the_model(app):  # noqa: F811
  import onnx_corpus
  path = onnx_corpus.data_dir() / "light" / "light_squeezenet.onnx"   # seconds to compile
  if not app.is_visible("#models-view"):
    app.click("#models-tab")
  app.wait_for_function(IDLE)
  app.set_input_files("#model-file", str(path))
  app.wait_for_function("!document.querySelector('#stop').disabled")
  app.click("#stop")
  app.wait_for_function(f"{STATE}.busy === false && document.body.dataset.ready === 'true' && "
                        "document.body.dataset.busy === '0'", timeout=300_000)
  assert app.inner_text("#model-error").startswith("Stopped"), app.inner_text("#model-error")
  assert app.evaluate(f"{STATE}.model") is None and app.is_disabled("#model-run")
  app.wait_for_function(IDLE)
  open_model(app, path)   # the fresh (or interrupted) Python loads it again
  assert app.get_attribute("#models-view", "data-last") == "load", app.inner_text("#model-error")
