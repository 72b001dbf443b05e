"""Lavapipe's uniform inlining settled in the page (issue 34): gpu.js gives each pipeline whose
shader reads uniforms (a symbolic kernel's dims) one dispatch of no workgroups with its dims at a
large value once it is built, as the native runtime does (runtime/uniform_inlining.py), on
lavapipe only: Chromium's compatibility mode on Mesa lavapipe (through ANGLE, an adapter that
describes nothing) settles, SwiftShader does not, and a kernel without uniforms never does. The
page builds a symbolic kernel's own pipeline first and each variant only when runs ask for it
(runtime/webgpu_browser.py pick: once the runs asking for it took its build's cost; a clock that
stands still here says they took none), so the variants are built here by hand (prepare), and
each is settled once as it is built. The counts come from gpu.js's `stats` (inliningSettles,
pipelinesMade); the settled kernel's values are checked at the range's ends and at a value that
divides no vector or lane count, before and after its variants exist. Nothing here is timed."""
from __future__ import annotations

import numpy as np
import pytest

from browser_util import launch_chromium, local_page
from test_demos import site  # noqa: F401 (a fixture)

pytestmark = pytest.mark.timeout(900)
VALUES = (1, 77, 1024)

PROGRAM = '''
import js
from pyodide.ffi import run_sync

import kernelgen as kg

runtime = kg.Device["WEBGPU"]
gpu = runtime.gpu
runtime.clock = lambda: 0.0   # the runs lose no time: no variant's build pays off (by hand only)


def counts():
  run_sync(js.Promise.all(getattr(js.Array, "from")(gpu.making.values())))   # builds done
  stats = gpu.stats.to_py()
  return [stats["inliningSettles"], stats["pipelinesMade"]]


start = counts()
static = Tensor([[1.0, 2.0, 3.0]] * 4).softmax(-1).realize().tolist()
got = [1 if gpu.settlesInlining else 0] + [a - b for a, b in zip(counts(), start)]
n = kg.Dim("n", 1, 1024)
for v in __VALUES__:
  before = counts()
  x = Tensor([[float((i * 5 + r) % 7 - 3) for i in range(v)] for r in range(4)])
  y = x.symbolic(4, n.bind(v)).softmax(-1)
  (kernel,) = kg.compile(y, **runtime.render_options())
  rows = y.realize().tolist()
  got += [v, 1 + len(kernel.variants)] + [a - b for a, b in zip(counts(), before)]
  got += [value for row in rows for value in row]
before = counts()
for _, _, variant in kernel.variants:   # built by hand: each settles once, as it is made
  runtime.prepare(variant)
got += [len(kernel.variants)] + [a - b for a, b in zip(counts(), before)]
for v in __VALUES__:   # now the variants run; nothing is built or settled again
  before = counts()
  x = Tensor([[float((i * 5 + r) % 7 - 3) for i in range(v)] for r in range(4)])
  rows = x.symbolic(4, n.bind(v)).softmax(-1).realize().tolist()
  got += [a - b for a, b in zip(counts(), before)] + [value for row in rows for value in row]
out = Tensor(got)
'''.replace("__VALUES__", repr(VALUES))

RUN = """async ([code, compatibility]) => {
  const { createKernelgen } = await import('/web/kernelgen.js');
  const kg = await createKernelgen({ base: '/', webgpu: true, compatibility });
  const r = await kg.run(code, { device: 'WEBGPU' });
  return Array.from(r.data, Number); }"""


@pytest.fixture(scope="module")
def lavapipe(playwright):
  browser = launch_chromium(playwright, lavapipe=True)
  yield browser
  browser.close()


def _run(browser, site, compatibility: bool) -> list:  # noqa: F811
  with local_page(browser, service_workers="block") as page:
    page.goto(site.url("web/README.md"))    # any page of the origin
    page.set_default_timeout(600_000)
    return page.evaluate(RUN, [PROGRAM, compatibility])


def _softmax_np(v: int) -> np.ndarray:
  x = np.array([[float((i * 5 + r) % 7 - 3) for i in range(v)] for r in range(4)])
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _check(got: list) -> tuple[list, tuple, list]:
  """([(settles, pipelines made, pipelines of the kernel)] per value on the first runs,
  (variants, settles, made) for building the variants, [(settles, made)] per value on the runs
  after); every value checked against numpy."""
  at, first, again = 3, [], []
  for v in VALUES:
    value, pipelines, settles, made = got[at:at + 4]
    assert value == v, got
    rows = np.array(got[at + 4:at + 4 + 4 * v]).reshape(4, v)
    np.testing.assert_allclose(rows, _softmax_np(v), rtol=1e-5, atol=1e-6)
    first.append((int(settles), int(made), int(pipelines)))
    at += 4 + 4 * v
  variants = tuple(int(c) for c in got[at:at + 3])
  at += 3
  for v in VALUES:
    rows = np.array(got[at + 2:at + 2 + 4 * v]).reshape(4, v)
    np.testing.assert_allclose(rows, _softmax_np(v), rtol=1e-5, atol=1e-6)
    again.append((int(got[at]), int(got[at + 1])))
    at += 2 + 4 * v
  assert at == len(got), (at, len(got))
  return first, variants, again


def test_lavapipe_settles_each_pipeline_with_uniforms_once(site, lavapipe):  # noqa: F811
  got = _run(lavapipe, site, compatibility=True)
  assert got[0] == 1, got[:3]                   # the adapter is taken for lavapipe
  assert got[1] == 0 and got[2] >= 1, got[:3]    # a static kernel: built, not settled
  first, variants, again = _check(got)
  assert first[0][2] >= 2 and first[0][:2] == (1, 1), first    # the kernel alone, settled
  assert all(row[:2] == (0, 0) for row in first[1:]), first      # built once
  assert variants[0] == first[0][2] - 1 >= 1 and variants[1] == variants[2] == variants[0], \
    variants                                                     # each variant settled once
  assert all(row == (0, 0) for row in again), again


def test_swiftshader_settles_nothing(site, chromium):  # noqa: F811
  got = _run(chromium, site, compatibility=False)
  assert got[0] == 0 and got[1] == 0, got[:3]
  first, variants, again = _check(got)
  assert first[0][1] == 1 and all(row[:2] == (0, 0) for row in first[1:]), first
  assert all(row[0] == 0 for row in first), first
  assert variants[1] == 0 and variants[2] == variants[0] == first[0][2] - 1, variants
  assert all(row == (0, 0) for row in again), again
