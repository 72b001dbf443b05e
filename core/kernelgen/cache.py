"""The compile cache: a kernel realized again reuses the code compiled for it before.

A training loop builds the same kernels every step from new lazy graphs: the same structure,
dtypes, shapes and constants over buffers that hold other data. `cached_compile(item, target,
options)` keys a scheduled kernel by everything its compiled code depends on and returns the
CompiledKernel made the first time:

- the target and the (checked) options, device limits and features included;
- the kernel's name (its entry point in the source);
- its fused graph, sources first, each node by op, dtype, shape, argument (a constant by type
  and exact value: 1, 1.0 and True differ, so do 0.0 and -0.0; views by shape, strides, offset
  and mask) and which earlier nodes it reads (so sharing counts too);
- each input by slot, dtype, shape and buffer name: not by the data it holds.

Kernels of the same structure under other names (a model's repeated blocks: ResNet-50's 74
kernels are 48 structures, told apart by their names' `_n2`, `_n3` suffixes) share the work of
every pass but the renderer's: a miss whose key without the kernel's name and its inputs' buffer
names (`shape_key`) matches an earlier kernel's renders that kernel's linearized form again under
its own names (compiler.renamed), which is what compiling it gives (only the renderer reads the
names). It still counts as a miss.

A node whose argument is of a type the key does not know makes the kernel uncached (compiled
every time), never wrongly shared. The cache is a bounded LRU (`set_cache_size`, 0 turns it off;
`clear_cache`; `cache_info` counts hits and misses). The device runtimes keep their own caches
of what they build from a kernel's source (WebGPU pipelines, parsed PTX), keyed by the source.
Only realizing uses it: `kg.compile` runs every pass (it is what the pipeline is timed and
inspected with), though within one program a kernel of the same structure as an earlier one is
rendered from it (compiler.compile_plan; as below). A test that patches a pipeline stage clears it
first (tests/conftest.py).

The plan cache, one level up: a realize of a whole graph with the same structure as an earlier
one (a training loop's every step) reuses that realize's schedule and compiled kernels, so a
steady step neither schedules nor computes kernel keys. `graph_key(roots, context)` keys the
graph like a kernel above (every unrealized node reachable from the roots, sources first; each
realized node it reads by dtype, shape, device and buffer name, not by data), plus the roots'
positions and `context` (the devices' options and limits the schedule and the compiled code
depend on). `plan_for` and `keep_plan` look up and keep a plan: ScheduleItems as node positions
in that order, with each item's CompiledKernel once compiled. The same size bound and switch
apply; each kernel a kept plan runs again counts as a hit (`plans`, `plan_hits` in cache_info).

In the web page a kernel this cache misses is next looked up in the browser's store of kernels
compiled on earlier page loads (stored.py, IndexedDB); one found there is not compiled (and
counts as no miss). `clear_cache` empties that store too.
"""
from __future__ import annotations

import time
from collections import OrderedDict

from . import stored
from .compiler import compile_item, renamed
from .graph.keys import kernel_key, shape_key, value_key as _value_key  # noqa: F401 (kernel_key)
from .graph.keys import options_key as _options_key
from .graph.lazy import LazyOp
from .graph.schedule import ScheduleItem
from .render.target import Target

# compiled kernels kept at most (a digits-MLP training step has 14; a ResNet forward ~100)
DEFAULT_SIZE = 1024


class _Cache:
  def __init__(self, size: int):
    self.entries: OrderedDict = OrderedDict()
    self.size, self.hits, self.misses, self.uncached = size, 0, 0, 0
    self.plans: OrderedDict = OrderedDict()   # graph_key -> RealizePlan (the module docstring)
    self.plan_hits = 0
    self.grown = 0       # compiles of a kept plan's capped kernel for more runs (realize._swap)
    self.compile_s = 0.0  # seconds spent compiling the misses (a cold run's Python share)
    self.shapes: OrderedDict = OrderedDict()  # shape_key -> a CompiledKernel of that structure


_CACHE = _Cache(DEFAULT_SIZE)


def _compile_new(item: ScheduleItem, target: Target, options: dict | None, key: tuple):
  """compile_item's kernel for `item`, rendered from an earlier kernel of its structure where
  there is one (the module docstring)."""
  shapes, shape = _CACHE.shapes, shape_key(key)
  found = shapes.get(shape)
  if found is not None and found.kernel is not None and not found.variants:
    shapes.move_to_end(shape)
    return renamed(found, item, target, options)
  compiled = compile_item(item, target, options)
  shapes[shape] = compiled
  while len(shapes) > _CACHE.size:
    shapes.popitem(last=False)
  return compiled


def cached_compile(item: ScheduleItem, target: Target, options: dict | None = None):
  """compile_item(item, target, options), reusing the CompiledKernel of an earlier kernel with
  the same key (the module docstring says what the key holds)."""
  cache = _CACHE
  key = kernel_key(item, target, options) if cache.size else None
  if key is None:
    cache.uncached += 1
    return compile_item(item, target, options)
  found = cache.entries.get(key)
  if found is not None:
    cache.hits += 1
    cache.entries.move_to_end(key)
    return found
  compiled = stored.find(key)      # kept by the browser from an earlier page load
  if compiled is None:
    cache.misses += 1
    start = time.perf_counter()
    compiled = _compile_new(item, target, options, key)
    cache.compile_s += time.perf_counter() - start
    stored.keep(key, compiled)
  cache.entries[key] = compiled
  while len(cache.entries) > cache.size:
    cache.entries.popitem(last=False)
  return compiled


class RealizePlan:
  """A realize's schedule as positions in graph_key's node order: per kernel (output position,
  input positions, name, rows, positions of the reductions it recomputes) and its
  CompiledKernel (None until compiled)."""

  def __init__(self, items: list, order: list):
    position = {id(n): i for i, n in enumerate(order)}
    self.items = [(position[id(it.out)], tuple(position[id(i)] for i in it.inputs), it.name,
                   it.rows, tuple(position[id(r)] for r in it.recomputed),
                   tuple(position[id(e)] for e in it.extra)) for it in items]
    self.compiled: list = [None] * len(items)
    self.runs = 0                  # realizes of this plan (realize._swap)
    self.growing: dict = {}        # position -> larger kernel whose build is under way (_swap)

  def schedule(self, order: list) -> list[ScheduleItem]:
    """The ScheduleItems of this plan over the nodes of a graph with the same key."""
    return [ScheduleItem(order[out], tuple(order[i] for i in inputs), name, rows,
                         tuple(order[r] for r in again), tuple(order[e] for e in extra))
            for out, inputs, name, rows, again, extra in self.items]


def graph_key(roots: list[LazyOp], context) -> tuple[tuple | None, list[LazyOp]]:
  """(the key of realizing `roots` (None when some argument has no exact key), the nodes in key
  order): see the module docstring."""
  index: dict[int, int] = {}
  order: list[LazyOp] = []
  rows: list = []
  stack = [(r, False) for r in reversed(roots)]
  try:
    while stack:
      node, expanded = stack.pop()
      if id(node) in index:
        continue
      if node.realized:
        rows.append((node.dtype.name, node.dtype.count, node.shape, node.device,
                     node.buffer.name))
      elif not expanded:
        stack.append((node, True))
        stack.extend((s, False) for s in reversed(node.src) if id(s) not in index)
        continue
      else:
        rows.append((node.op, node.dtype.name, node.dtype.count, node.shape, node.device,
                     _value_key(node.arg), tuple(index[id(s)] for s in node.src), node.sym))
      index[id(node)] = len(order)
      order.append(node)
    return (context, tuple(index[id(r)] for r in roots), tuple(rows)), order
  except TypeError:
    return None, order


def plan_for(key) -> RealizePlan | None:
  """The plan kept for `key`, or None (also when the cache is off or key is None)."""
  if key is None or not _CACHE.size:
    return None
  plan = _CACHE.plans.get(key)
  if plan is not None:
    _CACHE.plan_hits += 1
    _CACHE.hits += sum(c is not None for c in plan.compiled)
    _CACHE.plans.move_to_end(key)
  return plan


def keep_plan(key, plan: RealizePlan) -> None:
  if key is None or not _CACHE.size:
    return
  _CACHE.plans[key] = plan
  while len(_CACHE.plans) > _CACHE.size:
    _CACHE.plans.popitem(last=False)


def options_key(options: dict):
  """A hashable key of a device's render options (TypeError when some value has none)."""
  return _options_key(options)


def clear_cache() -> None:
  """Forget every compiled kernel and plan (and the hit and miss counts), and in the web page the
  kernels the browser keeps across page loads (stored.py)."""
  stored.clear()
  _CACHE.entries.clear()
  _CACHE.plans.clear()
  _CACHE.shapes.clear()
  _CACHE.hits = _CACHE.misses = _CACHE.uncached = _CACHE.plan_hits = _CACHE.grown = 0
  _CACHE.compile_s = 0.0


def set_cache_size(size: int) -> None:
  """Keep at most `size` compiled kernels (least recently used go first); 0 turns caching off."""
  from .errors import KernelgenError
  if not isinstance(size, int) or isinstance(size, bool) or size < 0:
    raise KernelgenError(f"the compile cache size is a count >= 0, got {size!r}")
  _CACHE.size = size
  while len(_CACHE.entries) > size:
    _CACHE.entries.popitem(last=False)
  while len(_CACHE.plans) > size:
    _CACHE.plans.popitem(last=False)
  while len(_CACHE.shapes) > size:
    _CACHE.shapes.popitem(last=False)


def cache_info() -> dict:
  """{hits, misses, uncached, size, max_size, plans, plan_hits, grown, compile_s}: what the
  compile cache did since it was cleared (plans: whole realizes kept; plan_hits: realizes that
  reused one, their kernels counted as hits; grown: of the misses, a kept plan's kernels capped
  for a one-off run compiled again for more runs as the plan is realized again,
  lowering/compile_cost.py; compile_s: wall seconds spent compiling the misses)."""
  c = _CACHE
  return {"hits": c.hits, "misses": c.misses, "uncached": c.uncached, "size": len(c.entries),
          "max_size": c.size, "plans": len(c.plans), "plan_hits": c.plan_hits,
          "grown": c.grown, "compile_s": c.compile_s}
