"""Realizing: run the kernels a lazy graph needs, on its device, and read results back."""
from __future__ import annotations

import os

from . import limits
from .errors import ExecutionError, ShapeError, internal_errors
from .graph.lazy import Buffer, L, LazyOp, copyout_many
from .graph.schedule import row_limit, schedule

# kg.jit (tensor/jit.py) records the kernels a call runs: while this is a list, each launch is
# appended to it as (runtime, compiled kernel, output Buffer, the Buffers it binds, in order)
recording: list | None = None
# a listener of realize's progress: called as progress(done, total, kernel name, device, running)
# as each kernel a realize runs starts (running: True; `done` kernels finished before it) and
# ends (running: False) (the page's progress bar: web_api.setup); None: nobody listens
progress = None
# a kept plan realized again compiles at most this many of its capped kernels for more runs per
# realize (_swap), so that no later call waits for more than one larger compile
SWAP_COMPILES = 1
# the capped kernels a recording (kg.jit, a model's replay) took while a larger one was built
# in the background (_record_grown, _swap): id(capped kernel) -> (capped kernel, larger
# kernel); a recorded program's replay runs the larger one once the runtime has it (swapped)
_growing: dict = {}


def _plan(pending: list[LazyOp]) -> tuple:
  """(the schedule of `pending`, the RealizePlan whose compiled kernels it fills, or None): a
  plan kept from an earlier realize of a graph with the same structure (cache.py), else a fresh
  schedule kept as a plan."""
  from .cache import RealizePlan, graph_key, keep_plan, options_key, plan_for
  from .compiler import target_of
  from .device import Device
  devices = sorted({n.device for n in pending})
  options = {d: Device[d].render_options() for d in devices}
  limits = [target_of(Device[d]).buffer_limit(options[d]) for d in devices]
  limit = min((m for m in limits if m), default=None)
  rows = min(row_limit(options[d]) for d in devices)
  searching = os.environ.get("KERNELGEN_SEARCH") == "1"
  key, order = None, None
  if not searching:
    try:
      context = (limit, rows, tuple((d, options_key(options[d])) for d in devices))
    except TypeError:
      context = None
    key, order = graph_key(pending, context) if context is not None else (None, None)
  plan = plan_for(key)
  if plan is not None:
    return plan.schedule(order), plan
  from .graph.join import join_outputs
  with internal_errors("schedule"):
    items = schedule(pending, limit, rows)             # schedule
    items = items if searching else join_outputs(items, pending, limit)   # join siblings
  if key is None:
    return items, None
  plan = RealizePlan(items, order)
  keep_plan(key, plan)
  return items, plan


def _collector_paused():
  """compiler.collector_paused: the cyclic collector off while kernelgen schedules and compiles
  (not while kernels run: the PYTHON and PTXSIM devices interpret them in Python, whose garbage
  is not ours to vouch for)."""
  from .compiler import collector_paused
  return collector_paused()


def realize(nodes: list[LazyOp]) -> None:
  """Compute every node in `nodes` into a buffer on its device (each kernel runs once), the
  kernels in schedule order. Each kernel runs once the next one is compiled: the device prepares
  a compiled kernel meanwhile (Runtime.prepare: WEBGPU builds its pipeline, the driver's shader
  compile, on a thread of its own). The search mode times each kernel on its inputs, so it runs
  the kernel before first."""
  from .device import Device
  pending = [n for n in nodes if not n.realized]
  if not pending:
    return
  values = var_values(pending)
  with _collector_paused():
    items, plan = _plan(pending)
  searching = os.environ.get("KERNELGEN_SEARCH") == "1"
  waiting = None     # (runtime, item, compiled kernel, output Buffer): compiled, not yet run
  done = 0
  upgrades = [SWAP_COMPILES]   # a kept plan's capped kernels compiled for more runs, this realize
  if plan is not None:     # a kept plan's kernels: all their pipelines start at once
    plan.runs += 1
    for item, compiled in zip(items, plan.compiled):
      if compiled is not None and item.out.size:
        Device[item.out.device].prepare(compiled)

  def launch(waiting) -> None:
    nonlocal done
    item = waiting[1]
    limits.tick()          # the web page's time limit (nothing unless a command is timed)
    if progress is not None:
      progress(done, len(items), item.name, item.out.device, True)
    _launch(*waiting, values)
    done += 1
    if progress is not None:
      progress(done, len(items), item.name, item.out.device, False)
  for at, item in enumerate(items):
    out = item.out
    # an in-place write (L.WRITE) stores into its target's buffer; others into a new one
    buffer = _out_buffer(out)
    buffer = (buffer,) + tuple(_out_buffer(e) for e in item.extra) \
      if item.extra else buffer      # a joined kernel's outputs (graph/join.py), slot order
    if not out.size:
      out.buffer, out.src = buffer, ()
      continue
    runtime = Device[out.device]
    if searching and waiting is not None:
      launch(waiting)
      waiting = None
    compiled = plan.compiled[at] if plan is not None else None
    if compiled is None:
      compiled = _compile(item, runtime, buffer, searching)
      if plan is not None:
        plan.compiled[at] = compiled
    elif compiled.capped:
      compiled = _swap(plan, at, item, runtime, upgrades)
    runtime.prepare(compiled)
    if waiting is not None:
      launch(waiting)
    waiting = (runtime, item, compiled, buffer)
  if waiting is not None:
    launch(waiting)


def _swap(plan, at: int, item, runtime, upgrades: list):
  """The kernel to run at `at` of a kept plan whose kernel there was capped for fewer runs
  (lowering/compile_cost.py). A plan realized n times is taken to run about n times more, so at
  each power of two of its realizes (plan.runs) the kernel is compiled again for that many runs
  (at most SWAP_COMPILES such compiles per realize): its build budget doubles each time, so what
  growing the kernel costs stays within about twice the budget per run, and a loop that runs
  long ends on the kernel compiled for many runs. The larger kernel's build starts at once
  (Runtime.prepare) and it is swapped in when the runtime says it is ready (Runtime.ready: the
  page's WEBGPU builds pipelines in the background, so the smaller kernel keeps running until
  then; natively the swap is at once: lavapipe compiles a shader at its first dispatch, on the
  dispatching thread, whatever thread built the pipeline). A recording (kg.jit, a model's
  replay: its replays bypass this plan, so never grow here) takes the kernel for many runs as
  _record_grown does, or keeps the capped one while that builds; its replays swap in the larger
  one (swapped)."""
  compiled = plan.compiled[at]
  if recording is not None:
    return _record_grown(item, runtime, runtime.render_options(), compiled)
  growing = plan.growing.get(at)
  if growing is not None:           # one larger build at a time per kernel
    if not runtime.ready(growing):
      return compiled
    del plan.growing[at]
    plan.compiled[at] = growing
    return growing
  runs = plan.runs
  if upgrades[0] <= 0 or runs < 2 or runs & (runs - 1):
    return compiled
  upgrades[0] -= 1
  grown = _compile_for(item, runtime, runs)
  runtime.prepare(grown)
  if runtime.ready(grown):
    plan.compiled[at] = grown
    return grown
  plan.growing[at] = grown
  if recording is not None:
    _growing[id(compiled)] = (compiled, grown)
  return compiled


def _compile_for(item, runtime, runs: int):
  """`item` compiled for the runtime's options with `runs` (counted in the cache's `grown`)."""
  from . import cache
  from .cache import cached_compile
  from .compiler import target_of
  options = {**runtime.render_options(), "runs": runs}
  misses = cache._CACHE.misses
  with _collector_paused():
    compiled = cached_compile(item, target_of(runtime), options)
  cache._CACHE.grown += cache._CACHE.misses - misses
  return compiled


def var_values(pending: list[LazyOp]) -> dict[str, int]:
  """{dim name: bound value} of the symbolic dims (L.VAR nodes) the unrealized graph under
  `pending` reads: its kernels' run-time arguments. ShapeError for a dim bound to two values,
  or read unbound. (No walk at all until some graph has made a VAR.)"""
  from .graph import lazy as lazy_graph
  if not lazy_graph.vars_made:
    return {}
  values: dict[str, int] = {}
  stack, seen = list(pending), set()
  while stack:
    node = stack.pop()
    if id(node) in seen or node.realized:
      continue
    seen.add(id(node))
    if node.sym is not None:       # a symbolic size's binding sets a run-time grid too
      for s in node.sym:
        for name, v in getattr(s, "values", {}).items():
          if values.setdefault(name, v) != v:
            raise ShapeError(f"dim {name} is bound to {values[name]} and to {v} in one "
                             f"realize: bind it once per call")
    if node.op is lazy_graph.L.VAR:
      name = node.arg[0]
      if node.bound is None:
        raise ShapeError(f"dim {name} is read unbound: bind it (e.g. {name}.bind(7)) where the "
                         f"tensor is built")
      if values.setdefault(name, node.bound) != node.bound:
        raise ShapeError(f"dim {name} is bound to {values[name]} and to {node.bound} in one "
                         f"realize: bind it once per call")
    stack.extend(node.src)
  return values


def _compile(item, runtime, buffer: Buffer, searching: bool):
  """The compiled kernel of `item` for `runtime` (the compile cache's, cache.py); the search
  mode first times candidate options on the kernel's buffers."""
  from .cache import cached_compile
  from .compiler import target_of
  options = runtime.render_options()
  if searching:
    from .search import forced_options, search
    out = item.out
    with internal_errors(f"upload to {out.device}", item.name, ExecutionError):
      handles = [buffer.handle] + [src.buffer.handle for src in item.inputs]
    with internal_errors("search", item.name, ExecutionError):
      opts = search(item, runtime, handles, options)
    options = {**options, **forced_options(opts)}
  with _collector_paused():
    compiled = cached_compile(item, target_of(runtime), options)
    if compiled.capped and recording is not None:
      return _record_grown(item, runtime, options, compiled)
    return compiled


def _record_grown(item, runtime, options: dict, compiled):
  """The kernel a recording (kg.jit, a model's replay: a step run many times) takes where the
  one-off kernel `compiled` was capped: the kernel compiled for many runs, when the runtime has
  it ready at once (natively); else (the page's WEBGPU builds it in the background) the capped
  one, the same in every recorded call, with the larger one kept in _growing for the replays
  to swap in (swapped). Only a capped kernel is compiled again, so every other one stays the
  compile cache's entry of the calls before the recording."""
  from .cache import cached_compile
  from .compiler import target_of
  from .lowering.compile_cost import RUNS_MANY
  if id(compiled) in _growing and _growing[id(compiled)][0] is compiled:
    return compiled
  grown = cached_compile(item, target_of(runtime), {**options, "runs": RUNS_MANY})
  runtime.prepare(compiled)      # the one-off kernel's build first: it may run now
  runtime.prepare(grown)
  if runtime.ready(grown):
    return grown
  _growing[id(compiled)] = (compiled, grown)
  return compiled


def launch_outputs(launches: list) -> list[Buffer]:
  """The buffers a recording's launches (runtime, kernel, outputs, bound buffers) write, in
  launch order: one per launch, several for a joined kernel's (graph/join.py)."""
  return [buf for launch in launches for buf in launch[2]]


def swapped(steps: list) -> list:
  """A recorded program's steps [(runtime, kernel, ...)], each capped kernel whose larger
  kernel (_record_grown) is built by now replaced by it (the same list when none is)."""
  if not _growing:
    return steps
  out = None
  for i, (runtime, kernel, *rest) in enumerate(steps):
    pending = _growing.get(id(kernel))
    if pending is not None and pending[0] is kernel and runtime.ready(pending[1]):
      out = out or list(steps)
      out[i] = (runtime, pending[1], *rest)
  return steps if out is None else out


def _out_buffer(out: LazyOp) -> Buffer:
  """The buffer a kernel stores `out` into: an in-place write's (L.WRITE) its target's, else a
  new one."""
  return out.src[0].buffer if out.op is L.WRITE else Buffer(out.device, out.dtype, out.size)


def _launch(runtime, item, compiled, buffer, values: dict) -> None:
  """Run the compiled kernel of `item` into `buffer` (a tuple of Buffers, `item.out`'s then
  `item.extra`'s, for a joined kernel: graph/join.py); only then are its nodes realized (a
  kernel cut short, by Ctrl-C or an error, leaves them unrealized, to run again)."""
  out = item.out
  outs = buffer if isinstance(buffer, tuple) else (buffer,)
  bound = [outs[0]] + [src.buffer for src in item.inputs] + list(outs[1:])
  with internal_errors(f"upload to {out.device}", item.name, ExecutionError):
    handles = [b.handle for b in bound]
  # a kernel binds only the buffers it still reads after simplification (by slot)
  with internal_errors(f"run on {out.device}", item.name, ExecutionError):
    runtime.run(compiled, [handles[b.slot] for b in compiled.buffers], values)
  if recording is not None:
    recording.append((runtime, compiled, outs, [bound[b.slot] for b in compiled.buffers]))
  for node, buf in zip((out,) + item.extra, outs):
    node.buffer, node.src = buf, ()


def read_bytes(node: LazyOp) -> bytes:
  """The node's values as bytes in numpy layout (realizing it first)."""
  return read_many([node])[0]


def read_many(nodes: list[LazyOp]) -> list[bytes]:
  """Each node's values as bytes in numpy layout, realized together and read back together
  (graph/lazy.py copyout_many: one map per device)."""
  if recording is not None:
    from .errors import UnsupportedError
    raise UnsupportedError("a function under kg.jit reads a tensor's values back to Python "
                           "(.item(), .tolist(), .numpy(), ...): return the tensor instead and "
                           "read it after the call")
  realize(list(nodes))
  devices = ", ".join(sorted({node.device for node in nodes}))
  with internal_errors(f"download from {devices}", "", ExecutionError):
    return copyout_many([node.buffer for node in nodes])
