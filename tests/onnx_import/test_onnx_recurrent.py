"""ONNX LSTM, GRU and RNN and com.microsoft DynamicQuantizeLSTM against onnxruntime (CPU) on
PYTHON and WEBGPU: forward, reverse and bidirectional; initial states, sequence_lens, peepholes,
clip, the activations attribute, layout=1 and linear_before_reset."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.graph.schedule import schedule

from onnx_contrib_util import check, kg_run, node_model, ort_run

DEVICES = ("PYTHON", "WEBGPU")
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _rand(*shape, seed=0, scale=1.0):
  return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _case(op, direction, seq=5, batch=3, width=4, hidden=6, states=False, lens=False,
          peep=False, layout=0):
  """(feeds, initializers, input names) of one recurrent node."""
  dirs, gates = 2 if direction == "bidirectional" else 1, GATES[op]
  feeds = {"x": _rand(*((batch, seq) if layout else (seq, batch)), width, seed=1)}
  inits = {"w": _rand(dirs, gates * hidden, width, seed=2, scale=0.5),
           "r": _rand(dirs, gates * hidden, hidden, seed=3, scale=0.5),
           "b": _rand(dirs, 2 * gates * hidden, seed=4, scale=0.3)}
  names = ["x", "w", "r", "b", "", "", ""] if op == "LSTM" else ["x", "w", "r", "b", "", ""]
  if lens:
    inits["lens"] = np.array([seq, 2, seq - 1][:batch], np.int32)
    names[4] = "lens"
  state_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
  if states:
    feeds["h0"] = _rand(*state_shape, seed=5)
    names[5] = "h0"
    if op == "LSTM":
      feeds["c0"] = _rand(*state_shape, seed=6)
      names[6] = "c0"
  if peep:
    inits["p"] = _rand(dirs, 3 * hidden, seed=7, scale=0.5)
    names.append("p")
  return feeds, inits, names


def _model(op, direction, case, **attrs):
  feeds, inits, names = case
  hidden = inits["r"].shape[-1]
  outs = ["y", "yh", "yc"] if op == "LSTM" else ["y", "yh"]
  return node_model(op, feeds, inits, outs, domain="", opset=14, inputs=names,
                    hidden_size=hidden, direction=direction, **attrs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_against_onnxruntime(device, op, direction):
  case = _case(op, direction, states=True, lens=True)
  check(_model(op, direction, case), case[0], device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_without_states_or_lengths_layout_1(device, op):
  """layout=1 (batch first; onnxruntime's CPU kernels refuse it): onnxruntime's layout=0 result
  of the transposed input, transposed."""
  case = _case(op, "bidirectional", layout=1)
  got = kg_run(_model(op, "bidirectional", case, layout=1), case[0], device)
  plain = {"x": case[0]["x"].transpose(1, 0, 2).copy()}
  want = ort_run(_model(op, "bidirectional", (plain,) + case[1:]), plain)
  for g, w in zip(got, [want[0].transpose(2, 0, 1, 3)] + [s.transpose(1, 0, 2) for s in want[1:]]):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_lstm_peepholes_clip_input_forget(device):
  case = _case("LSTM", "bidirectional", states=True, lens=True, peep=True)
  check(_model("LSTM", "bidirectional", case, clip=0.7, input_forget=1), case[0], device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,acts", [
    ("LSTM", ["Sigmoid", "Relu", "Tanh", "Sigmoid", "Tanh", "Relu"]),   # directions differ
    ("GRU", ["Relu", "Tanh", "Relu", "Tanh"]), ("RNN", ["Relu", "Sigmoid"])])
def test_recurrent_activations(device, op, acts):
  case = _case(op, "bidirectional", states=True)
  extra = {"linear_before_reset": 1} if op == "GRU" else {}
  check(_model(op, "bidirectional", case, activations=acts, **extra), case[0], device)



def _kernels(op, seq, **attrs):
  """How many kernels a bidirectional layer of `seq` steps compiles to (the python target:
  no buffer limit splits the stack of the step outputs)."""
  case = _case(op, "bidirectional", seq=seq, width=8, hidden=8, states=True, lens=True)
  model = kg.onnx.load(_model(op, "bidirectional", case, **attrs).SerializeToString())
  outs = model.run(case[0], device="PYTHON", replay=False)
  return len(kg.compile([outs[n] for n in model.output_names], "python"))


@pytest.mark.parametrize("op,attrs,per_step", [
    ("LSTM", {}, 1), ("GRU", {}, 2), ("GRU", {"linear_before_reset": 1}, 1), ("RNN", {}, 1)])
def test_recurrent_kernels_per_step(op, attrs, per_step):
  """Both directions step in the same kernels, each step's gates fuse (LSTM: c and h, one kernel
  storing both, graph/join.py; GRU: r, then h (r is read by h alone); one with
  linear_before_reset; RNN: one), the input projection is at most one matmul before the loop and
  Y a stack after it (6 steps at a time): no kernel per direction, none per step beyond those,
  none recomputing earlier steps."""
  six, twelve = _kernels(op, 6, **attrs), _kernels(op, 12, **attrs)
  assert six <= 6 * per_step + 2
  assert 6 * per_step <= twelve - six <= 6 * per_step + 2

def test_lstm_input_projection_reads_w_once():
  """The input projection of every step is one kernel, the only one reading W (a tiled matmul:
  seq * dirs * batch * 4 * hidden >= 4096 outputs); fused into each step's kernels, as it was,
  every step read all of W (ddddocr's OCR LSTM, issue 42). Values against onnxruntime."""
  case = _case("LSTM", "bidirectional", seq=8, batch=2, width=16, hidden=32)
  raw = _model("LSTM", "bidirectional", case)
  model = kg.onnx.load(raw.SerializeToString())
  outs = model.run(case[0], device="PYTHON", replay=False)
  items = schedule([outs[n].node for n in model.output_names])
  w = case[1]["w"].size
  assert sum(any(i.realized and i.size == w for i in it.inputs) for it in items) == 1
  check(raw, case[0], "PYTHON")


# ---- DynamicQuantizeLSTM ---------------------------------------------------------------------

def _quantized(direction, seq=6, batch=2, width=5, hidden=4, states=False, lens=False,
               per_column=True, uint8=False, seed=0):
  """(feeds, initializers, input names) of a DynamicQuantizeLSTM node."""
  rng = np.random.default_rng(seed)
  dirs = 2 if direction == "bidirectional" else 1
  kind, lo, hi = (np.uint8, 0, 256) if uint8 else (np.int8, -128, 128)
  cols = (dirs, 4 * hidden) if per_column else (dirs,)
  inits = {"w": rng.integers(lo, hi, (dirs, width, 4 * hidden)).astype(kind),
           "r": rng.integers(lo, hi, (dirs, hidden, 4 * hidden)).astype(kind),
           "b": _rand(dirs, 8 * hidden, seed=seed + 1, scale=0.1),
           "ws": (rng.random(cols) * 0.01 + 0.002).astype(np.float32),
           "wz": rng.integers(100, 156, cols).astype(kind) if uint8 else np.zeros(cols, kind),
           "rs": (rng.random(cols) * 0.01 + 0.002).astype(np.float32),
           "rz": rng.integers(100, 156, cols).astype(kind) if uint8 else np.zeros(cols, kind)}
  feeds = {"x": _rand(seq, batch, width, seed=seed + 2, scale=2.0)}
  names = ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"]
  if lens:
    inits["lens"] = np.array([seq, 3][:batch], np.int32)
    names[4] = "lens"
  if states:
    feeds["h0"], feeds["c0"] = _rand(dirs, batch, hidden, seed=seed + 3), \
      _rand(dirs, batch, hidden, seed=seed + 4)
    names[5:7] = ["h0", "c0"]
  return feeds, inits, names


def _quantized_model(direction, case):
  feeds, inits, names = case
  return node_model("DynamicQuantizeLSTM", feeds, inits, ["y", "yh", "yc"], inputs=names,
                    hidden_size=inits["r"].shape[1], direction=direction)


def _ort_threads(model, feeds, threads):
  """onnxruntime's outputs with `threads` intra-op threads: its quantized LSTM quantizes h over
  ceil(batch / threads) rows at a time, so with threads >= batch each row has its own scale."""
  ort = pytest.importorskip("onnxruntime")
  options = ort.SessionOptions()
  options.intra_op_num_threads = threads
  sess = ort.InferenceSession(model.SerializeToString(), options,
                              providers=["CPUExecutionProvider"])
  return sess.run(None, feeds)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("states,lens", [(False, False), (True, True)])
def test_dynamic_quantize_lstm_against_onnxruntime(device, direction, states, lens):
  """Activations quantized as onnxruntime quantizes them: X once, h per step and batch row."""
  case = _quantized(direction, states=states, lens=lens)
  model = _quantized_model(direction, case)
  got = kg_run(model, case[0], device)
  for g, w in zip(got, _ort_threads(model, case[0], threads=2)):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("per_column,uint8", [(False, False), (False, True)])
def test_dynamic_quantize_lstm_scales_and_zero_points(device, per_column, uint8):
  case = _quantized("bidirectional", batch=1, per_column=per_column, uint8=uint8, seed=3)
  model = _quantized_model("bidirectional", case)
  got = kg_run(model, case[0], device)
  for g, w in zip(got, ort_run(model, case[0])):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-6)
