"""Realizing: run the kernels a lazy graph needs, on its device, and read results back."""
from __future__ import annotations

import os

from .errors import ExecutionError, internal_errors
from .graph.lazy import Buffer, LazyOp
from .graph.schedule import row_limit, schedule


def realize(nodes: list[LazyOp]) -> None:
  """Compute every node in `nodes` into a buffer on its device (each kernel runs once)."""
  from .cache import cached_compile
  from .compiler import buffer_limit
  from .device import Device
  pending = [n for n in nodes if not n.realized]
  limits = [buffer_limit(Device[d].target or "python", Device[d].render_options())
            for d in {n.device for n in pending}]
  limit = min((m for m in limits if m), default=None)
  rows = min(row_limit(Device[d].render_options()) for d in {n.device for n in pending}) \
    if pending else 0
  with internal_errors("schedule"):
    items = schedule(pending, limit, rows)
  for item in items:
    out = item.out
    buffer = Buffer(out.device, out.dtype, out.size)
    if out.size:
      runtime = Device[out.device]
      options = runtime.render_options()
      with internal_errors(f"upload to {out.device}", item.name, ExecutionError):
        handles = [buffer.handle] + [src.buffer.handle for src in item.inputs]
      if os.environ.get("KERNELGEN_SEARCH") == "1":
        from .search import forced_options, search
        with internal_errors("search", item.name, ExecutionError):
          opts = search(item, runtime, handles, options)
        options = {**options, **forced_options(opts)}
      compiled = cached_compile(item, runtime.target or "python", options)   # cache.py
      # a kernel binds only the buffers it still reads after simplification (by slot)
      with internal_errors(f"run on {out.device}", item.name, ExecutionError):
        runtime.run(compiled, [handles[b.slot] for b in compiled.buffers], {})
    # only now: a kernel cut short (Ctrl-C, an error) leaves its node unrealized, to run again
    out.buffer, out.src = buffer, ()


def read_bytes(node: LazyOp) -> bytes:
  """The node's values as bytes in numpy layout (realizing it first)."""
  realize([node])
  with internal_errors(f"download from {node.device}", "", ExecutionError):
    return node.buffer.copyout()
