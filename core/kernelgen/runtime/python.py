"""Device PYTHON: buffers are bytearrays and kernels run on the reference interpreter."""
from __future__ import annotations

import time

from ..errors import ExecutionError
from ..uop.program import CompiledKernel, Kernel, launch_dispatch
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
      dispatch = launch_dispatch(kernel.launch, var_values)
      kernel = kernel.kernel
    dispatch = dispatch or kernel.global_size
    self.workgroups += dispatch[0] * dispatch[1] * dispatch[2]
    start = time.perf_counter()
    execute(kernel, handles, var_values, self.subgroup_size, self.subgroup_layout, dispatch)
    return time.perf_counter() - start
