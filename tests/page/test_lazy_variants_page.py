"""The page's own runtime builds a symbolic kernel's variants lazily (issue 37; lowering/variants.py,
runtime/webgpu_browser.py pick), as an exported bundle does (test_export_lazy_variants.py): a
realize prepares the kernel's own pipeline only (it serves every bound value); a variant is asked
for by each realize whose bound value it would take, charged at the read its kernel's share of the
realize's time (here all of it: one kernel), and once its charges reach its build cost (ski
rental: its WGSL bytes x the build rate) its pipeline is built in the background
(createComputePipelineAsync) after that read, while the kernel stands in; the realizes after the
build run it.
Headless Chromium (SwiftShader), the page's kg.run; every result equals numpy. Nothing is timed:
a stand-in clock makes each realize take RUN_MS and a stand-in rate makes n = 100's variant cost
2.5 realizes, and the program waits for the builds in flight (gpu.js `making`) where it says so."""
from __future__ import annotations

import numpy as np
import pytest

from test_demos import open_demo, site  # noqa: F401 (site: a fixture)

pytestmark = pytest.mark.timeout(900)

# n = 100 three times (charged 1, 2 and 3 realizes: its variant's build starts after the third's
# read, the kernel runs), then after the build (the variant runs); then 1000 and 1 once each
SIZES = (100, 100, 100, 100, 100, 1000, 1)
RUN_MS = 1000.0

PROGRAM = '''
import kernelgen as kg
import js
from pyodide.ffi import run_sync
gpu = kg.Device["WEBGPU"].gpu
kg.limits.set(page_seconds=1800)    # a loaded machine builds slowly; nothing here is timed

def builds_done():
  run_sync(js.Promise.all(getattr(js.Array, "from")(gpu.making.values())))

runtime = kg.Device["WEBGPU"]
picked = []     # per kernel run: [0 for the kernel or i + 1 for its variant i, its build's state]
pick = getattr(runtime, "pick", None)
seen = []       # the kernel
now = [0.0]     # the stand-in clock (ms): each realize takes __RUN_MS__ before its read

def rate():     # ms per WGSL byte: n = 100's variant costs 2.5 realizes
  from kernelgen.uop.program import variant_for
  return 2.5 * __RUN_MS__ / len(variant_for(seen[0], {"n": 100}).launch.source)

runtime.clock = lambda: now[0]
runtime.ms_per_byte = rate
runtime.build_rate = rate   # (what the builds cost the runs: not measured here)

def spy(kernel, values):
  seen[:] = [kernel]
  chosen = pick(kernel, values)
  runs = [kernel] + [v for _, _, v in kernel.variants]
  picked.append([next(i for i, k in enumerate(runs) if k is chosen),
                 {"ready": 1, "making": 2}.get(str(gpu.pipelineState(runtime._launch(chosen)[1])), 0)])
  return chosen

runtime.pick = spy
kg.clear_cache()
n = kg.Dim("n", 1, 4096)
a = Tensor([[((i * 8 + j) % 13) / 7 - 0.9 for j in range(8)] for i in range(32)]).realize()
y = None
flat, pipes, making, groups, started = [], [], [], [], []
for step, c in enumerate(__SIZES__):
  x = Tensor([[((i * c + j) % 11) / 5 - 1 for j in range(c)] for i in range(8)])
  x = x.symbolic(8, n.bind(c)).realize()
  builds_done()
  before, known = gpu.stats.workgroups, gpu.pipelines.size + gpu.making.size
  y = (a @ x).realize()
  now[0] += __RUN_MS__
  groups.append(gpu.stats.workgroups - before)
  pipes.append(gpu.pipelines.size + gpu.making.size - known)  # pipelines this realize asked for
  making.append(gpu.making.size)           # read before the page waits for anything (tolist)
  for row in y.tolist():
    flat += row
  started.append(gpu.making.size)          # builds under way once the result is read
  if step == 2:
    builds_done()
from kernelgen.uop.program import variant_for
sizes = [len(variant_for(seen[0], {"n": c}).launch.source) for c in (100, 1)]
out = Tensor(flat + pipes + making + groups + started + [i for p in picked for i in p] + sizes)
'''.replace("__SIZES__", repr(SIZES)).replace("__RUN_MS__", repr(RUN_MS))


def _operands(c: int):
  a = np.array([[((i * 8 + j) % 13) / 7 - 0.9 for j in range(8)] for i in range(32)], np.float32)
  x = np.array([[((i * c + j) % 11) / 5 - 1 for j in range(c)] for i in range(8)], np.float32)
  return a, x


def test_the_page_builds_a_variant_only_once_runs_ask_for_it_and_then_runs_it(site, chromium):  # noqa: F811
  manager, page = open_demo(chromium, site, "digits")
  try:
    page.set_default_timeout(800_000)
    got = np.array(page.evaluate(
      "async (code) => { const { createKernelgen } = await import('/web/kernelgen.js'); "
      "const kg = await createKernelgen({ base: '/', webgpu: true }); "
      "const r = await kg.run(code, {device: 'WEBGPU'}); "
      "if (r.error) throw new Error(JSON.stringify(r.error)); return Array.from(r.data, Number); }",
      PROGRAM))
    assert page.console_errors == [], page.console_errors
  finally:
    manager.__exit__(None, None, None)
  at = 0
  for step, c in enumerate(SIZES):
    a, x = _operands(c)
    np.testing.assert_allclose(got[at:at + 32 * c].reshape(32, c), a @ x, rtol=1e-4, atol=1e-4,
                               err_msg=f"run {step}, n = {c}")
    at += 32 * c
  k = len(SIZES)
  pipes, making, groups, started = (list(got[at + i * k:at + (i + 1) * k].astype(int))
                                    for i in range(4))
  # the first run builds the kernel's own pipeline only (before issue 37: all its variants too)
  assert pipes[0] == 1 and making[0] <= 1, (pipes, making, groups)
  picked = got[at + 4 * k:-2].astype(int).reshape(-1, 2)
  assert len(picked) == k, picked      # one kernel per run (pick: the page runtime's choice)
  # n = 1's own variant costs more than one realize (2.5 x its share of n = 100's bytes)
  bytes100, bytes1 = got[-2:]
  assert 2.5 * bytes1 / bytes100 > 1, (bytes100, bytes1)
  chosen, state = picked.T
  # the second and third runs at n = 100 ask for its variant again, and run the kernel; the
  # variant's build starts once the third run's result is read (charged 3 realizes, past its
  # cost of 2.5), none after the first two reads
  assert pipes[1:3] == [0, 0] and list(chosen[:3]) == [0, 0, 0], (pipes, making, picked)
  assert started[:3] == [0, 0, 1], (started, picked)
  # once built (the program waits for it before run 3), the runs at n = 100 take the variant
  variant = chosen[3]
  assert variant > 0 and list(chosen[3:5]) == [variant] * 2, picked
  assert pipes[3:5] == [0, 0], (pipes, making, picked)
  # n = 1000 and n = 1, asked for once each, build nothing; n = 1 takes a built variant whose
  # range holds it (n = 100's at the latest), not its own n = 1 variant; n = 1000 takes the
  # kernel or a variant whose pipeline is built already (variants may share one WGSL source)
  assert pipes[5:] == [0, 0] and 0 < chosen[6] <= variant, (pipes, picked)
  assert started[5:] == [0, 0], (started, picked)
  # a variant runs only once its pipeline is built
  assert all(s == 1 for c, s in picked if c > 0), picked
