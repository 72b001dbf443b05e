"""Device PTXSIM: kernels rendered to PTX run on the project's PTX simulator (pure Python).

Buffers are simulator buffers (a bytearray at a 64-bit address); `run` parses the kernel's PTX
text (cached by source), binds the buffers' addresses and then the scalar arguments in
parameter order, and executes `launch.dispatch` blocks of `launch.workgroup_size` threads.
Out-of-bounds accesses, uninitialised registers and shared-memory races raise ExecutionError.
"""
from __future__ import annotations

import time

from ..errors import DeviceError, ExecutionError
from ..uop.program import CompiledKernel, launch_dispatch, variant_for
from .base import Runtime


class PTXSimRuntime(Runtime):
  name = "PTXSIM"
  target = "ptx"

  def __init__(self, arch: str = "sm_80", check_races: bool = True):
    from ..ptxsim import GlobalMemory
    self.arch, self.check_races = arch, check_races
    self.memory = GlobalMemory()

  def render_options(self) -> dict:
    return {"arch": self.arch}

  def alloc(self, nbytes: int):
    return self.memory.alloc(nbytes, f"buffer{len(self.memory.buffers)}")

  def copyin(self, handle, data) -> None:
    data = memoryview(data).cast("B")
    if len(data) > handle.size:
      raise ExecutionError(f"cannot copy {len(data)} bytes into a buffer of {handle.size} bytes: "
                           f"allocate a larger buffer")
    handle.data[:len(data)] = data

  def copyout(self, handle) -> bytes:
    return bytes(handle.data)

  def free(self, handle) -> None:
    self.memory.free(handle)

  def run(self, kernel: CompiledKernel, handles: list, var_values: dict[str, int],
          progress=None) -> float:
    """Run `kernel` with `handles` in binding order; returns the seconds the simulation took.
    `progress(blocks done, blocks, seconds)` is called as it goes (False stops it)."""
    from ..ptxsim import program, launch
    kernel = variant_for(kernel, var_values)      # a symbolic kernel's variant for the values
    spec = kernel.launch
    if spec.target != self.target:
      raise DeviceError(f"PTXSIM runs PTX, but kernel {kernel.name} was rendered for "
                        f"{spec.target}: compile it for the PTXSIM device")
    if len(handles) != len(spec.bindings):
      raise DeviceError(f"kernel {kernel.name} needs {len(spec.bindings)} buffers, got "
                        f"{len(handles)}")
    missing = [name for name, _ in spec.uniforms if name not in var_values]
    if missing:
      raise DeviceError(f"no value given for the kernel argument(s) {', '.join(missing)}")
    for binding, handle in zip(spec.bindings, handles):
      handle.name = f"data{binding.slot} ({binding.name})"
    args = [h.base for h in handles] + [int(var_values[name]) for name, _ in spec.uniforms]
    start = time.perf_counter()
    launch(program(spec.source, spec.entry_point), launch_dispatch(spec, var_values),
           spec.workgroup_size, args, self.memory, self.check_races, progress=progress)
    return time.perf_counter() - start
