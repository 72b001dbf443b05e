"""GPU pipelines in the page (headless Chromium, SwiftShader): a realize of a graph kept as a plan
starts all of its kernels' pipelines at once (gpu.js prepare, createComputePipelineAsync), and
its result is unchanged. The counts come from gpu.js's `stats`; nothing here is timed."""
from __future__ import annotations

import numpy as np
import pytest

from test_demos import run_in_demo, site  # noqa: F401 (site: a fixture)

pytestmark = pytest.mark.timeout(900)

PROGRAM = '''
import kernelgen as kg
f32 = dtypes.float32
gpu = kg.Device["WEBGPU"].gpu

def chain():
  x = (Tensor.arange(48).cast(f32) * 0.1).reshape(6, 8)
  h = (x @ x.T).relu().contiguous()
  h = (h * 0.5).exp().contiguous()
  return (h.sum(axis=1) + h.max(axis=1)).softmax(axis=0)

first = chain().tolist()
gpu.clearPipelines()
gpu.stats.mostMaking = 0
made = gpu.stats.pipelinesMade
again = chain().tolist()     # the same graph: a kept plan, its pipelines all started at once
stats = gpu.stats.to_py()
out = Tensor(first + again + [stats["pipelinesMade"] - made, stats["mostMaking"]])
'''


def test_a_kept_plans_pipelines_are_created_at_once_and_its_result_is_unchanged(
    site, chromium):  # noqa: F811
  got = run_in_demo(chromium, site, "digits", PROGRAM)
  first, again, (made, most) = got[:6], got[6:12], got[12:]
  assert again == first
  np.testing.assert_allclose(sum(first), 1.0, rtol=1e-5)
  assert made >= 3, got              # every kernel's pipeline was made again
  assert most == made, got           # ... all of them in flight together


LAYERS = '''
import kernelgen as kg
from kernelgen.uop.program import unnamed_source
f32 = dtypes.float32
gpu = kg.Device["WEBGPU"].gpu
h = (Tensor.arange(32).cast(f32) * 0.01).reshape(4, 8)
w = [(Tensor.arange(64).cast(f32) * (0.01 * (i + 1)) - 0.3).reshape(8, 8).realize()
     for i in range(4)]
for i in range(4):
  h = ((h @ w[i]).relu().contiguous() * 2).contiguous()
kernels = kg.compile([h], target="wgsl", **kg.Device["WEBGPU"].render_options())
shapes = len({unnamed_source(k.source, k.launch.entry_point) for k in kernels})
gpu.clearPipelines()
made = gpu.stats.pipelinesMade
values = [v for row in h.tolist() for v in row]
out = Tensor(values + [gpu.stats.pipelinesMade - made, len(kernels), shapes])
'''


def test_layers_of_one_structure_share_a_pipeline_in_the_page(site, chromium):  # noqa: F811
  """Four identical layers (8 kernels of 3 structures: the first layer reads the fused arange,
  the others are named `_n2`...): the page builds one pipeline per structure (gpu.js
  pipelineKey), and the values are numpy's."""
  got = run_in_demo(chromium, site, "digits", LAYERS)
  values, (made, kernels, shapes) = np.array(got[:32], np.float32).reshape(4, 8), got[32:]
  h = (np.arange(32, dtype=np.float32) * 0.01).reshape(4, 8)
  for i in range(4):
    w = (np.arange(64, dtype=np.float32) * (0.01 * (i + 1)) - 0.3).reshape(8, 8)
    h = np.maximum(h @ w, 0) * 2
  np.testing.assert_allclose(values, h, rtol=1e-4, atol=1e-5)
  assert kernels == 8 and made == shapes == 3, got
