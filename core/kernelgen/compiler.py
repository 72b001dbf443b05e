"""The kernel pipeline: one list of named passes, from a kernel graph to rendered source.

`kernel_passes(target)` lists the passes in order; `compile_kernel` runs them and can print the
IR after any pass (`print_after={"simplify"}` or `"all"`). Tensor-level passes (schedule,
optimize, lower) run before these and live in the front end.

Targets: "python" (the reference interpreter runs the linearized kernel), "wgsl", "ptx".
Renderer modules expose `legalize(sink, **options) -> sink` (target rewrites, and typed errors
for what the target cannot do, before any source exists) and
`render(kernel, **options) -> CompiledKernel`.
"""
from __future__ import annotations

import functools
import importlib
import sys
from typing import Callable

from .errors import UnsupportedError, internal_errors
from .ops import UOp, print_graph, print_uops
from .program import Kernel

TARGETS = ("python", "wgsl", "ptx")
# options the front end consumes (optimize, tensor cores); the rest go to the renderer.
# `subgroups` (default off; the WEBGPU device sets it when its adapter has subgroups) is read by
# both: optimize lets grouped reductions combine per subgroup, and the WGSL renderer accepts
# subgroup ops only with it (PTX takes warp shuffles always)
FRONT_END_OPTIONS = ("local", "upcast", "upcast_vec", "group", "group_unroll", "group_vec",
                     "group_chunk", "tile", "stage", "tensor_cores", "tf32")


@functools.lru_cache(maxsize=None)
def _renderer(target: str):
  if target not in TARGETS:
    raise UnsupportedError(f"unknown target {target!r}: use one of {', '.join(TARGETS)}",
                           target=target)
  return None if target == "python" else importlib.import_module(f".render.{target}", __package__)


def kernel_passes(target: str, options: dict) -> list[tuple[str, Callable]]:
  """The passes from a kernel's SINK to a Kernel (linearized), in order.

  The graph is verified once, after the last rewrite (every node the linearizer and renderer
  see is checked; verify marks checked nodes, so verify_linear checks only what linearize adds).
  A rewrite that fails on its input verifies the input first, so a malformed graph from the
  front end is reported as the VerifyError naming its bad node, not as the rule's error."""
  from .linearize import linearize
  from .ops import sink_order
  from .rules.symbolic import simplify
  from .verify import verify, verify_linear, verify_node
  renderer = _renderer(target)

  def checked(rewrite: Callable) -> Callable:
    def run(sink: UOp) -> UOp:
      try:
        return rewrite(sink)
      except Exception:
        verify(sink)
        raise
    return run

  def legalize(sink: UOp) -> UOp:
    return sink if renderer is None else renderer.legalize(sink, **options)

  def check(sink: UOp) -> UOp:
    if not sink._verified:      # (a legalize may have verified as it walked: wgsl_legalize.py)
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


def compile_kernel(sink: UOp, name: str, target: str = "python", options: dict | None = None,
                   buffer_names: dict[int, str] | None = None, print_after=()):
  """Run every pass on `sink`; a Kernel for "python", a CompiledKernel for a GPU target."""
  from .linearize import make_kernel
  options = options or {}
  ir = sink
  for pass_name, run_pass in kernel_passes(target, options):
    with internal_errors(pass_name, name):
      ir = run_pass(ir)
    if print_after == "all" or pass_name in print_after:
      text = print_uops(ir) if isinstance(ir, list) else print_graph(ir)
      print(f"--- after {pass_name} ({name}) ---\n{text}", file=sys.stderr)
  renderer = _renderer(target)
  with internal_errors("render", name):
    kernel: Kernel = make_kernel(name, ir, buffer_names or {})
    return kernel if renderer is None else renderer.render(kernel, **options)


# ---- the whole pipeline, from tensors to kernels ---------------------------------------------

def compile_program(roots: list, target: str = "python", options: dict | None = None,
                    print_after=()) -> list:
  """Every pass from lazy tensors to kernels, in order: schedule, then per kernel optimize,
  lower and the kernel passes above (`kernel_passes`), then render. Returns CompiledKernels."""
  from .schedule import schedule
  _renderer(target)
  with internal_errors("schedule"):
    items = schedule(roots, buffer_limit(target, options))     # schedule
  if print_after == "all" or "schedule" in print_after:
    print("--- after schedule ---\n" + "\n".join(f"{it.name}: {it.out}" for it in items),
          file=sys.stderr)
  return [compile_item(item, target, options, print_after) for item in items if item.out.size]


def buffer_limit(target: str, options: dict | None) -> int | None:
  """The most buffers one kernel may bind on `target` with these options (None: no limit that
  the scheduler needs to split kernels for)."""
  renderer = _renderer(target)
  limit = getattr(renderer, "buffer_limit", None)
  return limit({k: v for k, v in (options or {}).items() if k not in FRONT_END_OPTIONS}) \
    if limit else None


def compile_item(item, target: str, options: dict | None = None, print_after=()):
  """One scheduled kernel through optimize, lower and the kernel passes -> CompiledKernel.
  A matmul-shaped kernel on PTX is lowered to tensor-core tiles instead (tensorcore.py)."""
  from .lower import lower
  from .optimize import optimize
  options = dict(options or {})
  from .tensorcore import lower_tensor_cores
  with internal_errors("tensor_cores", item.name):
    lowered = lower_tensor_cores(item, target, options)       # tensor cores (matmuls on PTX)
  if lowered is None:
    with internal_errors("optimize", item.name):
      opts = optimize(item, target, options)                  # optimize
    with internal_errors("lower", item.name):
      lowered = lower(item, opts)                             # lower
  sink, buffers = lowered
  if print_after == "all" or "lower" in print_after:
    print(f"--- after lower ({item.name}) ---\n{print_graph(sink)}", file=sys.stderr)
  render_options = {k: v for k, v in options.items() if k not in FRONT_END_OPTIONS}
  out = compile_kernel(sink, item.name, target, render_options,     # verify ... render
                       {b.slot: b.name for b in buffers}, print_after)
  if target != "python":
    return out
  with internal_errors("render", item.name):
    return python_compiled(out)


def python_compiled(kernel: Kernel):
  """A linearized Kernel dressed as a CompiledKernel (target "python"; source: printed UOps)."""
  from .program import Binding, CompiledKernel, Launch
  source = print_uops(kernel.uops)
  bindings = tuple(Binding(b.slot, b.name, b.dtype.name, b.size, b.access,
                           b.size * b.dtype.itemsize) for b in kernel.buffers)
  launch = Launch("python", source, kernel.name, bindings, kernel.local_size, kernel.global_size,
                  tuple((v.arg[0], "int32") for v in kernel.vars))
  return CompiledKernel(kernel.name, "python", source, kernel.global_size, kernel.local_size,
                        kernel.buffers, launch, kernel)
