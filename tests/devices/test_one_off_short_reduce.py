"""A one-off run's short reduction (TILE_INNER < K <= TILE_WINDOW, lowering/optimize.py
_window_tile) stays in a loop where its unrolled kernel's estimated build passes its work's GPU
time (lowering/compile_cost.py work_ms; issue 37): the light SqueezeNet's 1x1 expand conv of 48
channels to 192 at 13x13 with its ReLU (1.6 M multiply-adds) was 840 lines in 4x4 tiles with the
48 channels unrolled (lavapipe natively, Mesa's cache off: ~600 ms of driver compile for ~1 ms of
run); looped, 546 lines (~190 ms). Many runs keep it unrolled; both give the same values, run
on the WEBGPU device here."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.compiler import compile_item
from kernelgen.graph.schedule import schedule
from kernelgen.lowering.compile_cost import RUNS_MANY

import onnx_corpus
from tools import device_runtime, run_named

NAME = "r_1_192_13_13__48_1_1"


@pytest.fixture(scope="module")
def expand_conv():
  path = onnx_corpus.data_dir() / "light" / "light_squeezenet.onnx"
  if not path.exists():
    pytest.skip(f"{path} is not here (tests/helpers/onnx_corpus.py fetches the light models)")
  model = kg.onnx.load(str(path))
  x = kg.Tensor.empty(1, 3, 224, 224, device="WEBGPU")
  out = model.run({model.input_names[0]: x}, device="WEBGPU")[model.output_names[0]]
  return next(item for item in schedule([out.node]) if item.name == NAME)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_one_off_keeps_the_short_reduction_looped(expand_conv, adapter):
  one_off = compile_item(expand_conv, "wgsl", {"adapter": adapter})
  many = compile_item(expand_conv, "wgsl", {"adapter": adapter, "runs": RUNS_MANY})
  looped = compile_item(expand_conv, "wgsl", {"adapter": adapter, "tile_window": False})
  assert one_off.capped and not many.capped
  assert one_off.source == looped.source != many.source
  assert one_off.source.count("\n") < 0.7 * many.source.count("\n")


def test_short_reduction_values(expand_conv):
  """The looped one-off kernel gives the unrolled many-runs kernel's values (that kernel is as
  before, checked through the light model's output against onnx's in tests/onnx_import) on the
  same random inputs: the ReLU of the 48-channel conv (its weights folded in as constants) plus
  a bias of 192."""
  runtime = device_runtime("WEBGPU")
  rng = np.random.default_rng(0)
  x = rng.standard_normal(48 * 13 * 13).astype(np.float32)
  b = rng.standard_normal(192).astype(np.float32)
  got = {}
  for runs in (1, RUNS_MANY):
    kernel = compile_item(expand_conv, "wgsl", {"adapter": "lavapipe", "runs": runs})
    assert [spec.size for spec in kernel.buffers[1:]] == [x.size, b.size]
    names = [spec.name for spec in kernel.buffers[1:]]
    got[runs] = run_named(runtime, kernel, dict(zip(names, (x, b))), {}, out_fill=np.nan)
  assert np.isfinite(got[1]).all() and (got[1] > 0).any() and (got[1] == 0).any()
  np.testing.assert_allclose(got[1], got[RUNS_MANY], rtol=1e-5, atol=1e-5)
