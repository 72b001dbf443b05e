"""Issue 18's operations in the page (headless Chromium, SwiftShader WebGPU, the wheel running in
Pyodide): a token-embedding lookup (integer-array indexing), a causal mask (tril) and attention,
a cross-entropy loss and edge padding, checked against numpy."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ops_util import softmax_edge_rows
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


TORCH_PROGRAM = """\
x = Tensor.linspace(-3, 3, 24).reshape(1, 2, 3, 4)
out = cat([x.gelu('none').flatten(), x.abs().log1p().flatten(), x.erf().flatten(),
           x.adaptive_avg_pool2d((2, 3)).flatten(), x.softplus().mse_loss(x.sigmoid()).reshape(1),
           x.logsumexp(-1).flatten()])
"""


def test_torch_functional_ops_in_the_page(app):  # noqa: F811
  """This session's torch.nn.functional ops (special.py, activations.py, losses.py, adaptive
  pooling, logsumexp) in Pyodide on WebGPU, against numpy and the standard library's erf."""
  result = app.evaluate(RUN, TORCH_PROGRAM)
  assert "error" not in result, result
  x = np.linspace(-3, 3, 24, dtype=np.float32).astype(np.float64).reshape(1, 2, 3, 4)
  erf = np.vectorize(math.erf)(x)
  pooled = np.zeros((1, 2, 2, 3))
  for i in range(2):
    for j in range(3):
      rows, cols = slice((i * 3) // 2, -(-(i + 1) * 3 // 2)), slice((j * 4) // 3, -(-(j + 1) * 4 // 3))
      pooled[:, :, i, j] = x[:, :, rows, cols].mean((-2, -1))
  softplus, sigmoid = np.log1p(np.exp(x)), 1 / (1 + np.exp(-x))
  gelu = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
  want = np.concatenate([gelu.ravel(), np.log1p(np.abs(x)).ravel(), erf.ravel(),
                         pooled.ravel(), [((softplus - sigmoid) ** 2).mean()],
                         np.log(np.exp(x).sum(-1)).ravel()])
  assert result["device"] == "WEBGPU" and result["shape"] == [want.size]
  np.testing.assert_allclose(np.array(result["data"], np.float64), want, rtol=2e-6, atol=2e-6)



# ops_util.softmax_edge_rows, in the page
SOFTMAX_EDGES_PROGRAM = """\\
import math
rows = [[((i * 7 + j * 13) % 17) / 4 - 2 for j in range(40)] for i in range(8)]
rows[0] = [-math.inf] * 40              # every value -inf: NaN, as numpy
rows[1][:17] = [-math.inf] * 17         # masked keys first, then finite values
rows[2][3] = math.nan
rows[3][5] = math.inf
rows[4] = [j * 3.0 for j in range(40)]  # the max comes last
rows[5][::2] = [-math.inf] * 20
x = Tensor(rows, dtype='float32')
out = EXPR
"""


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "exp"])
def test_softmax_edge_rows_in_the_page(app, name):  # noqa: F811
  """Softmax's exp2 without its overflow and NaN guards (EXP2_NONPOSITIVE, and EXP2_NAN_UNREAD
  in the online softmax's one loop: a row kernel of a thread per row on SwiftShader) in
  Chromium's SwiftShader, whose exp2 gives inf for NaN: rows of -inf, NaN and +inf still come
  out as numpy's (the online softmax's sum is made NaN where a NaN entered it)."""
  expr = {"softmax": "x.softmax(axis=1)", "log_softmax": "x.log_softmax(axis=1)",
          "exp": "(x - x.max(axis=1, keepdim=True)).exp()"}[name]
  result = app.evaluate(RUN, SOFTMAX_EDGES_PROGRAM.replace("EXPR", expr))
  assert "error" not in result, result
  x = np.array([[((i * 7 + j * 13) % 17) / 4 - 2 for j in range(40)] for i in range(8)])
  x = softmax_edge_rows(x).astype(np.float32).astype(np.float64)
  with np.errstate(invalid="ignore"):
    shifted = x - x.max(1, keepdims=True)
    e = np.exp(shifted)
    want = {"softmax": e / e.sum(1, keepdims=True),
            "log_softmax": shifted - np.log(e.sum(1, keepdims=True)), "exp": e}[name]
  assert result["device"] == "WEBGPU" and result["shape"] == [8, 40]
  got = np.array(result["data"], np.float64).reshape(8, 40)
  np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
