"""Row kernels with few rows spread over several workgroups (issue 42; lowering/rows.py, option
min_groups of SwiftShader's rows): a CPU adapter runs each workgroup on one core, and PP-OCRv4
rec's last softmax (40 rows of 6625 classes) ran as ONE workgroup of 64 rows there, a thread per
row. With min_groups 8 a thread per row takes fewer rows per workgroup (halving down to
rows.SPREAD_LOCAL) until 8 workgroups, where rows hold at least rows.SPREAD_MIN_ELEMENTS; fewer
than 8 rows of at least rows.SPREAD_LANES_MIN take rows.SPREAD_LANES lanes per row (a workgroup
each). The launches on both sides of each threshold, the tables that keep theirs (lavapipe, the
default target), and values against numpy on PYTHON and natively on WEBGPU in these layouts."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.rows import SPREAD_LANES, SPREAD_LANES_MIN, SPREAD_LOCAL, \
  SPREAD_MIN_ELEMENTS, rows_local, spread_lanes
from kernelgen.render.targets import WGSL
from ops_util import on  # noqa: F401  (fixture)


def _launch(rows: int, n: int, **options) -> tuple:
  (kernel,) = kg.compile(kg.Tensor.empty(rows, n, name="x").softmax(-1), "wgsl", **options)
  return kernel.global_size[0], kernel.local_size[0]


def test_rec_softmax_spreads_over_ten_workgroups_on_swiftshader():
  """40 rows x 6625: 10 workgroups of 4 rows (before: one of 64, 24 of them idle)."""
  assert _launch(40, 6625, adapter="swiftshader") == (10, 4)
  assert _launch(40, 6625, adapter="swiftshader", min_groups=0) == (1, 64)


@pytest.mark.parametrize("rows, n, want", [
  (448, 1024, (14, 32)),   # 7 workgroups of 64: under 8, halved once
  (449, 1024, (8, 64)),    # 8 workgroups of 64 already: unchanged
  (65, 6625, (9, 8)),      # 2 of 64 -> 9 of 8
  (8, 6625, (2, 4)),       # 8 rows: a thread each, SPREAD_LOCAL rows a workgroup (the least)
  (7, 6625, (7, 8)),       # fewer rows than workgroups wanted: 8 lanes per row, a workgroup each
  (1, 6625, (1, 8)),
  (3, 1024, (3, 8)),       # rows of SPREAD_LANES_MIN: lanes
  (3, 1023, (1, 4)),       # shorter: a thread per row, as before
  (40, 64, (10, 4)),       # rows of SPREAD_MIN_ELEMENTS: spread
  (40, 63, (1, 64))])      # shorter rows: one workgroup, as before
def test_thresholds_on_swiftshader(rows, n, want):
  assert _launch(rows, n, adapter="swiftshader") == want
  assert (SPREAD_LOCAL, SPREAD_MIN_ELEMENTS, SPREAD_LANES, SPREAD_LANES_MIN) == (4, 64, 8, 1024)


def test_given_layouts_win():
  """A thread per row given as an option is not turned into lanes; option local= is kept."""
  assert _launch(3, 6625, adapter="swiftshader", row_lanes=1) == (1, 4)
  assert _launch(40, 6625, adapter="swiftshader", local=64) == (1, 64)


@pytest.mark.parametrize("options", [{"adapter": "lavapipe"}, {}])
def test_other_tables_keep_their_launches(options):
  """lavapipe and the default (discrete) target give each of these rows a workgroup of lanes:
  unchanged."""
  assert _launch(40, 6625, **options) == (40, 32)
  assert _launch(3, 6625, **options) == (3, 32)


def test_rows_local_and_spread_lanes_without_groups_are_rows_defaults():
  assert rows_local(40, 6625, WGSL) == 64 and rows_local(3, 6625, WGSL) == 4
  assert rows_local(40, 6625, WGSL, 8) == 4 and rows_local(1000, 6625, WGSL, 8) == 64
  assert spread_lanes(3, 6625, 0) == 1 and spread_lanes(3, 6625, 8) == 8


# rows x row lengths: 1, 3, 40, 65 rows of 1, 7 and 6625 elements
SHAPES = [(r, n) for r in (1, 3, 40, 65) for n in (1, 7, 6625)]


def _operand(rows: int, n: int) -> np.ndarray:
  x = np.random.default_rng(rows * 10007 + n).standard_normal((rows, n)).astype(np.float32) * 4
  if n > 1:
    x[0, n // 2] = 60.0                  # a large maximum: exp overflows unless it is subtracted
  return x


# a thread's sequential float32 sum over 6625 values drifts ~1e-5 relative (main's layout, one
# workgroup of 64 rows, gives the same values): rtol 1e-4
RTOL, ATOL = 1e-4, 1e-7


def _want(x: np.ndarray) -> np.ndarray:
  x = x.astype(np.float64)
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("rows, n", SHAPES)
def test_spread_softmax_on_python(on, rows, n):
  """The reference interpreter runs the spread layout (a thread per row, min_groups 8) and agrees
  with numpy."""
  on("PYTHON", row_lanes=1, min_groups=8)
  x = _operand(rows, n)
  (kernel,) = kg.compile(kg.Tensor(x).softmax(-1), "python", row_lanes=1, min_groups=8)
  if n >= SPREAD_MIN_ELEMENTS and rows > SPREAD_LOCAL:
    assert kernel.local_size[0] < 64
  np.testing.assert_allclose(kg.Tensor(x).softmax(-1).numpy(), _want(x), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("rows, n", [s for s in SHAPES if s[0] < 8])
def test_spread_lanes_softmax_on_python(on, rows, n):
  """The lanes layout fewer than 8 long rows take (SPREAD_LANES lanes per row) on the
  interpreter."""
  on("PYTHON", row_lanes=SPREAD_LANES)
  x = _operand(rows, n)
  np.testing.assert_allclose(kg.Tensor(x).softmax(-1).numpy(), _want(x), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("rows, n", SHAPES)
def test_spread_softmax_on_webgpu(on, rows, n):
  """SwiftShader's table (min_groups 8: a thread per row spread, or lanes for fewer than 8 long
  rows) natively on WEBGPU agrees with numpy."""
  want = {(40, 6625): (10, 4), (65, 6625): (9, 8), (3, 6625): (3, 8), (1, 6625): (1, 8)}
  if (rows, n) in want:
    assert _launch(rows, n, adapter="swiftshader") == want[rows, n]
  on("WEBGPU", adapter="swiftshader")
  x = _operand(rows, n)
  np.testing.assert_allclose(kg.Tensor(x).softmax(-1).numpy(), _want(x), rtol=RTOL, atol=ATOL)
