"""A symbolic row count's gated pair of matmuls (silu(x @ Wg.T) * (x @ Wu.T): a SwiGLU MLP's gate
and up) in an exported bundle (graph/one_row.py): the scheduler gives the pair two tiled kernels
(schedule.py _joint_matmuls), which every run of two rows or more launches; a run of one row
launches one kernel computing both products instead (its `runs`: compiler.with_one_row_joins),
writing the pair's output. Values against numpy at sizes that divide no tile (K 37, N 45), at
one row and at several, natively on WEBGPU; the same program through kg.compile (no `runs`:
its runtimes launch every kernel) keeps the pair alone."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from tools import device_runtime

K, N, HI = 37, 45, 128
RNG = np.random.default_rng(7)
WG, WU = (RNG.standard_normal((N, K)).astype(np.float32) * 0.3 for _ in range(2))


def _gated(x):
  return (x @ kg.Tensor(WG).permute(1, 0)).silu() * (x @ kg.Tensor(WU).permute(1, 0))


def _want(x: np.ndarray) -> np.ndarray:
  g = x @ WG.T
  return g / (1.0 + np.exp(-g)) * (x @ WU.T)


def _bundle(path):
  seq = kg.Dim("seq", 1, HI)
  return kg.export({"y": _gated(kg.Tensor.empty(seq, K, name="x"))}, str(path), format="webgpu")


def test_a_one_row_run_launches_the_pair_as_one_kernel(tmp_path):
  kernels = _bundle(tmp_path).manifest["kernels"]
  runs = [k.get("runs") for k in kernels]
  assert runs.count({"dim": "seq", "lo": 1, "hi": 1}) == 1, runs
  assert runs.count({"dim": "seq", "lo": 2, "hi": HI}) == 2, runs
  joined = next(k for k in kernels if k.get("runs", {}).get("hi") == 1)
  pair = [k for k in kernels if k.get("runs", {}).get("lo") == 2]
  assert kernels.index(joined) == kernels.index(pair[1]) + 1
  # it writes the pair's output and reads what both read, but not the first one's output
  out = pair[1]["bindings"][0]["buffer"]
  assert joined["bindings"][0]["buffer"] == out
  first = pair[0]["bindings"][0]["buffer"]
  reads = {b["buffer"] for b in joined["bindings"][1:]}
  assert first not in reads
  assert {b["buffer"] for k in pair for b in k["bindings"][1:]} - {first} == reads


def test_kg_compile_keeps_the_pair_for_every_row_count():
  seq = kg.Dim("seq", 1, HI)
  kernels = kg.compile(_gated(kg.Tensor.empty(seq, K, name="x")), "wgsl")
  assert len(kernels) == 2 and not any(k.runs for k in kernels)


@pytest.mark.parametrize("rows", [1, 2, 5, HI])
def test_the_bundle_computes_the_gated_pair_at_any_row_count(tmp_path, rows):
  device_runtime("WEBGPU")
  bundle = _bundle(tmp_path)
  x = RNG.standard_normal((rows, K)).astype(np.float32)
  got = bundle.run({"x": x}, device="WEBGPU")["y"].numpy()
  np.testing.assert_allclose(got, _want(x), rtol=1e-4, atol=1e-4)


W3 = RNG.standard_normal((N, K)).astype(np.float32) * 0.3


def test_a_chain_of_pairs_joins_its_first_pair_only(tmp_path):
  """silu(h) * (x @ W3.T), h = silu(x @ Wg.T) * (x @ Wu.T): a chain of three tiled kernels, each
  reading the one before it in place: the first pair joins; the second, whose joined kernel
  would read the first's output (not written by a one-row run), does not. Right at one row."""
  device_runtime("WEBGPU")
  seq = kg.Dim("seq", 1, HI)
  x = kg.Tensor.empty(seq, K, name="x")
  h = _gated(x)
  y = h.silu() * (x @ kg.Tensor(W3).permute(1, 0))
  bundle = kg.export({"y": y}, str(tmp_path), format="webgpu")
  runs = [k.get("runs") for k in bundle.manifest["kernels"]]
  assert runs.count({"dim": "seq", "lo": 1, "hi": 1}) == 1, runs
  for rows in (1, 3, 1):
    xv = RNG.standard_normal((rows, K)).astype(np.float32)
    hv = _want(xv)
    want = hv / (1.0 + np.exp(-hv)) * (xv @ W3.T)
    got = bundle.run({"x": xv}, device="WEBGPU")["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
