"""lowering/row_factor.py `factored`: a kernel that computes a norm's sum itself takes the norm's
factor out of the sums that read it only where that factor is the same for every element a sum
adds (a row factor); otherwise the kernel is left as it is (None)."""
from __future__ import annotations

import numpy as np

from kernelgen import Tensor
from kernelgen.graph.one_row import inlined
from kernelgen.graph.schedule import schedule
from kernelgen.lowering.reductions import nested_reduces, sibling_reduces
from kernelgen.lowering.row_factor import factor_stats, factored

X = np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32)


def _reader_and_norm(y: Tensor) -> tuple:
  """(the kernel computing y, the norm kernel it reads): y's two kernels."""
  norm, item = schedule([y.node])
  assert any(i is norm.out for i in item.inputs)
  return item, norm


def test_a_sum_over_the_rows_the_norm_scales_is_left_as_it_is():
  """z[k] = sum_s x[s, k] r[s]: r changes with the element the sum adds (its rows), so it is no
  factor of it, though r's sum and z's add as many elements (8)."""
  x = Tensor(X)
  r = ((x * x).mean(1, keepdim=True) + 1e-6).rsqrt()
  item, norm = _reader_and_norm((x * r).sum(0))
  joined = inlined(item, norm)
  assert factor_stats(next(n for n in _reduces(joined) if n.shape == (1, 8)))
  assert factored(joined) is None


def test_a_norm_read_by_a_matmul_becomes_a_sibling_of_its_sum():
  """y = x * r @ W, r the rows' rsqrt(mean(x^2) + eps): r's sum is nested in the matmul's
  source until factored, then a sum beside it over the matmul's own elements."""
  x, w = Tensor(X), Tensor(X.T.copy())
  r = ((x * x).mean(1, keepdim=True) + 1e-6).rsqrt()
  (item,) = schedule([((x * r) @ w).node])      # (static: the norm's sum nested in the matmul)
  assert nested_reduces(item)
  got = factored(item)
  assert got is not None and not nested_reduces(got) and sibling_reduces(got, set())


def _reduces(item) -> list:
  stop = {id(i) for i in item.inputs}
  out, stack, seen = [], [item.out], set()
  while stack:
    n = stack.pop()
    if id(n) in seen or id(n) in stop:
      continue
    seen.add(id(n))
    out += [n] if n.op.name == "REDUCE" else []
    stack.extend(n.src)
  return out
