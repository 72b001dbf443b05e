"""Slices with a step along a plain symbolic dim (issue 34): `x[::2]` of n rows has (n + 1) // 2,
a floored size (graph/dims.py), and every op family takes it: elementwise, reductions over it,
row ops, matmul with it as M or K, cumsum, a step of a step; on PYTHON, PTXSIM and WEBGPU at the
range's ends and at values that divide no tile or vector size, against numpy, one compiled
program for every value; and reshapes that merge a symbolic leading axis with the static axes
after it and split it back, -1 included."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from ops_util import check_compiles
from test_symbolic_dims import close, runs_once

HI = 77
VALUES = (1, 3, 17, HI)           # the range's ends and values that divide no tile or vector
RNG = np.random.default_rng(3417)
ROWS = RNG.standard_normal((HI, 64)).astype(np.float32)
COLS = RNG.standard_normal((5, HI)).astype(np.float32)
W = RNG.standard_normal((64, 33)).astype(np.float32)


def _rows(n, v):
  return kg.Tensor(ROWS[:v]).symbolic(n.bind(v), 64)


def _cols(n, v):
  return kg.Tensor(COLS[:, :v]).symbolic(5, n.bind(v))


def softmax_np(a, axis):
  a = a.astype(np.float64)
  e = np.exp(a - a.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


# ---- slices with a step -----------------------------------------------------------------------

def test_a_step_along_a_symbolic_axis_has_a_floored_size():
  n = kg.Dim("n", 1, HI)
  x = kg.Tensor.empty(n, 64, name="x")
  assert x[::2].symbolic_shape == ((n + 1) // 2, 64) and x[::2].shape == (39, 64)
  assert x[1:n:2].symbolic_shape == (n // 2, 64) and x[::3].symbolic_shape == ((n + 2) // 3, 64)
  assert x[::2][::2].symbolic_shape == ((n + 3) // 4, 64)
  assert str(x[::2].symbolic_shape[0]) == "(n + 1) // 2"


def test_elementwise_and_reductions_over_a_stepped_axis(device):
  n = kg.Dim("n", 1, HI)

  def build(v):
    x = _rows(n, v)
    return ((x[::2].exp() + 1).sum(0) + x[1:n.bind(v):2].sum(0) * 4 + x[::3].mean(0) * 2 +
            x[::2][::2].sum(0) * 3 + x[::2].max(0) * 5)

  def want(v):
    x = ROWS[:v].astype(np.float64)
    return ((np.exp(x[::2]) + 1).sum(0) + x[1:v:2].sum(0) * 4 + x[::3].mean(0) * 2 +
            x[::2][::2].sum(0) * 3 + x[::2].max(0) * 5)
  runs_once(build, lambda v, got: close(got, want(v), 1e-4), VALUES)


def test_mean_and_var_over_a_stepped_axis_and_a_static_one(device):
  n = kg.Dim("n", 1, HI)       # 64 * ((n + 1) // 2) values: a run-time count, no size

  def want(v):
    x = ROWS[:v][::2].astype(np.float64)
    return x.mean() + x.var(0).sum() + x.std((0, 1))
  runs_once(lambda v: _rows(n, v)[::2].mean() + _rows(n, v)[::2].var(0).sum() +
            _rows(n, v)[::2].std((0, 1), ddof=0),
            lambda v, got: close(got, want(v), 1e-4), VALUES)


def test_a_stepped_axis_keeps_its_values(device):
  n = kg.Dim("n", 1, HI)
  runs_once(lambda v: _rows(n, v)[1::2] * 2 - 1,
            lambda v, got: close(got, ROWS[:v][1::2] * 2 - 1, 1e-6), VALUES)


@pytest.mark.parametrize("op", ["softmax", "logsumexp", "cumsum"])
def test_row_ops_over_a_stepped_last_axis(device, op):
  n = kg.Dim("n", 1, HI)
  fns = {"softmax": lambda a: softmax_np(a, -1),
         "logsumexp": lambda a: np.log(np.exp(a.astype(np.float64)).sum(-1)),
         "cumsum": lambda a: np.cumsum(a.astype(np.float64), -1)}
  runs_once(lambda v: getattr(_cols(n, v)[:, ::2], op)(-1),
            lambda v, got: close(got, fns[op](COLS[:, :v][:, ::2]), 1e-4), VALUES)


def test_layernorm_of_stepped_rows(device):
  n = kg.Dim("n", 2, HI)

  def want(v):
    a = ROWS[:v][1::2].astype(np.float64)
    return (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
  runs_once(lambda v: _rows(n, v)[1::2].layernorm(-1),
            lambda v, got: close(got, want(v), 1e-4), (2, 3, 17, HI))


def test_matmul_with_a_stepped_m_or_k(device):
  n = kg.Dim("n", 1, HI)

  def build(v):
    x = _rows(n, v)
    m = x[::2] @ kg.Tensor(W)
    k = _cols(n, v)[:, ::3] @ x[::3]
    return m.sum(0)[:5] + k.sum(1)

  def want(v):
    x = ROWS[:v].astype(np.float64)
    return (x[::2] @ W).sum(0)[:5] + (COLS[:, :v][:, ::3] @ x[::3]).sum(1)
  runs_once(build, lambda v, got: close(got, want(v), 1e-3), VALUES)


def test_a_stepped_arange(device):
  n = kg.Dim("n", 1, HI)
  runs_once(lambda v: kg.Tensor.arange(n.bind(v))[::2] * 3,
            lambda v, got: np.testing.assert_array_equal(got.numpy(), np.arange(v)[::2] * 3),
            VALUES)


def test_stepped_kernels_take_the_dim_once_and_validate():
  n = kg.Dim("n", 1, HI)
  x = kg.Tensor.empty(n, 64, name="x")
  c = kg.Tensor.empty(5, n, name="c")
  outs = [x[::2].exp(), x[1::2].sum(0), c[:, ::2].softmax(-1), x[::3] @ kg.Tensor.empty(64, 8)]
  for target in ("wgsl", "ptx"):      # elementwise kernels run the padded axis and need no n
    uniforms = [kernel.launch.uniforms for kernel in kg.compile(outs, target=target)]
    assert set(uniforms) == {(), (("n", "int32"),)}, uniforms
  check_compiles(outs)


def test_jit_replays_a_stepped_read_for_every_length():
  n = kg.Dim("n", 1, HI)

  @kg.jit
  def step(x):
    return x[::2].softmax(0).sum(1) + x[1::2].sum()

  kg.clear_cache()
  for v in VALUES + (5, 2):
    got = step(kg.Tensor(ROWS[:v], device="PYTHON").symbolic(n.bind(v), 64))
    a = ROWS[:v].astype(np.float64)
    close(got, softmax_np(a[::2], 0).sum(1) + a[1::2].sum(), 1e-4)
    misses = kg.cache_info()["misses"] if v == VALUES[0] else misses
  assert kg.cache_info()["misses"] == misses


def test_a_value_outside_the_range_is_a_shape_error():
  n = kg.Dim("n", 1, HI)
  with pytest.raises(kg.ShapeError, match=r"1\.\.77, got 78"):
    kg.Tensor(np.zeros((HI + 1, 4), np.float32)).symbolic(n.bind(HI + 1), 4)[::2]


SIGNAL = RNG.standard_normal((2, 3, HI)).astype(np.float32)
TAPS = RNG.standard_normal((4, 3, 3)).astype(np.float32)


def test_pooling_and_conv_with_a_stride_over_a_symbolic_length(device):
  from test_symbolic_windows import conv_np, pool_np
  n = kg.Dim("n", 3, HI)       # n // 2 pools, (n + 1) // 2 and n // 3 conv outputs

  def build(v):
    x = kg.Tensor(SIGNAL[:, :, :v]).symbolic(2, 3, n.bind(v))
    conv = x.conv1d(kg.Tensor(TAPS), stride=2, padding=1)
    return (x.max_pool1d(2).sum(-1), conv.sum(-1), x.conv1d(kg.Tensor(TAPS), stride=3).max(-1),
            conv.max_pool1d(2).sum(-1))

  def check(v, outs):
    a, zero = SIGNAL[:, :, :v], np.zeros(4)
    conv = conv_np(a, TAPS, zero, 2, 1)
    for got, want in zip(outs, (pool_np(a, 2, np.max).sum(-1), conv.sum(-1),
                                conv_np(a, TAPS, zero, 3).max(-1),
                                pool_np(conv, 2, np.max).sum(-1))):
      close(got, want, 1e-3)
  runs_once(build, check, (3, 4, 17, HI))


# ---- reshapes of a symbolic leading axis with static ones (attention heads) ----------------------

def test_heads_merge_and_split_with_a_symbolic_length(device):
  n = kg.Dim("n", 1, HI)

  def build(v):
    x = _rows(n, v)                                     # (n, 64)
    heads = x.reshape(n.bind(v), 4, -1)                 # (n, 4, 16)
    back = heads.permute(1, 0, 2).softmax(-1).permute(1, 0, 2).reshape(n.bind(v), -1)
    flat = heads.reshape(-1)                            # (64 n,)
    return back.sum(0) + flat.reshape(n.bind(v) * 4, 16).sum(0).repeat(4) + \
      heads.reshape(-1, 64).sum(0)

  def want(v):
    x = ROWS[:v].astype(np.float64)
    heads = x.reshape(v, 4, 16)
    return softmax_np(heads, -1).reshape(v, 64).sum(0) + np.tile(x.reshape(-1, 16).sum(0), 4) + \
      x.sum(0)
  runs_once(build, lambda v, got: close(got, want(v), 1e-4), VALUES)


def test_reshape_infers_minus_one_next_to_a_symbolic_size():
  n = kg.Dim("n", 1, HI)
  x = kg.Tensor.empty(n, 4, 16, name="x")
  assert x.reshape(n, -1).symbolic_shape == (n, 64)
  assert x.reshape(n, 64).reshape(n, 4, -1).symbolic_shape == (n, 4, 16)
  assert x.reshape(n * 4, -1).symbolic_shape == (4 * n, 16)


@pytest.mark.parametrize("bad, match", [
  (lambda x, n, m: x.reshape(n, -1, 5), r"-1 would be 64\*n / \(5\*n\)"),
  (lambda x, n, m: kg.Tensor.empty(n, m).reshape(n, -1), r"product of symbolic sizes"),
  (lambda x, n, m: kg.Tensor.empty(2, n, 64).reshape(2 * n, 64), r"static axes before it"),
  (lambda x, n, m: x[::2].reshape(-1), r"merges the floored size.*keep the axes apart"),
])
def test_reshapes_no_layout_holds_are_typed_errors(bad, match):
  n, m = kg.Dim("n", 1, HI), kg.Dim("m", 1, 8)
  x = kg.Tensor.empty(n, 4, 16, name="x")
  with pytest.raises(kg.KernelgenError, match=match):
    bad(x, n, m)


def test_export_keeps_a_floored_size(tmp_path):
  n = kg.Dim("n", 1, HI)
  x = kg.Tensor.empty(n, 64, name="x")
  bundle = kg.export(x[::2].exp(), str(tmp_path / "bundle"))    # runs: test_symbolic_user_gaps
  (out,) = bundle.manifest["outputs"]
  assert out["symbolic_shape"] == [{"terms": [["n", 1]], "const": 1, "div": 2}, 64]
