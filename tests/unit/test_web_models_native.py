"""The page's Models view functions (web_api/models.py) run natively, as the worker calls them:
a model with 64-bit integer inputs runs on WEBGPU (its feeds made on PYTHON, narrowed by the
model's run as a numpy feed is), and a model that fills its weights with ConstantOfShape (the
light corpus' models) folds them on the host, so a warm load with the kernels the browser
stored (stored.py) compiles nothing in Python."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import cache, stored
from kernelgen.web_api import models
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from tools import device_runtime


def _model(nodes, inputs, outputs, inits=()) -> bytes:
  from onnx import helper
  g = helper.make_graph([helper.make_node(*n[:3], **(n[3] if len(n) > 3 else {})) for n in nodes],
                        "m", inputs, outputs, list(inits))
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _outputs(result: dict) -> dict:
  assert "error" not in result, result["error"]
  return {o["name"]: np.frombuffer(o["data"], o["dtype"]).reshape(o["shape"])   # bytes, as
          for o in result["outputs"]}                                            # the page gets


@pytest.fixture
def fresh():
  kg.clear_cache()
  yield
  stored.enable(False)
  kg.clear_cache()


def test_int64_inputs_run_on_webgpu_in_the_models_view(fresh):
  """Token ids (int64, Gather) and a scalar int64 (Silero's sample rate, compared) from the
  view's random inputs: onnxruntime's outputs on WEBGPU (they were an UnsupportedError: int64
  made on the device)."""
  from onnx import TensorProto, helper, numpy_helper
  ort = pytest.importorskip("onnxruntime")
  device_runtime("WEBGPU")
  table = np.random.default_rng(1).standard_normal((10, 6)).astype(np.float32)
  data = _model([("Gather", ["E", "ids"], ["emb"]), ("Cast", ["sr"], ["srf"], {"to": 1}),
                 ("Mul", ["emb", "srf"], ["out"])],
                [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 5]),
                 helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 5, 6])],
                [numpy_helper.from_array(table, "E")])
  models.load_model(data)
  got = _outputs(models.run_model(3, "WEBGPU"))
  feeds = {n: np.array(v["values"], np.int64).reshape(v["shape"])
           for n, v in models.random_inputs(models._loaded_model(), 3).items()}
  want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
  np.testing.assert_allclose(got["out"], want, rtol=1e-6)


def test_a_warm_load_of_a_model_filling_its_weights_compiles_nothing(fresh):
  """A conv whose weight and bias are ConstantOfShape fills: the first run compiles its WGSL
  kernels and no fill on PYTHON; with the stored records loaded into an empty cache (a reloaded
  page), the same model's load and run compile nothing."""
  from onnx import TensorProto, helper, numpy_helper
  device_runtime("WEBGPU")
  fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.02])
  data = _model([("ConstantOfShape", ["wshape"], ["w"], {"value": fill}),
                 ("ConstantOfShape", ["bshape"], ["b"], {"value": fill}),
                 ("Conv", ["x", "w", "b"], ["y"], {"pads": [1, 1, 1, 1]}), ("Relu", ["y"], ["z"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 7])],
                [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 9, 7])],
                [numpy_helper.from_array(np.array([4, 3, 3, 3], np.int64), "wshape"),
                 numpy_helper.from_array(np.array([4], np.int64), "bshape")])
  stored.enable()
  targets = []
  real = cache._compile_new

  def spy(item, target, options, key):
    targets.append(key[0])
    return real(item, target, options, key)
  cache._compile_new = spy
  try:
    models.load_model(data)
    first = models.run_model(0, "WEBGPU")
    records = dict(stored._RECORDS)
    assert first["compiled"] >= 1 and "python" not in targets, targets
    x = np.array(models.random_inputs(models._loaded_model(), 0)["x"]["values"],
                 np.float32).reshape(1, 3, 9, 7)
    kg.clear_cache()               # a reloaded page: an empty cache, the store's records
    stored.load(records)
    targets.clear()
    models.load_model(data)
    again = models.run_model(0, "WEBGPU")
  finally:
    cache._compile_new = real
  assert again["compiled"] == 0 and again["stored"] >= 1 and targets == [], (again, targets)
  pad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))   # every weight and bias 0.02
  window = sum(pad[0, :, i:i + 9, j:j + 7].sum(0) for i in range(3) for j in range(3))
  want = np.broadcast_to(np.maximum(np.float32(0.02) * window + np.float32(0.02), 0), (1, 4, 9, 7))
  np.testing.assert_allclose(_outputs(again)["z"], want, rtol=1e-5, atol=1e-6)
