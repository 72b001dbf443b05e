"""kg.jit in the page (headless Chromium, SwiftShader WebGPU, the kernelgen worker the digits demo
boots): the digits-MLP step (64-32-10, batch 64, Adam) under kg.jit gives the losses and weights
of the same steps run eagerly in the same page, and its replayed steps run only their kernels:
no realize (no plan lookup, no compile), one GPU wait per step (the loss read). The counts come
from gpu.js's `stats` and kg.cache_info(); nothing here is timed.
"""
from __future__ import annotations

import numpy as np
import pytest

from test_demos import run_in_demo, site  # noqa: F401 (site: a fixture)

pytestmark = pytest.mark.timeout(900)

WARMUP, STEADY = 3, 3   # Adam's first step differs from the later ones: replays from step 4

PROGRAM = '''
import kernelgen as kg
f32 = dtypes.float32

def param(n, shape, k):
  p = ((Tensor.arange(n).cast(f32) * k).sin() * 0.2).reshape(*shape).realize()
  return p.requires_grad_()

x = ((Tensor.arange(4096).cast(f32) * 0.11).cos() + 1).reshape(64, 64).realize()
onehot = ((Tensor.arange(64).reshape(64, 1) % 10) == Tensor.arange(10).reshape(1, 10)).cast(f32)
onehot = onehot.realize()

def train(jitted):
  params = [param(2048, (64, 32), 0.37), param(32, (32,), 0.5), param(320, (32, 10), 0.23),
            param(10, (10,), 0.9)]
  opt = kg.optim.Adam(params, lr=0.01)

  def step(x, onehot):
    opt.zero_grad()
    w1, b1, w2, b2 = params
    loss = -(((x @ w1 + b1).relu() @ w2 + b2).log_softmax(-1) * onehot).sum(-1).mean()
    loss.backward()
    opt.step(loss)
    return loss
  fn = kg.jit(step) if jitted else step
  losses = [fn(x, onehot).item() for _ in range(__WARMUP__)]
  gpu = kg.Device["WEBGPU"].gpu
  before, info = gpu.stats.to_py(), kg.cache_info()
  losses += [fn(x, onehot).item() for _ in range(__STEADY__)]
  after, later = gpu.stats.to_py(), kg.cache_info()
  counts = [after[k] - before[k] for k in ("kernels", "scopeWaits")]
  counts += [later[k] - info[k] for k in ("misses", "plan_hits")]
  counts.append(float(jitted and fn.replaying))
  weights = kg.cat([p.detach().reshape(-1) for p in params]).tolist()
  return losses + counts + weights

out = Tensor(train(False) + train(True))
'''.replace("__WARMUP__", str(WARMUP)).replace("__STEADY__", str(STEADY))


def test_jitted_step_in_the_page_equals_eager_and_only_runs_kernels(site, chromium):  # noqa: F811
  got = run_in_demo(chromium, site, "digits", PROGRAM)
  half = len(got) // 2
  eager, jitted = np.array(got[:half]), np.array(got[half:])
  n = WARMUP + STEADY
  losses, counts, weights = eager[:n], eager[n:n + 5], eager[n + 5:]
  j_losses, j_counts, j_weights = jitted[:n], jitted[n:n + 5], jitted[n + 5:]
  np.testing.assert_allclose(j_losses, losses, rtol=1e-6)
  np.testing.assert_allclose(j_weights, weights, rtol=1e-6, atol=1e-7)
  assert losses[-1] < losses[0]
  kernels, waits, misses, plan_hits, replaying = j_counts
  assert replaying == 1.0
  assert kernels == counts[0] > 0, (counts, j_counts)   # the same kernels as the eager steps
  assert waits == STEADY, j_counts                       # one wait per step: the loss read
  assert misses == 0 and plan_hits == 0, j_counts        # no realize: nothing planned or compiled
  assert counts[3] == STEADY                             # (the eager steps reused their plans)
