"""Issue 18's operations in the page (headless Chromium, SwiftShader WebGPU, the wheel running in
Pyodide): a token-embedding lookup (integer-array indexing), a causal mask (tril) and attention,
a cross-entropy loss and edge padding, checked against numpy."""
from __future__ import annotations

import math

import numpy as np
import pytest

from test_browser import RUN, app, site  # noqa: F401  (the booted page and the site fixtures)

pytestmark = pytest.mark.timeout(900)

PROGRAM = """\
table = Tensor.arange(40, dtype='float32').reshape(10, 4) / 7 - 2
tokens = Tensor([[1, 7, 7, 3, 0]])
x = table[tokens]                                   # (1, 5, 4): an embedding lookup
mask = Tensor.ones(5, 5, dtype='bool').tril()       # causal
att = kg.scaled_dot_product_attention(x, x, x, mask=mask)
loss = att.reshape(5, 4).cross_entropy(Tensor([0, 3, 1, 2, 3]), reduction='none')
out = cat([att.reshape(5, 4), loss.reshape(5, 1).expand(5, 4),
           x.reshape(5, 4).pad(((1, 0), (0, 0)), mode='edge')[:5]], axis=0)
"""


def expected() -> np.ndarray:
  table = (np.arange(40, dtype=np.float64).reshape(10, 4) / 7 - 2).astype(np.float32)
  x = table[[1, 7, 7, 3, 0]].astype(np.float64)
  s = x @ x.T / math.sqrt(4)
  s = np.where(np.tril(np.ones((5, 5), bool)), s, -np.inf)
  p = np.exp(s - s.max(-1, keepdims=True))
  att = (p / p.sum(-1, keepdims=True)) @ x
  logp = att - att.max(1, keepdims=True)
  logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
  loss = -logp[np.arange(5), [0, 3, 1, 2, 3]]
  padded = np.pad(x, ((1, 0), (0, 0)), mode="edge")[:5]
  return np.concatenate([att, np.broadcast_to(loss[:, None], (5, 4)), padded]).astype(np.float32)


def test_embedding_causal_attention_and_loss_in_the_page(app):  # noqa: F811
  result = app.evaluate(RUN, PROGRAM)
  assert "error" not in result, result
  assert result["device"] == "WEBGPU" and result["shape"] == [15, 4]
  got = np.array(result["data"], np.float32).reshape(15, 4)
  np.testing.assert_allclose(got, expected(), rtol=1e-4, atol=1e-5)
  assert result["reference"]["ok"] and result["reference"]["match"], result["reference"]


SCATTER_PROGRAM = """\
idx = Tensor.arange(600) * 37 % 700 - 50            # duplicates, negatives, out of range for 300
src = Tensor.arange(600, dtype='float32') % 5
out = cat([Tensor.zeros(300).scatter_add(0, idx, src), Tensor.zeros(300).scatter(0, idx, src)])
"""


def test_sorted_scatters_in_the_page(app):  # noqa: F811
  """300 outputs x 600 indices: above scatter.COMPARE_MAX, so the sorted form runs in the page."""
  result = app.evaluate(RUN, SCATTER_PROGRAM)
  assert "error" not in result, result
  idx = np.arange(600) * 37 % 700 - 50
  src = (np.arange(600) % 5).astype(np.float32)
  ok = (idx >= -300) & (idx < 300)
  added, written = np.zeros(300, np.float32), np.zeros(300, np.float32)
  np.add.at(added, idx[ok], src[ok])
  written[idx[ok]] = src[ok]
  assert result["device"] == "WEBGPU" and result["shape"] == [600]
  np.testing.assert_array_equal(np.array(result["data"], np.float32), np.concatenate([added,
                                                                                       written]))
