"""A steady training step in the page (headless Chromium, SwiftShader WebGPU, kernelgen's worker)
(a kernelgen worker booted by the digits demo's page) does its work without a wait per kernel: the digits-MLP step (64-32-10, batch 64, SGD) reuses
its plan (cache.py: no schedule, no compile), runs its few kernels through gpu.js's batches and
awaits GPU error scopes once per step (for the loss it reads), not once per kernel; its losses
are those of the same program in CPython on the native WEBGPU device (wgpu). The counts come from gpu.js's `stats` and
kg.cache_info(); nothing here is timed.
"""
from __future__ import annotations

import numpy as np
import pytest

from test_demos import run_in_demo, site  # noqa: F401 (site: a fixture)
from tools import wgpu_adapter

pytestmark = pytest.mark.timeout(900)

WARMUP, STEADY = 3, 2
# kernels of one step of PROGRAM (test_compile_cache's DIGITS_STEP_KERNELS counts kg.nn.Linear's
# step, 12: here the bias add and loss fuse one kernel differently)
STEP_KERNELS = 13

# the same steps on any device: fixed weights and batch from arange, SGD, the loss read per step;
# on the page's WEBGPU it also records gpu.js's counts over the steady steps
PROGRAM = '''
import kernelgen as kg
f32 = dtypes.float32

def param(n, shape, k):
  p = ((Tensor.arange(n).cast(f32) * k).sin() * 0.2).reshape(*shape).realize()
  return p.requires_grad_()

params = [param(2048, (64, 32), 0.37), param(32, (32,), 0.5), param(320, (32, 10), 0.23),
          param(10, (10,), 0.9)]
x = ((Tensor.arange(4096).cast(f32) * 0.11).cos() + 1).reshape(64, 64).realize()
onehot = ((Tensor.arange(64).reshape(64, 1) % 10) == Tensor.arange(10).reshape(1, 10)).cast(f32)
onehot = onehot.realize()
opt = kg.optim.SGD(params, lr=0.05)

def step():
  opt.zero_grad()
  w1, b1, w2, b2 = params
  logits = (x @ w1 + b1).relu() @ w2 + b2
  loss = -(logits.log_softmax(-1) * onehot).sum(-1).mean()
  loss.backward()
  opt.step(loss)
  return loss.item()

losses = [step() for _ in range(__WARMUP__)]
counts = []
gpu = getattr(kg.Device[kg.Device.DEFAULT], "gpu", None)   # gpu.js's executor, in the page
if gpu is not None:
  before, info = gpu.stats.to_py(), kg.cache_info()
losses += [step() for _ in range(__STEADY__)]
if gpu is not None:
  after, later = gpu.stats.to_py(), kg.cache_info()
  counts = [after[k] - before[k] for k in ("kernels", "batches", "submits", "scopeWaits")]
  counts += [later[k] - info[k] for k in ("misses", "uncached", "plan_hits", "hits")]
out = Tensor([float(v) for v in losses + counts])
'''.replace("__WARMUP__", str(WARMUP)).replace("__STEADY__", str(STEADY))


def cpython_losses() -> list:
  import kernelgen as kg
  wgpu_adapter()
  old = kg.Device.DEFAULT
  kg.Device.DEFAULT = "WEBGPU"
  try:
    names = {"Tensor": kg.Tensor, "dtypes": kg.dtypes}
    exec(PROGRAM, names)
    return names["out"].numpy().tolist()
  finally:
    kg.Device.DEFAULT = old


def test_steady_page_step_waits_once_and_reuses_its_plan(site, chromium):  # noqa: F811
  got = run_in_demo(chromium, site, "digits", PROGRAM)
  losses, counts = got[:WARMUP + STEADY], got[WARMUP + STEADY:]
  kernels, batches, submits, waits, misses, uncached, plan_hits, hits = counts
  # the same losses as CPython's
  np.testing.assert_allclose(losses, cpython_losses(), rtol=1e-5)
  assert losses[-1] < losses[0]
  assert 0 < kernels <= STEADY * STEP_KERNELS, counts
  assert waits == STEADY, counts                 # one wait per step (the loss read), not per kernel
  assert batches <= 2 * STEADY and submits <= 4 * STEADY, counts   # not one per kernel
  assert misses == 0 and uncached == 0, counts   # nothing compiled
  assert plan_hits == STEADY and hits == kernels, counts   # one realize per step, from its plan
