"""onnxruntime's com.microsoft operators of language-model exports against onnxruntime (CPU) on
PYTHON, PTXSIM and WEBGPU: fused norms, GELUs, RotaryEmbedding, GroupQueryAttention,
MultiHeadAttention, DynamicQuantizeMatMul, MatMulIntegerToFloat; ONNX Attention (opset 23)
with a past KV cache; operators still missing are typed errors naming the domain."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from onnx_contrib_util import DEVICES, check, kg_run, node_model, ort_run

from onnx import helper  # noqa: E402


def _rand(*shape, seed=0, scale=1.0):
  return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# ---- norms and GELUs -------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_simplified_layer_norm(device):
  """onnxruntime registers it in the default domain (as Optimum writes it)."""
  x, g = _rand(2, 3, 16), _rand(16, seed=1)
  model = node_model("SimplifiedLayerNormalization", {"x": x}, {"g": g}, ["y"], domain="",
                     opset=17, epsilon=1e-6, axis=-1)
  check(model, {"x": x}, device)


@pytest.mark.parametrize("device", DEVICES)
def test_skip_simplified_layer_norm_outputs_and_sum(device):
  x, skip, g, bias = _rand(2, 3, 16), _rand(2, 3, 16, seed=1), _rand(16, seed=2), \
    _rand(16, seed=3)
  model = node_model("SkipSimplifiedLayerNormalization", {"x": x, "skip": skip},
                     {"g": g, "bias": bias}, ["y", "", "inv", "sum"], epsilon=1e-6)
  check(model, {"x": x, "skip": skip}, device)


@pytest.mark.parametrize("device", DEVICES)
def test_skip_layer_norm_with_beta_and_bias(device):
  x, skip = _rand(2, 3, 16), _rand(2, 3, 16, seed=1)
  g, beta, bias = _rand(16, seed=2), _rand(16, seed=3), _rand(16, seed=4)
  model = node_model("SkipLayerNormalization", {"x": x, "skip": skip},
                     {"g": g, "beta": beta, "bias": bias}, ["y", "mean", "inv", "sum"],
                     epsilon=1e-5)
  check(model, {"x": x, "skip": skip}, device, skip=(1, 2))    # ORT leaves mean/inv unset


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,extra", [("Gelu", {}), ("FastGelu", {"b": 16}),
                                      ("FastGelu", {}), ("BiasGelu", {"b": 16}),
                                      ("QuickGelu", {}), ("QuickGelu", {"alpha": 1.5})])
def test_gelus(device, op, extra):
  x = _rand(3, 16, scale=2.0)
  inits = {"b": _rand(16, seed=1)} if "b" in extra else {}
  attrs = {"alpha": extra["alpha"]} if "alpha" in extra else {}
  model = node_model(op, {"x": x}, inits, ["y"], **attrs)
  check(model, {"x": x}, device, rtol=1e-4, atol=2e-5)


# ---- RotaryEmbedding -------------------------------------------------------------------------

def _caches(max_len: int, half: int):
  inv = 1.0 / (10000 ** (np.arange(half) / half))
  ang = np.arange(max_len)[:, None] * inv[None, :]
  return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interleaved,four_d,offset", [(0, False, False), (1, False, True),
                                                       (0, True, True), (1, True, False)])
def test_rotary_embedding_ms(device, interleaved, four_d, offset):
  b, s, h, d = 2, 3, 2, 8
  x = _rand(b, h, s, d) if four_d else _rand(b, s, h * d)
  pos = np.array([5], np.int64) if offset else np.array([[0, 1, 2], [4, 6, 7]], np.int64)
  cos, sin = _caches(16, d // 2)
  model = node_model("RotaryEmbedding", {"x": x, "pos": pos}, {"cos": cos, "sin": sin}, ["y"],
                     interleaved=interleaved, num_heads=0 if four_d else h)
  check(model, {"x": x, "pos": pos}, device)


# ---- GroupQueryAttention ---------------------------------------------------------------------

def gqa_case(s: int, past: int, hq=4, hkv=2, d=8, b=1, rotary=False, packed=False, **attrs):
  """feeds, initializers, input names and attributes of a GroupQueryAttention node."""
  total = past + s
  feeds = {"q": _rand(b, s, hq * d, seed=1)}
  names = ["q"]
  if packed:
    feeds["q"] = _rand(b, s, (hq + 2 * hkv) * d, seed=1)
    names += ["", ""]
  else:
    feeds["k"], feeds["v"] = _rand(b, s, hkv * d, seed=2), _rand(b, s, hkv * d, seed=3)
    names += ["k", "v"]
  if past:
    feeds["pk"], feeds["pv"] = _rand(b, hkv, past, d, seed=4), _rand(b, hkv, past, d, seed=5)
    names += ["pk", "pv"]
  else:
    names += ["", ""]
  feeds["seqlens"] = np.full((b,), total - 1, np.int32)
  feeds["total"] = np.array([total], np.int32)
  names += ["seqlens", "total"]
  inits = {}
  if rotary:
    inits["cos"], inits["sin"] = _caches(32, d // 2)
    names += ["cos", "sin"]
  attrs = dict(num_heads=hq, kv_num_heads=hkv, do_rotary=int(rotary), **attrs)
  return feeds, inits, names, attrs


def _gqa_model(feeds, inits, names, attrs):
  return node_model("GroupQueryAttention", feeds, inits, ["y", "present_k", "present_v"],
                    inputs=names, **attrs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("s,past", [(5, 0), (1, 6), (3, 4)])
def test_group_query_attention_prompt_and_decode(device, s, past):
  feeds, inits, names, attrs = gqa_case(s, past)
  check(_gqa_model(feeds, inits, names, attrs), feeds, device)


@pytest.mark.parametrize("device", DEVICES)
def test_group_query_attention_rotary_window_softcap(device):
  feeds, inits, names, attrs = gqa_case(2, 5, rotary=True, local_window_size=3, softcap=2.0,
                                        rotary_interleaved=1, d=16)
  check(_gqa_model(feeds, inits, names, attrs), feeds, device)


@pytest.mark.parametrize("rotary", [False, True])
def test_group_query_attention_packed_qkv_and_scale(rotary):
  feeds, inits, names, attrs = gqa_case(4, 0, rotary=rotary, packed=True, scale=0.3, b=2, d=16)
  check(_gqa_model(feeds, inits, names, attrs), feeds, "PYTHON")


@pytest.mark.parametrize("device", DEVICES)
def test_group_query_attention_bias_and_head_sink(device):
  feeds, inits, names, attrs = gqa_case(2, 3)
  feeds["bias"] = _rand(1, 1, 2, 5, seed=7)
  feeds["sink"] = _rand(4, seed=8)
  names = names + ["", "", "", "bias", "sink"]
  check(_gqa_model(feeds, inits, names, attrs), feeds, device)


def test_group_query_attention_smooth_softmax():
  feeds, inits, names, attrs = gqa_case(3, 2, smooth_softmax=1)
  check(_gqa_model(feeds, inits, names, attrs), feeds, "PYTHON")


def test_group_query_attention_qk_output_is_refused():
  feeds, inits, names, attrs = gqa_case(2, 0, qk_output=1)
  with pytest.raises(kg.UnsupportedError, match="qk_output"):
    kg_run(_gqa_model(feeds, inits, names, attrs), feeds, "PYTHON")


# ---- MultiHeadAttention ----------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_multi_head_attention_bias_padding_past_causal(device):
  b, s, t, h, d, past = 2, 3, 3, 2, 4, 2
  feeds = {"q": _rand(b, s, h * d), "k": _rand(b, t, h * d, seed=1),
           "v": _rand(b, t, h * d, seed=2), "pk": _rand(b, h, past, d, seed=3),
           "pv": _rand(b, h, past, d, seed=4)}
  inits = {"bias": _rand(3 * h * d, seed=5),
           "mask": np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], np.int32)}
  model = node_model("MultiHeadAttention", feeds, inits, ["y", "present_k", "present_v"],
                     inputs=["q", "k", "v", "bias", "mask", "", "pk", "pv"], num_heads=h,
                     unidirectional=1)
  check(model, feeds, device)


def test_multi_head_attention_attention_bias_and_scale():
  b, s, t, h, d = 1, 2, 4, 2, 4
  feeds = {"q": _rand(b, s, h * d), "k": _rand(b, t, h * d, seed=1),
           "v": _rand(b, t, h * d, seed=2), "ab": _rand(1, h, s, t, seed=3)}
  model = node_model("MultiHeadAttention", feeds, {}, ["y"],
                     inputs=["q", "k", "v", "", "", "ab"], num_heads=h, scale=0.7)
  check(model, feeds, "PYTHON")


# ---- dynamic quantization --------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b_type,per_column,bias", [(np.int8, False, True),
                                                    (np.uint8, True, False)])
def test_dynamic_quantize_matmul(device, b_type, per_column, bias):
  rng = np.random.default_rng(0)
  a = _rand(3, 16, scale=2.0)
  lo, hi = (-128, 128) if b_type == np.int8 else (0, 256)
  w = rng.integers(lo, hi, (16, 8)).astype(b_type)
  n = 8 if per_column else 1
  inits = {"w": w, "ws": (rng.random(n) * 0.01 + 0.001).astype(np.float32),
           "wz": rng.integers(-3, 3, n).astype(b_type) if b_type == np.int8 else
           rng.integers(100, 150, n).astype(b_type)}
  names = ["a", "w", "ws", "wz"]
  if bias:
    inits["bias"] = _rand(8, seed=3)
    names.append("bias")
  model = node_model("DynamicQuantizeMatMul", {"a": a}, inits, ["y"], inputs=names)
  check(model, {"a": a}, device, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_integer_to_float(device):
  rng = np.random.default_rng(1)
  a = rng.integers(0, 256, (2, 3, 16)).astype(np.uint8)
  inits = {"w": rng.integers(-128, 128, (16, 8)).astype(np.int8),
           "as": np.array(0.02, np.float32), "ws": (rng.random(8) * 0.01).astype(np.float32),
           "az": np.array(120, np.uint8), "wz": rng.integers(-4, 4, 8).astype(np.int8),
           "bias": _rand(8, seed=2)}
  model = node_model("MatMulIntegerToFloat", {"a": a}, inits, ["y"],
                     inputs=["a", "w", "as", "ws", "az", "wz", "bias"])
  check(model, {"a": a}, device, rtol=1e-5, atol=1e-5)


# ---- ONNX Attention (opset 23) with a past KV cache ------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_onnx_attention_with_past_kv_and_gqa(device):
  b, hq, hkv, s, past, d = 1, 4, 2, 2, 3, 8
  feeds = {"q": _rand(b, hq, s, d), "k": _rand(b, hkv, s, d, seed=1),
           "v": _rand(b, hkv, s, d, seed=2), "pk": _rand(b, hkv, past, d, seed=3),
           "pv": _rand(b, hkv, past, d, seed=4)}
  model = node_model("Attention", feeds, {}, ["y", "present_k", "present_v"], domain="",
                     opset=23, inputs=["q", "k", "v", "", "pk", "pv"], is_causal=1)
  check(model, feeds, device)


# ---- what is still missing -------------------------------------------------------------------

def _quantized_lstm(seed: int = 0):
  """feeds, quantized initializers, and the same weights dequantized (ONNX LSTM's layout)."""
  rng = np.random.default_rng(seed)
  d, i, h = 2, 5, 4
  wq = rng.integers(-128, 128, (d, i, 4 * h)).astype(np.int8)
  rq = rng.integers(-128, 128, (d, h, 4 * h)).astype(np.int8)
  ws, rs = (rng.random((d, 4 * h)) * 0.01).astype(np.float32), \
    (rng.random(d) * 0.01).astype(np.float32)
  wz, rz = np.zeros((d, 4 * h), np.int8), np.zeros(d, np.int8)   # ORT: int8 zero points 0
  inits = {"w": wq, "r": rq, "b": _rand(d, 8 * h, seed=1, scale=0.1), "ws": ws, "wz": wz,
           "rs": rs, "rz": rz}
  w = ((wq.astype(np.float32) - wz[:, None, :]) * ws[:, None, :]).transpose(0, 2, 1)
  r = ((rq.astype(np.float32) - rz[:, None, None]) * rs[:, None, None]).transpose(0, 2, 1)
  feeds = {"x": _rand(3, 2, i, seed=2)}
  return feeds, inits, {"w": w.copy(), "r": r.copy(), "b": inits["b"]}, h


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_quantize_lstm_quantizes_its_activations(device):
  """onnxruntime's kernel (here with a thread per batch row: it quantizes h over groups of
  ceil(batch / threads) rows) to float rounding; ONNX LSTM of the dequantized weights differs
  by the activations' uint8 rounding (more cases: test_onnx_recurrent.py)."""
  ort = pytest.importorskip("onnxruntime")
  feeds, inits, dequant, h = _quantized_lstm()
  names = ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"]
  model = node_model("DynamicQuantizeLSTM", feeds, inits, ["y", "yh", "yc"], inputs=names,
                     hidden_size=h, direction="bidirectional")
  got = kg_run(model, feeds, device)
  options = ort.SessionOptions()
  options.intra_op_num_threads = 2
  want = ort.InferenceSession(model.SerializeToString(), options,
                              providers=["CPUExecutionProvider"]).run(None, feeds)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-6)
  plain = node_model("LSTM", feeds, dequant, ["y", "yh", "yc"], domain="",
                     inputs=["x", "w", "r", "b"], hidden_size=h, direction="bidirectional")
  assert max(float(np.abs(g - w).max()) for g, w in zip(got, ort_run(plain, feeds))) > 1e-4


def test_missing_com_microsoft_operator_names_itself_and_its_domain():
  x = _rand(2, 4)
  model = node_model("QOrderedMatMul", {"x": x}, {}, ["y"])
  with pytest.raises(kg.UnsupportedError,
                     match="QOrderedMatMul of domain 'com.microsoft'.*MatMulNBits"):
    kg.onnx.load(model.SerializeToString())
  other = node_model("Foo", {"x": x}, {}, ["y"], domain="org.example")
  with pytest.raises(kg.UnsupportedError, match="Foo of domain 'org.example'"):
    kg.onnx.load(other.SerializeToString())
  assert helper is not None


# ---- float16 ---------------------------------------------------------------------------------

def test_group_query_attention_float16_with_rotary():
  feeds, inits, names, attrs = gqa_case(3, 4, rotary=True, d=16)
  feeds = {n: a.astype(np.float16) if a.dtype == np.float32 else a for n, a in feeds.items()}
  inits = {n: a.astype(np.float16) for n, a in inits.items()}
  check(_gqa_model(feeds, inits, names, attrs), feeds, "PYTHON", rtol=2e-3, atol=2e-3)


def test_skip_simplified_layer_norm_float16():
  x, skip, g = _rand(2, 3, 16).astype(np.float16), _rand(2, 3, 16, seed=1).astype(np.float16), \
    _rand(16, seed=2).astype(np.float16)
  model = node_model("SkipSimplifiedLayerNormalization", {"x": x, "skip": skip}, {"g": g},
                     ["y", "", "", "sum"], epsilon=1e-6)
  check(model, {"x": x, "skip": skip}, "PYTHON", rtol=2e-3, atol=2e-3)


def test_group_query_attention_rows_of_different_lengths():
  """Batch rows with their own past lengths (seqlens_k) in a decode step (onnxruntime takes
  batch 1 only for longer steps with a past): each row's new key is written after its own
  past, and each query sees its row's keys up to its position."""
  s = 1
  feeds, inits, names, attrs = gqa_case(s, 6, b=2, rotary=True, d=16)
  feeds["seqlens"] = np.array([6 + s - 1, 3 + s - 1], np.int32)
  check(_gqa_model(feeds, inits, names, attrs), feeds, "PYTHON", skip=(1, 2))
  want = ort_run(_gqa_model(feeds, inits, names, attrs), feeds)
  got = kg_run(_gqa_model(feeds, inits, names, attrs), feeds, "PYTHON")
  for g, w in zip(got[1:], want[1:]):        # row 1's cache beyond its length is unspecified
    np.testing.assert_allclose(g[0], w[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g[1, :, :3 + s], w[1, :, :3 + s], rtol=1e-5, atol=1e-6)


def test_multi_head_attention_with_projected_4d_key_value():
  """Cross attention with key and value already (B, heads, L, head_dim)."""
  b, s, t, h, d = 2, 3, 5, 2, 8
  feeds = {"q": _rand(b, s, h * d), "k": _rand(b, h, t, d, seed=1),
           "v": _rand(b, h, t, d, seed=2)}
  model = node_model("MultiHeadAttention", feeds, {}, ["y"], inputs=["q", "k", "v"],
                     num_heads=h)
  check(model, feeds, "PYTHON")


def test_rotary_embedding_ms_partial_rotary_dim():
  b, s, h, d, r = 1, 3, 2, 16, 8
  x, pos = _rand(b, s, h * d), np.array([[2, 3, 4]], np.int64)
  cos, sin = _caches(8, r // 2)
  model = node_model("RotaryEmbedding", {"x": x, "pos": pos}, {"cos": cos, "sin": sin}, ["y"],
                     num_heads=h, rotary_embedding_dim=r)
  check(model, {"x": x, "pos": pos}, "PYTHON")


def test_group_query_attention_right_padded_prompt():
  """A prompt of rows of different lengths (right-padded, seqlens_k + 1 tokens each): each
  row's real queries see only its own tokens (the padded positions' outputs are unspecified)."""
  feeds, inits, names, attrs = gqa_case(4, 0, b=2, rotary=True, d=16)
  feeds["seqlens"] = np.array([3, 1], np.int32)
  model = _gqa_model(feeds, inits, names, attrs)
  want, got = ort_run(model, feeds), kg_run(model, feeds, "PYTHON")
  np.testing.assert_allclose(got[0][0], want[0][0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got[0][1, :2], want[0][1, :2], rtol=1e-5, atol=1e-6)
  for g, w in zip(got[1:], want[1:]):
    np.testing.assert_allclose(g[0], w[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g[1, :, :2], w[1, :, :2], rtol=1e-5, atol=1e-6)
