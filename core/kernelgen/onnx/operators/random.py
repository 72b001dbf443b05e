"""ONNX random operators: RandomUniform, RandomNormal (and their *Like forms), Bernoulli,
Multinomial, and Dropout in training mode. Values come from kernelgen's counter-based generator (Tensor.rand /
randn), deterministic in the node's `seed` attribute; without one, the seed is derived from the
node's name, so two random nodes draw different values but a model gives the same values run
after run. ONNX leaves the values to the implementation: only their distribution, shape and
dtype are defined (the node tests' expected values come from numpy's generator and cannot be
matched; the conformance report lists those cases as random).
"""
from __future__ import annotations

import zlib

from ...dtype import dtypes
from ...errors import ShapeError
from ...tensor.tensor import Tensor
from ..registry import op

INT32 = 6       # TensorProto.INT32: Multinomial's default output type


def _seed(ins, at) -> int:
  _, seed = at.any("seed")       # a float for Random*, an int for Dropout
  if isinstance(seed, (int, float)):
    return int(seed) & 0x7FFFFFFF
  return zlib.crc32(f"{ins.node.name}/{ins.node.outputs[0]}".encode()) & 0x7FFFFFFF


def _dtype(ins, at, like=None):
  code = at.int("dtype")
  if code is not None:
    return ins.dtype(code)
  return like.dtype if like is not None else dtypes.float32


def _uniform(ins, at, shape, dtype):
  lo, hi = at.float("low", 0.0), at.float("high", 1.0)
  u = Tensor.rand(*shape, seed=_seed(ins, at), device=ins.device)
  return (u * (hi - lo) + lo).cast(dtype)


def _normal(ins, at, shape, dtype):
  mean, scale = at.float("mean", 0.0), at.float("scale", 1.0)
  z = Tensor.randn(*shape, seed=_seed(ins, at), device=ins.device)
  return (z * scale + mean).cast(dtype)


def _shape(at, name: str) -> tuple:
  shape = at.ints("shape")
  if shape is None:
    raise ShapeError(f"{name} needs its shape attribute")
  return tuple(shape)


@op("RandomUniform", foldable=False)
def _random_uniform(ins, at):
  return _uniform(ins, at, _shape(at, "RandomUniform"), _dtype(ins, at))


@op("RandomUniformLike", foldable=False)
def _random_uniform_like(ins, at):
  return _uniform(ins, at, ins[0].shape, _dtype(ins, at, ins[0]))


@op("RandomNormal", foldable=False)
def _random_normal(ins, at):
  return _normal(ins, at, _shape(at, "RandomNormal"), _dtype(ins, at))


@op("RandomNormalLike", foldable=False)
def _random_normal_like(ins, at):
  return _normal(ins, at, ins[0].shape, _dtype(ins, at, ins[0]))


@op("Bernoulli", foldable=False)
def _bernoulli(ins, at):
  p = ins[0]
  u = Tensor.rand(*p.shape, seed=_seed(ins, at), device=ins.device)
  return (u < p.cast(dtypes.float32)).cast(_dtype(ins, at, p))


@op("Multinomial", foldable=False)
def _multinomial(ins, at):
  """sample_size class indices per row of a (batch, classes) input of unnormalized
  log-probabilities, drawn by inverse CDF: the row's weights exp(x - max) summed along the row,
  and for each draw u in [0, total) the number of classes whose running sum is <= u (a class of
  weight 0 is never drawn). Each draw is one uniform value of the counter-based generator."""
  x = ins[0]
  if x is None or x.ndim != 2:
    raise ShapeError(f"Multinomial ({ins.node.describe()}) takes a 2-d (batch, classes) input of "
                     f"log-probabilities, got shape {None if x is None else x.shape}")
  draws = at.int("sample_size", 1)
  if draws < 1:
    raise ShapeError(f"Multinomial ({ins.node.describe()}): sample_size must be >= 1, got "
                     f"{draws}")
  batch, classes = x.shape
  logits = x.cast(dtypes.float32)
  weights = (logits - logits.max(1, keepdim=True)).exp()
  running = weights.cumsum(1)
  u = Tensor.rand(batch, draws, seed=_seed(ins, at), device=ins.device) * running[:, classes - 1:]
  below = running.reshape(batch, 1, classes) <= u.reshape(batch, draws, 1)
  index = below.cast(dtypes.int32).sum(2).minimum(classes - 1)   # u rounded up to the total
  return index.cast(ins.dtype(at.int("dtype", INT32)))


def dropout_training(ins, at, x, ratio: float):
  """Training-mode Dropout: each element kept with probability 1 - ratio, scaled by
  1 / (1 - ratio); the mask says which were kept."""
  keep = Tensor.rand(*x.shape, seed=_seed(ins, at), device=ins.device) >= ratio
  scale = 1.0 / (1.0 - ratio) if ratio < 1 else 0.0
  return [(x * keep.cast(x.dtype) * scale).cast(x.dtype), keep]
