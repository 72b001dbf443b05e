"""Autograd: every differentiable primitive and the composite ops built from them, checked against
central finite differences of kernelgen's own forward pass in float64 (PYTHON for all, PTXSIM for
a subset), plus the documented semantics (ties, integer tensors, no_grad, accumulation, errors).

KERNELGEN_GRADCHECK_TABLE=path writes the table operation -> device -> max relative error as JSON.
"""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

import kernelgen as kg

F64 = kg.dtypes.float64
EPS = 1e-6
TOL = 1e-6
TABLE: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _write_table():
  yield
  path = os.environ.get("KERNELGEN_GRADCHECK_TABLE")
  if path:
    old = json.load(open(path)) if os.path.exists(path) else {}
    for name, devs in TABLE.items():
      old.setdefault(name, {}).update(devs)
    with open(path, "w") as f:
      json.dump(old, f, indent=1, sort_keys=True)


def _inputs(shapes, rng, positive):
  xs = []
  for s in shapes:
    x = rng.standard_normal(s)
    xs.append(np.abs(x) + 0.5 if positive else x)
  return xs


def gradcheck(name, fn, shapes, device="PYTHON", positive=False, seed=0, directions=6):
  """d/dx of sum(fn(x) * w) by autograd vs central differences: per element for small inputs,
  along `directions` random unit directions for larger ones. Records the max relative error."""
  rng = np.random.default_rng(seed)
  xs = _inputs(shapes, rng, positive)
  ts = [kg.Tensor(x, dtype=F64, device=device, requires_grad=True) for x in xs]
  out = fn(*ts)
  w = rng.standard_normal(out.shape)
  (out * kg.Tensor(w, dtype=F64, device=device)).sum().backward()
  grads = [t.grad.numpy() for t in ts]

  def f(arrays):
    with kg.no_grad():
      vals = fn(*(kg.Tensor(a, dtype=F64, device=device) for a in arrays)).numpy()
    return float((vals * w).sum())

  worst = 0.0
  for i, x in enumerate(xs):
    assert grads[i].shape == x.shape
    dirs = ([np.eye(x.size)[k].reshape(x.shape) for k in range(x.size)] if x.size <= 12 else
            [rng.standard_normal(x.shape) for _ in range(directions)])
    for v in dirs:
      plus = [a + EPS * v if j == i else a for j, a in enumerate(xs)]
      minus = [a - EPS * v if j == i else a for j, a in enumerate(xs)]
      numeric = (f(plus) - f(minus)) / (2 * EPS)
      analytic = float((grads[i] * v).sum())
      err = abs(numeric - analytic) / max(abs(numeric), abs(analytic), 1e-3)
      worst = max(worst, err)
  TABLE.setdefault(name, {})[device] = max(worst, TABLE.get(name, {}).get(device, 0.0))
  assert worst < TOL, f"{name} on {device}: relative error {worst:.3g}"


# ---- the cases: name -> (fn, shapes, positive inputs) -----------------------------------------

CASES = {
  "add (broadcast)": (lambda a, b: a + b, [(3, 1), (1, 4)], False),
  "sub (broadcast)": (lambda a, b: a - b, [(3, 4), (4,)], False),
  "mul (broadcast)": (lambda a, b: a * b, [(2, 3, 1), (3, 4)], False),
  "div": (lambda a, b: a / b, [(3, 4), (3, 4)], True),
  "scalar ops": (lambda a: (2.0 - a) * 3.0 / (a + 4.0) - 1.5 / a, [(3, 4)], True),
  "maximum": (lambda a, b: a.maximum(b), [(3, 4), (3, 4)], False),
  "minimum": (lambda a, b: a.minimum(b), [(3, 4), (1, 4)], False),
  "pow tensor**tensor": (lambda a, b: a ** b, [(3, 4), (3, 4)], True),
  "pow x**3": (lambda a: a ** 3, [(3, 4)], False),
  "pow x**2.5": (lambda a: a ** 2.5, [(3, 4)], True),
  "pow 2**x": (lambda a: 2 ** a, [(3, 4)], False),
  "neg": (lambda a: -a, [(3, 4)], False),
  "exp": (lambda a: a.exp(), [(3, 4)], False),
  "exp2": (lambda a: a.exp2(), [(3, 4)], False),
  "log": (lambda a: a.log(), [(3, 4)], True),
  "log2": (lambda a: a.log2(), [(3, 4)], True),
  "sqrt": (lambda a: a.sqrt(), [(3, 4)], True),
  "rsqrt": (lambda a: a.rsqrt(), [(3, 4)], True),
  "reciprocal": (lambda a: a.reciprocal(), [(3, 4)], True),
  "sin": (lambda a: a.sin(), [(3, 4)], False),
  "cos": (lambda a: a.cos(), [(3, 4)], False),
  "tan": (lambda a: a.tan(), [(3, 4)], False),
  "sigmoid": (lambda a: a.sigmoid(), [(3, 4)], False),
  "tanh": (lambda a: a.tanh(), [(3, 4)], False),
  "gelu": (lambda a: a.gelu(), [(3, 4)], False),
  "silu": (lambda a: a.silu(), [(3, 4)], False),
  "relu": (lambda a: a.relu(), [(3, 4)], False),
  "abs": (lambda a: a.abs(), [(3, 4)], False),
  "clip": (lambda a: a.clip(-0.5, 0.7), [(3, 4)], False),
  "where": (lambda a, b: kg.where(a > b, a * 2, b.exp()), [(3, 4), (3, 4)], False),
  "sum axis": (lambda a: a.sum(1), [(3, 4, 2)], False),
  "sum all": (lambda a: a.sum(), [(3, 4)], False),
  "mean": (lambda a: a.mean((0, 2), keepdim=True), [(3, 4, 2)], False),
  "prod": (lambda a: a.prod(1), [(3, 4)], False),
  "max axis": (lambda a: a.max(0), [(3, 4)], False),
  "min axis": (lambda a: a.min((1,), keepdim=True), [(3, 4)], False),
  "max all": (lambda a: a.max(), [(3, 4)], False),
  "var/std": (lambda a: a.var(1) + a.std(0, ddof=1).sum(), [(3, 4)], False),
  "reshape": (lambda a: a.reshape(4, 3) * kg.Tensor.arange(3, dtype=F64, device=a.device),
              [(3, 4)], False),
  "permute": (lambda a: a.permute(2, 0, 1) ** 2, [(2, 3, 2)], False),
  "transpose/T": (lambda a: a.T @ a, [(3, 4)], False),
  "expand": (lambda a: a.expand(3, 4) * kg.Tensor.arange(4, dtype=F64, device=a.device),
             [(3, 1)], False),
  "pad": (lambda a: a.pad(((1, 2), (0, 1))) ** 2, [(3, 4)], False),
  "pad value": (lambda a: a.pad(((1, 1), (1, 1)), value=2.0) ** 2, [(3, 4)], False),
  "shrink": (lambda a: a.shrink(((1, 3), (0, 2))) ** 2, [(3, 4)], False),
  "flip": (lambda a: a.flip(1) * kg.Tensor.arange(4, dtype=F64, device=a.device), [(3, 4)],
           False),
  "step / getitem": (lambda a: a[::2, 1::3] ** 2 + a[1, ::-2].sum(), [(5, 7)], False),
  "getitem ints": (lambda a: a[1] * a[:, 2].sum(), [(3, 4)], False),
  "squeeze/unsqueeze": (lambda a: a.unsqueeze(0).squeeze(2) ** 2, [(3, 1, 2)], False),
  "repeat": (lambda a: a.repeat(2, 3) ** 2, [(2, 2)], False),
  "cat/stack": (lambda a, b: kg.cat([a, b * 2], 1).sum(1) + kg.stack([a, b]).prod(0).sum(1),
                [(3, 2), (3, 2)], False),
  "contiguous": (lambda a: (a * 2).contiguous().exp(), [(3, 4)], False),
  "matmul": (lambda a, b: a @ b, [(3, 4), (4, 5)], False),
  "matmul batched": (lambda a, b: a @ b, [(2, 3, 4), (4, 2)], False),
  "matmul vector": (lambda a, b: a @ b, [(4,), (4, 3)], False),
  "conv2d": (lambda x, w, b: x.conv2d(w, b), [(2, 3, 5, 5), (4, 3, 3, 3), (4,)], False),
  "conv2d stride/pad": (lambda x, w: x.conv2d(w, stride=2, padding=1),
                        [(1, 2, 6, 7), (3, 2, 3, 2)], False),
  "conv2d dilation": (lambda x, w: x.conv2d(w, dilation=2, padding=(2, 1)),
                      [(1, 2, 6, 6), (2, 2, 3, 3)], False),
  "conv2d groups": (lambda x, w: x.conv2d(w, groups=2, stride=(1, 2)),
                    [(2, 4, 5, 6), (6, 2, 2, 3)], False),
  "conv2d stack": (lambda x, w1, b1, w2: x.conv2d(w1, b1, padding=1).relu()
                   .conv2d(w2, stride=2, padding=1), [(2, 1, 5, 5), (2, 1, 3, 3), (2,), (3, 2, 3, 3)],
                   False),
  "max_pool2d": (lambda x: x.max_pool2d(2), [(2, 2, 6, 6)], False),
  "max_pool2d stride/pad": (lambda x: x.max_pool2d(3, stride=2, padding=1), [(1, 2, 7, 7)],
                            False),
  "avg_pool2d": (lambda x: x.avg_pool2d(2, stride=1, padding=1), [(1, 2, 5, 5)], False),
  "layernorm": (lambda x, w, b: x.layernorm(weight=w, bias=b), [(3, 6), (6,), (6,)], False),
  "softmax": (lambda x: x.softmax(-1), [(3, 5)], False),
  "log_softmax": (lambda x: x.log_softmax(0), [(4, 3)], False),
}

PTXSIM_CASES = ["mul (broadcast)", "div", "pow tensor**tensor", "exp", "log", "sqrt", "sin",
                "where", "sum axis", "prod", "max axis", "permute", "pad", "step / getitem",
                "matmul", "conv2d stride/pad", "max_pool2d", "layernorm", "log_softmax"]


@pytest.mark.parametrize("name", list(CASES))
def test_gradcheck_python(name):
  fn, shapes, positive = CASES[name]
  gradcheck(name, fn, shapes, "PYTHON", positive)


@pytest.mark.parametrize("name", PTXSIM_CASES)
def test_gradcheck_ptxsim(name):
  fn, shapes, positive = CASES[name]
  gradcheck(name, fn, shapes, "PTXSIM", positive)


# ---- semantics ------------------------------------------------------------------------------

def T(x, **kw):
  return kg.Tensor(np.asarray(x, dtype=np.float64), dtype=F64, device="PYTHON", **kw)


def test_matmul_grad_matches_numpy_float32():
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3))
  ta = kg.Tensor(a, requires_grad=True, device="PYTHON")
  tb = kg.Tensor(b.astype(np.float32), requires_grad=True, device="PYTHON")
  (ta @ tb).relu().sum().backward()
  mask = ((a @ b.astype(np.float32)) > 0).astype(np.float32)
  np.testing.assert_allclose(ta.grad.numpy(), mask @ b.T.astype(np.float32), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(tb.grad.numpy(), a.T @ mask, rtol=1e-5, atol=1e-5)


def test_max_ties_split_evenly():
  x = T([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], requires_grad=True)
  x.max().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [[0, 0.5, 0.5], [0, 0, 0]])
  y = T([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], requires_grad=True)
  y.min(1).sum().backward()
  np.testing.assert_allclose(y.grad.numpy(), [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]])


def test_maximum_tie_and_relu_at_zero():
  x = T([-1.0, 0.0, 2.0], requires_grad=True)
  y = T([0.5, 0.0, 1.0], requires_grad=True)
  x.maximum(y).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [0, 0.5, 1])
  np.testing.assert_array_equal(y.grad.numpy(), [1, 0.5, 0])


def test_prod_with_zeros():
  x = T([[2.0, 0.0, 3.0], [0.0, 0.0, 4.0], [1.0, 2.0, 3.0]], requires_grad=True)
  x.prod(1).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [[0, 6, 0], [0, 0, 0], [6, 3, 2]])


def test_pow_at_zero_is_finite():
  x = T([0.0, 1.0, 2.0], requires_grad=True)
  (x ** 2.5).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [0.0, 2.5, 2.5 * 2 ** 1.5])


def test_nondifferentiable_ops_have_no_grad():
  x = T([1.5, -2.5, 3.5], requires_grad=True)
  assert not x.argmax().requires_grad
  assert not (x > 0).requires_grad
  assert not x.int().requires_grad
  (x.floor() + x.round() + x.trunc() + x.int().cast(F64) + x).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [1, 1, 1])


def test_integer_tensors_cannot_require_grad():
  with pytest.raises(kg.DTypeError, match="float"):
    kg.Tensor([1, 2, 3], requires_grad=True)
  with pytest.raises(kg.DTypeError):
    kg.Tensor.arange(3).requires_grad_()


def test_backward_errors():
  x = T([1.0, 2.0], requires_grad=True)
  with pytest.raises(kg.ShapeError, match="scalar"):
    (x * 2).backward()
  with pytest.raises(kg.AutogradError):
    T([1.0]).sum().backward()
  with pytest.raises(kg.ShapeError):
    (x * 2).backward(T([1.0, 2.0, 3.0]))


def test_backward_with_gradient_and_accumulation():
  x = T([1.0, 2.0, 3.0], requires_grad=True)
  (x * x).backward(T([1.0, 0.5, 2.0]))
  np.testing.assert_array_equal(x.grad.numpy(), [2, 2, 12])
  (x * 3).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [5, 5, 15])
  x.grad = None
  (x * 3).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [3, 3, 3])


def test_shared_subexpression_and_leaf_grad_only():
  x = T([1.0, 2.0], requires_grad=True)
  y = x.exp()
  (y * y + y).sum().backward()
  e = np.exp([1.0, 2.0])
  np.testing.assert_allclose(x.grad.numpy(), 2 * e * e + e)
  assert y.grad is None and not y.is_leaf and x.is_leaf


def test_no_grad_and_detach():
  x = T([1.0, 2.0], requires_grad=True)
  with kg.no_grad():
    y = x * 2
    with kg.enable_grad():
      z = x * 3
  assert not y.requires_grad and z.requires_grad and kg.is_grad_enabled()
  d = (x * 2).detach()
  assert not d.requires_grad and d.tolist() == [2.0, 4.0]
  (d * x).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [2, 4])

  @kg.no_grad()
  def f(t):
    return t * 2
  assert not f(x).requires_grad


def test_float32_and_float16_grads_keep_dtype():
  for dt in ("float32", "float16"):
    x = kg.Tensor([1.0, 2.0, 4.0], dtype=dt, requires_grad=True, device="PYTHON")
    (x.sqrt() * 2).sum().backward()
    assert x.grad.dtype == kg.dtypes.from_name(dt)
    vals = x.grad.numpy().view(np.float16) if dt == "float16" else x.grad.numpy()
    np.testing.assert_allclose(vals.astype(np.float64), [1.0, 2 ** -0.5, 0.5], rtol=1e-3)


def test_cast_between_floats_passes_the_gradient():
  x = T([1.0, 2.0, 3.0], requires_grad=True)
  y = x.cast("float32") * kg.Tensor([1.0, 2.0, 3.0], device="PYTHON")
  assert y.dtype == kg.dtypes.float32
  y.cast("float16").cast("float64").sum().backward()
  assert x.grad.dtype == F64
  np.testing.assert_array_equal(x.grad.numpy(), [1, 2, 3])


def test_to_device_is_differentiable():
  x = T([1.0, 2.0], requires_grad=True)
  (x.to("PTXSIM") * 3).sum().backward()
  assert x.grad.device == "PYTHON"
  np.testing.assert_array_equal(x.grad.numpy(), [3, 3])


def test_backward_pass_fuses():
  """The gradients of an MLP are a few kernels (about one per reduction: 4 forward, 4 backward),
  not one per primitive."""
  rng = np.random.default_rng(0)
  x = kg.Tensor(rng.standard_normal((8, 16)).astype(np.float32), device="PYTHON")
  w1 = kg.Tensor(rng.standard_normal((16, 32)).astype(np.float32), requires_grad=True,
                 device="PYTHON")
  w2 = kg.Tensor(rng.standard_normal((32, 4)).astype(np.float32), requires_grad=True,
                 device="PYTHON")
  loss = (x @ w1).relu().__matmul__(w2).log_softmax(-1).mean()
  loss.backward()
  kernels = kg.compile([w1.grad, w2.grad], target="python")
  assert len(kernels) <= 10, len(kernels)
  assert math.isfinite(float(np.abs(w1.grad.numpy()).sum()))


def _np_grads(x, k1, c1, k2, w3, net):
  """The network's gradients in float64 (its parameters' float32 values, widened)."""
  ps = [kg.Tensor(a.astype(np.float64), dtype=F64, device="PYTHON", requires_grad=True)
        for a in (k1, c1, k2, w3)]
  net(kg.Tensor(x.astype(np.float64), dtype=F64, device="PYTHON"), *ps).backward()
  return [p.grad.numpy() for p in ps]


def test_conv_gradients_read_the_output_gradient_once():
  """A small CNN (conv, ReLU, strided conv, ReLU, linear): conv2d's backward rule (tensor/ops/
  conv.py) computes each conv's output gradient once into a buffer (the first conv's: the ReLU
  mask times the second conv's input gradient, E_2_2_8_8), which its weight gradient (split
  partial sums, then their sum) and bias gradient read; the strided conv's input gradient is one
  small stride-1 reduction per stride phase (2 x 2: taps 2x2, 2x1, 1x2, 1x1 of the 3x3 kernel),
  not a product per window element and a reduction over a spread grid. The float32 gradients
  match those of the same network in float64 (whose gradients the "conv2d stack" gradcheck
  checks); tests/unit/test_conv_grad.py checks the rule against numpy."""
  rng = np.random.default_rng(0)
  k1, c1, k2, w3 = (rng.standard_normal(s).astype(np.float32)
                    for s in ((2, 1, 3, 3), (2,), (3, 2, 3, 3), (48, 4)))
  x = rng.random((2, 1, 8, 8), dtype=np.float32)
  ps = [kg.Tensor(a, device="PYTHON", requires_grad=True) for a in (k1, c1, k2, w3)]

  def net(x, k1, c1, k2, w3):
    h = x.conv2d(k1, c1, padding=1).relu().conv2d(k2, stride=2, padding=1).relu()
    return (h.reshape(2, -1) @ w3).log_softmax(-1).mean()
  net(kg.Tensor(x, device="PYTHON"), *ps).backward()
  kernels = kg.compile([ps[0].grad, ps[1].grad], target="wgsl")
  sizes = {k.name: len(k.source) for k in kernels}
  phases = [f"r_2_1_2_4_4_1_1_1__3_{a}_{b}" for a, b in ((2, 2), (2, 1), (1, 2), (1, 1))]
  once = ["E_2_2_8_8", "r_2_1_1_2_1_1_1_1_3_3__1_8_8", "r_2_1_3_3__2_1", "r_2__2_8_8"]
  assert all(name in sizes for name in phases + once), list(sizes)
  assert len(kernels) == 13 and max(sizes.values()) < 4000, sizes
  want = _np_grads(x, k1, c1, k2, w3, net)
  for p, ref in zip(ps, want):
    assert np.abs(p.grad.numpy() - ref).max() <= 1e-5 * np.abs(ref).max(), p.shape


# ---- the model operations (gather, scans, sort, einsum, losses, attention, ...) -----------------
# They are built from the primitives above, so they need no rules of their own (sort's values are
# a gather of the input at the sorted positions while a gradient is recorded).

def _idx(values, device="PYTHON"):
  return kg.Tensor(np.asarray(values, dtype=np.int32), device=device)


OPS_CASES = {
  "gather": (("gather",), lambda a: a.gather(1, _idx([[0, 2], [1, 1], [3, 0]])), [(3, 4)]),
  "take": (("take",), lambda a: kg.take(a, _idx([4, 0, 4, 7])), [(2, 5)]),
  "scatter_add": (("scatter_add",),
                  lambda a, s: a.scatter_add(0, _idx([[0, 1, 0], [0, 2, 2]]), s) ** 2,
                  [(3, 3), (2, 3)]),
  "cumsum": (("cumsum",), lambda a: a.cumsum(1) ** 2, [(2, 5)]),
  "sort values": (("sort",),
                  lambda a: a.sort(-1)[0] * kg.Tensor.arange(5, dtype=F64, device=a.device),
                  [(2, 5)]),
  "einsum": (("einsum",), lambda a, b: kg.einsum("ij,jk->ik", a, b), [(2, 3), (3, 4)]),
  "cross_entropy": (("cross_entropy",), lambda a: a.cross_entropy(_idx([1, 0, 3])), [(3, 4)]),
  "nll_loss": (("nll_loss",), lambda a: a.log_softmax(-1).nll_loss(_idx([2, 2, 0])), [(3, 4)]),
  "sdpa causal": (("scaled_dot_product_attention",),
                  lambda q, k, v: kg.scaled_dot_product_attention(q, k, v, is_causal=True),
                  [(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)]),
  "group_norm": (("group_norm",), lambda a: a.group_norm(2) ** 2, [(2, 4, 3, 2)]),
  "interpolate bilinear": (("interpolate",),
                           lambda a: a.interpolate(size=(5, 7), mode="bilinear") ** 2,
                           [(1, 1, 3, 4)]),
  "pad reflect": (("pad",), lambda a: a.pad(((1, 1), (2, 1)), mode="reflect") ** 2, [(3, 4)]),
}


@pytest.mark.parametrize("name", list(OPS_CASES))
def test_gradcheck_model_operations(name):
  _, fn, shapes = OPS_CASES[name]
  gradcheck(name, fn, shapes, "PYTHON")


def test_dropout_op_grad_is_its_mask():
  x = T(np.ones((8, 8)), requires_grad=True)
  y = x.dropout(0.5, seed=3)
  y.sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), y.detach().numpy())
