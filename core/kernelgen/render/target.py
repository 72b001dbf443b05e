"""What a backend is: one frozen `Target` per backend (WGSL in wgsl/target.py, PTX in
ptx/target.py, PYTHON in targets.py) holding every hard fact the optimizer and the lowering read
(workgroup limits, vector widths, subgroup dtypes, tensor-core shapes), the options it takes, and
its steps: `legalize` and `render` (its renderer package, render/<backend>/), `buffer_limit`,
`adapter_defaults`. The target is resolved from its name once, where the user names it
(targets.get_target), and this object travels down the pipeline; nothing below compares names.

`Target.check_options(options)` is the one option check every target runs: an unknown or
misspelled option is an UnsupportedError naming the closest valid one.
"""
from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field
from typing import Callable

from ..errors import UnsupportedError

# options the front end consumes (optimize, tensor cores), valid on every target; the rest go to
# the renderer. `subgroups` (default off; the WEBGPU device sets it when its adapter has
# subgroups) is read by both: optimize lets grouped reductions combine per subgroup, and the WGSL
# renderer accepts subgroup ops only with it (PTX takes warp shuffles always). `adapter` (WGSL:
# the WebGPU adapter's class or description) picks defaults from render/wgsl/adapters.py; `runs`
# (how often the caller expects to run the kernels) and the adapter's `driver_cost` weigh
# compile time against GPU time (lowering/compile_cost.py)
# front-end options whose value is a plain int
INT_OPTIONS = ("local", "upcast", "group", "group_unroll", "group_vec", "row_lanes",
               "row_thread_rows", "row_short", "row_short_groups", "attention_keys", "tile_unroll",
               "reduce_inner", "reduce_whole", "reduce_rows", "reduce_step", "runs", "q4_lanes",
               "seq_vec", "tile_chunk", "exact_local", "group_outputs", "tile_rate",
               "min_groups", "variant_groups")
FRONT_END_OPTIONS = ("local", "upcast", "upcast_vec", "group", "group_unroll", "group_vec",
                     "group_chunk", "tile", "stage", "tensor_cores", "tf32", "row_kernels",
                     "row_lanes", "adapter", "small_tiles", "tiles", "long_tiles",
                     "tile_window", "tile_size_cap", "row_online", "row_thread_rows",
                     "row_short", "row_short_groups", "attention_keys", "tile_unroll",
                     "reduce_inner", "reduce_whole", "static_low_end",
                     "reduce_rows", "reduce_step", "runs", "q4_lanes",
                     "driver_cost", "long_tiles_cost", "slide", "seq_vec", "tile_chunk",
                     "exact_local", "group_outputs", "whole_tiles", "tile_rate", "min_groups",
                     "variant_groups", "cheap_first", "quad_weights")


@dataclass(frozen=True)
class Target:
  """One backend's facts. Sizes are in threads (local) and bytes; dtypes by name."""
  name: str                       # "python", "wgsl", "ptx"
  title: str                      # how messages name it: "WGSL", "PTX", "python"
  renderer_options: tuple         # options its renderer takes (besides FRONT_END_OPTIONS)
  max_local: int                  # the most threads in one workgroup we use
  max_local_bytes: int            # bytes of workgroup memory one kernel may use
  upcast: int = 4                 # outputs per thread of large elementwise kernels (0: never)
  upcast_local: int | None = None  # the most threads per workgroup for those (None: max_local)
  upcast_vec: bool = False        # those kernels read runs and write vectors
  subgroup_dtypes: tuple = ()     # dtypes whose grouped reductions may combine per subgroup
  subgroup_whole_warps: bool = False  # subgroups only for groups of whole warps (WARP threads)
  group_unroll: int = 1           # each lane's loop of a grouped reduction unrolled this often
  group_vec: int = 1              # consecutive elements per lane and step of those
  group_min_steps: int = 0        # the fewest steps each lane of those takes
  register_tiles: bool = True     # the heuristic gives matmul-like kernels register tiles
  tile_over_group: bool = False   # a register tile that shares loads beats a grouped reduction
  stage_threads: tuple = (8, 8)   # the most threads (rows, cols) of a workgroup-memory tile
  stage_default: bool = False     # tiles go through workgroup memory by default
  tile_fma: bool = False          # register tiles accumulate float products fused (MULACC)
  tensor_cores: bool = False      # matmuls use tensor cores by default
  runs_wmma: bool = True          # tensor cores can be forced (WMMA; the interpreter runs it)
  mma_shapes: dict = field(default_factory=dict)  # (M, N, K, dtype) -> (oldest sm, ...)
  arch_number: Callable | None = None  # arch name ('sm_80') -> its number, checked (tensor cores)
  backend: str | None = None      # its renderer package, render/<backend>/ (legalize, render,
                                  # buffer_limit); None: the interpreter runs the Kernel itself
  adapters: bool = False          # option `adapter` picks defaults (the package's adapter_defaults)

  @property
  def options(self) -> tuple:
    """Every option name this target accepts."""
    return FRONT_END_OPTIONS + tuple(n for n in self.renderer_options
                                     if n not in FRONT_END_OPTIONS)

  def check_options(self, options: dict) -> dict:
    """`options` itself when every name is one this target takes; else an UnsupportedError
    naming the unknown ones, the closest valid name to each, and the valid names."""
    unknown = [name for name in options if name not in self.options]
    if unknown:
      raise UnsupportedError(unknown_options_message(self.title, unknown, self.options),
                             target=self.name)
    for name in INT_OPTIONS:
      value = options.get(name)
      if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise UnsupportedError(f"option {name}={value!r}: give an int (a count of threads, "
                               f"lanes or elements)", target=self.name)
      least = 1 if name in ("upcast", "runs") else 0
      if value is not None and value < least:
        raise UnsupportedError(f"option {name}={value}: give an int >= {least} (a count of "
                               f"threads, lanes or elements)", target=self.name)
    cost = options.get("driver_cost")
    if cost is not None and not (isinstance(cost, (tuple, list)) and len(cost) == 2 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in cost)):
      raise UnsupportedError(f"option driver_cost={cost!r}: give (a, b), the driver's compile "
                             f"in ms as a * uops + b * uops^2 / 1000, both >= 0, or None for "
                             f"no compile-cost cap", target=self.name)
    kernels = options.get("row_kernels")
    if kernels is not None and not isinstance(kernels, (bool, int)):
      raise UnsupportedError(f"option row_kernels={kernels!r}: give True, False or an int "
                             f"(the longest row fused)", target=self.name)
    return options

  def for_renderer(self, options: dict) -> dict:
    """The options its renderer takes (the front end's dropped)."""
    return {k: v for k, v in options.items() if k not in FRONT_END_OPTIONS}

  def renderer(self):
    """Its renderer package (imported on first use), or None (PYTHON: no source to write)."""
    return importlib.import_module(f".{self.backend}", __package__) if self.backend else None

  def legalize(self, sink, options: dict):
    """The renderer's rewrites of a kernel graph, and its typed errors for what the target
    cannot do (`options`: the renderer's, see for_renderer)."""
    backend = self.renderer()
    return sink if backend is None else backend.legalize(sink, **options)

  def render(self, kernel, options: dict):
    """A linearized Kernel written out: a CompiledKernel, or the Kernel itself (PYTHON)."""
    backend = self.renderer()
    return kernel if backend is None else backend.render(kernel, **options)

  def buffer_limit(self, options: dict) -> int | None:
    """The most buffers one kernel may bind with these options (None: no limit to split for)."""
    limit = getattr(self.renderer(), "buffer_limit", None)
    return limit(self.for_renderer(options)) if limit else None

  def adapter_defaults(self, adapter: str, shape_class: str) -> dict:
    """The options `adapter`'s class defaults to for kernels of `shape_class` ({} when the
    target keys nothing on adapters)."""
    return self.renderer().adapter_defaults(adapter, shape_class) if self.adapters else {}

  def arch(self, arch: str) -> int:
    """The number of arch name `arch` (tensor-core shapes are chosen by it); UnsupportedError
    where the target has no archs."""
    if self.arch_number is None:
      raise UnsupportedError(f"target {self.name} has no archs (arch={arch!r})", target=self.name)
    return self.arch_number(arch)


def unknown_options_message(title: str, unknown: list, valid) -> str:
  """'unknown PTX option(s) upcst (did you mean upcast?): use one of ...'."""
  named = []
  for name in sorted(unknown):
    close = difflib.get_close_matches(str(name), list(valid), n=1)
    named.append(f"{name} (did you mean {close[0]}?)" if close else str(name))
  return f"unknown {title} option(s) {', '.join(named)}: use one of {', '.join(sorted(valid))}"

