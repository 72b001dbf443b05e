"""Run-time grids (Launch.grid, uop/program.py launch_dispatch) on the runtimes beyond native
WEBGPU / CUDA: the PYTHON interpreter runs only the workgroups a kernel's bound size needs, and a
bundle keeps each kernel's grid in its manifest so that `Bundle.run` launches the same number
(PTXSIM counts them in its progress reports). Values against numpy at the range's ends and at a
value that divides no workgroup."""
from __future__ import annotations

import json

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.device import Device
from kernelgen.uop.program import launch_dispatch

HI = 96
VALUES = (1, 13, HI)
W = np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)


def _rows(v):
  return np.random.default_rng(v).standard_normal((v, 8)).astype(np.float32)


@pytest.mark.parametrize("build, want", [
  (lambda x: x * 2 + 1, lambda a: a * 2 + 1),                             # elementwise
  (lambda x: x.softmax(-1), lambda a: np.exp(a) / np.exp(a).sum(-1, keepdims=True)),   # rows
  (lambda x: x @ kg.Tensor(W, device="PYTHON"), lambda a: a @ W)])       # register tiles
def test_python_runs_only_the_workgroups_the_bound_size_needs(build, want):
  runtime = Device["PYTHON"]
  n = kg.Dim("n", 1, HI)
  counts = {}
  for v in VALUES:
    x = kg.Tensor(_rows(v), device="PYTHON").symbolic(n.bind(v), 8)
    y = build(x)
    before = runtime.workgroups
    got = y.numpy()
    counts[v] = runtime.workgroups - before
    np.testing.assert_allclose(got, want(_rows(v)), rtol=1e-4, atol=1e-5)
  assert counts[1] <= counts[13] < counts[HI], counts


def _program():
  n = kg.Dim("n", 1, HI)
  x = kg.Tensor.empty(n, 8, name="x")
  return {"y": (x @ kg.Tensor(W).realize()) * 2 + 1}


def test_a_bundle_manifest_keeps_each_kernels_grid(tmp_path):
  compiled = kg.compile(_program()["y"], target="ptx")
  grids = [k.launch.grid for k in compiled if k.launch.grid]
  assert grids
  bundle = kg.export(_program(), str(tmp_path), format="ptx")
  manifest = json.loads((tmp_path / "manifest.json").read_text())
  assert [k["grid"] for k in manifest["kernels"] if "grid" in k] == \
      [[[[list(t) for t in terms], *rest] for terms, *rest in g] for g in grids]
  assert [m["name"] for m in manifest["kernels"]] == [k.name for k in compiled]


def test_bundle_run_launches_the_blocks_the_bound_size_needs(tmp_path):
  bundle = kg.export(_program(), str(tmp_path), format="ptx")
  kernels = kg.compile(_program()["y"], target="ptx")    # the bundle's kernels, in launch order
  for v in VALUES:
    blocks = {}

    def progress(info):
      if info["blocks"] is not None:
        blocks[info["kernel"]] = info["blocks"][1]
    got = bundle.run({"x": _rows(v)}, device="PTXSIM", progress=progress)
    np.testing.assert_allclose(got["y"].numpy(), _rows(v) @ W * 2 + 1, rtol=1e-4, atol=1e-5)
    want = [int(np.prod(launch_dispatch(k.launch, {"n": v}))) for k in kernels]
    assert [blocks.get(i + 1, want[i]) for i in range(len(kernels))] == want
    if v < HI:
      assert sum(want) < sum(int(np.prod(k.launch.dispatch)) for k in kernels)
