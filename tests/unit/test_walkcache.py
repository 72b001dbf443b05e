"""The scheduler walks a kernel again only when a boundary it reads has changed
(graph/walkcache.py), and schedules exactly as when it walks every kernel every round."""
from __future__ import annotations

import os

import numpy as np
import pytest

from kernelgen import Tensor
from kernelgen.graph import schedule as schedule_module
from kernelgen.graph.schedule import schedule
from kernelgen.graph.walkcache import WalkCache, footprint
from tools import default_device


@pytest.fixture(autouse=True)
def python_device(monkeypatch):
  with default_device(monkeypatch, os.environ.get("KERNELGEN_TEST_DEVICE", "PYTHON")):
    yield


def _t(*shape, seed=0):
  return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _decoder(layers: int = 4, d: int = 16):
  """Residual projections read by layernorms: every layer's matmuls take their tails as
  epilogues (a round of the scheduler each)."""
  x = _t(2, d)
  for i in range(layers):
    h = x.layernorm() @ _t(d, 4 * d, seed=3 * i + 1)
    x = x + h.gelu() @ _t(4 * d, d, seed=3 * i + 2) + _t(d, seed=3 * i + 3)
  return x.layernorm().softmax(-1)


def _cnn():
  """Convs with a bias, a residual and a ReLU, a pool and a linear layer."""
  x = _t(1, 4, 8, 8)
  for i in range(3):
    y = x.conv2d(_t(4, 4, 3, 3, seed=2 * i + 1), _t(4, seed=2 * i + 2), padding=1).relu()
    x = (x + y).relu()
  flat = x.max_pool2d(2).reshape(1, 64)
  return (flat @ _t(64, 10, seed=9)).softmax(-1)


def _wide():
  """A sum of many inputs and two matmuls under WebGPU's 8 buffers: split as well as promoted."""
  y = _t(1, 32) @ _t(32, 16, seed=1)
  for i in range(12):
    y = y + _t(1, 16, seed=10 + i)
  return (y.layernorm() @ _t(16, 16, seed=2)).sigmoid()


class _Uncached(WalkCache):
  """Walks every time: the scheduler as before the cache."""

  def __call__(self, root, boundary):
    self.walks += 1
    return self._walk(root, boundary)


def _shape_of(items) -> list:
  """Each kernel's name, output, inputs, rows and recomputed reductions (nodes by identity)."""
  return [(it.name, id(it.out), [id(i) for i in it.inputs], it.rows,
           [id(r) for r in it.recomputed]) for it in items]


@pytest.mark.parametrize("make, max_buffers", [(_decoder, None), (_decoder, 8), (_cnn, None),
                                               (_cnn, 8), (_wide, 8)])
def test_the_schedule_is_the_same_as_walking_every_kernel_every_round(monkeypatch, make,
                                                                     max_buffers):
  out = make()
  cached = _shape_of(schedule([out.node], max_buffers))
  monkeypatch.setattr(schedule_module, "WalkCache", _Uncached)
  assert _shape_of(schedule([out.node], max_buffers)) == cached


def test_a_decoder_walks_each_kernel_about_once_not_once_per_round(monkeypatch):
  """Without the cache every round walks every kernel: rounds x kernels walks."""
  made = []

  def recorded(cls):
    def make(walk):
      made.append(cls(walk))
      return made[-1]
    return make
  out = _decoder(layers=6)
  monkeypatch.setattr(schedule_module, "WalkCache", recorded(WalkCache))
  kernels = len(schedule([out.node]))
  monkeypatch.setattr(schedule_module, "WalkCache", recorded(_Uncached))
  schedule([out.node])
  cached, uncached = made[0].walks, made[1].walks
  assert uncached > 4 * kernels          # one round per promoted epilogue, each walking all
  assert cached < 3 * kernels            # found, walked again from its new boundaries, promoted
  assert made[0].kept > 0


def _chain():
  """a -> b -> c -> root over one realized input, the nodes by name."""
  a = Tensor([1.0, 2.0, 3.0])
  b = a.exp()
  c = b + 1
  root = c * 2
  return {"a": a.node, "b": b.node, "c": c.node, "root": root.node}


def test_a_kept_walk_answers_until_a_boundary_in_its_footprint_changes():
  n = _chain()
  calls = []

  def walk(root, boundary):
    calls.append(set(boundary))
    return (root,)
  cache = WalkCache(walk)
  boundary = {id(n["root"])}
  assert cache(n["root"], boundary) == (n["root"],) and len(calls) == 1
  cache(n["root"], boundary)
  assert len(calls) == 1 and cache.kept == 1
  boundary.add(12345)                        # not a node the walk reaches: still kept
  cache(n["root"], boundary)
  assert len(calls) == 1
  boundary.add(id(n["b"]))                   # b becomes a kernel: the walk stops there now
  cache(n["root"], boundary)
  assert len(calls) == 2
  cache(n["root"], boundary)
  assert len(calls) == 2
  boundary.discard(id(n["b"]))               # and fused again
  cache(n["root"], boundary)
  assert len(calls) == 3


def test_a_walk_that_adds_boundaries_is_walked_again():
  n = _chain()
  calls = []

  def walk(root, boundary):
    calls.append(1)
    boundary.add(id(n["c"]))
    return (root,)
  cache = WalkCache(walk)
  boundary = {id(n["root"])}
  cache(n["root"], boundary)
  assert id(n["c"]) in boundary
  cache(n["root"], boundary)                 # from c as a boundary: may differ, so walked
  assert len(calls) == 2
  cache(n["root"], boundary)                 # that walk added nothing: kept
  assert len(calls) == 2


def test_the_footprint_stops_at_boundaries_and_leaves_out_realized_nodes():
  n = _chain()
  ids = {k: id(v) for k, v in n.items()}
  assert n["a"].realized
  whole = footprint(n["root"], {ids["root"]})
  assert {ids["root"], ids["c"], ids["b"]} <= whole and ids["a"] not in whole
  cut = footprint(n["root"], {ids["root"], ids["c"]})
  assert ids["c"] in cut and ids["b"] not in cut
