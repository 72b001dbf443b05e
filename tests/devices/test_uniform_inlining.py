"""Lavapipe's uniform inlining settled once per symbolic pipeline (runtime/uniform_inlining.py):
on lavapipe each pipeline built for a kernel with uniforms (a symbolic kernel's dims, its
variants' too) gets one dispatch of no workgroups on stand-in buffers, a static kernel's none,
and the kernel is right after it at every value, the first run at k = 1 (where the inlined
shader would drop its loop of unrolled steps) included, the padding NaN. On other adapters
nothing is dispatched."""
from __future__ import annotations

import numpy as np

import kernelgen as kg
from kernelgen.render.wgsl.adapters import classify
from kernelgen.uop.program import with_variants
from tools import device_runtime, run_named

M, N, HI = 8, 16, 40


def _kernel(k):
  a, b = kg.Tensor.empty(M, k, name="a"), kg.Tensor.empty(k, N, name="b")
  (kernel,) = kg.compile(a @ b, "wgsl")
  return kernel


def _run(runtime, kernel, v: int, padded: int):
  rng = np.random.default_rng(v)
  a, b = rng.standard_normal((M, v)).astype(np.float32), rng.standard_normal((v, N))
  data = {"a": np.full((M, padded), np.nan, np.float32), "b": np.full((padded, N), np.nan)}
  data["a"][:, :v], data["b"][:v] = a, b
  values = {"k": v} if kernel.launch.uniforms else {}
  got = run_named(runtime, kernel, data, values, out_fill=np.nan).reshape(M, N)
  np.testing.assert_allclose(got, a @ b.astype(np.float32), rtol=1e-4, atol=1e-4,
                             err_msg=f"k = {v}")


def test_lavapipe_settles_each_symbolic_pipeline_once_and_the_kernel_stays_right():
  runtime = device_runtime("WEBGPU")
  assert runtime.settles == (classify(dict(runtime.adapter.info)) == "lavapipe")
  kernel = _kernel(kg.Dim("k", 1, HI))
  before = runtime.settled
  for v in (1, 2, 3, 4, 17, HI, 1):
    _run(runtime, kernel, v, HI)
  built = sum(1 for each in with_variants(kernel) if each.launch.uniforms
              and runtime._pipeline_key(each.launch) in runtime.pipelines)
  assert built >= 1 and runtime.settled - before == (built if runtime.settles else 0)
  static = runtime.settled
  _run(runtime, _kernel(5), 5, 5)
  assert runtime.settled == static
