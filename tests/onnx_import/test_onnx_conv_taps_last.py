"""Conv weights held taps-last (onnx/operators/weights.py held_taps_last): where the adapter holds
weights in the layouts it reads fastest (the CPU adapters), a dense Conv's 4-D float initializer
(O, C, kh, kw) of more than one tap and at least 4 outputs is uploaded once as [C][kh][kw][O]
and read through a permuted view. Against onnxruntime with the layout forced (strides, pads,
dilation, bias, outputs that 4 does and does not divide), the held tensor really taps-last,
and grouped, 1x1 and narrow convs keep their weights."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.onnx.operators import weights
from onnx_contrib_util import check, node_model
from tools import device_runtime


@pytest.fixture
def forced(monkeypatch):
  """Every dense Conv's float initializer held taps-last, whatever the device."""
  monkeypatch.setattr(weights, "transposes_weights", lambda device: True)


def _model(cin, cout, side, k=(3, 3), groups=1, bias=True, seed=0, **attrs):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((1, cin, side, side)).astype(np.float32)
  inits = {"w": rng.standard_normal((cout, cin // groups, *k)).astype(np.float32)}
  if bias:
    inits["b"] = rng.standard_normal(cout).astype(np.float32)
  model = node_model("Conv", {"x": x}, inits, ["y"], domain="", opset=17, group=groups, **attrs)
  return model, {"x": x}, inits["w"]


def _held(model, feeds, device: str = "PYTHON") -> list:
  loaded = kg.onnx.load(model.SerializeToString())
  loaded.run(feeds, device=device)
  return [t for key, t in loaded.uploads.items() if key[1].endswith(weights.TAPS_LAST)]


# (in, out, side, attributes): PYTHON at these sizes, WEBGPU at twice the side
CASES = [
  (4, 8, 8, {"pads": [1, 1, 1, 1]}),
  (5, 6, 9, {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
  (4, 4, 10, {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
]


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("cin,cout,side,attrs", CASES)
def test_taps_last_conv_matches_onnxruntime(forced, device, cin, cout, side, attrs):
  if device != "PYTHON":
    device_runtime(device)
    side *= 2
  model, feeds, _ = _model(cin, cout, side, seed=cin + cout, **attrs)
  check(model, feeds, device, rtol=1e-4, atol=1e-4)


def test_held_weight_is_stored_taps_last(forced):
  model, feeds, w = _model(3, 8, 6, pads=[1, 1, 1, 1])
  held = _held(model, feeds)
  assert len(held) == 1 and held[0].node.realized
  assert tuple(held[0].shape) == (3, 3, 3, 8)
  assert np.array_equal(held[0].numpy(), w.transpose(1, 2, 3, 0))


@pytest.mark.parametrize("cin,cout,k,groups", [(8, 8, (3, 3), 2), (8, 8, (1, 1), 1),
                                                (8, 3, (3, 3), 1)])
def test_grouped_pointwise_and_narrow_convs_keep_their_weights(forced, cin, cout, k, groups):
  model, feeds, _ = _model(cin, cout, 6, k, groups, bias=False)
  assert _held(model, feeds) == []
  check(model, feeds, "PYTHON", rtol=1e-4, atol=1e-4)


def test_cpu_adapters_only():
  """PYTHON (no adapter) keeps OIHW; WEBGPU holds taps-last where its adapter is a CPU one."""
  model, feeds, _ = _model(4, 8, 8, pads=[1, 1, 1, 1])
  assert _held(model, feeds) == []
  rt = device_runtime("WEBGPU")
  cpu = rt.render_options().get("adapter") in ("lavapipe", "swiftshader")
  assert len(_held(model, feeds, "WEBGPU")) == int(cpu)
