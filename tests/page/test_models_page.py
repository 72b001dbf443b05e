"""The page's Models view (index.html, web/models.js, web_api.load_model / run_model /
compare_model): a small ONNX model built here with the `onnx` package is opened through the file
input; the view lists its inputs, outputs, operator histogram and WGSL + PTX kernels, downloads
them as a zip, runs the model on SwiftShader WebGPU with seeded random inputs that match
onnxruntime, and compares with PYTHON. A truncated file shows a ModelError and the page goes on
working. An image model (with a label set in its metadata) runs on a PNG picked in the view: the
input the page makes (centre crop, normalization) and its top-5 classes match numpy's."""
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
  assert not app.is_visible("#model-image-actions")   # one channel: not an image model
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


# ---- an image model run on a picture ----

LABELS = [f"class {i}" for i in range(10)]
IMAGENET = (np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225],
                                                                  np.float32))


def image_model(layout: str = "NCHW", labels_key: str | None = "labels") -> bytes:
  """GlobalAveragePool of x * w + Gemm to 10 classes on a [N, 3, 8, 8] (or [N, 8, 8, 3])
  picture, no softmax; `labels_key`: the metadata_props key of a JSON label list."""
  from onnx import TensorProto, helper, numpy_helper
  rng = np.random.default_rng(5)
  init = lambda name, a: numpy_helper.from_array(a, name)  # noqa: E731
  weights = [init("w", rng.standard_normal((1, 3, 8, 8)).astype(np.float32)),
             init("g", rng.standard_normal((10, 3)).astype(np.float32) * 4),
             init("gb", rng.standard_normal(10).astype(np.float32)),
             init("perm_shape", np.array([0, -1], np.int64))]
  nodes = [helper.make_node("Mul", ["xc", "w"], ["m"]),
           helper.make_node("GlobalAveragePool", ["m"], ["p"]),
           helper.make_node("Reshape", ["p", "perm_shape"], ["f"]),
           helper.make_node("Gemm", ["f", "g", "gb"], ["logits"], transB=1)]
  if layout == "NHWC":
    nodes.insert(0, helper.make_node("Transpose", ["x"], ["xc"], perm=[0, 3, 1, 2]))
    shape = ["N", 8, 8, 3]
  else:
    nodes.insert(0, helper.make_node("Identity", ["x"], ["xc"]))
    shape = ["N", 3, 8, 8]
  graph = helper.make_graph(
    nodes, "picture", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], weights)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
  if labels_key:
    helper.set_model_props(model, {labels_key: json.dumps(LABELS)})
  onnx.checker.check_model(model)
  return model.SerializeToString()


def png_bytes(rgb: np.ndarray) -> bytes:
  """An 8-bit RGB PNG of an H x W x 3 uint8 array (unfiltered rows, no colour chunks)."""
  import struct
  import zlib
  chunk = lambda kind, body: (struct.pack(">I", len(body)) + kind + body +  # noqa: E731
                              struct.pack(">I", zlib.crc32(kind + body)))
  h, w, _ = rgb.shape
  rows = b"".join(b"\0" + rgb[y].tobytes() for y in range(h))
  return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
          + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def softmax_top5(logits: np.ndarray) -> tuple:
  e = np.exp(logits.astype(np.float64) - logits.max())
  p = e / e.sum()
  order = sorted(range(len(p)), key=lambda i: (-p[i], i))[:5]
  return order, p[order]


def test_image_helpers_in_cpython():
  import kernelgen as kg
  from kernelgen import web_api
  assert web_api.image_input(kg.onnx.load(image_model())) == {
    "name": "x", "layout": "NCHW", "height": 8, "width": 8}
  nhwc = kg.onnx.load(image_model("NHWC", labels_key="class_labels"))
  assert web_api.image_input(nhwc) == {"name": "x", "layout": "NHWC", "height": 8, "width": 8}
  assert web_api.model_labels(nhwc) == {"key": "class_labels", "labels": LABELS}
  assert web_api.image_input(kg.onnx.load(tiny_model())) is None   # one channel
  assert web_api.model_labels(kg.onnx.load(image_model(labels_key=None))) is None
  assert web_api.model_labels(kg.onnx.load(tiny_model())) is None
  scores = np.array([0.5, 3.0, -1.0, 3.0, 2.0, 0.0], np.float32)
  top = web_api.top_k(scores.tolist(), 5)
  order, probs = softmax_top5(scores)
  assert not top["probabilities"] and [t["index"] for t in top["top"]] == order == [1, 3, 4, 0, 5]
  np.testing.assert_allclose([t["probability"] for t in top["top"]], probs, rtol=1e-12)
  already = web_api.top_k([0.1, 0.7, 0.2], 2)
  assert already["probabilities"] and already["top"] == [{"index": 1, "probability": 0.7},
                                                         {"index": 2, "probability": 0.2}]


def drop_picture(page, data: bytes) -> None:
  """Drop a PNG named dropped.png on the Models view."""
  page.evaluate("""(bytes) => { const files = new DataTransfer();
    files.items.add(new File([new Uint8Array(bytes)], 'dropped.png', {type: 'image/png'}));
    document.querySelector('#models-view').dispatchEvent(new DragEvent('drop',
      { dataTransfer: files, bubbles: true, cancelable: true })); }""", list(data))


def test_image_model_runs_on_a_picture_top5_like_numpy(app, tmp_path):  # noqa: F811
  data = image_model()
  path = tmp_path / "picture.onnx"
  path.write_bytes(data)
  rgb = np.random.default_rng(9).integers(0, 256, (8, 16, 3), dtype=np.uint8)
  picture = tmp_path / "wide.png"
  picture.write_bytes(png_bytes(rgb))
  if not app.is_visible("#models-view"):
    app.click("#models-tab")
  # a picture dropped on a model that is not an image model (one channel): a ModelError
  one_channel = tmp_path / "tiny.onnx"
  one_channel.write_bytes(tiny_model())
  open_model(app, one_channel)
  assert app.get_attribute("#models-view", "data-last") == "load", app.inner_text("#model-error")
  drop_picture(app, picture.read_bytes())
  app.wait_for_function(f"{STATE}.busy === false && "
                        "document.querySelector('#models-view').dataset.last === 'error'")
  error = app.inner_text("#model-error")
  assert error.startswith("ModelError") and "not an image model" in error, error
  open_model(app, path)
  assert app.get_attribute("#models-view", "data-last") == "load", app.inner_text("#model-error")
  assert app.is_visible("#model-image-actions") and not app.is_disabled("#model-image")
  assert "8×8 NCHW" in app.inner_text("#model-image-facts")
  assert 'metadata "labels"' in app.inner_text("#model-labels")
  assert app.input_value("#model-norm") == "imagenet"

  # a 16 x 8 picture: the centre crop is its middle 8 x 8 at scale 1, so no resampling
  session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
  for norm, convert in [("imagenet", lambda v: (v / np.float32(255) - IMAGENET[0]) / IMAGENET[1]),
                        ("unit", lambda v: v / np.float32(255))]:
    app.select_option("#model-norm", norm)
    app.set_input_files("#model-image", str(picture))
    app.wait_for_function(f"{STATE}.busy === false && "
                          "document.querySelector('#models-view').dataset.last !== 'load' && "
                          f"{STATE}.picture?.normalization === '{norm}'", timeout=300_000)
    assert app.get_attribute("#models-view", "data-last") == "image", \
      app.inner_text("#model-error")
    run = app.evaluate(f"""() => {{ const r = {STATE}.run;
      return {{device: r.device, x: Array.from(r.inputs[0].data), shape: r.inputs[0].shape,
               logits: Array.from(r.outputs[0].data), top: r.top}}; }}""")
    assert run["device"] == "WEBGPU" and run["shape"] == [1, 3, 8, 8]
    crop = rgb[:, 4:12].astype(np.float32)                       # H x W x 3
    x = convert(crop).transpose(2, 0, 1)[None].astype(np.float32)
    np.testing.assert_allclose(np.array(run["x"], np.float32).reshape(x.shape), x,
                               rtol=1e-6, atol=1e-6)
    logits = session.run(None, {"x": x})[0][0]
    np.testing.assert_allclose(run["logits"], logits, rtol=1e-4, atol=1e-4)
    order, probs = softmax_top5(logits)
    assert [t["index"] for t in run["top"]["top"]] == order, (run["top"], logits)
    np.testing.assert_allclose([t["probability"] for t in run["top"]["top"]], probs,
                               rtol=1e-4, atol=1e-5)
    rows = app.evaluate("Array.from(document.querySelectorAll('#model-top tr')).slice(1)"
                        ".map((r) => Array.from(r.cells, (c) => c.textContent))")
    assert rows == [[str(t["index"]), LABELS[t["index"]], f"{t['probability']:.4f}"]
                    for t in run["top"]["top"]], rows
    assert "wide.png (16×8 → 8×8" in app.inner_text("#model-results")

  # a picture dropped on the view runs the model on it (the normalization kept)
  drop_picture(app, picture.read_bytes())
  app.wait_for_function(f"{STATE}.busy === false && {STATE}.picture?.name === 'dropped.png'")
  assert app.get_attribute("#models-view", "data-last") == "image", app.inner_text("#model-error")
  assert app.evaluate(f"{STATE}.run.top.top.map((t) => t.index)") == order
  assert app.evaluate(f"{STATE}.model?.image?.name") == "x"   # the model stays loaded

  # a file that is not a picture: an ImageError in the view's box, the model still loaded
  bad = tmp_path / "broken.png"
  bad.write_bytes(b"\x89PNG not really")
  app.set_input_files("#model-image", str(bad))
  app.wait_for_function(f"{STATE}.busy === false && "
                        "document.querySelector('#models-view').dataset.last === 'error'")
  error = app.inner_text("#model-error")
  assert error.startswith("ImageError") and "broken.png" in error, error
  assert app.evaluate(f"{STATE}.model?.image?.layout") == "NCHW"
  assert not app.is_disabled("#model-image") and app.input_value("#model-norm") == "unit"

  # the same picture into an NHWC model, labels under "class_labels", normalized to -1..1
  data = image_model("NHWC", labels_key="class_labels")
  path.write_bytes(data)
  open_model(app, path)
  assert "8×8 NHWC" in app.inner_text("#model-image-facts")
  assert 'metadata "class_labels"' in app.inner_text("#model-labels")
  app.select_option("#model-norm", "signed")
  app.set_input_files("#model-image", str(picture))
  app.wait_for_function(f"{STATE}.busy === false && {STATE}.picture?.normalization === 'signed'")
  assert app.get_attribute("#models-view", "data-last") == "image", app.inner_text("#model-error")
  run = app.evaluate(f"""() => ({{x: Array.from({STATE}.run.inputs[0].data),
    shape: {STATE}.run.inputs[0].shape, top: {STATE}.run.top}})""")
  x = (rgb[:, 4:12].astype(np.float32) / np.float32(127.5) - 1)[None]
  assert run["shape"] == [1, 8, 8, 3]
  np.testing.assert_allclose(np.array(run["x"], np.float32).reshape(x.shape), x, rtol=1e-6,
                             atol=1e-6)
  logits = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  order, probs = softmax_top5(logits[0])
  assert [t["index"] for t in run["top"]["top"]] == order
  np.testing.assert_allclose([t["probability"] for t in run["top"]["top"]], probs, rtol=1e-4,
                             atol=1e-5)
  assert app.inner_text("#model-top").count("class ") == 5
