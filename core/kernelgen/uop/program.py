"""What a kernel is once lowered and linearized, and what a renderer hands to a runtime.

`Kernel`: the linearized UOp list with its launch shape and buffer table; the interpreter and
both renderers consume it. `CompiledKernel`: a kernel's rendered source plus a `Launch`, the plain
description (JSON-able) that every runtime — wgpu, the page's navigator.gpu, CUDA, PTXSIM —
executes unchanged.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field

from ..dtype import DType
from .ops import Ops, UOp


@dataclass(frozen=True)
class BufferSpec:
  slot: int      # binding index / parameter position
  name: str      # the user's name for it (any text; renderers make their own identifiers)
  dtype: DType   # element dtype (scalar)
  size: int      # number of elements
  access: str    # "read", "write" or "readwrite"


@dataclass(frozen=True)
class Kernel:
  name: str                        # stable, readable, unique within a program
  uops: tuple[UOp, ...]            # linearized: every node after its sources, scoped blocks
  buffers: tuple[BufferSpec, ...]  # ordered by slot
  global_size: tuple[int, int, int] = (1, 1, 1)  # workgroups per dimension
  local_size: tuple[int, int, int] = (1, 1, 1)   # threads per workgroup per dimension
  vars: tuple[UOp, ...] = ()       # the VAR nodes (scalar int arguments), in argument order

  @property
  def threads(self) -> int:
    gx, gy, gz = self.global_size
    lx, ly, lz = self.local_size
    return gx * gy * gz * lx * ly * lz


def kernel_buffers(out, inputs, extra=()) -> list[BufferSpec]:
  """The buffer table of a kernel computing lazy node `out` from `inputs` (slot order): slot 0
  is "out"; an input is called by its buffer's name (`Tensor.empty(..., name=)`, or a program's
  variable: tensor/names.py), else `in<slot>`; the further outputs `extra` (graph/join.py) follow
  the inputs as "out2", "out3"... A name already taken in this kernel gets the first free suffix
  `_2`, `_3`..., so names are unique within a kernel."""
  specs, taken = [BufferSpec(0, "out", out.dtype, out.size, "write")], {"out"}
  named = [(getattr(node.buffer, "name", None) or f"in{slot}", node, "read")
           for slot, node in enumerate(inputs, 1)]
  named += [(f"out{k + 2}", node, "write") for k, node in enumerate(extra)]
  for slot, (name, node, access) in enumerate(named, 1):
    unique, n = name, 1
    while unique in taken:
      n += 1
      unique = f"{name}_{n}"
    taken.add(unique)
    specs.append(BufferSpec(slot, unique, node.dtype, node.size, access))
  return specs


def launch_sizes(uops) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  """(global_size, local_size) from the SPECIAL nodes of a kernel."""
  grid, block = [1, 1, 1], [1, 1, 1]
  for u in uops:
    if u.op is Ops.SPECIAL:
      kind, dim, extent = u.arg
      if kind in ("gid", "lid"):
        (grid if kind == "gid" else block)[dim] = extent
  return tuple(grid), tuple(block)


def buffer_access(uops, slot: int) -> str:
  """Whether the PARAM in `slot` is read, written, or both by the kernel."""
  reads = writes = False
  for u in uops:
    if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.PARAM and u.src[0].arg == slot:
      reads |= u.op is Ops.LOAD
      writes |= u.op is Ops.STORE
  return "readwrite" if reads and writes else "write" if writes else "read"


@dataclass(frozen=True)
class Binding:
  slot: int
  name: str
  dtype: str     # element dtype name ("float32", "uint8", ...)
  size: int      # elements
  access: str    # "read", "write" or "readwrite"
  nbytes: int    # bytes the runtime allocates (after any packing the target needs)
  # how a WGSL kernel binds it: "storage", or "uniform" (a small read-only input bound as a
  # uniform buffer of `nbytes`, a multiple of 16, so that the kernel stays within the device's
  # storage buffers: render/wgsl/target.py uniform_slots)
  kind: str = "storage"


@dataclass(frozen=True)
class Launch:
  """Everything a runtime needs to run one compiled kernel; plain data only."""
  target: str                      # "wgsl" or "ptx"
  source: str
  entry_point: str
  bindings: tuple[Binding, ...]
  workgroup_size: tuple[int, int, int]
  dispatch: tuple[int, int, int]   # workgroups per dimension as launched (after grid folding)
  uniforms: tuple[tuple[str, str], ...] = ()  # (name, dtype) of scalar arguments, in order
  # device features the kernel needs, by their WebGPU names ("subgroups"): the device must have
  # been created with them, and a compiler that wants them declared (Tint: `enable subgroups;`)
  # gets the directive from its runtime, as naga rejects it
  features: tuple[str, ...] = ()
  # a run-time grid (symbolic sizes): ((terms, const, per[, unit]), ...) per dimension, or ():
  # the first dimension needs only ceil(need / per) workgroups, at most `dispatch`'s (the rest
  # would compute padding), where need = const + sum(c * dim for dim, c in terms) rounded up to
  # a multiple of `unit` (1 where absent: a register tile's threads come in rows of tiles,
  # compiler.with_grid). A runtime may always launch `dispatch`.
  grid: tuple = ()
  # the kernel's estimated work (lowering/compile_cost.py item_work): factors (terms, const),
  # each const + sum(c * dim for dim, c in terms), whose product at the dims' values is its
  # multiply-adds (or outputs); () where unknown. The page's runtimes weigh a run's wall time
  # among its kernels by it (launch_work: which variants to build, webgpu_browser.py)
  work: tuple = ()

  def to_json(self) -> dict:
    """The launch as JSON-able data (the page's gpu.js and bundles run it); "grid" only where
    the launch has a run-time grid: [[[[dim, coefficient], ...], const, per], ...]."""
    out = {"target": self.target, "source": self.source, "entry_point": self.entry_point,
           "bindings": [b.__dict__ for b in self.bindings],
           "workgroup_size": list(self.workgroup_size), "dispatch": list(self.dispatch),
           "uniforms": [list(u) for u in self.uniforms], "features": list(self.features)}
    if self.grid:
      out["grid"] = grid_json(self.grid)
    if self.work:
      out["work"] = work_json(self.work)
    return out


@functools.lru_cache(maxsize=512)
def unnamed_source(source: str, entry_point: str) -> str:
  """A kernel's `source` with its entry point's name blanked: kernels of one structure under
  other names (a model's layers, `_n2`, `_n3`...; the compile cache renders them so) have the
  same, and one pipeline or one bundle file serves them all (only dispatch names the entry
  point, and nothing else in the source reads it). Kept for the last sources asked (a runtime
  asks at every dispatch: the same string again, its hash cached)."""
  return re.sub(rf"\b{re.escape(entry_point)}\b", "\x00", source)


def grid_json(grid: tuple) -> list:
  """Launch.grid as JSON-able lists (`grid_from_json` reads it back): [terms, const, per] and
  the unit after them where it is not 1."""
  return [[[list(t) for t in terms], *rest] for terms, *rest in grid]


def grid_from_json(data) -> tuple:
  """Launch.grid from `grid_json`'s lists (() for None)."""
  return tuple((tuple((str(n), int(c)) for n, c in terms), *(int(x) for x in rest))
               for terms, *rest in data or ())


def work_json(work: tuple) -> list:
  """Launch.work as JSON-able lists: [[[dim, coefficient], ...], const] per factor."""
  return [[[list(t) for t in terms], const] for terms, const in work]


def work_from_json(data) -> tuple:
  """Launch.work from `work_json`'s lists (() for None)."""
  return tuple((tuple((str(n), int(c)) for n, c in terms), int(const))
               for terms, const in data or ())


def launch_work(launch: Launch, values: dict | None) -> float:
  """The launch's estimated work at the dims' `values`: Launch.work's product, times the padding
  its run-time grid launches there (the workgroups' share of the grid's first dimension over
  what the values need: a kernel tiled for large values computes whole tiles of padding at
  small ones, the work its variants save); where it has none, or a dim is not bound, the
  threads it launches there (launch_dispatch x workgroup)."""
  work = 1.0
  for terms, const in launch.work:
    if any(name not in (values or {}) for name, _ in terms):
      break
    work *= max(1, const + sum(c * values[name] for name, c in terms))
  else:
    if launch.work:
      return work * _padding(launch, values)
  return float(math.prod(launch_dispatch(launch, values)) * math.prod(launch.workgroup_size))


def _padding(launch: Launch, values: dict | None) -> float:
  """What the launch's run-time grid covers at `values` over what they need (1 without one)."""
  if not launch.grid or not values:
    return 1.0
  terms, const, per, *_ = launch.grid[0]
  if any(name not in values for name, _ in terms):
    return 1.0
  need = const + sum(c * values[name] for name, c in terms)
  return max(1.0, launch_dispatch(launch, values)[0] * per / max(need, 1))


def launch_dispatch(launch: Launch, values: dict | None) -> tuple:
  """The workgroups to launch: `launch.dispatch`, its first dimension cut to `launch.grid`
  under the dims' `values` (a symbolic size's bound value) where the launch has one."""
  if not launch.grid or not values:
    return tuple(launch.dispatch)
  terms, const, per, *unit = launch.grid[0]
  if any(name not in values for name, _ in terms):
    return tuple(launch.dispatch)
  need = const + sum(c * values[name] for name, c in terms)
  unit = unit[0] if unit else 1
  need = -(-need // unit) * unit
  x = min(launch.dispatch[0], max(1, -(-need // per)))
  return (x,) + tuple(launch.dispatch[1:])


@dataclass(frozen=True)
class CompiledKernel:
  """One kernel of `kg.compile`'s result (frozen): its `name`, the `target` it was rendered for,
  the `source` text, the grid (`global_size`: workgroups / blocks per axis, x y z) and the
  workgroup / block size (`local_size`: threads per axis), the `buffers` it binds in slot order
  (BufferSpec: slot, name, dtype, size in elements, access "read", "write" or "readwrite"),
  the `launch` (plain data a runtime needs to run it) and the compiler's `kernel` (the
  linearized IR it was rendered from). `capped`: the optimizer cut a choice down to fit a
  one-off run's compile budget (lowering/compile_cost.py): a plan run again may swap in the
  kernel compiled for many runs. `variants`: ((dim, most, CompiledKernel), ...), the same
  computation compiled for smaller bound values of the symbolic `dim` (a register tile or the
  lanes per row sized for them, lowering/variants.py), all compiled with this one: a runtime
  runs the first that serves the bound value (`serves`: up to its `most`), else this kernel;
  each is correct at every value it serves, so a runtime that ignores them only runs slower.
  `exact`: a variant pinned to the one value `most` (lowering/pinned.py: its stores are gated by
  dim == most, so at any other value it writes nothing): it serves that value only. `runs`:
  (dim, lo, hi) where a plan launches it only while `dim` is bound within lo..hi (`runs_at`:
  graph/one_row.py's joined kernel of a one-row step and the pair it stands for); () always."""
  name: str
  target: str                       # "wgsl" or "ptx"
  source: str
  global_size: tuple[int, int, int]
  local_size: tuple[int, int, int]
  buffers: tuple[BufferSpec, ...]
  launch: Launch
  kernel: Kernel = field(repr=False, default=None)
  capped: bool = field(repr=False, default=False, compare=False)
  variants: tuple = field(repr=False, default=(), compare=False)
  exact: bool = field(repr=False, default=False, compare=False)
  runs: tuple = field(repr=False, default=(), compare=False)


def runs_at(runs, values: dict | None) -> bool:
  """Whether a kernel of `runs` ((dim, lo, hi), or () / None: always; CompiledKernel.runs, a
  bundle manifest's kernel entry's as a dict) is launched where the dims are bound to `values`
  (a dim without a value: launched)."""
  if not runs:
    return True
  dim, lo, hi = (runs["dim"], runs["lo"], runs["hi"]) if isinstance(runs, dict) else runs
  value = (values or {}).get(dim)
  return value is None or lo <= value <= hi


def serves(dim: str, most: int, variant, values: dict | None) -> bool:
  """Whether a variant (dim, most, variant) serves the dims' bound `values`: its dim bound to at
  most `most`, and to exactly `most` where the variant is pinned to that value (`exact`). The
  one rule of every runtime's pick (variant_for, the page's webgpu_browser.py pick, model.js's
  pick: a fallback to another built variant never takes a pin of another value)."""
  return bool(values) and dim in values and values[dim] <= most and \
    (values[dim] == most or not getattr(variant, "exact", False))


def variant_for(kernel, values: dict | None):
  """The kernel to run for the dims' bound `values`: the first of `kernel.variants` that serves
  them (`serves`), else `kernel` itself (a Kernel or a kernel without variants)."""
  for dim, most, variant in getattr(kernel, "variants", ()) or ():
    if serves(dim, most, variant, values):
      return variant
  return kernel


def with_variants(kernel) -> list:
  """`kernel` and its variants (the native runtime prepares them all with it; the page's builds a
  variant once runs ask for it: webgpu_browser.py pick)."""
  return [kernel] + [variant for _, _, variant in getattr(kernel, "variants", ()) or ()]
