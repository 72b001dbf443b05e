"""graph/schedule.py's re-read rule (REREAD_LOADS) counts no load of a one-element source: an
elementwise expression of scalars (a run's key count, a cache length) read through a broadcast
loads the same elements for every output, so it fuses into its reader (issue 35: a decode step's
attention mask, computed by every attention kernel, no kernel of its own). The same expression
over vectors, re-read, still gets a kernel of its own. Values as numpy's."""
from __future__ import annotations

import numpy as np

import kernelgen as kg

LOADS = 9          # above REREAD_LOADS (8)


def _chain(width: int) -> tuple:
  """(lazy e, numpy e): e = (...((x0 * 0.5 + x1) * 0.5 + x2)...) over LOADS inputs of `width`."""
  arrays = [np.arange(width, dtype=np.float32) + i + 1 for i in range(LOADS)]
  e, want = kg.Tensor(arrays[0], device="PYTHON"), arrays[0]
  for a in arrays[1:]:
    e, want = e * 0.5 + kg.Tensor(a, device="PYTHON"), want * np.float32(0.5) + a
  return e, want


def test_scalar_expression_reread_by_a_broadcast_fuses():
  e, want = _chain(1)
  x = np.arange(16, dtype=np.float32).reshape(4, 4)
  y = kg.Tensor(x, device="PYTHON") + e.reshape(1, 1).expand(4, 4)
  assert len(kg.compile(y, target="python")) == 1
  np.testing.assert_allclose(y.numpy(), x + want.reshape(1, 1), rtol=1e-6)


def test_vector_expression_reread_by_a_broadcast_keeps_its_kernel():
  e, want = _chain(4)
  x = np.arange(16, dtype=np.float32).reshape(4, 4)
  y = kg.Tensor(x, device="PYTHON") + e.reshape(4, 1).expand(4, 4)
  assert len(kg.compile(y, target="python")) == 2
  np.testing.assert_allclose(y.numpy(), x + want.reshape(4, 1), rtol=1e-6)
