"""Kernels of one structure under other names (a model's layers: the compile cache renders them
under `_n2`, `_n3`... names, uop/program.py unnamed_source) share one WebGPU pipeline natively:
a chain of four identical layers realized on WEBGPU builds a pipeline per structure, not per
kernel, and gives numpy's result (issue 37: each pipeline is a driver compile)."""
from __future__ import annotations

import numpy as np

import kernelgen as kg
from kernelgen.uop.program import unnamed_source
from tools import device_runtime


def test_layers_of_one_structure_share_a_pipeline_and_match_numpy():
  runtime = device_runtime("WEBGPU")
  runtime.clear_pipelines()
  rng = np.random.default_rng(0)
  x = rng.standard_normal((4, 8)).astype(np.float32)
  ws = [rng.standard_normal((8, 8)).astype(np.float32) for _ in range(4)]
  h = kg.Tensor(x, device="WEBGPU")
  for w in ws:
    h = ((h @ kg.Tensor(w, device="WEBGPU")).relu().contiguous() * 2).contiguous()
  kernels = kg.compile([h], target="wgsl", **runtime.render_options())
  got = h.numpy()
  want = x
  for w in ws:
    want = np.maximum(want @ w, 0) * 2
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  names = {k.launch.entry_point for k in kernels}
  shapes = {unnamed_source(k.source, k.launch.entry_point) for k in kernels}
  assert len(kernels) == len(names) == 8 and len(shapes) == 2
  assert len(runtime.pipelines) == len(shapes)


def test_unnamed_source_blanks_only_the_whole_entry_point_name():
  source = "fn E_4_8(a: i32) { E_4_8_n2(); let E_4_8x = 1; }"
  assert unnamed_source(source, "E_4_8") == "fn \0(a: i32) { E_4_8_n2(); let E_4_8x = 1; }"
