"""Symbolic sizes in the page (headless Chromium, SwiftShader WebGPU, kernelgen.js in the digits
demo's page): a kernel over a symbolic size launches only the workgroups its bound value needs
(gpu.js counts the workgroups it dispatches in `stats`), the same count as launch_dispatch gives
for its Launch, and computes the right values at the range's ends and at a value that divides
no workgroup; one compile serves them all. Nothing here is timed."""
from __future__ import annotations

import numpy as np
import pytest

from test_demos import run_in_demo, site  # noqa: F401 (site: a fixture)

pytestmark = pytest.mark.timeout(900)
VALUES = (1, 77, 1024)

PROGRAM = '''
import kernelgen as kg
from kernelgen.uop.program import launch_dispatch

n = kg.Dim("n", 1, 1024)
gpu = kg.Device["WEBGPU"].gpu
got = []
for v in __VALUES__:
  x = Tensor([[float(i * 8 + j) for j in range(8)] for i in range(v)]).symbolic(n.bind(v), 8)
  y = x * 2 + 1
  (kernel,) = kg.compile(y)
  before = gpu.stats.to_py()["workgroups"]
  rows = y.realize().tolist()
  after = gpu.stats.to_py()["workgroups"]
  got += [v, after - before, launch_dispatch(kernel.launch, {"n": v})[0],
          kernel.launch.dispatch[0], float(sum(sum(r) for r in rows)), len(rows),
          kg.cache_info()["misses"]]
out = Tensor(got)
'''.replace("__VALUES__", repr(VALUES))


def test_a_symbolic_size_launches_only_the_workgroups_it_needs(site, chromium):  # noqa: F811
  got = run_in_demo(chromium, site, "digits", PROGRAM)
  rows = np.array(got).reshape(len(VALUES), 7)
  for v, launched, want, full, total, length, _ in rows:
    assert length == v and total == (np.arange(int(v) * 8) * 2 + 1).sum()
    assert launched == want, rows
  launched = rows[:, 1]
  assert launched[0] < launched[1] < launched[2] == rows[0, 3], rows
  assert rows[1, 6] == rows[0, 6] and rows[2, 6] == rows[0, 6], rows   # compiled once


COLS = '''
import kernelgen as kg
from kernelgen.uop.program import launch_dispatch, variant_for

n = kg.Dim("n", 1, 1024)
runtime = kg.Device["WEBGPU"]
gpu = runtime.gpu
a = Tensor([[float((i * 8 + j) % 7 - 3) for j in range(8)] for i in range(32)]).realize()
got = []
for v in __VALUES__:
  x = Tensor([[float((i * v + j) % 5 - 2) for j in range(v)] for i in range(8)]).symbolic(8, n.bind(v))
  y = a @ x
  (kernel,) = kg.compile(y, **runtime.render_options())
  before = gpu.stats.to_py()["workgroups"]
  rows = y.realize().tolist()
  after = gpu.stats.to_py()["workgroups"]
  picked = variant_for(kernel, {"n": v})
  got += [v, after - before, launch_dispatch(picked.launch, {"n": v})[0], len(kernel.variants),
          float(sum(sum(r) for r in rows)), len(rows[0]), launch_dispatch(kernel.launch, {"n": v})[0]]
out = Tensor(got)
'''.replace("__VALUES__", repr(VALUES))


def test_a_symbolic_n_matmul_runs_its_variant_and_grid_in_the_page(site, chromium):  # noqa: F811
  """(32, 8) @ (8, n) in the page's worker runtime (webgpu_browser.py): each value runs with
  only the workgroups its grid needs, from the kernel itself or, once built, the variant the
  value picks (variant_for: a smaller tile for n = 1; a variant not built is never dispatched:
  lazy variants, tests/page/test_lazy_variants_page.py). SwiftShader's n = 77 variant spreads
  over 5 workgroups where the kernel itself launches 1 there, so the two are told apart."""
  got = run_in_demo(chromium, site, "digits", COLS)
  rows = np.array(got).reshape(len(VALUES), 7)
  a = np.array([[float((i * 8 + j) % 7 - 3) for j in range(8)] for i in range(32)])
  for v, launched, want, variants, total, length, itself in rows:
    x = np.array([[float((i * int(v) + j) % 5 - 2) for j in range(int(v))] for i in range(8)])
    assert length == v and total == (a @ x).sum(), rows
    assert launched in (want, itself) and variants > 0, rows
  # (n = 77's 32 x 77 outputs are under TILE_MIN_SIZE: SwiftShader's small_tiles puts them in one
  # workgroup, as n = 1's; n = 1024 takes more)
  assert rows[0, 1] <= rows[1, 1] < rows[2, 1], rows
