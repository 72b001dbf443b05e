"""The page's WEBGPU runtime (runtime/webgpu_browser.py) builds a symbolic kernel's variants
only once realizes ask for them (issue 37), with a stand-in for gpu.js: prepare() starts the
kernel's own pipeline only; pick() runs the kernel until the variant that the bound values select
is built, queues that build once two realizes have asked for it (BUILD_AFTER), build_next (after
a read) starts the queued builds one at a time, and pick never returns a variant whose pipeline
is not built."""
from __future__ import annotations

import numpy as np

import kernelgen as kg
from kernelgen.runtime.webgpu_browser import BUILD_AFTER, BrowserWebGPU
from kernelgen.uop.program import variant_for


class FakeGpu:
  """gpu.js's prepare / pipelineState, keyed by source and entry point as gpu.js keys them."""

  def __init__(self):
    self.state: dict = {}
    self.prepared: list = []

  def prepare(self, launch):
    key = (launch["source"], launch["entry_point"])
    if key not in self.state:
      self.prepared.append(key)
      self.state[key] = "making"

  def pipelineState(self, launch):  # noqa: N802 (gpu.js's name)
    return self.state.get((launch["source"], launch["entry_point"]), "none")

  def finish(self):
    self.state = dict.fromkeys(self.state, "ready")


def _runtime():
  runtime = object.__new__(BrowserWebGPU)    # no Pyodide here: only what pick reads
  runtime.gpu, runtime.launches, runtime.asked = FakeGpu(), {}, {}
  runtime.queued, runtime.background = {}, None
  runtime._launch = lambda kernel: (kernel.launch.to_json(), kernel.launch.to_json())
  return runtime


def test_variants_are_built_once_asked_for_and_used_only_once_built():
  n = kg.Dim("n", 1, 4096)
  y = kg.Tensor(np.ones((32, 8), np.float32)).realize() @ kg.Tensor.empty(8, n, name="x")
  (kernel,) = kg.compile(y, target="wgsl")
  wanted = variant_for(kernel, {"n": 100})
  assert wanted is not kernel and len(kernel.variants) >= 2
  assert len(wanted.launch.source) <= len(kernel.launch.source) * 1.5   # asked BUILD_AFTER times
  runtime = _runtime()
  runtime.prepare(kernel)
  assert len(runtime.gpu.prepared) == 1 and runtime.ready(kernel) is False
  runtime.gpu.finish()
  assert runtime.ready(kernel)
  for ask in range(1, BUILD_AFTER + 1):
    values = {"n": 100}         # one dict per realize: its runs count as one ask
    assert runtime.pick(kernel, values) is kernel and runtime.pick(kernel, values) is kernel
    assert len(runtime.gpu.prepared) == 1 and bool(runtime.queued) == (ask == BUILD_AFTER), ask
  runtime.build_next()          # after a read: the queued variant's build starts
  assert len(runtime.gpu.prepared) == 2 and not runtime.queued
  assert runtime.pick(kernel, {"n": 100}) is kernel      # building: the kernel stands in
  assert len(runtime.gpu.prepared) == 2
  runtime.gpu.finish()
  assert runtime.pick(kernel, {"n": 100}) is wanted
  # n = 1's own variant is asked once: not built; the built one whose range holds 1 runs it
  assert runtime.pick(kernel, {"n": 1}) is wanted and len(runtime.gpu.prepared) == 2
  assert runtime.pick(kernel, {"n": 4096}) is kernel


def test_queued_variants_build_one_at_a_time_the_shortest_first():
  n = kg.Dim("n", 1, 4096)
  y = kg.Tensor(np.ones((32, 8), np.float32)).realize() @ kg.Tensor.empty(8, n, name="x")
  (kernel,) = kg.compile(y, target="wgsl")
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
