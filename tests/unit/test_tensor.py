"""Every Tensor operation against numpy on the PYTHON device (the reference interpreter).

KERNELGEN_TEST_DEVICE=WEBGPU (or PTXSIM, CUDA) runs the same tests on another device."""
from __future__ import annotations

import os
import math

import numpy as np
import pytest

import kernelgen as kg
from tools import default_device
from kernelgen import Tensor, dtypes


@pytest.fixture(autouse=True)
def python_device(monkeypatch):
  with default_device(monkeypatch, os.environ.get("KERNELGEN_TEST_DEVICE", "PYTHON")):
    yield


RNG = np.random.default_rng(0)
NO_64BIT = os.environ.get("KERNELGEN_TEST_DEVICE", "PYTHON").upper() == "WEBGPU"


def needs_64bit(dtype: str):
  if NO_64BIT and np.dtype(dtype).itemsize == 8:
    pytest.skip("WGSL has no 64-bit types (a typed UnsupportedError, tested below)")


def rand(*shape, dtype="float32", lo=-3, hi=3):
  if np.dtype(dtype).kind == "f":
    return RNG.uniform(lo, hi, shape).astype(dtype)
  if np.dtype(dtype).kind == "b":
    return RNG.integers(0, 2, shape).astype(bool)
  info = np.iinfo(dtype)
  return RNG.integers(max(info.min, lo), min(info.max, hi) + 1, shape).astype(dtype)


def close(got: Tensor, want, rtol=1e-5, atol=1e-6):
  want = np.asarray(want)
  out = got.numpy()
  assert got.shape == want.shape, (got.shape, want.shape)
  assert out.dtype == want.dtype, (out.dtype, want.dtype)
  if want.dtype.kind == "f":
    np.testing.assert_allclose(out, want, rtol=rtol, atol=atol, equal_nan=True)
  else:
    np.testing.assert_array_equal(out, want)


# ---- creation and data out ----

def test_from_nested_lists_gives_int32_and_float32():
  assert Tensor([[1, 2], [3, 4]]).dtype == dtypes.int32
  assert Tensor([1.0, 2]).dtype == dtypes.float32
  assert Tensor([True, False]).dtype == dtypes.bool
  assert Tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]


def test_from_numpy_keeps_dtype():
  needs_64bit("int64")
  a = np.arange(6, dtype=np.int64).reshape(2, 3)
  t = Tensor(a)
  assert t.dtype == dtypes.int64 and t.shape == (2, 3)
  close(t + 1, a + 1)


def test_data_is_a_memoryview_with_shape():
  m = Tensor([[1.5, 2.0], [3.0, 4.0]]).data()
  assert m.format == "f" and m.shape == (2, 2) and m.tolist() == [[1.5, 2.0], [3.0, 4.0]]


def test_zeros_ones_full_eye_arange():
  close(Tensor.zeros(2, 3), np.zeros((2, 3), np.float32))
  close(Tensor.ones(3, dtype="int32"), np.ones(3, np.int32))
  close(Tensor.full((2, 2), 7), np.full((2, 2), 7, np.int32))
  close(Tensor.eye(3, 4), np.eye(3, 4, dtype=np.float32))
  close(Tensor.arange(2, 11, 3), np.arange(2, 11, 3, dtype=np.int32))
  close(Tensor.arange(0.0, 1.0, 0.25), np.arange(0.0, 1.0, 0.25, dtype=np.float32))


def test_rand_is_deterministic_and_uniform():
  a, b = Tensor.rand(1000, seed=3).numpy(), Tensor.rand(1000, seed=3).numpy()
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, Tensor.rand(1000, seed=4).numpy())
  assert a.min() >= 0 and a.max() < 1 and abs(a.mean() - 0.5) < 0.05


def test_randn_moments():
  a = Tensor.randn(2000, seed=1).numpy()
  assert abs(a.mean()) < 0.1 and abs(a.std() - 1) < 0.1


def test_scalar_and_empty_tensors():
  assert Tensor(3.5).tolist() == 3.5
  assert Tensor(3.5).shape == ()
  e = Tensor.zeros(0, 3) + 1
  assert e.shape == (0, 3) and e.tolist() == []
  close(Tensor.zeros(0, 3).sum(0), np.zeros(3, np.float32))


# ---- elementwise ----

BINARY = [
  ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
  ("max", lambda a, b: a.maximum(b) if isinstance(a, Tensor) else np.maximum(a, b)),
  ("min", lambda a, b: a.minimum(b) if isinstance(a, Tensor) else np.minimum(a, b)),
]


@pytest.mark.parametrize("name,fn", BINARY)
@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "uint8", "float16", "int64"])
def test_binary_broadcast(name, fn, dtype):
  needs_64bit(dtype)
  a, b = rand(3, 1, 4, dtype=dtype), rand(5, 1, dtype=dtype)
  close(fn(Tensor(a), Tensor(b)), fn(a, b), rtol=1e-3 if dtype == "float16" else 1e-6)


def test_promotion_and_weak_scalars():
  i8, f16 = rand(4, dtype="int8"), rand(4, dtype="float16")
  close(Tensor(i8) + Tensor(f16), i8 + f16, rtol=1e-3)
  assert (Tensor(i8) + 1).dtype == dtypes.int8
  assert (Tensor(f16) * 2.5).dtype == dtypes.float16
  assert (Tensor([1, 2]) + 0.5).dtype == dtypes.float32
  close(3 - Tensor([1.0, 2.0]), np.array([2.0, 1.0], np.float32))


@pytest.mark.parametrize("dtype", ["int32", "int8", "float32", "uint16"])
def test_floor_div_and_mod_follow_numpy(dtype):
  a = rand(40, dtype=dtype, lo=-20, hi=20)
  b = rand(40, dtype=dtype, lo=-6, hi=6)
  b[b == 0] = 3
  close(Tensor(a) // Tensor(b), a // b)
  close(Tensor(a) % Tensor(b), a % b, atol=1e-5)


def test_true_division():
  a, b = rand(10, dtype="int32", lo=-9, hi=9), rand(10, dtype="int32", lo=1, hi=5)
  close(Tensor(a) / Tensor(b), (a / b).astype(np.float32))
  close(Tensor([1.0, -1.0, 0.0]) / 0.0, np.array([1.0, -1.0, 0.0], np.float32) / np.float32(0))


def test_pow():
  a = rand(20, lo=-3, hi=3)
  close(Tensor(a) ** 3, a ** 3, rtol=1e-5)
  b = rand(20, lo=0.1, hi=3)
  close(Tensor(b) ** Tensor(a), b ** a, rtol=1e-5)
  close(Tensor([-2.0, -2.0, 0.0, 0.0]) ** Tensor([3.0, 0.5, 0.0, -1.0]),
        np.array([-2.0, -2.0, 0.0, 0.0], np.float32) ** np.array([3.0, 0.5, 0.0, -1.0],
                                                                  np.float32))
  i = rand(10, dtype="int32", lo=-5, hi=5)
  close(Tensor(i) ** 2, i ** 2)
  close(Tensor(i) ** Tensor(np.full(10, 3, np.int32)), i ** 3)


def test_unary_arithmetic():
  a = np.array([-2.5, -0.0, 0.0, 1.5, np.nan, np.inf, -np.inf], np.float32)
  close(-Tensor(a), -a)
  close(abs(Tensor(a)), np.abs(a))
  close(Tensor(a).sign(), np.sign(a))
  i = rand(10, dtype="int16", lo=-9, hi=9)
  close(-Tensor(i), -i)
  close(Tensor(i).abs(), np.abs(i))
  close(Tensor(i).sign(), np.sign(i))


def test_comparisons_with_nan():
  a = np.array([1.0, np.nan, 2.0, -np.inf, 3.0], np.float32)
  b = np.array([1.0, 1.0, np.nan, 0.0, 2.0], np.float32)
  ta, tb = Tensor(a), Tensor(b)
  for fn in (lambda x, y: x < y, lambda x, y: x <= y, lambda x, y: x > y,
             lambda x, y: x >= y, lambda x, y: x == y, lambda x, y: x != y):
    close(fn(ta, tb), fn(a, b))


def test_where_and_clip():
  c, a = rand(3, 4, dtype="bool"), rand(3, 4)
  close(kg.where(Tensor(c), Tensor(a), 0.0), np.where(c, a, np.float32(0)))
  close(kg.where(Tensor(c), 1, 2), np.where(c, 1, 2).astype(np.int32))
  close(Tensor(a).clip(-1, 1), np.clip(a, -1, 1))


def test_maximum_propagates_nan():
  a = np.array([np.nan, 1.0, 2.0], np.float32)
  b = np.array([0.0, np.nan, 1.0], np.float32)
  close(Tensor(a).maximum(Tensor(b)), np.maximum(a, b))
  close(Tensor(a).minimum(Tensor(b)), np.minimum(a, b))


UNARY = [("exp", np.exp, 1e-5), ("log", np.log, 1e-5), ("exp2", np.exp2, 1e-5),
         ("log2", np.log2, 1e-5), ("sqrt", np.sqrt, 1e-6), ("reciprocal", np.reciprocal, 1e-6),
         ("rsqrt", lambda x: 1 / np.sqrt(x), 1e-5), ("sin", np.sin, 1e-5),
         ("cos", np.cos, 1e-5), ("tan", np.tan, 1e-4), ("tanh", np.tanh, 1e-5),
         ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), 1e-5), ("relu", lambda x: np.maximum(x, 0), 0),
         ("silu", lambda x: x / (1 + np.exp(-x)), 1e-5),
         ("gelu", lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
          1e-5)]


@pytest.mark.parametrize("name,ref,tol", UNARY)
def test_transcendental(name, ref, tol):
  a = rand(64, lo=0.05, hi=4) if name in ("log", "log2", "sqrt", "rsqrt") else rand(64, lo=-4, hi=4)
  with np.errstate(all="ignore"):
    close(getattr(Tensor(a), name)(), ref(a).astype(np.float32), rtol=max(tol, 1e-6), atol=1e-5)


def test_transcendental_edge_values():
  a = np.array([0.0, -1.0, np.inf, -np.inf, np.nan], np.float32)
  with np.errstate(all="ignore"):
    close(Tensor(a).exp(), np.exp(a))
    close(Tensor(a).log(), np.log(a))
    close(Tensor(a).sqrt(), np.sqrt(a))


def test_int_math_gives_float32():
  a = np.array([1, 4, 9], np.int32)
  close(Tensor(a).sqrt(), np.sqrt(a).astype(np.float32))


def test_half_math():
  a = rand(16, dtype="float16", lo=-2, hi=2)
  close(Tensor(a).exp(), np.exp(a), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool", "int16"])
def test_bitwise(dtype):
  a, b = rand(20, dtype=dtype, lo=0, hi=100), rand(20, dtype=dtype, lo=0, hi=100)
  close(Tensor(a) & Tensor(b), a & b)
  close(Tensor(a) | Tensor(b), a | b)
  close(Tensor(a) ^ Tensor(b), a ^ b)
  close(~Tensor(a), ~a)


def test_shifts_numpy_semantics_for_big_amounts():
  a = np.array([1, -8, 1234, -1, 7], np.int32)
  s = np.array([3, 1, 40, 33, 31], np.int32)
  close(Tensor(a) << Tensor(s), np.left_shift(a, s))
  close(Tensor(a) >> Tensor(s), np.right_shift(a, s))
  u = np.array([1, 8, 2 ** 31, 5, 3], np.uint32)
  close(Tensor(u) >> Tensor(s.astype(np.uint32)), np.right_shift(u, s.astype(np.uint32)))


def test_cast_and_bitcast():
  a = np.array([-1.7, 2.5, 300.2, -0.2], np.float32)
  close(Tensor(a).cast("int32"), a.astype(np.int32))
  close(Tensor(a).cast(dtypes.float16), a.astype(np.float16))
  close(Tensor(a).bitcast(dtypes.uint32), a.view(np.uint32))
  close(Tensor([0, 1, 2]).cast(dtypes.bool), np.array([0, 1, 2]).astype(bool))
  with pytest.raises(kg.DTypeError, match="use cast"):
    Tensor(a).bitcast(dtypes.int16)


# ---- reductions ----

@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_over_axes(axis, keepdim):
  a = rand(3, 4, 5)
  t = Tensor(a)
  for name in ("sum", "max", "min", "mean", "prod"):
    close(getattr(t, name)(axis=axis, keepdim=keepdim),
          getattr(np, name)(a, axis=axis, keepdims=keepdim), rtol=1e-5, atol=1e-5)
  close(t.var(axis=axis, keepdim=keepdim), a.var(axis=axis, keepdims=keepdim), rtol=1e-4)
  close(t.std(axis=axis, ddof=1, keepdim=keepdim),
        a.std(axis=axis, ddof=1, keepdims=keepdim), rtol=1e-4)


def test_integer_sums_stay_int32():
  a = rand(6, 7, dtype="int8", lo=-100, hi=100)
  close(Tensor(a).sum(1), a.sum(1).astype(np.int32))
  close(Tensor(a).max(0), a.max(0))
  close(Tensor(a).mean(1), a.mean(1).astype(np.float32), rtol=1e-6)
  b = rand(5, dtype="bool")
  close(Tensor(b).sum(), np.int32(b.sum()))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_argmax_argmin(axis):
  a = rand(4, 6, dtype="int32", lo=0, hi=3)   # ties: numpy picks the first
  close(Tensor(a).argmax(axis), np.argmax(a, axis).astype(np.int32))
  close(Tensor(a).argmin(axis), np.argmin(a, axis).astype(np.int32))


def test_argmax_with_nan_picks_first_nan():
  a = np.array([[1.0, np.nan, 5.0, np.nan]], np.float32)
  close(Tensor(a).argmax(1), np.argmax(a, 1).astype(np.int32))


def test_max_with_nan_and_inf():
  a = np.array([[1.0, np.nan, 5.0], [-np.inf, -1.0, np.inf]], np.float32)
  close(Tensor(a).max(1), a.max(1))
  close(Tensor(a).sum(1), a.sum(1))


def test_softmax_and_log_softmax():
  a = rand(3, 7)
  e = np.exp(a - a.max(1, keepdims=True))
  close(Tensor(a).softmax(1), e / e.sum(1, keepdims=True))
  close(Tensor(a).log_softmax(0), a - a.max(0) - np.log(np.exp(a - a.max(0)).sum(0)),
        atol=1e-5)


def test_reduce_of_empty_axis():
  a = np.zeros((3, 0), np.float32)
  close(Tensor(a).sum(1), a.sum(1))
  with pytest.raises(kg.ShapeError, match="empty axis"):
    Tensor(a).max(1)


def test_size_one_dims():
  a = rand(1, 5, 1)
  close(Tensor(a).sum(0), a.sum(0))
  close(Tensor(a).max(2, keepdim=True), a.max(2, keepdims=True))


# ---- movement and indexing ----

def test_reshape_permute_transpose_expand():
  a = rand(2, 3, 4)
  t = Tensor(a)
  close(t.reshape(4, 6), a.reshape(4, 6))
  close(t.reshape(-1, 2), a.reshape(-1, 2))
  close(t.permute(2, 0, 1), a.transpose(2, 0, 1))
  close(t.T, a.T)
  close(t.transpose(1, 0, 2).reshape(6, 4), a.transpose(1, 0, 2).reshape(6, 4))
  close(Tensor(a[:, :1]).expand(2, 5, 4), np.broadcast_to(a[:, :1], (2, 5, 4)))


def test_pad_shrink_flip():
  a = rand(3, 4)
  t = Tensor(a)
  close(t.pad(((1, 2), (0, 3))), np.pad(a, ((1, 2), (0, 3))))
  close(t.pad(((1, 1), (1, 1)), value=5.0), np.pad(a, 1, constant_values=5.0))
  close(t.shrink(((1, 3), (0, 2))), a[1:3, 0:2])
  close(t.flip(0), np.flip(a, 0))
  close(t.flip(), np.flip(a))
  close(t.pad(((2, 0), (1, 1))).flip(1).shrink(((1, 4), (0, 5))),
        np.flip(np.pad(a, ((2, 0), (1, 1))), 1)[1:4, 0:5])
  close(t.exp().pad(((1, 0), (0, 1))), np.pad(np.exp(a), ((1, 0), (0, 1))), rtol=1e-5)


@pytest.mark.parametrize("index", [
  1, -1, (slice(None), 2), (slice(1, None), slice(None, None, -1)), (slice(None, None, 2),),
  (Ellipsis, 1), (None, 0), (slice(3, 0, -2), None, slice(1, 4, 2)), (0, None, Ellipsis, None),
  (slice(-2, None), -3),
])
def test_getitem(index):
  a = rand(4, 5)
  close(Tensor(a)[index], a[index])


def test_getitem_of_a_computed_view():
  a = rand(6, 6)
  close((Tensor(a).T * 2)[::-2, 1:5:3], (a.T * 2)[::-2, 1:5:3])


def test_index_errors():
  with pytest.raises(kg.ShapeError, match="out of bounds"):
    Tensor([1, 2, 3])[3]
  with pytest.raises(kg.ShapeError, match="too many indices"):
    Tensor([1, 2, 3])[0, 0]


def test_reshape_of_non_contiguous_view():
  a = rand(4, 6)
  close(Tensor(a).T.reshape(3, 8), a.T.reshape(3, 8))
  close(Tensor(a)[:, ::2].reshape(12), a[:, ::2].reshape(12))
  close(Tensor(a).pad(((1, 1), (0, 0))).reshape(36), np.pad(a, ((1, 1), (0, 0))).reshape(36))


def test_cat_and_stack():
  a, b = rand(2, 3), rand(4, 3)
  close(kg.cat([Tensor(a), Tensor(b)], 0), np.concatenate([a, b], 0))
  close(kg.cat([Tensor(a), Tensor(a)], 1), np.concatenate([a, a], 1))
  close(kg.stack([Tensor(a), Tensor(a) * 2], 1), np.stack([a, a * 2], 1))
  close(kg.stack([Tensor([1, 2]), Tensor([3, 4])]), np.array([[1, 2], [3, 4]], np.int32))


# ---- linear algebra and nn ----

@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((4,), (4, 2)), ((3, 4), (4,)),
                                   ((4,), (4,)), ((2, 3, 4), (4, 2)), ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul(sa, sb):
  a, b = rand(*sa), rand(*sb)
  close(Tensor(a) @ Tensor(b), a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_ints_and_dot():
  a, b = rand(3, 4, dtype="int32"), rand(4, 2, dtype="int32")
  close(Tensor(a) @ Tensor(b), a @ b)
  close(Tensor(a).dot(Tensor(b)), a.dot(b))


def test_matmul_shape_error():
  with pytest.raises(kg.ShapeError, match="inner dims 4 and 3 must match"):
    Tensor.ones(2, 4) @ Tensor.ones(3, 2)


def _conv_ref(x, w, b, stride, pad, dil, groups):
  n, c, h, wd = x.shape
  o, cg, kh, kw = w.shape
  xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
  ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
  out = np.zeros((n, o, oh, ow), np.float32)
  og = o // groups
  for oc in range(o):
    g = oc // og
    for i in range(oh):
      for j in range(ow):
        patch = xp[:, g * cg:(g + 1) * cg, i * stride:i * stride + dil * (kh - 1) + 1:dil,
                   j * stride:j * stride + dil * (kw - 1) + 1:dil]
        out[:, oc, i, j] = (patch * w[oc]).sum((1, 2, 3))
  return out + (b.reshape(1, o, 1, 1) if b is not None else 0)


@pytest.mark.parametrize("stride,pad,dil,groups", [(1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1),
                                                   (1, 1, 1, 2)])
def test_conv2d(stride, pad, dil, groups):
  x, w, b = rand(2, 4, 6, 5), rand(6, 4 // groups, 3, 3), rand(6)
  got = Tensor(x).conv2d(Tensor(w), Tensor(b), stride=stride, padding=pad, dilation=dil,
                         groups=groups)
  close(got, _conv_ref(x, w, b, stride, pad, dil, groups), rtol=1e-4, atol=1e-4)


def test_pools():
  x = rand(1, 2, 6, 6)
  want_max = x.reshape(1, 2, 3, 2, 3, 2).max((3, 5))
  close(Tensor(x).max_pool2d(2), want_max)
  close(Tensor(x).avg_pool2d(2), x.reshape(1, 2, 3, 2, 3, 2).mean((3, 5)), rtol=1e-5)
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
  want = np.stack([xp[..., i:i + 3, j:j + 3].max((-2, -1)) for i in range(0, 6, 2)
                   for j in range(0, 6, 2)], -1).reshape(1, 2, 3, 3)
  close(Tensor(x).max_pool2d(3, stride=2, padding=1), want)


def test_layernorm():
  x = rand(4, 8)
  want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
  close(Tensor(x).layernorm(), want, rtol=1e-4, atol=1e-5)


# ---- errors ----

def test_broadcast_error_says_how_to_fix():
  with pytest.raises(kg.ShapeError, match=r"\(2, 3\) and \(4,\) do not broadcast"):
    Tensor.ones(2, 3) + Tensor.ones(4)


def test_bad_axis():
  with pytest.raises(kg.ShapeError, match="axis 2 is out of range .* use an axis in -2..1"):
    Tensor.ones(2, 3).sum(2)


def test_bad_reshape():
  with pytest.raises(kg.ShapeError, match="element counts must match"):
    Tensor.ones(2, 3).reshape(4, 2)


def test_device_name_error():
  with pytest.raises(kg.DeviceError, match="PYTHON, WEBGPU, CUDA, PTXSIM"):
    Tensor([1.0], device="TPU")


def test_64bit_on_wgsl_is_a_typed_error():
  with pytest.raises(kg.UnsupportedError, match="int64"):
    kg.compile(Tensor(np.arange(3, dtype=np.int64)) + 1, target="wgsl")


def test_unknown_target_is_a_typed_error():
  with pytest.raises(kg.UnsupportedError, match="use one of python, wgsl, ptx"):
    kg.compile(Tensor([1.0]) + 1, target="metal")


def test_to_moves_between_devices():
  t = Tensor([1.0, 2.0]).to("PYTHON")
  assert t.device == "PYTHON" and t.tolist() == [1.0, 2.0]
