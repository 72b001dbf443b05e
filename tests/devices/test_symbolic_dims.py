"""Symbolic dims (kg.Dim, graph/dims.py, tensor/symbolic.py): each op family at both ends of a
dim's range and at a value that divides no tile, vector or workgroup size, on PYTHON, PTXSIM and
WEBGPU, against numpy; one compiled kernel per kernel for every bound value; the kernels'
WGSL validates and their PTX assembles."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kernelgen as kg
from ops_util import check_compiles, sdpa_np

HI = 40
VALUES = (1, 13, HI)           # the range's ends and one that divides no tile or vector
RNG = np.random.default_rng(0)


def dim(name="n", lo=1, hi=HI):
  return kg.Dim(name, lo, hi)


def data(*shape):
  return RNG.standard_normal(shape).astype(np.float32)


def runs_once(build, check, values=VALUES):
  """build(v) -> a Tensor for bound value v, check(v, tensor) compares it; every value after the
  first compiles nothing new (the plan and kernels of the first serve them all)."""
  kg.clear_cache()
  misses = None
  for v in values:
    check(v, build(v))
    info = kg.cache_info()
    if misses is None:
      misses = info["misses"]
    assert info["misses"] == misses, f"value {v} compiled again: {info}"


def close(got, want, tol=1e-5):
  want = np.asarray(want)
  got = got.numpy()
  assert got.shape == want.shape, (got.shape, want.shape)
  np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# ---- the Dim itself -------------------------------------------------------------------------

def test_dim_expressions_are_canonical_and_ranged():
  n, m = dim("n", 1, 10), dim("m", 0, 5)
  assert n + 1 - 1 == n and 2 * n + m == m + n * 2 and (n * 8) // 8 == n
  assert (n + 1).lo == 2 and (n + 1).hi == 11 and (n - m).lo == -4 and (n - m).hi == 10
  assert n.bind(3) == n and (n.bind(3) + 1).value == 4
  assert str(2 * n + m - 3) == "m + 2*n - 3"


@pytest.mark.parametrize("bad, match", [
  (lambda: kg.Dim("n", 5, 2), "range"), (lambda: kg.Dim("1n", 1, 4), "identifier"),
  (lambda: kg.Dim("n", 1, 4).bind(9), r"1\.\.4"), (lambda: (kg.Dim("n", 1, 4) + 1).bind(2), "dim"),
  (lambda: kg.Dim("n", 1, 4) * kg.Dim("m", 1, 4), "product"),
  (lambda: int(kg.Dim("n", 1, 4)), r"\.value"),
  (lambda: kg.Dim("n", 1, 4) < 3, "bound value")])
def test_dim_errors_say_what_to_do(bad, match):
  with pytest.raises(kg.KernelgenError, match=match):
    bad()


def test_unbound_dim_is_a_shape_error():
  n = dim()
  x = kg.Tensor.empty(n, 4, name="x", device="PYTHON")
  with pytest.raises(kg.ShapeError, match="bind"):
    (x + 1).numpy()


def test_two_values_of_one_dim_are_a_shape_error():
  n = dim()
  a = kg.Tensor(data(3, 4), device="PYTHON").symbolic(n.bind(3), 4)
  b = kg.Tensor(data(5, 4), device="PYTHON").symbolic(n.bind(5), 4)
  with pytest.raises(kg.ShapeError, match="bound to (3 and to 5|5 and to 3)"):
    (a.sum(0) + b.sum(0)).numpy()


def test_compile_names_the_dim_and_takes_it_as_an_argument():
  n = dim()
  x = kg.Tensor.empty(n, 8, name="x")
  assert x.symbolic_shape == (n, 8) and x.shape == (HI, 8)
  for kernel in kg.compile(x.softmax(0), target="wgsl"):
    assert kernel.launch.uniforms == (("n", "int32"),)
    assert "kg_vars" in kernel.source
  for kernel in kg.compile(x.softmax(0), target="ptx"):
    assert kernel.launch.uniforms == (("n", "int32"),)
    assert ".param .s32" in kernel.source


# ---- op families, each on every device --------------------------------------------------------

def _sym(a, *shape):
  return kg.Tensor(a).symbolic(*shape)


def test_elementwise_and_creation(device):
  n = dim()

  def build(v):
    x = _sym(DATA[:v], n.bind(v), 8)
    ramp = kg.Tensor.arange(n.bind(v)).reshape(n.bind(v), 1).float()
    return (x * 2 + 1).exp() * 0.5 + ramp + kg.Tensor.zeros(n.bind(v), 8)
  runs_once(build, lambda v, t: close(t, np.exp(DATA[:v] * 2 + 1) * 0.5 +
                                      np.arange(v)[:, None], 1e-4))


DATA = data(HI, 8)


@pytest.mark.parametrize("op", ["sum", "max", "mean", "var"])
def test_reductions_over_the_symbolic_axis(device, op):
  n = dim()
  runs_once(lambda v: getattr(_sym(DATA[:v], n.bind(v), 8), op)(0),
            lambda v, t: close(t, getattr(np, op)(DATA[:v], axis=0), 1e-5))


@pytest.mark.parametrize("op", ["softmax", "logsumexp", "layernorm", "rms_norm", "mean"])
def test_row_ops_over_a_symbolic_last_axis(device, op):
  n = dim()
  rows = data(4, HI) * 3

  def want(v):
    x = rows[:, :v].astype(np.float64)
    if op == "softmax":
      e = np.exp(x - x.max(-1, keepdims=True))
      return e / e.sum(-1, keepdims=True)
    if op == "logsumexp":
      return np.log(np.exp(x).sum(-1))
    if op == "layernorm":
      return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    if op == "rms_norm":
      return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    return x.mean(-1)

  def build(v):
    x = _sym(rows[:, :v], 4, n.bind(v))
    if op == "rms_norm":
      return x * ((x * x).mean(-1, keepdim=True) + 1e-6).rsqrt()
    return getattr(x, op)(-1)
  runs_once(build, lambda v, t: close(t, want(v).astype(np.float32), 1e-4))


@pytest.mark.parametrize("which", ["M", "K", "N"])
def test_matmul_with_a_symbolic_size(device, which):
  n = dim()
  a, b = data(HI, 24), data(24, HI)

  def pair(v):
    if which == "M":
      return a[:v], b[:, :16]
    if which == "K":
      return b[:8, :v], a[:v, :12]
    return a[:6], b[:, :v]

  def build(v):
    x, y = pair(v)
    shapes = {"M": ((n.bind(v), 24), (24, 16)), "K": ((8, n.bind(v)), (n.bind(v), 12)),
              "N": ((6, 24), (24, n.bind(v)))}[which]
    return _sym(x, *shapes[0]) @ _sym(y, *shapes[1])
  runs_once(build, lambda v, t: close(t, np.matmul(*pair(v)), 1e-4))


def test_reshape_expand_and_flatten(device):
  n = dim()

  def build(v):
    x = _sym(DATA[:v], n.bind(v), 8)
    flat = x.reshape(n.bind(v) * 8)
    back = flat.reshape(n.bind(v), 2, 4).sum(1)
    col = kg.Tensor(DATA[0]).reshape(1, 8).expand(n.bind(v), 8)
    return flat.sum() + back.sum(0).sum() + (col * x).sum()
  runs_once(build, lambda v, t: close(
    t, DATA[:v].sum() * 2 + (DATA[0][None] * DATA[:v]).sum(), 1e-3))


def test_slices_with_symbolic_bounds(device):
  n, pos = dim(), dim("pos", 0, HI - 1)
  table = kg.Tensor(DATA)

  def build(v):
    p = v - 1
    head = table[:n.bind(v)].sum(0)
    row = table[pos.bind(p):pos.bind(p) + 1]
    one = table[pos.bind(p)]
    return head + row.reshape(8) * 2 + one * 3
  runs_once(build, lambda v, t: close(t, DATA[:v].sum(0) + DATA[v - 1] * 5, 1e-4))


def test_pad_and_cat_along_a_symbolic_axis(device):
  n = dim()
  tail = data(3, 8)

  def build(v):
    x = _sym(DATA[:v], n.bind(v), 8)
    padded = x.pad(((2, 1), (0, 0)), value=5.0)
    joined = kg.cat([x, kg.Tensor(tail)], axis=0)
    return padded.sum(0) + joined.sum(0) * 10 + padded.max(0)

  def want(v):
    padded = np.pad(DATA[:v], ((2, 1), (0, 0)), constant_values=5.0)
    return padded.sum(0) + np.concatenate([DATA[:v], tail]).sum(0) * 10 + padded.max(0)
  runs_once(build, lambda v, t: close(t, want(v), 1e-4))


def test_pad_keeps_the_logical_shape(device):
  n = dim()
  x = _sym(DATA[:5], n.bind(5), 8).pad(((1, 2), (0, 0)), value=-1.0)
  assert x.symbolic_shape == (n + 3, 8)
  close(x, np.pad(DATA[:5], ((1, 2), (0, 0)), constant_values=-1.0))


def test_gather_with_a_symbolic_number_of_indices(device):
  n = dim()
  idx = np.array([3, 0, 7, 7, 1] * 8, dtype=np.int32)

  def build(v):
    return kg.take(kg.Tensor(DATA), _sym(idx[:v], n.bind(v)), axis=0).sum(0)
  runs_once(build, lambda v, t: close(t, DATA[idx[:v]].sum(0), 1e-4))


def test_cumsum_along_a_symbolic_axis(device):
  n = dim()
  runs_once(lambda v: _sym(DATA[:v], n.bind(v), 8).cumsum(0),
            lambda v, t: close(t, np.cumsum(DATA[:v], 0), 1e-4))


@pytest.mark.parametrize("causal", [False, True])
def test_attention_with_symbolic_key_length(device, causal):
  n = dim()
  q, k, v_ = data(2, 3, 8), data(2, HI, 8), data(2, HI, 8)

  def build(v):
    keys = _sym(k[:, :v], 2, n.bind(v), 8)
    vals = _sym(v_[:, :v], 2, n.bind(v), 8)
    # the 3 queries sit at positions v-3.. (clamped at 0): query i sees keys up to its position
    offset = n.bind(v) - 3
    return kg.scaled_dot_product_attention(kg.Tensor(q), keys, vals, is_causal=causal,
                                           offset=offset if causal else None)

  def want(v):
    if not causal:
      return sdpa_np(q, k[:, :v], v_[:, :v]).astype(np.float32)
    mask = np.arange(v)[None, :] <= np.arange(3)[:, None] + (v - 3)
    with np.errstate(invalid="ignore"):
      return sdpa_np(q, k[:, :v], v_[:, :v], mask=mask).astype(np.float32)

  def check(v, t):
    got, exp = t.numpy(), want(v)
    assert got.shape == exp.shape
    ok = ~np.isnan(exp)
    np.testing.assert_allclose(got[ok], exp[ok], rtol=1e-4, atol=1e-4)
  runs_once(build, check, (3, 13, HI))


def test_symbolic_kernels_validate_and_assemble():
  n = dim()
  x = kg.Tensor.empty(n, 8, name="x")
  w = kg.Tensor.empty(8, 16, name="w")
  check_compiles([(x @ w).softmax(0), x.cumsum(0), x.layernorm(0)])


@pytest.mark.parametrize("op", ["argmax", "argmin", "min", "prod", "any", "all", "std"])
def test_more_reductions_over_the_symbolic_axis(op):
  n = dim()
  base = (DATA > 0) if op in ("any", "all") else DATA * 0.5 + (1.0 if op == "prod" else 0.0)

  def build(v):
    return getattr(_sym(base[:v], n.bind(v), 8), op)(0)
  want = {"argmax": np.argmax, "argmin": np.argmin}
  runs_once(build, lambda v, t: close(t, (want.get(op) or getattr(np, op))(base[:v], axis=0), 1e-4),
            (1, 13, HI))


def test_a_static_axis_gathered_keeps_the_symbolic_one():
  n = dim()
  idx = kg.Tensor(np.array([1, 3], np.int32))
  runs_once(lambda v: kg.take(_sym(DATA[:v], n.bind(v), 8), idx, axis=1).sum(0),
            lambda v, t: close(t, DATA[:v][:, [1, 3]].sum(0), 1e-4))


def test_where_stack_and_broadcast_with_symbolic_operands():
  n = dim()

  def build(v):
    x = _sym(DATA[:v], n.bind(v), 8)
    y = kg.where(x > 0, x, x * 0.1) + kg.Tensor(DATA[0])
    both = kg.stack([x, y], 0)
    assert both.symbolic_shape == (2, n, 8)
    return both.sum(1).max(0)
  runs_once(build, lambda v, t: close(t, np.maximum(
    DATA[:v].sum(0), (np.where(DATA[:v] > 0, DATA[:v], DATA[:v] * 0.1) + DATA[0]).sum(0)), 1e-4))


def test_jit_replays_a_prefill_with_symbolic_tensor_arguments():
  n = dim()
  w = kg.Tensor(data(8, 8))

  @kg.jit
  def f(x):
    return (x @ w).softmax(0).sum(1)
  for v in (3, 13, 7, HI, 1):
    got = f(_sym(DATA[:v], n.bind(v), 8))
    assert got.symbolic_shape == (n,)
    h = DATA[:v] @ w.numpy()
    e = np.exp(h - h.max(0))
    close(got, (e / e.sum(0)).sum(1), 1e-4)
  assert f.replaying


def test_jit_never_reuses_a_static_size_at_another():
  @kg.jit
  def f(x):
    return x.sum(0)
  for rows in (3, 3, 3, 5, 5):
    close(f(kg.Tensor(DATA[:rows])), DATA[:rows].sum(0), 1e-4)


def test_a_dim_read_by_kernels_but_bound_by_no_argument_is_an_error():
  n = dim()
  table = kg.Tensor(DATA)
  state = {"v": 1}

  @kg.jit
  def f(x):
    return table[:n.bind(state["v"])].sum(0) + x
  x = kg.Tensor(np.zeros(8, np.float32))
  for v in (1, 2, 3):
    state["v"] = v
    with pytest.raises(kg.UnsupportedError, match="no argument binds") if f.replaying else \
         _no_error():
      close(f(x), DATA[:v].sum(0), 1e-4)


class _no_error:
  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False


def _loops_stop_at_a_dim(tensor, target="python") -> list[bool]:
  """For each kernel with a loop: whether some loop's end depends on a symbolic dim (VAR)."""
  from kernelgen.uop.ops import Ops, toposort
  out = []
  for kernel in kg.compile(tensor, target=target):
    ends = [u.src[0] for u in kernel.kernel.uops if u.op is Ops.RANGE]
    if ends:
      out.append(any(v.op is Ops.VAR for e in ends for v in toposort([e])))
  return out


@pytest.mark.parametrize("build", [
  lambda n: kg.Tensor.empty(n, 8, name="x").sum(0),                       # grouped
  lambda n: kg.Tensor.empty(64, n, name="x").sum(1),                      # a loop per output
  lambda n: kg.Tensor.empty(8, n, name="x").softmax(-1),                  # a row kernel
  lambda n: kg.Tensor.empty(16, n, name="a") @ kg.Tensor.empty(n, 16, name="b"),   # tiles
  lambda n: kg.scaled_dot_product_attention(kg.Tensor.empty(1, 2, 1, 8, name="q"),
                                            kg.Tensor.empty(1, 2, n, 8, name="k"),
                                            kg.Tensor.empty(1, 2, n, 8, name="v"))])
def test_loops_over_a_symbolic_axis_stop_at_its_bound_value(build):
  got = _loops_stop_at_a_dim(build(dim()))
  assert got and all(got), got


def test_an_elementwise_kernel_launches_only_the_workgroups_its_bound_size_needs():
  from kernelgen.uop.program import launch_dispatch
  n = kg.Dim("n", 1, 4096)
  x = kg.Tensor.empty(n, 8, name="x")
  (kernel,) = kg.compile(x * 2, target="wgsl")
  full = kernel.launch.dispatch
  assert launch_dispatch(kernel.launch, {"n": 4096}) == full
  small = launch_dispatch(kernel.launch, {"n": 3})
  assert small[0] * kernel.launch.workgroup_size[0] >= 3 * 8 and small[0] < full[0]
  (static,) = kg.compile(kg.Tensor.empty(4096, 8, name="x") * 2, target="wgsl")
  assert static.launch.grid == () and static.source == kernel.source.replace("E_n_8", "E_4096_8")


def test_a_mean_loss_over_a_symbolic_batch_divides_by_the_bound_size():
  n = dim()
  logits, probs = data(HI, 5), np.abs(data(HI, 5))
  probs /= probs.sum(1, keepdims=True)

  def want(v):
    x = logits[:v].astype(np.float64)
    logp = x - x.max(1, keepdims=True) - np.log(np.exp(x - x.max(1, keepdims=True)).sum(1,
                                                                                        keepdims=True))
    return -(logp * probs[:v]).sum(1).mean()
  runs_once(lambda v: _sym(logits[:v], n.bind(v), 5).cross_entropy(_sym(probs[:v], n.bind(v), 5)),
            lambda v, t: close(t, np.float32(want(v)), 1e-4))


def test_flip_along_a_symbolic_axis(device):
  n = dim()
  runs_once(lambda v: _sym(DATA[:v], n.bind(v), 8).flip((0, 1)).cumsum(0),
            lambda v, t: close(t, np.cumsum(DATA[:v][::-1, ::-1], 0), 1e-4))


def test_a_matmul_with_symbolic_m_launches_the_tiles_its_bound_size_needs():
  from kernelgen.uop.program import launch_dispatch
  n = kg.Dim("n", 1, 4096)
  y = kg.Tensor.empty(n, 32, name="a") @ kg.Tensor.empty(32, 48, name="b")
  (kernel,) = kg.compile(y, target="wgsl")
  assert kernel.launch.grid
  assert launch_dispatch(kernel.launch, {"n": 4096}) == kernel.launch.dispatch
  assert launch_dispatch(kernel.launch, {"n": 5})[0] < kernel.launch.dispatch[0]


def test_a_row_kernel_launches_the_rows_its_bound_size_needs():
  from kernelgen.uop.program import launch_dispatch
  n = kg.Dim("n", 1, 512)
  kernels = kg.compile(kg.Tensor.empty(n, 64, name="x").softmax(-1), target="wgsl")
  (kernel,) = [k for k in kernels if k.launch.grid]
  assert launch_dispatch(kernel.launch, {"n": 3})[0] < kernel.launch.dispatch[0]
