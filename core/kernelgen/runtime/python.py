"""Device PYTHON: buffers are bytearrays and kernels run on the reference interpreter."""
from __future__ import annotations

import time

from .. import limits
from ..errors import ExecutionError
from ..rules.ranges import value_range
from ..uop.ops import Ops
from ..uop.program import CompiledKernel, Kernel, launch_dispatch, variant_for
from .base import Runtime


class PythonRuntime(Runtime):
  name = "PYTHON"
  target = None   # kernels stay linearized UOps: no source is rendered
  # subgroups as the interpreter models them: off unless set (then grouped reductions use
  # SUBGROUP_REDUCE, run with subgroups of `subgroup_size` threads in `subgroup_layout`)
  subgroups, subgroup_size, subgroup_layout = False, 32, "linear"
  workgroups = 0   # workgroups run so far, all kernels together (a run-time grid runs fewer)

  def render_options(self) -> dict:
    return {"subgroups": True} if self.subgroups else {}

  def alloc(self, nbytes: int) -> bytearray:
    return bytearray(nbytes)

  def copyin(self, handle: bytearray, data) -> None:
    data = memoryview(data).cast("B")
    if len(data) > len(handle):
      raise ExecutionError(f"cannot copy {len(data)} bytes into a buffer of {len(handle)} bytes: "
                           f"allocate a larger buffer")
    handle[:len(data)] = data

  def copyout(self, handle: bytearray) -> bytes:
    return bytes(handle)

  def run(self, kernel: Kernel | CompiledKernel, handles: list,
          var_values: dict[str, int]) -> float:
    """Run a linearized Kernel (or a CompiledKernel that carries one: only the workgroups its
    run-time grid needs under `var_values`); returns the seconds taken."""
    from ..uop.interpret import execute
    dispatch = None
    if isinstance(kernel, CompiledKernel):
      kernel = variant_for(kernel, var_values)    # a symbolic kernel's variant for the values
      dispatch = launch_dispatch(kernel.launch, var_values)
      kernel = kernel.kernel
    dispatch = dispatch or kernel.global_size
    self.workgroups += dispatch[0] * dispatch[1] * dispatch[2]
    limits.check("interpreted_work", interpreted_work(kernel),
                 f"kernel {kernel.name!r} on PYTHON: its loop iterations over the whole grid")
    start = time.perf_counter()
    execute(kernel, handles, var_values, self.subgroup_size, self.subgroup_layout, dispatch)
    return time.perf_counter() - start


UNBOUNDED = 2**31 - 1  # a loop end whose range reaches int32's top: nothing bounds it statically


def interpreted_work(kernel: Kernel) -> int:
  """About how many loop iterations `kernel` runs over its whole grid: each constant-bound loop
  counted times its enclosing loops' trips, at the most its bound can be, and a loop whose end
  is data-dependent once (checked against a limit before the interpreter runs it, so a
  2**40-element reduction is refused rather than run for days)."""
  total, trips = 0, [1]
  for u in kernel.uops:
    if u.op is Ops.RANGE:
      end = value_range(u.src[0])[1]     # the most trips it can take
      if not isinstance(end, int) or end >= UNBOUNDED:
        end = 1                          # a data-dependent end (a loaded value): counted once
      trips.append(trips[-1] * max(end, 1))
      total += trips[-1]
    elif u.op is Ops.ENDRANGE and len(trips) > 1:
      trips.pop()
  return kernel.threads * max(total, 1)
