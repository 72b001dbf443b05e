"""split_wide.py's work on an unrolled recurrent cell (its cell state one long fused chain that reads
two buffers a step): it walks only the candidates that could save more buffers than the best so
far, not every node of the chain twice (split_wide.candidates)."""
from __future__ import annotations

import numpy as np

from kernelgen import Tensor
from kernelgen.graph import schedule as sched

H = 4


def _lstm(steps: int):
  rng = np.random.default_rng(1)
  param = lambda *s: Tensor(rng.standard_normal(s).astype(np.float32), device="PYTHON")  # noqa
  xs, wi, wh, b = param(steps, 1, 3), param(3, 4 * H), param(H, 4 * H), param(4 * H)
  h = c = Tensor(np.zeros((1, H), np.float32), device="PYTHON")
  for t in range(steps):
    g = xs[t] @ wi + h @ wh + b
    i, f, o = g[:, :H].sigmoid(), g[:, H:2 * H].sigmoid(), g[:, 3 * H:].sigmoid()
    c = f * c + i * g[:, 2 * H:3 * H].tanh()
    h = o * c.tanh()
  return h, c


def _walks(monkeypatch, steps: int) -> tuple[int, list]:
  calls = [0]
  walk = sched._walk_kernel

  def counted(*args, **kwargs):
    calls[0] += 1
    return walk(*args, **kwargs)
  monkeypatch.setattr(sched, "_walk_kernel", counted)
  h, c = _lstm(steps)
  items = sched.schedule([h.node, c.node], 8)
  return calls[0], items


def test_split_wide_walks_only_candidates_that_can_win(monkeypatch):
  walks, items = _walks(monkeypatch, 6)
  assert all(len(item.inputs) + 1 <= 8 for item in items)
  # 525 walks now; every candidate walked (twice where its own kernel fits), as before
  # split_wide.candidates: 849
  assert walks <= 560, walks


def test_the_split_schedule_computes_the_lstm(monkeypatch):
  """Values of the split kernels against numpy (the same cell, float64)."""
  import kernelgen as kg
  h, c = _lstm(6)
  kernels = kg.compile(c, target="wgsl", max_storage_buffers=8, max_uniform_buffers=1)
  assert all(len(k.buffers) <= 8 for k in kernels)
  rng = np.random.default_rng(1)
  xs, wi, wh, b = (rng.standard_normal(s) for s in ((6, 1, 3), (3, 4 * H), (H, 4 * H), (4 * H,)))
  sig = lambda v: 1 / (1 + np.exp(-v))  # noqa
  hn, cn = np.zeros((1, H)), np.zeros((1, H))
  for t in range(6):
    g = xs[t] @ wi + hn @ wh + b
    cn = sig(g[:, H:2 * H]) * cn + sig(g[:, :H]) * np.tanh(g[:, 2 * H:3 * H])
    hn = sig(g[:, 3 * H:]) * np.tanh(cn)
  np.testing.assert_allclose(c.numpy(), cn, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(h.numpy(), hn, rtol=1e-4, atol=1e-5)
