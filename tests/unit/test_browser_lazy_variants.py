"""The page's WEBGPU runtime (runtime/webgpu_browser.py) builds a symbolic kernel's variants
only once realizes ask for them (issue 37), with a stand-in for gpu.js: prepare() starts the
kernel's own pipeline only; pick() runs the kernel until the variant that the bound values select
is built; at a read (build_next) every variant asked for since the previous read is charged its
kernels' share of the wall time since the first run (their estimated work over the runs', Launch
.work) and queued once its charges reach its build cost (ski rental: its WGSL bytes x the build
rate: what the background builds so far added to the reads they overlapped, per byte
(build_rate), before any gpu.js's measured wall build rate, DEFAULT_MS_PER_BYTE before any
build); build_next starts the
queued builds one at a time, and pick never returns a variant whose pipeline is not built. A fake
clock and build rate make the decision deterministic."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.errors import KernelgenError
from kernelgen.runtime.webgpu_browser import DEFAULT_MS_PER_BYTE, BrowserWebGPU
from kernelgen.uop.program import variant_for


class FakeGpu:
  """gpu.js's prepare / pipelineState, keyed by source and entry point as gpu.js keys them."""

  def __init__(self):
    self.state: dict = {}
    self.prepared: list = []
    self.stats = SimpleNamespace(pipelineBusyMs=0.0, pipelineBytes=0)

  def prepare(self, launch):
    key = (launch["source"], launch["entry_point"])
    if key not in self.state:
      self.prepared.append(key)
      self.state[key] = "making"

  def pipelineState(self, launch):  # noqa: N802 (gpu.js's name)
    return self.state.get((launch["source"], launch["entry_point"]), "none")

  def finish(self):
    self.state = dict.fromkeys(self.state, "ready")


class Clock:
  """A fake clock (ms): reads `now`, which the test moves."""

  def __init__(self):
    self.now = 0.0

  def __call__(self) -> float:
    return self.now


def _runtime():
  runtime = object.__new__(BrowserWebGPU)    # no Pyodide here: only what pick reads
  runtime.gpu, runtime.launches, runtime.asked = FakeGpu(), {}, {}
  runtime.queued, runtime.background, runtime.asking, runtime.since = {}, None, {}, None
  runtime.work, runtime.time, runtime.ran, runtime.shape = 0.0, 0.0, [], []
  runtime.rates, runtime.last = {}, {}
  runtime.clean, runtime.during, runtime.overlapped, runtime.picked = {}, {}, set(), []
  runtime.foreground = [0.0, 0]
  runtime.clock = Clock()
  runtime._launch = lambda kernel: (kernel.launch.to_json(), kernel.launch.to_json())
  return runtime


def _matmul():
  n = kg.Dim("n", 1, 4096)
  y = kg.Tensor(np.ones((32, 8), np.float32)).realize() @ kg.Tensor.empty(8, n, name="x")
  (kernel,) = kg.compile(y, target="wgsl")
  return kernel


def test_a_variant_is_built_once_its_runs_took_its_build_cost_and_used_only_once_built():
  kernel = _matmul()
  wanted = variant_for(kernel, {"n": 100})
  assert wanted is not kernel and len(kernel.variants) >= 2
  runtime = _runtime()
  runtime.prepare(kernel)
  assert len(runtime.gpu.prepared) == 1 and runtime.ready(kernel) is False
  # the kernel's build took 2 ms per byte: the variant costs 2 x its bytes; a run takes 40% of it
  runtime.gpu.stats.pipelineBusyMs = 2.0 * len(kernel.launch.source)
  runtime.gpu.stats.pipelineBytes = len(kernel.launch.source)
  runtime.gpu.finish()
  assert runtime.ready(kernel) and runtime.ms_per_byte() == 2.0
  cost = 2.0 * len(wanted.launch.source)
  for ask in range(1, 4):
    values = {"n": 100}         # one realize: its runs ask once, charged from the first ask
    assert runtime.pick(kernel, values) is kernel
    runtime.clock.now += 0.4 * cost
    assert runtime.pick(kernel, values) is kernel
    assert not runtime.queued and len(runtime.gpu.prepared) == 1, ask
    runtime.clock.now += 7.0    # the read: the realize took 0.4 x the cost and 7 ms
    runtime.build_next()
    assert runtime.asked[id(wanted)][1] == ask * (0.4 * cost + 7.0)
    # charged 0.8 x the cost + 14 ms after two: not yet (the variant is over 70 bytes);
    # 1.2 x after three: its build starts
    assert len(runtime.gpu.prepared) == (2 if ask == 3 else 1), ask
  assert not runtime.queued and runtime.background is wanted
  runtime.clock.now += 10 * cost       # time between realizes that ask nothing is not charged
  assert runtime.pick(kernel, {"n": 100}) is kernel      # building: the kernel stands in
  runtime.build_next()
  assert len(runtime.gpu.prepared) == 2 and not runtime.asking
  runtime.gpu.finish()
  assert runtime.pick(kernel, {"n": 100}) is wanted
  # n = 1's own variant is asked once, by a run shorter than its cost: not built; the built
  # one whose range holds 1 runs it
  assert runtime.pick(kernel, {"n": 1}) is wanted
  runtime.clock.now += 1.0
  runtime.build_next()
  assert len(runtime.gpu.prepared) == 2 and runtime.pick(kernel, {"n": 4096}) is kernel


def test_before_any_build_is_timed_the_default_rate_prices_a_variant():
  kernel = _matmul()
  wanted = variant_for(kernel, {"n": 100})
  runtime = _runtime()
  runtime.prepare(kernel)
  runtime.gpu.finish()
  # nothing timed yet: the default rate
  assert runtime.ms_per_byte() == DEFAULT_MS_PER_BYTE
  cost = DEFAULT_MS_PER_BYTE * len(wanted.launch.source)
  runtime.clock.now = 500.0      # the time before the first ask is not charged
  assert runtime.pick(kernel, {"n": 100}) is kernel
  runtime.clock.now += cost - 1.0   # one realize, 1 ms short of the cost: not bought
  runtime.build_next()
  assert len(runtime.gpu.prepared) == 1
  runtime.gpu.finish()
  values = {"n": 100}
  runtime.pick(kernel, values)
  runtime.clock.now += 2.0
  runtime.build_next()          # the next, 2 ms: past the cost, bought
  assert runtime.gpu.prepared[-1] == (wanted.launch.source, wanted.launch.entry_point)


def test_queued_variants_build_one_at_a_time_the_shortest_first():
  kernel = _matmul()
  variants = [v for _, _, v in kernel.variants]
  runtime = _runtime()
  runtime.queued = {id(v): v for v in variants}
  shortest = min(variants, key=lambda v: len(v.launch.source))
  runtime.build_next()
  assert runtime.gpu.prepared == [(shortest.launch.source, shortest.launch.entry_point)]
  runtime.build_next()          # the first is still building: nothing more starts
  assert len(runtime.gpu.prepared) == 1
  runtime.gpu.finish()
  runtime.build_next()
  assert len(runtime.gpu.prepared) == 2 and len(runtime.queued) == len(variants) - 2


def _matmul_k(k: int):
  """(32, k) @ (k, n): 32 x k x n multiply-adds at n (Launch.work)."""
  n = kg.Dim("n", 1, 4096)
  a = np.ones((32, k), np.float32)
  (kernel,) = kg.compile(kg.Tensor(a).realize() @ kg.Tensor.empty(k, n, name="x"), target="wgsl")
  return kernel


def test_the_compiler_estimates_each_kernels_work_at_the_bound_values(tmp_path):
  """Launch.work: a matmul's multiply-adds at n; it travels in the launch's JSON and an
  exported manifest (model.js reads it), and loads back with the bundle."""
  from kernelgen.uop.program import launch_work, work_from_json
  from kernelgen.uop.program import launch_dispatch
  big = _matmul_k(512)
  (terms, const, per, *_), = big.launch.grid
  for c in (1, 7, 100, 4096):     # times the padding its grid launches at n (whole tiles)
    need = const + sum(k * c for _, k in terms)
    padding = max(1, launch_dispatch(big.launch, {"n": c})[0] * per / need)
    assert launch_work(big.launch, {"n": c}) == 32 * 512 * c * padding, c
  # at n = 1 the kernel's tiles are mostly padding (what its variant for n = 1 saves)
  assert launch_work(big.launch, {"n": 1}) > 2 * 32 * 512
  assert work_from_json(big.launch.to_json()["work"]) == big.launch.work
  n = kg.Dim("n", 1, 4096)
  y = kg.Tensor(np.ones((32, 512), np.float32)).realize() @ kg.Tensor.empty(512, n, name="x")
  kg.export({"y": y}, str(tmp_path / "b"), format="webgpu")
  path = tmp_path / "b" / "manifest.json"
  manifest = json.loads(path.read_text())
  assert work_from_json(manifest["kernels"][0]["work"]) == big.launch.work
  kg.load_bundle(str(tmp_path / "b"))
  manifest["kernels"][0]["work"] = [[["n", "1"]], 0]
  path.write_text(json.dumps(manifest))
  with pytest.raises(KernelgenError, match="work"):
    kg.load_bundle(str(tmp_path / "b"))
  # without an estimate (a bundle exported before): the threads it launches at n
  import dataclasses
  bare = dataclasses.replace(big.launch, work=())
  threads = np.prod(launch_dispatch(bare, {"n": 100})) * np.prod(bare.workgroup_size)
  assert launch_work(bare, {"n": 100}) == threads


def test_a_read_charges_each_variant_its_kernels_share_of_the_time_by_their_work():
  """One realize runs a big matmul (32 x 512 x n) and a small one (32 x 8 x n), each asking
  its variant for n = 100: the read's time T is shared out by their work (launch_work: about
  512 : 8), so the big one's variant, costing 0.9 T, is bought at the first read and the small
  one's, whose kernel is about 1/65 of the run, only once its runs have lost its cost (charged T
  each before: both bought at once; shared equally: neither)."""
  from kernelgen.uop.program import launch_work
  big, small = _matmul_k(512), _matmul_k(8)
  works = [launch_work(k.launch, {"n": 100}) for k in (big, small)]
  assert works[0] > 0.9 * sum(works) and works[1] < 0.1 * sum(works), works
  wanted = [variant_for(big, {"n": 100}), variant_for(small, {"n": 100})]
  runtime = _runtime()
  runtime.prepare(big)
  runtime.prepare(small)
  runtime.gpu.finish()
  run_ms = 1000.0
  rate = 0.9 * run_ms / len(wanted[0].launch.source)
  runtime.gpu.stats.pipelineBusyMs, runtime.gpu.stats.pipelineBytes = rate * 1000, 1000
  small_cost = rate * len(wanted[1].launch.source)
  share = run_ms * works[1] / sum(works)
  assert small_cost > 2 * share, (small_cost, share)
  reads = 0
  while id(wanted[1]) not in runtime.queued and reads < 200:
    reads += 1
    values = {"n": 100}
    assert runtime.pick(big, values) in (big, wanted[0]) and runtime.pick(small, values) is small
    runtime.clock.now += run_ms
    runtime.charge()
    if reads == 1:
      assert runtime.asked[id(wanted[0])][1] == pytest.approx(run_ms * works[0] / sum(works))
      assert runtime.asked[id(wanted[1])][1] == pytest.approx(share)
      assert list(runtime.queued) == [id(wanted[0])]
  # the small variant: bought at the read where its shares reach its cost, not before
  assert reads == int(np.ceil(small_cost / share - 1e-9)), (reads, small_cost, share)
  assert runtime.asked[id(wanted[1])][1] == pytest.approx(reads * share)
  # a run of one kernel is charged its whole time, as before
  runtime.pick(small, {"n": 100})
  runtime.clock.now += 5.0
  runtime.charge()
  assert runtime.asked[id(wanted[1])][1] == pytest.approx(reads * share + 5.0)


def _read(runtime, kernel, values: dict, ms: float):
  """One realize of `kernel` at `values` taking `ms`, then its read (build_next)."""
  taken = runtime.pick(kernel, values)
  runtime.clock.now += ms
  runtime.build_next()
  return taken


def _background_build(held_up_ms: float, same_like: bool = True):
  """A runtime whose driver took 1000 ms per byte at load (the wall rate: no variant's share of
  a 50 ms read pays for it), one read of a big matmul at n = 4096 (no variant) taking 100 ms,
  then a variant of a small matmul built in the background during a second read, which takes
  `held_up_ms` more (of the same kernels where `same_like`, else of another one)."""
  big, small = _matmul_k(512), _matmul_k(8)
  runtime = _runtime()
  runtime.prepare(big)
  runtime.prepare(small)
  runtime.gpu.finish()
  runtime.gpu.stats.pipelineBusyMs, runtime.gpu.stats.pipelineBytes = 1000.0 * 1000, 1000
  built = variant_for(small, {"n": 1})
  _read(runtime, big, {"n": 4096}, 100.0)       # the base: 100 ms, no build under way
  runtime.queued = {id(built): built}
  runtime.build_next()                          # its build starts after that read
  assert runtime.gpu.prepared[-1][0] == built.launch.source
  _read(runtime, big if same_like else small, {"n": 4096}, 100.0 + held_up_ms)
  runtime.gpu.finish()                          # built during that read
  _read(runtime, big, {"n": 4096}, 100.0)       # the read after: the build is measured
  return runtime, big, built


def test_a_build_the_runs_went_on_beside_prices_variants_at_what_it_cost_them():
  """The driver compiled beside the runs (lavapipe's prefill, issue 37): the read during the
  build took as long as before, so builds cost the runs nothing and the next variant asked is
  bought at its first read, where the wall rate (1000 ms per byte) would wait ~10^5 reads."""
  runtime, big, _ = _background_build(0.0)
  assert runtime.build_rate() == 0.0 and runtime.ms_per_byte() == 1000.0
  wanted = variant_for(big, {"n": 100})
  assert _read(runtime, big, {"n": 100}, 50.0) is big
  assert runtime.gpu.prepared[-1][0] == wanted.launch.source
  runtime.gpu.finish()
  assert runtime.pick(big, {"n": 100}) is wanted


def test_a_build_that_held_the_runs_up_prices_variants_at_the_time_it_added():
  """The build held the read during it up by 30 ms (a driver compiling on the runs' thread:
  SwiftShader): each byte of a variant costs 30 ms over the built one's bytes, and the next
  variant asked is bought at the read where its shares reach that, not before."""
  runtime, big, built = _background_build(30.0)
  rate = 30.0 / len(built.launch.source)
  assert runtime.build_rate() == pytest.approx(rate)
  wanted = variant_for(big, {"n": 100})
  cost, before = rate * len(wanted.launch.source), len(runtime.gpu.prepared)
  reads = 0
  while len(runtime.gpu.prepared) == before and reads < 100:
    reads += 1
    _read(runtime, big, {"n": 100}, 10.0)       # a run of one kernel: charged its 10 ms
  assert reads == int(np.ceil(cost / 10.0 - 1e-9)) > 1, (reads, cost)
  assert runtime.gpu.prepared[-1][0] == wanted.launch.source


def test_a_build_during_reads_of_no_known_like_is_not_measured():
  """A read during the build whose kernels never ran without one has no base: the build is not
  measured, and variants stay priced at the wall rate."""
  runtime, _, _ = _background_build(0.0, same_like=False)
  assert runtime.foreground == [0.0, 0] and runtime.build_rate() == 1000.0


def test_a_built_variant_is_weighed_by_its_own_launch_so_it_stops_absorbing_the_charge():
  """Issue 37, lavapipe's prefill: the LM head (1 row) runs its built variant, fast, while the
  base kernel's estimate counts whole tiles of padding (~75 % of the prefill's work): a run's time
  is shared out by the work of the launch that runs (the variant's own grid: launch_work), so the
  unbuilt variant asked for beside it is charged nearly the whole run, not the head's leftover."""
  from kernelgen.uop.program import launch_work
  head, body = _matmul_k(512), _matmul_k(64)
  fast = variant_for(head, {"n": 1})
  wanted = variant_for(body, {"n": 100})
  padded, own = launch_work(head.launch, {"n": 1}), launch_work(fast.launch, {"n": 1})
  work = launch_work(body.launch, {"n": 100})
  assert padded > 5 * work > 5 * own, (padded, work, own)   # the base's padding dwarfs the body
  runtime = _runtime()
  for kernel in (head, body, fast):
    runtime.prepare(kernel)
  runtime.gpu.finish()                        # the head's variant for n = 1 is built
  runtime.gpu.stats.pipelineBusyMs, runtime.gpu.stats.pipelineBytes = 1e9, 1
  run_ms = 1000.0
  assert runtime.pick(head, {"n": 1}) is fast and runtime.pick(body, {"n": 100}) is body
  runtime.clock.now += run_ms
  runtime.charge()
  assert runtime.asked[id(wanted)][1] == pytest.approx(run_ms * work / (work + own))
  assert runtime.asked[id(wanted)][1] > 0.8 * run_ms     # (the padded estimate: < 0.2 of it)


def test_a_built_variant_is_charged_its_measured_time_not_its_work_share():
  """Issue 37, lavapipe's prefill: a built variant of the same work as its kernel (no padding at
  the value) runs ~10x faster, yet counted its kernel's work and so absorbed the charge of the
  unbuilt variants beside it. Measured instead: a read of 1000 ms takes both kernels; once the
  first one's variant is built the same read takes 1100 ms (its first use: the driver's compile),
  then 400 ms, so that variant's runs take what its kernel's took (its work share) less the
  600 ms saved, its rate (measured again at each read); the next read charges the second
  kernel's unbuilt variant its share of the time under that rate."""
  from kernelgen.uop.program import launch_work
  first, second = _matmul_k(512), _matmul_k(128)
  built, wanted = variant_for(first, {"n": 100}), variant_for(second, {"n": 100})
  works = [launch_work(k.launch, {"n": 100}) for k in (first, second, built)]
  runtime = _runtime()
  for kernel in (first, second):
    runtime.prepare(kernel)
  runtime.gpu.finish()
  runtime.gpu.stats.pipelineBusyMs, runtime.gpu.stats.pipelineBytes = 1e9, 1   # never bought

  def read(ms):
    taken = [runtime.pick(k, {"n": 100}) for k in (first, second)]
    runtime.clock.now += ms
    runtime.build_next()
    return taken
  assert read(1000.0) == [first, second]
  runtime.prepare(built)            # built (not in the background: no read overlapped it)
  runtime.gpu.finish()
  assert read(1100.0) == [built, second]
  took = 1000.0 * works[0] / (works[0] + works[1])      # the first kernel's share, then
  assert runtime.rates[id(built)][1] == pytest.approx(works[0] / works[2])   # no saving yet
  read(400.0)
  rate = (took - 600.0) / took * works[0] / works[2]
  assert runtime.rates[id(built)][1] == pytest.approx(rate)
  before = runtime.asked[id(wanted)][1]
  read(400.0)
  charged = runtime.asked[id(wanted)][1] - before
  assert charged == pytest.approx(400.0 * works[1] / (works[1] + rate * works[2]))
  assert charged > 2 * 400.0 * works[1] / (works[1] + works[2])    # its work share: < half
