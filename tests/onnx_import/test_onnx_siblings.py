"""Sibling projections joined at load (onnx/siblings.py): MatMul / MatMulNBits nodes reading the
same input with their own constant weights become one node over the weights concatenated along
N, whose output columns are sliced for each sibling. Against onnxruntime: joined groups (float
MatMul in f32 and f16, MatMulNBits with zero points, bias and a block count that pads the zero
points' rows), groups that must not be joined (different inputs, a weight read elsewhere too,
different block sizes) left as they are and still right, the weight bytes held not grown, and
greedy tokens of the tiny LMs (fp32, fp16, q4; the Qwen-like config with 1 KV head and q/k/v
biases) equal to onnxruntime's."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.onnx.siblings import JOINED
from onnx_contrib_util import MS, ort_run
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from onnx import TensorProto, helper, numpy_helper
from tools import device_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lm_models  # noqa: E402

DEVICES = ["PYTHON", "WEBGPU"]


def _graph_model(nodes: list, feeds: dict, inits: dict, outputs: list):
  """A model of `nodes` with graph inputs `feeds`, initializers `inits` and outputs."""
  vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in feeds.items()]
  outs = [onnx.ValueInfoProto(name=n) for n in outputs]
  tensors = [numpy_helper.from_array(v, n) for n, v in inits.items()]
  graph = helper.make_graph(nodes, "g", vis, outs, tensors)
  imports = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
  return helper.make_model(graph, opset_imports=imports, ir_version=10)


def _nbits(name: str, x: str, k: int, n: int, block: int, rng, bias: bool = False):
  """(a MatMulNBits node of random 4-bit weights with uint8 zero points, its initializers)."""
  blocks = -(-k // block)
  inits = {f"{name}.b": rng.integers(0, 256, (n, blocks, block // 2), dtype=np.uint8),
           f"{name}.s": (rng.random(n * blocks) * 0.05 + 0.01).astype(np.float32),
           f"{name}.z": rng.integers(0, 256, n * -(-blocks // 2), dtype=np.uint8)}
  names = [x, *inits]
  if bias:
    inits[f"{name}.bias"] = rng.standard_normal(n).astype(np.float32)
    names += ["", f"{name}.bias"]
  node = helper.make_node("MatMulNBits", names, [f"{name}.y"], domain=MS, K=k, N=n, bits=4,
                          block_size=block)
  return node, inits


def _matmuls(x: str, widths: list, k: int, dtype, rng, prefix: str = "w"):
  nodes, inits = [], {}
  for i, n in enumerate(widths):
    inits[f"{prefix}{i}"] = (rng.standard_normal((k, n)) * 0.2).astype(dtype)
    nodes.append(helper.make_node("MatMul", [x, f"{prefix}{i}"], [f"{prefix}{i}.y"]))
  return nodes, inits


def _run(model, feeds: dict, device: str):
  """(kernelgen's outputs as arrays, the loaded Model), after checking the outputs' count."""
  if device != "PYTHON":
    device_runtime(device)
  loaded = kg.onnx.load(model.SerializeToString())
  out = loaded.run(feeds, device=device)
  return [t.numpy() for t in out.values()], loaded


def _check(model, feeds: dict, device: str, joined: int, tol: float = 1e-4):
  """kernelgen's outputs are onnxruntime's; `joined` nodes were joined; the Model returned."""
  got, loaded = _run(model, feeds, device)
  for g, w in zip(got, ort_run(model, feeds)):
    assert g.shape == w.shape
    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)
  assert sum(node.proto.domain == JOINED for node in loaded.nodes) == joined
  return loaded


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float16, 2e-2)])
def test_float_matmuls_of_one_input_joined(device, dtype, tol):
  """Three MatMuls of x (64, 16 and 24 columns) and one of another input: the three joined into
  one node (a decode row and prompt rows), the fourth left alone."""
  rng = np.random.default_rng(1)
  nodes, inits = _matmuls("x", [64, 16, 24], 48, dtype, rng)
  other, more = _matmuls("x2", [16], 48, dtype, rng, prefix="u")
  for rows in (1, 5):
    feeds = {"x": rng.standard_normal((1, rows, 48)).astype(dtype),
             "x2": rng.standard_normal((1, rows, 48)).astype(dtype)}
    model = _graph_model(nodes + other, feeds, {**inits, **more},
                         ["w0.y", "w1.y", "w2.y", "u0.y"])
    loaded = _check(model, feeds, device, 1, tol)
    assert len(loaded.nodes) == 2


def test_joined_weight_bytes_not_grown():
  """The joined weight replaces its parts: the initializers' bytes are as many as before, the
  parts are gone from the model (and its proto), and the device holds the joined tensor only."""
  rng = np.random.default_rng(2)
  nodes, inits = _matmuls("x", [40, 8, 8], 32, np.float32, rng)
  feeds = {"x": rng.standard_normal((1, 32)).astype(np.float32)}
  model = _graph_model(nodes, feeds, inits, ["w0.y", "w1.y", "w2.y"])
  got, loaded = _run(model, feeds, "PYTHON")
  assert list(loaded.initializers) == ["w0+w1+w2"]
  assert sum(len(raw) for _, _, raw in loaded.initializers.values()) == \
    sum(a.nbytes for a in inits.values())
  assert [t.name for t in loaded.proto.graph.initializer] == []
  assert [key[1] for key in loaded.uploads] == ["w0+w1+w2"]
  held = loaded.uploads[("PYTHON", "w0+w1+w2")]
  assert held.shape == (32, 56)
  np.testing.assert_array_equal(held.numpy(), np.concatenate(list(inits.values()), axis=1))
  for g, w in zip(got, ort_run(model, feeds)):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_weight_read_elsewhere_not_joined(device):
  """w1 is also added to the output of another node: its MatMul keeps its own weight (a second
  reader needs w1's own buffer); w0 and w2 are still joined."""
  rng = np.random.default_rng(3)
  nodes, inits = _matmuls("x", [16, 16, 16], 16, np.float32, rng)
  nodes.append(helper.make_node("Add", ["w1", "w1"], ["w1.twice"]))
  feeds = {"x": rng.standard_normal((2, 16)).astype(np.float32)}
  model = _graph_model(nodes, feeds, inits, ["w0.y", "w1.y", "w2.y", "w1.twice"])
  loaded = _check(model, feeds, device, 1)
  assert "w1" in loaded.initializers and "w0+w2" in loaded.initializers


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [False, True])
def test_matmul_nbits_siblings_joined(device, bias):
  """MatMulNBits of x with 4-bit weights, scales, uint8 zero points (K = 80: 3 blocks of 32 a
  row, the zero points' rows padded to 2 bytes) and bias: joined, the joined node's N the sum."""
  rng = np.random.default_rng(4)
  nodes, inits = [], {}
  for name, n in (("q", 64), ("k", 32), ("v", 24)):
    node, more = _nbits(name, "x", 80, n, 32, rng, bias)
    nodes.append(node)
    inits.update(more)
  feeds = {"x": rng.standard_normal((1, 1, 80)).astype(np.float32)}
  model = _graph_model(nodes, feeds, inits, ["q.y", "k.y", "v.y"])
  loaded = _check(model, feeds, device, 1, 1e-3)
  assert loaded.nodes[0].attrs.int("N") == 120
  assert len(loaded.initializers) == (4 if bias else 3)
  assert sum(len(raw) for _, _, raw in loaded.initializers.values()) == \
    sum(a.nbytes for a in inits.values())


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_nbits_different_block_sizes_not_joined(device):
  """Two MatMulNBits of x with blocks of 32 and of 16: left as two nodes, both right."""
  rng = np.random.default_rng(5)
  (a, ia), (b, ib) = _nbits("a", "x", 64, 32, 32, rng), _nbits("b", "x", 64, 32, 16, rng)
  feeds = {"x": rng.standard_normal((1, 64)).astype(np.float32)}
  model = _graph_model([a, b], feeds, {**ia, **ib}, ["a.y", "b.y"])
  loaded = _check(model, feeds, device, 0, 1e-3)
  assert len(loaded.nodes) == 2


PROMPT = [1, 5, 9, 2, 7, 3, 4, 8]


@pytest.mark.parametrize("config,dtype,kv_heads", [
  ("tiny", "fp32", 2), ("tiny", "fp16", 2), ("tiny", "q4", 2), ("tiny-qwen", "fp32", 1),
  ("tiny-qwen", "q4", 1), ("tiny-qwen", "q4", 2)])
def test_greedy_tokens_with_joined_projections(config, dtype, kv_heads):
  """Each layer's q, k and v joined (one node a layer); its gate and up, which meet in
  silu(gate) * up, left apart: kg.generate's greedy tokens on WEBGPU are onnxruntime's (prompt,
  decode steps and their replays); the Qwen-like config (q/k/v biases joined too) with 1 and 2
  KV heads."""
  device_runtime("WEBGPU")
  cfg = dataclasses.replace(lm_models.CONFIGS[config], kv_heads=kv_heads)
  model = lm_models.build(cfg, dtype)
  loaded = kg.onnx.load(model.SerializeToString())
  joined = [node for node in loaded.nodes if node.proto.domain == JOINED]
  assert [len(node.outputs) for node in joined] == [3] * cfg.layers
  want = lm_models.ort_greedy(model, PROMPT, 8)
  assert kg.generate(loaded, PROMPT, max_new_tokens=8, device="WEBGPU") == want
