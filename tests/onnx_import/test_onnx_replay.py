"""Warm calls of an ONNX model replay recorded kernels (onnx/replay.py): no node of the model is
visited (structure: the runner's node evaluations are counted), no host-side kernel runs, one
submit per call on WEBGPU; the outputs match onnxruntime's on new data every call, a small
feed that picks an If branch keys the replay (another value runs its own branch), symbolic dims
take their new values, and a data-dependent model keeps running eagerly."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.onnx import runner as onnx_runner

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _vad_like():
  """A Silero-VAD-shaped model: x (1, n) and state (2, 1, 8) through a MatMul, a Tanh and a
  ReduceMean, in an If on Equal(sr, 16000) (the other branch scales by 2)."""
  rng = np.random.default_rng(0)
  w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
  n = helper.make_node
  out = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "s2")]

  def branch(name, scale):
    nodes = [n("MatMul", ["x", "w"], [f"h_{name}"]),
             n("Add", [f"h_{name}", "state"], [f"a_{name}"]),
             n("Tanh", [f"a_{name}"], [f"t_{name}"]),
             n("Mul", [f"t_{name}", f"k_{name}"], [f"s_{name}"]),
             n("ReduceMean", [f"s_{name}"], [f"y_{name}"], keepdims=0)]
    k = numpy_helper.from_array(np.array(scale, np.float32), f"k_{name}")
    return helper.make_graph(nodes, name, [], [
      helper.make_tensor_value_info(f"y_{name}", TensorProto.FLOAT, None),
      helper.make_tensor_value_info(f"s_{name}", TensorProto.FLOAT, None)], [k])
  nodes = [n("Equal", ["sr", "rate"], ["is16k"]),
           n("If", ["is16k"], ["y", "s2"], then_branch=branch("then", 1.0),
             else_branch=branch("else", 2.0))]
  ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, 8]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])]
  graph = helper.make_graph(nodes, "vad", ins, out,
                            [w, numpy_helper.from_array(np.array(16000, np.int64), "rate")])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture
def visits(monkeypatch):
  """How many nodes the runner evaluates (each call of Runner._eval, subgraphs included)."""
  count = [0]
  original = onnx_runner.Runner._eval

  def counted(self, node, fn):
    count[0] += 1
    return original(self, node, fn)
  monkeypatch.setattr(onnx_runner.Runner, "_eval", counted)
  return count


def _feeds(k: int, sr: int = 16000) -> dict:
  rng = np.random.default_rng(k)
  return {"x": rng.standard_normal((1, 16)).astype(np.float32),
          "state": rng.standard_normal((2, 1, 8)).astype(np.float32),
          "sr": np.array(sr, np.int64)}


def _check(model, session, feeds, device):
  got = model.run(feeds, device=device)
  for name, want in zip(("y", "s2"), session.run(None, feeds)):
    np.testing.assert_allclose(got[name].numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_warm_calls_replay_without_visiting_a_node(device, visits, monkeypatch):
  if device == "WEBGPU":
    from tools import device_runtime
    device_runtime("WEBGPU")
  src = _vad_like()
  session = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
  model = kg.onnx.load(src)
  for k in range(3):                     # lazy, then recorded
    _check(model, session, _feeds(k), device)
  assert visits[0] > 0 and model.replayer.replays == 0
  outside, submits, inside = [], [], [False]     # launches outside a replay's submit
  for name in {device, "PYTHON"}:
    rt = kg.Device[name]
    run, run_many = rt.run, rt.run_many

    def counted_run(*a, _run=run, _name=name, **k):
      if not inside[0]:
        outside.append(_name)
      return _run(*a, **k)

    def counted_many(launches, *a, _many=run_many):
      submits.append(len(launches))
      inside[0] = True
      try:
        return _many(launches, *a)
      finally:
        inside[0] = False
    # on the instance's own __dict__: undone by deleting the keys, so that the class's methods
    # show through again (setattr on the instance would leave the old bound methods pinned
    # there, and later tests patching the class would patch nothing)
    monkeypatch.setitem(rt.__dict__, "run", counted_run)
    monkeypatch.setitem(rt.__dict__, "run_many", counted_many)
  visits[0] = 0
  for k in range(3, 8):
    got = model.run(_feeds(k), device=device)
    assert all(t.node.realized for t in got.values())
    for name, want in zip(("y", "s2"), session.run(None, _feeds(k))):
      np.testing.assert_allclose(got[name].numpy(), want, rtol=1e-5, atol=1e-6)
  assert visits[0] == 0 and model.replayer.replays == 5
  assert len(submits) == 5 and len(set(submits)) == 1       # one submit per call
  assert outside == []                          # no kernel outside it, no host-side kernel


def test_a_small_feed_that_picks_a_branch_keys_the_replay(visits):
  src = _vad_like()
  session = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
  model = kg.onnx.load(src)
  for k in range(4):
    _check(model, session, _feeds(k), "PYTHON")
  replays = model.replayer.replays
  for k in range(4, 8):                 # the other branch: run and recorded for itself
    _check(model, session, _feeds(k, sr=8000), "PYTHON")
  _check(model, session, _feeds(9), "PYTHON")
  assert model.replayer.replays == replays + 3


def test_a_python_tensor_that_picks_a_branch_keys_the_replay(visits):
  """sr given as a kg.Tensor on PYTHON (as the page's worker does), not a numpy array: its
  values are host memory, so the If on it keys the replay as an array's does (it ran every call
  eagerly, reading the Equal's device values); each value replays its own branch."""
  src = _vad_like()
  session = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
  model = kg.onnx.load(src)

  def call(k, sr):
    feeds = _feeds(k, sr)
    got = model.run({**feeds, "sr": kg.Tensor(feeds["sr"], device="PYTHON")}, device="PYTHON")
    for name, want in zip(("y", "s2"), session.run(None, feeds)):
      np.testing.assert_allclose(got[name].numpy(), want, rtol=1e-5, atol=1e-6)
  for k in range(5):           # lazy, lazy keyed on sr's value, recorded, then replayed
    call(k, 16000)
  assert model.replayer.replays == 2
  visits[0] = 0
  call(5, 16000)
  assert visits[0] == 0
  for k in range(6, 10):                 # the other branch: run, recorded, replayed
    call(k, 8000)
  assert model.replayer.replays == 5


def test_only_values_on_the_host_keep_a_host_copy():
  """An array and a computed PYTHON Tensor keep a host copy (what an If on them reads); a
  placeholder (Tensor.empty on PYTHON: kg.export's inputs) does not: its bytes mean nothing."""
  rate = np.array(16000, np.int64)
  for sr, kept in ((rate, True), (kg.Tensor(rate, device="PYTHON"), True),
                   (kg.Tensor.empty(dtype="int64", device="PYTHON"), False)):
    runner = onnx_runner.Runner(kg.onnx.load(_vad_like()), "PYTHON")
    runner.run({**_feeds(0), "sr": sr})
    assert ("sr" in runner.host) == kept and "x" in runner.host
    if kept:
      assert runner.host["sr"].values == [16000]


def test_symbolic_dims_replay_with_their_new_values():
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
  w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 10, "w")
  nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("Softmax", ["h"], ["y"], axis=1)]
  src = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=[
    helper.make_opsetid("", 17)]).SerializeToString()
  session = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
  model = kg.onnx.load(src, dims={"seq": (1, 12)})
  for k, seq in enumerate([3, 5, 12, 1, 7, 9]):
    feeds = {"x": np.random.default_rng(k).standard_normal((2, seq, 4)).astype(np.float32)}
    got = model.run(feeds, device="PYTHON")["y"].numpy()
    np.testing.assert_allclose(got, session.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
  assert model.replayer.replays == 4          # lazy, recorded, then replayed at any size


def test_a_realized_broadcast_fed_in_runs_and_the_fed_back_state_replays(visits):
  """Tensor.zeros(...).realize() (a broadcast with no buffer of its shape: the page's first
  state, where there is no numpy) runs the call eagerly; the state it returns, fed back, replays
  (an IndexError in the replay's signature once); every call matches onnxruntime's."""
  raw = _vad_like()
  model = kg.onnx.load(raw)
  session = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
  rng = np.random.default_rng(3)
  state, want_state = kg.Tensor.zeros(2, 1, 8).realize(), np.zeros((2, 1, 8), np.float32)
  for step in range(5):
    x = rng.standard_normal((1, 16)).astype(np.float32)
    visits[0] = 0
    out = model.run({"x": x, "state": state, "sr": np.array(16000, np.int64)})
    want = session.run(None, {"x": x, "state": want_state, "sr": np.array(16000, np.int64)})
    np.testing.assert_allclose(out["y"].numpy(), want[0], rtol=1e-5, atol=1e-6)
    state, want_state = out["s2"].realize(), want[1]
  assert visits[0] == 0                   # the last calls were replayed


def test_a_data_dependent_model_keeps_running_eagerly():
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
  y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
  nodes = [helper.make_node("NonZero", ["x"], ["y"])]
  src = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[
    helper.make_opsetid("", 17)]).SerializeToString()
  model = kg.onnx.load(src)
  for k in range(5):
    x = (np.random.default_rng(k).standard_normal(6) > 0).astype(np.float32) * 1.5
    got = model.run({"x": x}, device="PYTHON")["y"].numpy()
    np.testing.assert_array_equal(got, np.array(np.nonzero(x)))
  assert model.replayer.replays == 0


def test_a_replayed_call_reads_its_two_outputs_in_one_map():
  """kg.numpy_of reads a WEBGPU call's outputs through one staging buffer: the replay's
  dispatches and the copies are one submit, the read one map; .numpy() per output maps twice."""
  from tools import device_runtime
  runtime = device_runtime("WEBGPU")
  src = _vad_like()
  session = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
  model = kg.onnx.load(src)
  for k in range(3):                     # lazy, then recorded
    _check(model, session, _feeds(k), "WEBGPU")
  for k in range(3, 5):
    state = kg.Tensor(_feeds(k)["state"], device="WEBGPU").realize()
    feeds = {**_feeds(k), "state": state}
    got = model.run(feeds, device="WEBGPU")
    maps, submits = runtime.maps, runtime.submits
    y, s2 = kg.numpy_of(got["y"], got["s2"])
    assert (runtime.maps - maps, runtime.submits - submits) == (1, 1)
    for read, want in zip((y, s2), session.run(None, _feeds(k))):
      np.testing.assert_allclose(read, want, rtol=1e-5, atol=1e-6)
  assert model.replayer.replays == 2
  maps = runtime.maps
  got = model.run(_feeds(5), device="WEBGPU")
  got["y"].numpy(), got["s2"].numpy()
  assert runtime.maps - maps == 2
  with pytest.raises(kg.DTypeError, match="kg.numpy_of takes Tensors, got a ndarray"):
    kg.numpy_of(got["y"], np.zeros(2))


def test_a_warm_call_unpacks_no_initializer(monkeypatch):
  """A replayed call's Runner reuses the small initializers unpacked by the first run (Silero VAD
  unpacked 8 of them at every warm call)."""
  from kernelgen.onnx import values
  src = _vad_like()
  session = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
  model = kg.onnx.load(src)
  for k in range(3):
    _check(model, session, _feeds(k), "PYTHON")
  unpacked, original = [0], values.Static.from_bytes

  def counted(*args):
    unpacked[0] += 1
    return original(*args)
  monkeypatch.setattr(values.Static, "from_bytes", staticmethod(counted))
  for k in range(3, 5):
    _check(model, session, _feeds(k), "PYTHON")
  assert model.replayer.replays == 2 and unpacked[0] == 0


def test_a_warm_call_makes_no_bind_group():
  """Natively every launch of a replay binds the same buffers each call (Program._stage: the
  small inputs copied into the program's own buffers, the returned outputs copied out of its
  temporaries), so its bind groups are made once: Silero VAD made 4 of its 8 again per call.
  The state fed back stays right: each call's outputs match onnxruntime's; one submit per call.
  """
  from tools import device_runtime
  runtime = device_runtime("WEBGPU")
  src = _vad_like()
  session = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
  model = kg.onnx.load(src)
  state = kg.Tensor(_feeds(0)["state"], device="WEBGPU").realize()
  want_state = _feeds(0)["state"]
  made, submits = [], []
  for k in range(7):
    feeds = {**_feeds(k), "state": state}
    before, submitted = runtime.bind_groups, runtime.submits
    got = model.run(feeds, device="WEBGPU")
    y, s2 = kg.numpy_of(got["y"], got["s2"])
    made.append(runtime.bind_groups - before)
    submits.append(runtime.submits - submitted)
    want_y, want_state = session.run(None, {**_feeds(k), "state": want_state})
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s2, want_state, rtol=1e-5, atol=1e-6)
    state = got["s2"]
  assert model.replayer.replays == 4, made     # (the fed-back state: a signature of its own)
  assert made[3] > 0 and made[4:] == [0, 0, 0], made   # (made at the first replay, then kept)
  # the copies join the dispatches' submit (sr, which no launch binds, is not copied: its upload
  # would submit the copies recorded before it)
  assert submits[3:] == [1, 1, 1, 1], submits
