"""com.microsoft MatMulNBits and GatherBlockQuantized, DequantizeLinear with block_size and
int4/uint4 tensors (opset 21) against onnxruntime (CPU) on PYTHON, PTXSIM and WEBGPU; and the
packed weights dequantized in registers: no kernel writes a weight-sized float buffer."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from onnx_contrib_util import DEVICES, check, kg_run, node_model, onnx

from onnx import TensorProto, helper  # noqa: E402


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
  """4-bit codes (..., 2n) as bytes (..., n), the low nibble first."""
  codes = codes.astype(np.uint8)
  return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def quantize_nbits(n: int, k: int, bits: int, block: int, seed: int, zp: str = "none"):
  """(B packed (N, blocks, blob), scales (N*blocks,), zero points or None) of a random weight."""
  rng = np.random.default_rng(seed)
  blocks = -(-k // block)
  levels = 1 << bits
  codes = rng.integers(0, levels, (n, blocks * block))
  codes[:, k:] = 0
  scales = (rng.random((n * blocks,)) * 0.1 + 0.01).astype(np.float32)
  if bits == 4:
    packed = pack_nibbles(codes).reshape(n, blocks, block // 2)
  else:
    packed = codes.astype(np.uint8).reshape(n, blocks, block)
  zps = None
  if zp == "uint8":
    zcodes = rng.integers(0, levels, (n, blocks + (blocks % 2 if bits == 4 else 0)))
    zps = (pack_nibbles(zcodes) if bits == 4 else zcodes.astype(np.uint8)).reshape(-1)
  elif zp == "float":
    zps = (rng.random((n * blocks,)) * levels).astype(np.float32)
  return packed, scales, zps


def nbits_model(m: int, n: int, k: int, bits: int, block: int, zp: str = "none",
                bias: bool = False, seed: int = 0, lead=(1,)):
  packed, scales, zps = quantize_nbits(n, k, bits, block, seed, zp)
  inits = {"B": packed, "scales": scales}
  names = ["A", "B", "scales", "zp" if zps is not None else ""]
  if zps is not None:
    inits["zp"] = zps
  if bias:
    inits["bias"] = np.random.default_rng(seed + 1).standard_normal(n).astype(np.float32)
    names += ["", "bias"]
  a = np.random.default_rng(seed + 2).standard_normal((*lead, m, k)).astype(np.float32)
  model = node_model("MatMulNBits", {"A": a}, inits, ["Y"], inputs=names, K=k, N=n, bits=bits,
                     block_size=block)
  return model, {"A": a}


def q4_matvec_kernel(n: int, k: int, **options):
  """The one kernel reading packed 4-bit words of an (n, k) MatMulNBits matvec (block 32, uint8
  zero points, bias), as kg.compile(**options) gives it."""
  model, feeds = nbits_model(1, n, k, 4, 32, "uint8", bias=True, seed=3)
  out = kg.onnx.load(model.SerializeToString()).run(feeds, device="PYTHON")
  kernels = kg.compile(list(out.values()), **options)
  words = [kern for kern in kernels for b in kern.buffers if b.dtype == kg.dtypes.uint32]
  assert len(words) == 1
  return words[0]


@pytest.mark.parametrize("bits,block,zp,bias", [
  (4, 32, "none", False), (4, 16, "uint8", True), (4, 64, "float", False),
  (4, 128, "uint8", False), (8, 32, "uint8", True), (8, 256, "none", False),
  (8, 16, "uint8", False)])
def test_matmul_nbits_matches_onnxruntime_on_python(bits, block, zp, bias):
  model, feeds = nbits_model(3, 24, 96 if block < 128 else 320, bits, block, zp, bias)
  check(model, feeds, "PYTHON", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", ["PTXSIM", "WEBGPU"])
@pytest.mark.parametrize("bits,zp", [(4, "uint8"), (8, "none")])
def test_matmul_nbits_matches_onnxruntime_on_devices(device, bits, zp):
  model, feeds = nbits_model(2, 16, 64, bits, 32, zp, bias=True, lead=(2,))
  check(model, feeds, device, rtol=1e-4, atol=1e-4)


def test_matmul_nbits_k_not_a_multiple_of_the_block():
  model, feeds = nbits_model(2, 8, 40, 4, 16, "uint8")
  check(model, feeds, "PYTHON", rtol=1e-4, atol=1e-4)


def _float_kernel_outputs(kernels) -> list:
  return [b.size for k in kernels for b in k.buffers
          if b.access != "read" and b.dtype == kg.dtypes.float32]


@pytest.mark.parametrize("m", [1, 8])
def test_matmul_nbits_never_writes_a_dequantized_weight(m):
  """The packed weights are read and dequantized in registers: every kernel's float output is
  far smaller than the N x K weight (the only float output is Y, M x N)."""
  n, k = 256, 512
  model, feeds = nbits_model(m, n, k, 4, 32, "uint8", bias=True)
  out = kg.onnx.load(model.SerializeToString()).run(feeds, device="PYTHON")
  for target in ("wgsl", "ptx"):
    kernels = kg.compile(list(out.values()), target=target)
    sizes = _float_kernel_outputs(kernels)
    assert sizes and max(sizes) <= m * n, f"{target}: float buffers written {sizes}"
    reads = [b for kern in kernels for b in kern.buffers
             if b.dtype in (kg.dtypes.uint8, kg.dtypes.uint32)]
    assert any(b.size * b.dtype.itemsize == n * k // 2 for b in reads), \
      "the packed weight is read as its packed bytes (or their 32-bit words)"


def test_matmul_nbits_reordering_g_idx_is_refused():
  packed, scales, _ = quantize_nbits(8, 64, 4, 32, 0)
  a = np.ones((1, 64), np.float32)
  g_idx = np.array([(i * 7) % 2 for i in range(64)], np.int32)
  model = node_model("MatMulNBits", {"A": a}, {"B": packed, "scales": scales, "g": g_idx},
                     ["Y"], inputs=["A", "B", "scales", "", "g"], K=64, N=8, bits=4,
                     block_size=32)
  with pytest.raises(kg.UnsupportedError, match="g_idx.*com.microsoft"):
    kg_run(model, {"A": a}, "PYTHON")
  plain = np.array([i // 32 for i in range(64)], np.int32)
  model = node_model("MatMulNBits", {"A": a}, {"B": packed, "scales": scales, "g": plain},
                     ["Y"], inputs=["A", "B", "scales", "", "g"], K=64, N=8, bits=4,
                     block_size=32)
  check(model, {"A": a}, "PYTHON", rtol=1e-4, atol=1e-4)


def test_matmul_nbits_other_bit_widths_are_refused():
  model, feeds = nbits_model(1, 8, 64, 4, 32)
  model.graph.node[0].attribute[0].i = 2 if model.graph.node[0].attribute[0].name == "bits" \
    else model.graph.node[0].attribute[0].i
  for a in model.graph.node[0].attribute:
    if a.name == "bits":
      a.i = 3
  with pytest.raises(kg.UnsupportedError, match="bits=3"):
    kg_run(model, feeds, "PYTHON")


# ---- GatherBlockQuantized --------------------------------------------------------------------

def gbq_model(bits: int, block: int, zp: bool, data_type: str = "uint8", seed: int = 0):
  rng = np.random.default_rng(seed)
  vocab, dim = 10, 64
  codes = rng.integers(0, 1 << bits, (vocab, dim))
  scales = (rng.random((vocab, dim // block)) * 0.1 + 0.01).astype(np.float32)
  zcodes = rng.integers(0, 1 << bits, (vocab, dim // block))
  idx = np.array([[3, 0, 9], [9, 1, 3]], np.int64)
  inits, names = {"scales": scales}, ["data", "idx", "scales"]
  if data_type == "uint8":
    inits["data"] = pack_nibbles(codes) if bits == 4 else codes.astype(np.uint8)
    zdata = (pack_nibbles(zcodes) if bits == 4 else zcodes.astype(np.uint8)) if zp else None
  else:
    tp = TensorProto.UINT4 if data_type == "uint4" else TensorProto.INT4
    shift = 0 if data_type == "uint4" else 8
    inits["data"] = helper.make_tensor("data", tp, codes.shape, (codes - shift).flatten())
    zdata = helper.make_tensor("zp", tp, zcodes.shape, (zcodes - shift).flatten()) if zp \
      else None
  if zdata is not None:
    inits["zp"] = zdata
    names.append("zp")
  attrs = {"block_size": block, "gather_axis": 0, "quantize_axis": 1}
  if data_type == "uint8":
    attrs["bits"] = bits
  model = node_model("GatherBlockQuantized", {"idx": idx}, inits, ["y"],
                     inputs=[n if n != "idx" else "idx" for n in names], **attrs)
  return model, {"idx": idx}


@pytest.mark.parametrize("bits,block,zp,data_type", [
  (4, 16, True, "uint8"), (4, 32, False, "uint8"), (8, 32, True, "uint8"), (8, 16, False, "uint8"),
  (4, 32, True, "uint4"), (4, 16, False, "uint4"), (4, 32, True, "int4"), (4, 16, False, "int4")])
def test_gather_block_quantized_matches_onnxruntime(bits, block, zp, data_type):
  model, feeds = gbq_model(bits, block, zp, data_type)
  check(model, feeds, "PYTHON", rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", ["PTXSIM", "WEBGPU"])
def test_gather_block_quantized_on_devices(device):
  model, feeds = gbq_model(4, 16, True, "uint8")
  check(model, feeds, device, rtol=1e-5, atol=1e-6)


# ---- DequantizeLinear with block_size, int4/uint4 tensors -------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tp", [TensorProto.INT4, TensorProto.UINT4])
def test_dequantize_linear_blocked_int4(device, tp):
  rng = np.random.default_rng(1)
  lo, hi = (-8, 8) if tp == TensorProto.INT4 else (0, 16)
  codes = rng.integers(lo, hi, (4, 33))
  zcodes = rng.integers(lo, hi, (4, 3))
  x = helper.make_tensor("x", tp, codes.shape, codes.flatten())
  zp = helper.make_tensor("zp", tp, zcodes.shape, zcodes.flatten())
  scale = (rng.random((4, 3)) + 0.5).astype(np.float32)
  model = node_model("DequantizeLinear", {}, {"x": x, "scale": scale, "zp": zp}, ["y"],
                     domain="", inputs=["x", "scale", "zp"], axis=1, block_size=16)
  check(model, {}, device, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("tp", [TensorProto.INT4, TensorProto.UINT4])
def test_cast_to_and_from_4_bits_wraps_as_onnxruntime(tp):
  x = np.array([-20, -9, -8, -1, 0, 3, 7, 8, 15, 20], np.float32)
  nodes = [helper.make_node("Cast", ["x"], ["q"], to=tp),
           helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT)]
  graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [10])],
                            [helper.make_tensor_value_info("y", 1, [10])])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
  check(model, {"x": x}, "PYTHON", rtol=0, atol=0)


def test_odd_count_int4_initializer_unpacks_every_value():
  vals = np.array([-8, 7, -1, 0, 5], np.int64)
  t = helper.make_tensor("x", TensorProto.INT4, [5], vals)
  model = node_model("Cast", {}, {"x": t}, ["y"], domain="", inputs=["x"], to=TensorProto.FLOAT)
  got = kg_run(model, {}, "PYTHON")[0]
  assert got.tolist() == vals.tolist()
  assert onnx is not None


def test_matmul_nbits_float16_activations():
  model, feeds = nbits_model(3, 16, 64, 4, 32, "uint8", bias=False)
  feeds = {"A": feeds["A"].astype(np.float16)}
  for t in model.graph.initializer:
    if t.name == "scales":
      from onnx import numpy_helper
      t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), "scales"))
  model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
  check(model, feeds, "PYTHON", rtol=3e-3, atol=3e-3)


def test_initializers_are_uploaded_once_across_runs():
  """A model run again (a decode step) reuses its initializers' device tensors: the packed
  weights are not uploaded per step."""
  model, feeds = nbits_model(1, 16, 64, 4, 32, "uint8", bias=True)
  m = kg.onnx.load(model.SerializeToString())
  first = m.run(feeds, device="PYTHON")["Y"].numpy()
  uploads = dict(m.uploads)
  # B is uploaded once, as its 32-bit words (not also as bytes)
  assert {name for _, name in uploads} == {"B#uint32", "scales", "zp", "bias"}
  second = m.run(feeds, device="PYTHON")["Y"].numpy()
  assert all(m.uploads[key] is t for key, t in uploads.items())
  np.testing.assert_array_equal(first, second)


def test_gather_block_quantized_dequantizes_only_the_gathered_rows():
  """The table stays packed: the one float buffer written is the gathered rows."""
  rng = np.random.default_rng(0)
  vocab, dim = 512, 64
  data = pack_nibbles(rng.integers(0, 16, (vocab, dim)))
  scales = rng.random((vocab, dim // 32)).astype(np.float32)
  idx = np.array([[7, 300, 511]], np.int64)
  model = node_model("GatherBlockQuantized", {"idx": idx}, {"data": data, "scales": scales},
                     ["y"], inputs=["data", "idx", "scales"], block_size=32, bits=4,
                     gather_axis=0, quantize_axis=1)
  out = kg.onnx.load(model.SerializeToString()).run({"idx": idx}, device="PYTHON")
  kernels = kg.compile(list(out.values()), target="wgsl")
  assert _float_kernel_outputs(kernels) == [3 * dim]
  check(model, {"idx": idx}, "PYTHON", rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("tp", [TensorProto.INT4, TensorProto.UINT4])
def test_quantize_linear_to_4_bits_saturates_to_their_range(tp):
  """Rounded half to even, plus the zero point, saturated to -8..7 (int4) or 0..15 (uint4)."""
  x = np.array([-100, -9, -1.2, 0, 3.4, 7.6, 15.2, 100], np.float32)
  zp = helper.make_tensor("zp", tp, [], [0 if tp == TensorProto.INT4 else 3])
  model = node_model("QuantizeLinear", {"x": x}, {"s": np.array(1.0, np.float32), "zp": zp},
                     ["q"], domain="", inputs=["x", "s", "zp"])
  want = np.clip(np.round(x) + (0 if tp == TensorProto.INT4 else 3),
                 *((-8, 7) if tp == TensorProto.INT4 else (0, 15)))
  assert kg_run(model, {"x": x}, "PYTHON")[0].tolist() == want.tolist()   # (onnxruntime's
  # Python API cannot return 4-bit outputs: numpy, as the ONNX definition, is the oracle)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_matmul_nbits_loads_each_weight_word_once_on_cpu_adapters(adapter):
  """On CPU adapters (option reduce_inner) the decode matvec is a thread per output whose loop
  steps over the blocks with each block's words unrolled: the block's 4 words (32 4-bit values)
  in one vec4<u32> load, their 8 fields each taken from registers, and one scale load per
  block (with reduce_step=0: a block a step and a row a thread, not the default steps of several
  blocks, test_onnx_q4_stepped.py)."""
  n, k = 256, 512
  model, feeds = nbits_model(1, n, k, 4, 32, "uint8")
  out = kg.onnx.load(model.SerializeToString()).run(feeds, device="PYTHON")
  kernels = kg.compile(list(out.values()), target="wgsl", adapter=adapter,
                       reduce_step=0)
  words = [(kern, b) for kern in kernels for b in kern.buffers if b.dtype == kg.dtypes.uint32]
  assert len(words) == 1 and words[0][1].size == n * k // 8
  kern, spec = words[0]
  assert kern.local_size[0] > 1 and kern.global_size[0] * kern.local_size[0] >= n
  assert f"b{spec.slot}_{spec.name}: array<vec4<u32>>" in kern.source
  assert kern.source.count(f"b{spec.slot}_{spec.name}[") == 1, kern.source
  scales = [b for b in kern.buffers if b.dtype == kg.dtypes.float32 and b.size == n * k // 32]
  assert kern.source.count(f"b{scales[0].slot}_{scales[0].name}[") == 1
