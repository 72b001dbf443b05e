"""ONNX ScatterElements' mul / max / min reductions (onnx/operators/indexing.py): compared below
scatter.COMPARE_MAX, a segmented scan over the sorted indices above it (tensor/ops/sorted_scatter.py
scatter_reduce) and with the sorted form forced on (scatter.forced_form) at every size: values
against numpy's multiply.at / maximum.at / minimum.at on PYTHON, PTXSIM and WEBGPU, duplicates in
runs longer than SCAN_BLOCK, NaN updates (max and min propagate them), float and int dtypes; and
the onnx package's ScatterElements / Scatter / ScatterND node cases with the sorted form forced."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.tensor.ops.sorted_scatter import COMPARE_MAX, forced_form
from onnx_conformance import known_failures, run_case
from onnx_corpus import node_cases, onnx_or_missing
import tools

UFUNC = {"mul": np.multiply, "max": np.maximum, "min": np.minimum}
# (rows, outputs n, indices m along axis 0): the first compared, the second above COMPARE_MAX
SIZES = {"compared": (3, 6, 9), "sorted": (2, 200, 400)}


def _model(reduction: str, shape, ishape, elem):
  from onnx import TensorProto, helper
  node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=0, reduction=reduction)
  vi = helper.make_tensor_value_info
  graph = helper.make_graph([node], "g", [vi("d", elem, shape), vi("i", TensorProto.INT64, ishape),
                                          vi("u", elem, ishape)], [vi("y", elem, shape)])
  return kg.onnx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
                      .SerializeToString())


def _case(reduction: str, size: str, dtype: str):
  """data, indices (negative ones too: ONNX counts them from the end) and updates: small
  integers (products exact; -0.0 never meets 0.0), a NaN among the float updates."""
  rows, n, m = SIZES[size]
  rng = np.random.default_rng(m + len(reduction))
  data = rng.integers(-3, 4, (n, rows)).astype(dtype)
  idx = rng.integers(-n, n, (m, rows))
  idx[: m // 3] = 5                                   # one long run of duplicates
  upd = rng.choice([-2, -1, 1, 2] if reduction == "mul" else list(range(-9, 10)),
                   (m, rows)).astype(dtype)
  if dtype == "float32":
    upd[m // 2, 0] = np.nan
  want = data.copy()
  cols = np.broadcast_to(np.arange(rows), idx.shape)
  with np.errstate(invalid="ignore"):
    UFUNC[reduction].at(want, (idx % n, cols), upd)
  return data, idx, upd, want


@pytest.mark.parametrize("size,forced", [("compared", None), ("compared", "sorted"),
                                         ("sorted", None)])
@pytest.mark.parametrize("reduction", list(UFUNC))
def test_scatter_elements_reductions_match_ufunc_at(device, reduction, size, forced):
  onnx_or_missing()
  from onnx import TensorProto
  for dtype, elem in (("float32", TensorProto.FLOAT), ("int32", TensorProto.INT32)):
    data, idx, upd, want = _case(reduction, size, dtype)
    with forced_form(forced):
      model = _model(reduction, data.shape, idx.shape, elem)
      got = model.run({"d": data, "i": idx, "u": upd})["y"].numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want, err_msg=f"{reduction} {size} {dtype} {forced}")


def test_threshold_sides():
  """Below COMPARE_MAX one kernel; above it (and forced) the sort's kernels."""
  onnx_or_missing()
  from onnx import TensorProto
  counts = {}
  for size in SIZES:
    rows, n, m = SIZES[size]
    model = _model("max", (n, rows), (m, rows), TensorProto.FLOAT)
    feeds = {"d": kg.Tensor.empty(n, rows), "i": kg.Tensor.empty(m, rows, dtype="int64"),
             "u": kg.Tensor.empty(m, rows)}
    counts[size] = len(kg.compile(model.run(feeds)["y"], target="wgsl"))
    with forced_form("sorted"):
      counts[size + " forced"] = len(kg.compile(model.run(feeds)["y"], target="wgsl"))
  assert SIZES["sorted"][0] * SIZES["sorted"][1] * SIZES["sorted"][2] > COMPARE_MAX
  assert counts["compared"] <= 2 < counts["sorted"] and counts["compared forced"] > 2, counts


def _scatter_cases():
  try:
    import onnx  # noqa: F401
  except ImportError:
    return ["onnx-not-installed"]
  known = known_failures(tools.TESTS_DIR / "onnx_import" / "onnx_node_known_failures.txt")
  return [c for c in node_cases() if "scatter" in c.name and c.name not in known]


@pytest.mark.parametrize("case", _scatter_cases(), ids=lambda c: getattr(c, "name", str(c)))
def test_onnx_scatter_node_cases_with_the_sorted_form(case):
  onnx_or_missing()
  with forced_form("sorted"):
    ok, reason = run_case(case, "PYTHON")
  assert ok, f"{case.name}: {reason}"
