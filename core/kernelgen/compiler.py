"""The compiler: lazy tensors to kernels, every pass in order, for one Target.

`compile_plan` / `compile_program` schedule the graph, then per kernel `compile_item` runs
optimize (or the tensor-core lowering) and lower (lowering/), then `compile_kernel` runs the kernel
passes `kernel_passes` lists (simplify, the target's legalize, verify, linearize, verify_linear)
and the target's render. Any pass's IR can be printed (`print_after={"simplify"}` or `"all"`).
A program's kernels of one structure under other names (a model's repeated blocks) are compiled
once and rendered again under each name (`renamed`: only the renderer reads the names).

The target is a Target (render/target.py) carrying its facts, its option check and its legalize
and render steps; the public functions here take one or its name ("python": the reference
interpreter runs the linearized kernel; "wgsl"; "ptx"), resolved once (render/targets.py).
"""
from __future__ import annotations

import dataclasses
import gc
import sys
from contextlib import contextmanager
from typing import Callable

from . import limits
from .errors import internal_errors
from .render.target import FRONT_END_OPTIONS, Target  # noqa: F401 (the front end's options)
from .render.targets import TARGETS, get_target  # noqa: F401
from .uop.ops import UOp, print_graph, print_uops
from .uop.program import CompiledKernel, Kernel


def target_of(runtime) -> Target:
  """The Target the kernels of a device's `runtime` are compiled for (its `target` name; None:
  PYTHON's interpreter runs them): where a device names its target (realize, search)."""
  return get_target(runtime.target or "python")


def kernel_passes(target: Target, options: dict) -> list[tuple[str, Callable]]:
  """The passes from a kernel's SINK to a Kernel (linearized), in order.

  The graph is verified once, after the last rewrite (every node the linearizer and renderer
  see is checked; verify marks checked nodes, so verify_linear checks only what linearize adds).
  A rewrite that fails on its input verifies the input first, so a malformed graph from the
  front end is reported as the VerifyError naming its bad node, not as the rule's error."""
  from .uop.linearize import linearize
  from .uop.ops import sink_order
  from .rules.symbolic import simplify
  from .uop.verify import verify, verify_linear, verify_node

  def checked(rewrite: Callable) -> Callable:
    def run(sink: UOp) -> UOp:
      try:
        return rewrite(sink)
      except Exception:
        verify(sink)
        raise
    return run

  def legalize(sink: UOp) -> UOp:
    return target.legalize(sink, options)

  def check(sink: UOp) -> UOp:
    if not sink._verified:      # (a legalize may have verified as it walked: render/wgsl/legalize.py)
      for u in sink_order(sink):  # sources first, as verify checks them (linearize reuses it)
        if not u._verified:
          verify_node(u)
    return sink

  def check_linear(uops):
    verify_linear(uops)
    return uops

  return [("simplify", checked(simplify)),
          ("legalize", checked(legalize)),
          ("verify", check),
          ("linearize", linearize),
          ("verify_linear", check_linear)]


def compile_kernel(sink: UOp, name: str, target: Target | str = "python",
                   options: dict | None = None, buffer_names: dict[int, str] | None = None,
                   print_after=()):
  """Run every pass on `sink`; a Kernel for "python", a CompiledKernel for a GPU target
  (`options`: the renderer's)."""
  from .uop.linearize import make_kernel
  target, options = get_target(target), options or {}
  ir = sink
  for pass_name, run_pass in kernel_passes(target, options):
    with internal_errors(pass_name, name):
      ir = run_pass(ir)
    if print_after == "all" or pass_name in print_after:
      text = print_uops(ir) if isinstance(ir, list) else print_graph(ir)
      print(f"--- after {pass_name} ({name}) ---\n{text}", file=sys.stderr)
  with internal_errors("render", name):
    kernel: Kernel = make_kernel(name, ir, buffer_names or {})
    return target.render(kernel, options)


# ---- the whole pipeline, from tensors to kernels ---------------------------------------------

def compile_program(roots: list, target: Target | str = "python", options: dict | None = None,
                    print_after=()) -> list:
  """Every pass from lazy tensors to kernels, in order: schedule, then per kernel optimize,
  lower and the kernel passes above (`kernel_passes`), then render. Returns CompiledKernels."""
  return [kernel for _, kernel in compile_plan(roots, target, options, print_after)]


def compile_plan(roots: list, target: Target | str = "python", options: dict | None = None,
                 print_after=()) -> list:
  """compile_program's kernels with the schedule items they compute: [(ScheduleItem,
  CompiledKernel)] in launch order (export wires buffers from the items: slot 0 is `item.out`,
  slot i the input `item.inputs[i - 1]`, then `item.extra`'s outputs: graph/join.py). Python's
  cyclic collector is paused meanwhile, as realize pauses it (collector_paused, below: the
  passes' garbage holds no cycles; light ResNet-50 for lavapipe, CPU s: 1.95-2.07 with it,
  1.53-1.62 without, 380-470 collections)."""
  with collector_paused():
    return _compile_plan(roots, get_target(target), options, print_after)


@contextmanager
def collector_paused():
  """Python's cyclic garbage collector off (as it was after) while kernelgen schedules and
  compiles: that builds tens of thousands of short-lived nodes (UOps, index math) that hold no
  reference cycles, so the collections their allocations set off (a CNN training step's first
  realize: ~110 of ~300, one of them full) scan them all and free nothing; their memory goes by
  reference counting."""
  was = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    if was:
      gc.enable()


def compile_plan_twice(roots: list, target: Target | str, options: dict, other: dict) -> list:
  """compile_plan's pairs with each kernel compiled again under `options` updated by `other`
  (an export's subgroups form): [(ScheduleItem, CompiledKernel, CompiledKernel)]. The schedule
  is made once, under `options`, so both kernels of an item bind the same buffers; `other` must
  leave the buffer limit and row kernels alone (the schedule's options)."""
  target = get_target(target)
  with collector_paused():
    items = _schedule(roots, target, options, ())
    shared: dict = {}
    first = [_compile_shared(item, target, options, shared) for item in items if item.out.size]
    shared.clear()
    both = {**options, **other}
    target.check_options(both)
    again = [_compile_shared(item, target, both, shared) for item in items if item.out.size]
  return list(zip([item for item in items if item.out.size], first, again))


def _schedule(roots: list, target: Target, options: dict | None, print_after) -> list:
  from .graph.join import join_outputs
  from .graph.schedule import row_limit, schedule
  target.check_options(options or {})
  limit = target.buffer_limit(options or {})
  with internal_errors("schedule"):
    items = schedule(roots, limit, row_limit(options))                 # schedule
    items = join_outputs(items, roots, limit)                          # join sibling outputs
  if print_after == "all" or "schedule" in print_after:
    print("--- after schedule ---\n" + "\n".join(f"{it.name}: {it.out}" for it in items),
          file=sys.stderr)
  return items


def _compile_plan(roots: list, target: Target, options: dict | None, print_after) -> list:
  items = _schedule(roots, target, options, print_after)
  if print_after:
    return [(item, compile_item(item, target, options, print_after)) for item in items
            if item.out.size]
  shared: dict = {}     # graph/keys.shape_key -> the first kernel of that structure
  return [(item, _compile_shared(item, target, options, shared)) for item in items
          if item.out.size]


def with_one_row_joins(pairs: list, roots: list, target: Target | str,
                       options: dict | None = None) -> list:
  """compile_plan's [(item, kernel)] with, after each pair of kernels that one row's run
  computes as one (graph/one_row.py: a q4 LM's gate and up*silu(gate) over a symbolic `seq`),
  that joined kernel, cut to one row (the dim's lo, 1) and launched only there; the pair then
  runs above it (CompiledKernel.runs). A joined kernel binding more than the target's buffers
  (bind_limit.py) is left out. So too a symbolic projection and the cache writes reading it
  (one_row.write_joins), and an RMS norm's sum kernel that the joined kernels compute
  themselves (one_row.norm_joins, lowering/row_factor.py). Only for plans whose runtimes honour
  `runs` (export/plan.py)."""
  from .graph.one_row import one_row_joins
  from .lowering.row_factor import factored
  target = get_target(target)
  limit = target.buffer_limit(options or {})
  above, placed = {}, {}
  for after, members, joined, stored, (name, lo, hi) in \
      one_row_joins([it for it, _ in pairs], roots, limit, factored):
    above.update((id(m), (name, lo + 1, hi)) for m in members)
    if joined is not None:
      kernel = replace_runs(compile_item(joined, target, options), (name, lo, lo))
      placed[id(after)] = (stored, kernel)
  out = []
  for item, kernel in pairs:
    out.append((item, replace_runs(kernel, above[id(item)]) if id(item) in above else kernel))
    if id(item) in placed:
      out.append(placed[id(item)])
  return out


def replace_runs(kernel: CompiledKernel, runs: tuple) -> CompiledKernel:
  """`kernel` launched only while runs' (dim, lo, hi) holds (CompiledKernel.runs)."""
  return dataclasses.replace(kernel, runs=runs)


def _compile_shared(item, target: Target, options: dict | None, shared: dict):
  """compile_item(item, target, options), or a kernel of the same structure compiled before in
  this program rendered again under `item`'s names (`renamed`: a model's repeated blocks)."""
  from .graph.keys import kernel_key, shape_key
  key = kernel_key(item, target, options)
  if key is None:
    return compile_item(item, target, options)
  found = shared.get(shape_key(key))
  if found is not None and found.kernel is not None and not found.variants:
    return renamed(found, item, target, options)
  compiled = shared[shape_key(key)] = compile_item(item, target, options)
  return compiled


def buffer_limit(target: Target | str, options: dict | None) -> int | None:
  """The most buffers one kernel may bind on `target` with these options (None: no limit that
  the scheduler needs to split kernels for)."""
  return get_target(target).buffer_limit(options or {})


def compile_item(item, target: Target | str, options: dict | None = None, print_after=(),
                 pin: tuple | None = None):
  """One scheduled kernel through optimize, lower and the kernel passes -> CompiledKernel.
  A matmul-shaped kernel on PTX is lowered to tensor-core tiles instead (lowering/tensorcore.py).
  `pin` (dim name, value[, its VAR argument]): a variant for that one bound value
  (lowering/pinned.py)."""
  from .lowering import compile_cost
  from .lowering.lower import forget_last, lower
  from .lowering.optimize import optimize
  from .lowering.pinned import pin_dim
  from .lowering.tensorcore import lower_tensor_cores
  target = get_target(target)
  options = dict(target.check_options(options or {}))
  limits.tick()            # the web page's time limit (nothing unless a command is timed)
  if target.backend is not None:        # rendered for a GPU (WGSL, PTX): int32 indices
    index_elements(item, target)
  opts = None              # (tensor-core kernels have none)
  with internal_errors("tensor_cores", item.name):
    lowered = lower_tensor_cores(item, target, options)       # tensor cores (matmuls on PTX)
  if lowered is None:
    with internal_errors("optimize", item.name):
      opts = optimize(item, target, options)                  # optimize
    with internal_errors("lower", item.name):
      lowered = lower(item, opts)                             # lower
    forget_last()
  sink, buffers = lowered
  if pin is not None:
    sink = pin_dim(sink, *pin)
  if print_after == "all" or "lower" in print_after:
    print(f"--- after lower ({item.name}) ---\n{print_graph(sink)}", file=sys.stderr)
  out = compile_kernel(sink, item.name, target, target.for_renderer(options),  # verify .. render
                       {b.slot: b.name for b in buffers}, print_after)
  if not isinstance(out, CompiledKernel):
    with internal_errors("render", item.name):
      out = python_compiled(out)
  out = with_variants(with_grid(out, item, opts), item, target, options, opts, print_after)
  out = dataclasses.replace(out, launch=dataclasses.replace(
    out.launch, work=compile_cost.item_work(item)))    # a run's share of it (webgpu_browser.py)
  out = dataclasses.replace(out, capped=True) if opts is not None and opts.capped else out
  return cheap_first(out, item, target, options, opts, print_after)


def cheap_first(compiled, item, target: Target, options: dict, opts, print_after=()):
  """`compiled`, a one-off run's capped register tile over a symbolic grid dim, as a variant up
  to the dim's top (after its own variants) of the kernel that is cheapest to build
  (lowering/cheap_first.py), which serves a page's first runs while that variant builds;
  `compiled` itself where it is not such a kernel or the cheap one binds otherwise."""
  from .lowering.cheap_first import cheap_first as cheap_options
  found = cheap_options(item, target, options, opts, bool(compiled.launch.grid))
  if found is None:
    return compiled
  (_, dim, _, hi), extra = found
  cheap = compile_item(item, target, {**options, **extra}, print_after)
  if not cheap.launch.grid or cheap.variants or \
     cheap.launch.bindings != compiled.launch.bindings or \
     cheap.launch.uniforms != compiled.launch.uniforms:
    return compiled
  top = dataclasses.replace(compiled, variants=())
  return dataclasses.replace(cheap, variants=compiled.variants + ((dim, hi, top),), capped=True)


def with_variants(compiled, item, target: Target, options: dict, opts, print_after=()):
  """`compiled` with its variants for small bound values of its symbolic dim
  (lowering/variants.py), each compiled here, now, so that no bound value compiles later; a
  variant is kept only with a run-time grid where the kernel has one (but the static kernel of
  one value: pinned.STATIC), and with the same buffers and arguments; a pinned one (PIN, STATIC)
  is `exact`: it serves its one value only (uop/program.py serves)."""
  from .graph.at_value import item_at
  from .lowering.variants import variants
  from .lowering.pinned import PIN, STATIC
  made, gridded = [], bool(compiled.launch.grid)
  for dim, most, extra in variants(item, target, options, opts, gridded):
    if STATIC in extra:      # the static kernel of the one value `most` (graph/at_value.py)
      static = item_at(item, dim, most)
      reads = dim in {name for name, _ in compiled.launch.uniforms}
      variant = static and _as_kernels(compile_item(static, target, options, print_after,
                                                    (dim, most, extra[STATIC]) if reads else None),
                                       compiled)
    else:
      rest = {k: v for k, v in extra.items() if k != PIN}
      variant = compile_item(item, target, {**options, **rest}, print_after,
                             (dim, extra[PIN]) if PIN in extra else None)
    if variant and (bool(variant.launch.grid) == gridded or STATIC in extra) and \
       variant.launch.bindings == compiled.launch.bindings and \
       variant.launch.uniforms == compiled.launch.uniforms:
      pinned = STATIC in extra or PIN in extra     # it serves `most` only (program.py serves)
      made.append((dim, most, dataclasses.replace(variant, exact=True) if pinned else variant))
  return dataclasses.replace(compiled, variants=tuple(made)) if made else compiled


def _as_kernels(variant, compiled):
  """Static `variant` (pinned.STATIC) binding `compiled`'s buffers: its outputs are prefixes of
  the kernel's (graph/at_value.py), declared at the kernel's sizes; else it as it is (not kept)."""
  own, kernel = variant.launch.bindings, compiled.launch.bindings
  if len(own) != len(kernel) or any(
      dataclasses.replace(a, size=b.size, nbytes=b.nbytes) != b or a.size > b.size
      for a, b in zip(own, kernel)):
    return variant
  buffers = tuple(dataclasses.replace(a, size=b.size) if a.slot == b.slot else a
                  for a, b in zip(variant.buffers, compiled.buffers))
  return dataclasses.replace(variant, buffers=buffers,
                             launch=dataclasses.replace(variant.launch, bindings=kernel))


def renamed(compiled, item, target: Target, options: dict | None = None):
  """What compile_item(item, target, options) gives, from `compiled`, the CompiledKernel of a
  kernel of the same structure (graph/keys.py's shape_key) under other names: its linearized kernel
  rendered again with `item`'s name and buffer names (no pass before the renderer reads them),
  with its run-time grid, work estimate and cap."""
  from .uop.program import kernel_buffers
  options = dict(target.check_options(options or {}))
  limits.tick()            # the web page's time limit, as compile_item
  names = {b.slot: b.name for b in kernel_buffers(item.out, item.inputs, item.extra)}
  kernel = compiled.kernel
  kernel = dataclasses.replace(kernel, name=item.name, buffers=tuple(
    dataclasses.replace(b, name=names.get(b.slot, f"buf{b.slot}")) for b in kernel.buffers))
  with internal_errors("render", item.name):
    out = target.render(kernel, target.for_renderer(options))
    if not isinstance(out, CompiledKernel):
      out = python_compiled(out)
  launch = dataclasses.replace(out.launch, grid=compiled.launch.grid, work=compiled.launch.work)
  return dataclasses.replace(out, launch=launch, capped=compiled.capped)


def index_elements(item, target: Target) -> None:
  """A LimitError (limits.index_elements) where kernel `item` would form an integer index of
  2**31 or more (GPU indices are int32; symbolic axes count at their largest): the output's
  and each input buffer's elements, an axis, a reduction's reduced elements, the flat index of a
  view's or a gather's source, an iota's values. A broadcast product that is only reduced (a
  4096**3 matmul's) forms no index of its own size and is not refused."""
  stack, seen, stop = [item.out], set(), {id(i) for i in item.inputs}
  while stack:
    node = stack.pop()
    if id(node) in seen:
      continue
    seen.add(id(node))
    for size, shape in _indexed(node, node is item.out or id(node) in stop):
      limits.index_elements(size, f"kernel {item.name}: a tensor of shape {shape}", target.title)
    if id(node) not in stop and not node.realized:
      stack.extend(node.src)


def _indexed(node, whole: bool):
  """(elements, shape) of what `node` makes a kernel index: each axis; the whole node where it
  is a buffer, the output or an iota; a view's or gather's source; a reduction's reduced part."""
  from .graph.lazy import L
  yield max(node.shape, default=1), node.shape
  if whole or node.realized or node.op in (L.BUFFER, L.IOTA):
    yield node.size, node.shape
  if node.realized or not node.src:
    return
  if node.op in (L.VIEW, L.GATHER):
    yield node.src[0].size, node.src[0].shape
  elif node.op is L.REDUCE:
    yield node.src[0].size // max(node.size, 1), node.src[0].shape


def with_grid(compiled, item, opts):
  """`compiled` with a run-time grid (Launch.grid) where one output axis is symbolic and its
  threads run over the outputs in row-major order with that axis leading (lower._thread_stores:
  the first axis only) or over register tiles with that axis outermost (tile_grid.tile_threads,
  any axis): the workgroups past the bound size would only compute padding."""
  from .graph.lazy import L
  from .lowering.tile_grid import grid_axis, tile_axes
  out = item.out
  sym = out.sym
  if sym is not None and any(getattr(s, "div", 1) != 1 for s in sym):
    return compiled        # a floored size ((n + 1) // 2): the whole padded grid runs
  if item.rows and sym is not None and opts is not None:
    return _row_grid(compiled, item, opts)
  if out.op is L.ATTENTION:
    return _attention_grid(compiled, item, opts)
  axis = grid_axis(out)
  if axis is None or opts is None or item.rows or opts.group or opts.stage or \
     out.op in (L.ATTENTION, L.SORTNET, L.WRITE) or (axis and not opts.tile) or \
     compiled.global_size[1:] != (1, 1) or \
     tuple(compiled.launch.dispatch) != tuple(compiled.global_size):
    return compiled
  rows, inner, per = 1, 1, max(opts.local, 1) * max(opts.upcast, 1)
  if opts.tile:            # one thread per R x C block, `axis` outermost
    sizes = dict(zip(opts.tile_axes or tile_axes(out.shape), opts.tile))
    rows, per = sizes.get(axis, 1), max(opts.local, 1) * sizes.get(axis, 1)
    for a, n in enumerate(out.shape):
      inner *= -(-n // sizes.get(a, 1)) if a != axis else 1
    # Opts.tile_chunk: `axis`'s blocks in runs of that many (tile_grid.tile_threads), whole runs
    chunk = opts.tile_chunk if opts.tile_chunk > 1 and \
      -(-out.shape[axis] // rows) % opts.tile_chunk == 0 else 1
    rows *= chunk
  else:
    for s in sym[1:]:
      inner *= s
  # threads needed, times `rows`: ceil(S / rows) rows of `inner` tiles, so S * inner rounded up
  # to whole rows (unit; where a workgroup covers part of a row, a rounding before the
  # multiplication by `inner` would leave fewer workgroups than the rows' threads need)
  return _gridded(compiled, sym[axis] * inner, per, rows * inner if rows > 1 else 1)


def _gridded(compiled, need, per: int, unit: int = 1):
  import dataclasses
  grid = ((tuple(need.terms), need.const, per) + ((unit,) if unit != 1 else ()),)
  return dataclasses.replace(compiled, launch=dataclasses.replace(compiled.launch, grid=grid))


def _attention_grid(compiled, item, opts):
  """A fused attention kernel's run-time grid where its query count is symbolic
  (lowering/attention.py query_grid: the blocks of query rows are the workgroups' outermost
  index): the blocks the bound count needs, each batch entry's."""
  from .lowering.attention import query_grid
  out = item.out
  if opts is None or not query_grid(out) or compiled.global_size[1:] != (1, 1) or \
     tuple(compiled.launch.dispatch) != tuple(compiled.global_size):
    return compiled
  batch = 1
  for n in out.shape[:-2]:
    batch *= n
  rows = max(opts.local, 1) * max(opts.upcast, 1)       # query rows per workgroup
  return _gridded(compiled, out.sym[-2] * batch, rows, rows * batch)


def _row_grid(compiled, item, opts):
  """A row kernel's run-time grid: its rows (the outer axes, row-major: a thread, or with
  row_lanes a workgroup, each) past a leading symbolic outer axis's bound size."""
  from .graph.dims import Sym
  from .graph.schedule import row_node
  out = item.out
  outer = [a for a in range(len(out.shape)) if a not in item.rows]
  if row_node(out) is not out or not outer or outer[0] != 0 or \
     not isinstance(out.sym[0], Sym) or any(isinstance(s, Sym) for s in out.sym[1:]) or \
     compiled.global_size[1:] != (1, 1) or \
     tuple(compiled.launch.dispatch) != tuple(compiled.global_size):
    return compiled
  inner = 1
  for a in outer[1:]:
    inner *= out.shape[a]
  lanes = max(opts.row_lanes, 1)
  return _gridded(compiled, out.sym[0] * inner, 1 if lanes > 1 else max(opts.local, 1))


def python_compiled(kernel: Kernel):
  """A linearized Kernel dressed as a CompiledKernel (target "python"; source: printed UOps)."""
  from .uop.program import Binding, Launch
  source = print_uops(kernel.uops)
  bindings = tuple(Binding(b.slot, b.name, b.dtype.name, b.size, b.access,
                           b.size * b.dtype.itemsize) for b in kernel.buffers)
  launch = Launch("python", source, kernel.name, bindings, kernel.local_size, kernel.global_size,
                  tuple((v.arg[0], "int32") for v in kernel.vars))
  return CompiledKernel(kernel.name, "python", source, kernel.global_size, kernel.local_size,
                        kernel.buffers, launch, kernel)
