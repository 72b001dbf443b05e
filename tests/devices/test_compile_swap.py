"""A one-off run's capped kernel, then larger ones as the same graph keeps running (issue 37;
realize._swap, lowering/compile_cost.py): on the native WEBGPU device (lavapipe here, whose class
has a measured driver cost), the first realize of a graph compiles a 5x5 blur for one run; a kept
plan realized n times, n a power of two, compiles it again for n runs, so the blur's 8x8 unrolled
window, whose estimated build is set here to three one-off budgets, comes at the fourth realize.
Every result matches numpy. kg.jit compiles its step for many runs from the start, and so does
an ONNX model's recorded call (the second: its plan, kept from the first, realized twice), whose
replays never realize the plan again (issue 42: PP-OCRv4's replays ran one-off kernels)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import cache
from kernelgen.graph.schedule import schedule
from kernelgen.lowering import compile_cost
from kernelgen.lowering import tile_budget
from kernelgen.lowering.compile_cost import RUNS_MANY
from kernelgen.lowering.optimize import optimize
from kernelgen.render.targets import get_target
from kernelgen.render.wgsl import adapters

from tools import device_runtime

SHAPE = (3, 68, 100)       # a 5x5 window over 3 x 64 x 96 outputs: 8x8 tiles unrolled


def _blur(x):
  w = np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5) / 625
  return x.unsqueeze(1).conv2d(kg.Tensor(np.repeat(w, 1, 0), device=x.device)).squeeze(1)


def _want(x):
  w = np.arange(1, 26, dtype=np.float64).reshape(5, 5) / 625
  win = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (5, 5), axis=(1, 2))
  return np.einsum("chwij,ij->chw", win, w)


@pytest.fixture
def webgpu(monkeypatch):
  """The WEBGPU device, its adapter's tiled kernels without the sliding window (slide.py), whose
  small kernel a one-off run never caps."""
  runtime = device_runtime("WEBGPU")
  klass = adapters.classify(dict(runtime.adapter.info))
  if (klass, "tile") not in adapters.DRIVER_COST:
    pytest.skip("the WEBGPU adapter here has no measured driver cost: nothing is capped")
  table = {k: v for k, v in adapters.TABLE.get((klass, "tile"), {}).items() if k != "slide"}
  monkeypatch.setitem(adapters.TABLE, (klass, "tile"), table)
  kg.clear_cache()
  yield runtime
  kg.clear_cache()


def _kept_plan():
  plans = list(cache._CACHE.plans.values())
  assert plans
  return plans[-1]


def _eight_by_eight_costs_three_budgets(runtime, monkeypatch):
  """Set the adapter's tile cost so that the blur's 8x8 unrolled window estimates at three
  one-off budgets (its 4x4 tile at about one)."""
  item = schedule([_blur(kg.Tensor.empty(*SHAPE, device="PYTHON")).node])[-1]
  options = {"adapter": runtime.render_options()["adapter"], "runs": RUNS_MANY}
  opts = optimize(item, get_target("wgsl"), options)
  assert opts.tile == (8, 8) and opts.tile_inner == 25
  uops = tile_budget.window_uops(item, opts.tile_axes, 25, (8, 8))
  cost = 3 * compile_cost.ONE_OFF_MS / uops - compile_cost.PYTHON_MS_PER_UOP
  monkeypatch.setitem(adapters.DRIVER_COST, (options["adapter"], "tile"), (cost, 0.0))
  # (the budget alone: the work's GPU time, compile_cost.work_ms, taken as far longer)
  monkeypatch.setattr(compile_cost, "CPU_MACS_PER_MS", 1)


def test_a_graph_run_again_grows_its_kernel(webgpu, monkeypatch):
  _eight_by_eight_costs_three_budgets(webgpu, monkeypatch)
  rng = np.random.default_rng(0)
  x = rng.standard_normal(SHAPE).astype(np.float32)
  want = _want(x)
  kernels = []
  for _ in range(4):
    got = _blur(kg.Tensor(x, device="WEBGPU")).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    kernels.append(_kept_plan().compiled[-1])
  assert [k.capped for k in kernels] == [True, True, True, False]
  assert kernels[0] is kernels[2] or kernels[0].source == kernels[2].source
  assert "for (" not in kernels[3].source and len(kernels[3].source) > 2 * len(kernels[0].source)


def test_jit_compiles_for_many_runs(webgpu):
  rng = np.random.default_rng(1)
  x = rng.standard_normal(SHAPE).astype(np.float32)
  step = kg.jit(_blur)
  for _ in range(3):
    got = step(kg.Tensor(x, device="WEBGPU")).numpy()
    np.testing.assert_allclose(got, _want(x), rtol=1e-5, atol=1e-5)
  programs = [s.program for s in step.signatures.values() if s.program is not None]
  assert programs, "the jitted step never replayed"
  sources = [kernel.source for _, kernel, _ in programs[0].steps if kernel.name.endswith("_5_5")]
  assert sources and all("for (" not in s for s in sources)


def _blur_model() -> bytes:
  """An ONNX model of _blur: a 5x5 Conv over x (3, 1, 68, 100)."""
  onnx = pytest.importorskip("onnx")
  from onnx import TensorProto, helper, numpy_helper
  w = np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5) / 625
  graph = helper.make_graph(
    [helper.make_node("Conv", ["x", "w"], ["y"])], "blur",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1, *SHAPE[1:]])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    [numpy_helper.from_array(w, "w")])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_models_replay_runs_the_kernel_for_many_runs(webgpu, monkeypatch):
  _eight_by_eight_costs_three_budgets(webgpu, monkeypatch)
  model = kg.onnx.load(_blur_model())
  rng = np.random.default_rng(2)
  x = rng.standard_normal(SHAPE).astype(np.float32)
  for _ in range(4):                 # lazy, recorded, replayed twice
    got = model.run({"x": x[:, None]}, device="WEBGPU")["y"].numpy()
    np.testing.assert_allclose(got[:, 0], _want(x), rtol=1e-5, atol=1e-5)
  assert model.replayer.replays == 2
  program = next(p for p in model.replayer.programs.values() if p is not None)
  blurs = [kernel for _, kernel, _ in program.steps if kernel.name.endswith("_5_5")]
  assert blurs and all(not k.capped and "for (" not in k.source for k in blurs)
