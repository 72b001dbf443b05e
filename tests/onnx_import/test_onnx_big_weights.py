"""Constant weights over one storage-buffer binding (onnx/operators/big_weights.py): a MatMul's
weight and a Gather's table of more than PIECE_BYTES (WebGPU's default 128 MiB binding, what
lavapipe and SwiftShader offer) are held as pieces that each fit, and the results equal
onnxruntime's. Qwen2.5-0.5B's fp32 embedding table and LM head (151936 x 896, 544 MB) were
refused with a LimitError on WEBGPU before."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.onnx.operators import big_weights
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from tools import device_runtime

pytestmark = pytest.mark.timeout(600)


def _model(weights: dict, nodes: list, inputs: list, outputs: list) -> bytes:
  from onnx import helper, numpy_helper
  g = helper.make_graph([helper.make_node(*n) for n in nodes], "big", inputs,
                        [helper.make_tensor_value_info(o, 1 if o != "h16" else 10, None)
                         for o in outputs],
                        [numpy_helper.from_array(w, n) for n, w in weights.items()])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _ort(model: bytes, feeds: dict) -> list:
  ort = pytest.importorskip("onnxruntime")
  return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


def _pieces(model) -> set:
  inner = getattr(model, "model", model)
  return {k[1].split(big_weights.PIECE)[0] for k in inner.uploads if big_weights.PIECE in k[1]}


@pytest.mark.parametrize("device", ["PYTHON", "PTXSIM", "WEBGPU"])
def test_weights_over_a_piece_are_held_in_pieces_and_match_onnxruntime(device, monkeypatch):
  """With PIECE_BYTES made small: a MatMul weight (batched and 2-D operands, N not a multiple of
  the piece width) and a Gather table (negative indices, the first and last row, a row at each
  piece's edge) split into several pieces give onnxruntime's values; a weight under the limit
  is not split."""
  from onnx import TensorProto, helper
  device_runtime(device)
  monkeypatch.setattr(big_weights, "PIECE_BYTES", 16384)
  rng = np.random.default_rng(3)
  weights = {"W": rng.standard_normal((48, 301)).astype(np.float32),
             "E": rng.standard_normal((403, 40)).astype(np.float32),
             "W0": rng.standard_normal((40, 7)).astype(np.float32),
             "E16": rng.standard_normal((700, 12)).astype(np.float16)}
  nodes = [("Gather", ["E", "ids"], ["emb"]), ("MatMul", ["emb", "W0"], ["h"]),
           ("MatMul", ["x", "W"], ["y"]), ("MatMul", ["x2", "W"], ["y2"]),
           ("Gather", ["E16", "ids16"], ["h16"])]
  inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 4]),
            helper.make_tensor_value_info("ids16", TensorProto.INT64, [4]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 48]),
            helper.make_tensor_value_info("x2", TensorProto.FLOAT, [3, 48])]
  model = _model(weights, nodes, inputs, ["h", "y", "y2", "h16"])
  feeds = {"ids": np.array([[0, 402, -1, 83], [84, 335, -403, 336]], np.int64),
           "ids16": np.array([699, -700, 351, 352], np.int64),
           "x": rng.standard_normal((2, 5, 48)).astype(np.float32),
           "x2": rng.standard_normal((3, 48)).astype(np.float32)}
  want = _ort(model, feeds)
  lm = kg.onnx.load(model)
  got = lm.run(feeds, device=device)
  for name, w in zip(["h", "y", "y2", "h16"], want):
    np.testing.assert_allclose(got[name].numpy().astype(np.float32), w.astype(np.float32),
                               rtol=1e-5, atol=1e-5, err_msg=name)
  assert _pieces(lm) == {"W", "E", "E16"}      # W0 (1120 bytes) is read whole
  assert big_weights._bounds(403, 160) == [(0, 84), (84, 168), (168, 252), (252, 336), (336, 403)]


def test_a_weight_and_a_table_over_128_mib_run_on_webgpu():
  """Real sizes: a 138 MB MatMul weight and a 138 MB Gather table (over WebGPU's default
  128 MiB binding, which lavapipe keeps) run natively on WEBGPU and equal onnxruntime's
  values; each kernel binds pieces within the device's limit."""
  from onnx import TensorProto, helper
  device_runtime("WEBGPU")
  rng = np.random.default_rng(5)
  k, n = 128, 270_000
  w = rng.standard_normal((k, n), dtype=np.float32)
  table = np.ascontiguousarray(w.T)            # (n, k): 138 MB too
  assert w.nbytes > big_weights.PIECE_BYTES == 1 << 27
  model = _model({"W": w, "E": table},
                 [("MatMul", ["x", "W"], ["y"]), ("Gather", ["E", "ids"], ["e"])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k]),
                  helper.make_tensor_value_info("ids", TensorProto.INT64, [5])], ["y", "e"])
  del table
  feeds = {"x": rng.standard_normal((1, k)).astype(np.float32),
           "ids": np.array([0, n - 1, 54_000, 216_001, -2], np.int64)}
  want = _ort(model, feeds)
  lm = kg.onnx.load(model)
  got = lm.run(feeds, device="WEBGPU")
  np.testing.assert_allclose(got["y"].numpy(), want[0], rtol=1e-4, atol=1e-3)
  np.testing.assert_array_equal(got["e"].numpy(), want[1])
  assert _pieces(lm) == {"W", "E"}
