"""ONNX random operators: RandomUniform, RandomNormal (and their *Like forms), Bernoulli, and
Dropout in training mode. Values come from kernelgen's counter-based generator (Tensor.rand /
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
from ..tensor import Tensor
from .ops import op


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


def dropout_training(ins, at, x, ratio: float):
  """Training-mode Dropout: each element kept with probability 1 - ratio, scaled by
  1 / (1 - ratio); the mask says which were kept."""
  keep = Tensor.rand(*x.shape, seed=_seed(ins, at), device=ins.device) >= ratio
  scale = 1.0 / (1.0 - ratio) if ratio < 1 else 0.0
  return [(x * keep.cast(x.dtype) * scale).cast(x.dtype), keep]
