"""ONNX Multinomial: class indices drawn per row of unnormalized log-probabilities.

Its values are draws of kernelgen's counter-based generator, so they cannot equal onnxruntime's
(or numpy's) draws; what ONNX defines is checked instead: the output's shape and dtype, the
frequencies of many draws against softmax(row) (a chi-square test at a fixed seed), classes of
probability 0 never drawn, and the same draws for the same seed (different ones for another).
The onnx package ships no Multinomial node test cases (tests/helpers/onnx_conformance.py says so in its
report).
"""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from onnx_corpus import onnx_or_missing
from tools import device_runtime

onnx = onnx_or_missing()
from onnx import TensorProto, helper  # noqa: E402

# chi-square critical values at p = 0.001 by degrees of freedom (tables; scipy.stats.chi2.ppf)
CHI2_999 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467}

PROBS = np.array([[0.1, 0.2, 0.3, 0.4, 0.0],
                  [0.2, 0.2, 0.2, 0.2, 0.2],
                  [0.5, 0.0, 0.0, 0.0, 0.5],
                  [0.05, 0.05, 0.1, 0.3, 0.5]], np.float32)


def _model(rows: int, classes: int, draws: int, seed=None, dtype=None, opset=13):
  attrs = {"sample_size": draws}
  if seed is not None:
    attrs["seed"] = float(seed)
  if dtype is not None:
    attrs["dtype"] = dtype
  node = helper.make_node("Multinomial", ["x"], ["y"], **attrs)
  out = TensorProto.INT32 if dtype is None else dtype
  graph = helper.make_graph([node], "multinomial",
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, classes])],
                            [helper.make_tensor_value_info("y", out, [rows, draws])])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
  return kg.onnx.load(model.SerializeToString())


def _logits(probs: np.ndarray, shift: float = 0.0) -> np.ndarray:
  """log(probs) + a per-row shift (unnormalized); -inf for probability 0."""
  with np.errstate(divide="ignore"):
    out = np.log(probs) + shift * np.arange(len(probs))[:, None]
  return out.astype(np.float32)


@pytest.fixture(params=["PYTHON", "WEBGPU"])
def device(request):
  if request.param != "PYTHON":
    device_runtime(request.param)
  return request.param


def test_frequencies_match_the_softmax_of_each_row(device):
  draws = 2000 if device == "PYTHON" else 8000
  model = _model(*PROBS.shape, draws, seed=7)
  got = model.run({"x": _logits(PROBS, shift=3.0)}, device=device)["y"].numpy()
  assert got.shape == (len(PROBS), draws) and got.dtype == np.int32
  assert got.min() >= 0 and got.max() < PROBS.shape[1]
  for row, p in zip(got, PROBS):
    seen = np.bincount(row, minlength=len(p))
    assert not seen[p == 0].any(), f"a class of probability 0 was drawn: {seen}"
    live = p > 0
    want = p[live] / p[live].sum() * draws
    chi2 = float(((seen[live] - want) ** 2 / want).sum())
    assert chi2 < CHI2_999[int(live.sum()) - 1], (seen, want, chi2)


def test_a_skewed_distribution_fails_the_same_check():
  """The check above can fail: draws from the last row's distribution (0.05 ... 0.5) tested
  against uniform probabilities are far outside the critical value."""
  got = _model(1, 5, 2000, seed=7).run({"x": _logits(PROBS[3:4])}, device="PYTHON")["y"].numpy()
  seen = np.bincount(got[0], minlength=5)
  want = np.full(5, 2000 / 5)
  assert float(((seen - want) ** 2 / want).sum()) > CHI2_999[4]


def test_the_same_seed_draws_the_same_samples(device):
  x = _logits(PROBS)
  first = _model(*PROBS.shape, 64, seed=11).run({"x": x}, device=device)["y"].numpy()
  again = _model(*PROBS.shape, 64, seed=11).run({"x": x}, device=device)["y"].numpy()
  other = _model(*PROBS.shape, 64, seed=12).run({"x": x}, device=device)["y"].numpy()
  np.testing.assert_array_equal(first, again)
  assert (first != other).any()
  if device != "PYTHON":     # the generator is the same on every device
    np.testing.assert_array_equal(
      first, _model(*PROBS.shape, 64, seed=11).run({"x": x}, device="PYTHON")["y"].numpy())


def test_without_a_seed_a_model_draws_the_same_samples_run_after_run():
  model = _model(2, 3, 16)
  x = _logits(PROBS[:2, :3] + 0.1)
  np.testing.assert_array_equal(model.run({"x": x})["y"].numpy(), model.run({"x": x})["y"].numpy())


@pytest.mark.parametrize("dtype", [TensorProto.INT32, TensorProto.INT64])
def test_dtype_and_sample_size(dtype):
  """dtype int32 or int64 (int64 narrowed to int32, as every int64 tensor of data); shape
  (batch, sample_size); a one-class row always draws 0."""
  model = _model(3, 1, 5, seed=1, dtype=dtype)
  got = model.run({"x": np.zeros((3, 1), np.float32)}, device="PYTHON")["y"].numpy()
  assert got.shape == (3, 5) and got.dtype == np.int32 and not got.any()


def test_bad_inputs_and_attributes_are_typed_errors():
  node = helper.make_node("Multinomial", ["x"], ["y"], sample_size=0)
  graph = helper.make_graph([node], "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          [2, 3])],
                            [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 0])])
  model = kg.onnx.load(helper.make_model(graph).SerializeToString())
  with pytest.raises(kg.ShapeError, match="sample_size must be >= 1"):
    model.run({"x": np.zeros((2, 3), np.float32)})["y"].numpy()
  node = helper.make_node("Multinomial", ["x"], ["y"], sample_size=2)
  graph = helper.make_graph([node], "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          [2, 3, 4])],
                            [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 2])])
  model = kg.onnx.load(helper.make_model(graph).SerializeToString())
  with pytest.raises(kg.ShapeError, match="2-d"):
    model.run({"x": np.zeros((2, 3, 4), np.float32)})["y"].numpy()
