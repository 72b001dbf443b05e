"""The work a first compile does, counted (never timed): the optimizer lowers each register-tile
probe of a kernel once (tile_probe._probe: its loads and its UOps from one lowering; the adapter
table's shape class needs none), tileplan.plan splits a kernel's reduction once per axes, and
realizing and kg.compile pause Python's cyclic garbage collector only while they schedule and
compile (realize.py), leaving it as it was, also when a kernel fails. Values are checked
against numpy on both sides of each change: a conv whose outputs share operands (register
tiles), a small reduction (none)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.graph.schedule import schedule
from kernelgen.lowering import optimize as opt
from kernelgen.lowering import tile_budget, tile_probe, tileplan
from kernelgen.render.targets import WGSL
from tools import default_device, device_runtime


@pytest.fixture(autouse=True)
def python_device(monkeypatch):
  with default_device(monkeypatch, "PYTHON"):
    yield


def _conv(n=2, c=3, o=16, side=16):   # 8192 outputs (>= TILE_MIN_SIZE), sums of 27
  rng = np.random.default_rng(0)
  x = rng.standard_normal((n, c, side, side)).astype(np.float32)
  w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
  return x, w


def _np_conv(x, w):
  t = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  windows = np.lib.stride_tricks.sliding_window_view(t, (3, 3), axis=(2, 3))
  return np.einsum("nchwij,ocij->nohw", windows, w)


def _item(t: Tensor):
  (item,) = schedule([t.node])
  return item


def _counting(monkeypatch, module, name: str) -> list:
  """Patch module.name to record its arguments (and still run it); returns the record."""
  calls, real = [], getattr(module, name)

  def counted(*args, **kwargs):
    calls.append(args)
    return real(*args, **kwargs)
  monkeypatch.setattr(module, name, counted)
  return calls


def _lowerings(monkeypatch) -> list:
  """Every lowering the optimizer makes (optimize.py, its probes in tile_probe.py, its budget
  rules in tile_budget.py), recorded in one list, each still run."""
  calls = []
  for module in (opt, tile_probe, tile_budget):
    real = module.lower

    def counted(*args, real=real, **kwargs):
      calls.append(args)
      return real(*args, **kwargs)
    monkeypatch.setattr(module, "lower", counted)
  return calls


def test_a_conv_lowers_each_tile_probe_once(monkeypatch):
  x, w = _conv()
  item = _item(Tensor(x).conv2d(Tensor(w), padding=1))
  lowered = _lowerings(monkeypatch)
  got = opt.optimize(item, WGSL, {"adapter": "lavapipe"})
  probes = [(o.tile, o.tile_axes, o.tile_inner) for _, o in lowered]   # (tile_window: inner)
  assert got.tile and len(probes) > 2                    # it probed pairs of axes, and tiles
  assert len(set(probes)) == len(probes)                 # ... each once
  assert (opt.TILE_PROBE, got.tile_axes, 0) in probes and ((1, 1), got.tile_axes, 0) in probes


def test_the_shape_class_needs_no_probe(monkeypatch):
  x, w = _conv()
  item = _item(Tensor(x).conv2d(Tensor(w), padding=1))
  lowered = _lowerings(monkeypatch)
  assert opt.shape_class(item) == "tile" and lowered == []
  small = _item(Tensor(np.ones((32, 9), np.float32)).sum(0))   # one output axis: no pair
  assert opt.shape_class(small) == "rows" and lowered == []


def test_a_small_output_with_a_short_reduction_takes_no_tile_and_no_probe(monkeypatch):
  # (8, 9) outputs (< TILE_MIN_SIZE), each a sum of 32 (< GROUP_MIN_REDUCE): _small_tile says no
  # before it needs the tiled axes, so no pair of axes is probed
  a = np.random.default_rng(1).standard_normal((32, 8, 3, 3)).astype(np.float32)
  t = Tensor(a).sum(0)
  lowered = _lowerings(monkeypatch)
  got = opt.optimize(_item(t), WGSL, {"adapter": "lavapipe"})
  assert not got.tile and lowered == []
  np.testing.assert_allclose(t.numpy(), a.sum(0), rtol=1e-5, atol=1e-5)


def test_the_plan_of_an_item_is_split_once_per_axes(monkeypatch):
  x, w = _conv()
  item = _item(Tensor(x).conv2d(Tensor(w), padding=1))
  split = _counting(monkeypatch, tileplan, "_plan")
  first = tileplan.plan(item, (1, 3))
  assert tileplan.plan(item, (1, 3)) is first and len(split) == 1
  tileplan.plan(item, (2, 3))
  assert len(split) == 2


def test_a_tiled_conv_runs_to_the_right_values():
  device_runtime("WEBGPU")       # lavapipe's defaults tile it (the probes above), its pipeline
  x, w = _conv()                 # built on the runtime's builder thread (prepare)
  got = Tensor(x, device="WEBGPU").conv2d(Tensor(w, device="WEBGPU"), padding=1).numpy()
  np.testing.assert_allclose(got, _np_conv(x, w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("enabled", [True, False])
def test_realize_leaves_the_collector_as_it_was(enabled):
  was = gc.isenabled()
  try:
    (gc.enable if enabled else gc.disable)()
    got = (Tensor.arange(16) * 2 + 1).numpy()
    assert gc.isenabled() is enabled
    np.testing.assert_array_equal(got, np.arange(16) * 2 + 1)
  finally:
    (gc.enable if was else gc.disable)()


def test_a_failing_realize_turns_the_collector_back_on(monkeypatch):
  from kernelgen import cache
  kg.clear_cache()

  def broken(*args, **kwargs):
    assert not gc.isenabled()       # paused while the kernels compile
    raise kg.UnsupportedError("no kernels today")
  monkeypatch.setattr(cache, "compile_item", broken)
  assert gc.isenabled()
  with pytest.raises(kg.UnsupportedError, match="no kernels today"):
    (Tensor.arange(8) + 3).numpy()
  assert gc.isenabled()


def test_kg_compile_pauses_the_collector_and_turns_it_back_on(monkeypatch):
  """kg.compile (compiler.compile_plan) pauses it too, also when a kernel fails."""
  from kernelgen import compiler
  seen = []
  real = compiler.compile_item

  def spy(*args, **kwargs):
    seen.append(gc.isenabled())
    return real(*args, **kwargs)
  monkeypatch.setattr(compiler, "compile_item", spy)
  assert gc.isenabled()
  kernels = kg.compile(Tensor(np.ones((4, 8), np.float32)).sum(1) * 2, target="wgsl")
  assert kernels and seen and not any(seen) and gc.isenabled()

  def broken(*args, **kwargs):
    raise kg.UnsupportedError("no kernels today")
  monkeypatch.setattr(compiler, "compile_item", broken)
  with pytest.raises(kg.UnsupportedError, match="no kernels today"):
    kg.compile(Tensor(np.ones(8, np.float32)) + 3, target="wgsl")
  assert gc.isenabled()
