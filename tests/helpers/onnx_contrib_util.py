"""Helpers of the com.microsoft operator tests: one-node models built with the onnx package's
helpers, run by onnxruntime (CPU, the oracle) and by kernelgen on a device."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from onnx_corpus import onnx_or_missing
from tools import DEVICES, device_runtime

onnx = onnx_or_missing()
from onnx import helper, numpy_helper  # noqa: E402

MS = "com.microsoft"


def elem(a: np.ndarray) -> int:
  return helper.np_dtype_to_tensor_dtype(a.dtype)


def node_model(op: str, feeds: dict, inits: dict, outputs: list, domain: str = MS,
               opset: int = 21, inputs: list | None = None, **attrs):
  """A model of one `op` node: inputs `feeds` (graph inputs) and `inits` (initializers) in the
  order of `inputs` (names; "" for an absent optional input), outputs `outputs`."""
  names = inputs if inputs is not None else list(feeds) + list(inits)
  node = helper.make_node(op, names, outputs, domain=domain, **attrs)
  vis = [helper.make_tensor_value_info(n, elem(a), a.shape) for n, a in feeds.items()]
  outs = [onnx.ValueInfoProto(name=n) for n in outputs if n]
  tensors = [v if isinstance(v, onnx.TensorProto) else numpy_helper.from_array(v, n)
             for n, v in inits.items()]
  graph = helper.make_graph([node], "g", vis, outs, tensors)
  imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain
                                                else [])
  return helper.make_model(graph, opset_imports=imports, ir_version=10)


def ort_run(model, feeds: dict) -> list:
  ort = pytest.importorskip("onnxruntime")
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  return sess.run(None, feeds)


def kg_run(model, feeds: dict, device: str) -> list:
  """kernelgen's outputs as numpy arrays (None for an absent one)."""
  if device != "PYTHON":
    device_runtime(device)
  out = kg.onnx.load(model.SerializeToString()).run(feeds, device=device)
  return [None if t is None else t.numpy() for t in out.values()]


def check(model, feeds: dict, device: str, rtol=1e-4, atol=1e-5, skip=()) -> list:
  """kernelgen's outputs equal onnxruntime's (to rtol/atol), all but the indices in `skip`."""
  want = ort_run(model, feeds)
  got = kg_run(model, feeds, device)
  for i, (g, w) in enumerate(zip(got, want)):
    if i in skip:
      continue
    assert g is not None, f"output {i} missing"
    assert g.shape == w.shape, f"output {i}: shape {g.shape}, onnxruntime {w.shape}"
    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                               atol=atol, err_msg=f"output {i} on {device}")
  return got


def options_forcer(monkeypatch, options: dict):
  """force(device): that device's kernels compiled with `options` over its own render options
  (as an adapter's defaults would set them), undone when the test ends."""
  def force(device: str) -> None:
    rt = device_runtime(device) if device != "PYTHON" else kg.Device["PYTHON"]
    base = rt.render_options
    monkeypatch.setattr(rt, "render_options", lambda: {**base(), **options})
  return force
