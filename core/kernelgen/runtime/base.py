"""The interface every device runtime implements (PYTHON, WEBGPU, CUDA, PTXSIM).

A runtime owns device memory and runs compiled kernels. Data crosses as raw little-endian bytes
in numpy layout (bool: one byte per element), so the tensor layer never needs numpy.
"""
from __future__ import annotations

from ..uop.program import CompiledKernel


class Runtime:
  name: str = ""           # the device name users type: "PYTHON", "WEBGPU", "CUDA", "PTXSIM"
  target: str | None = None  # the source a kernel must be rendered to: "wgsl", "ptx" or None
  # whether run_many keeps what it makes to bind a launch's buffers (WEBGPU natively: a bind
  # group) for launches binding the same buffers each time: a replay then copies small inputs and
  # outputs through buffers of its own (onnx/replay.py Program._stage), binding those
  keeps_bindings: bool = False

  def render_options(self) -> dict:
    """The options this device's kernels are compiled with (its features and limits, and the
    front-end defaults it wants, e.g. `adapter`); the compiler hands the renderer its part of
    them (Target.for_renderer)."""
    return {}

  def alloc(self, nbytes: int):
    """A new device buffer of `nbytes` bytes (contents unspecified); returns a handle."""
    raise NotImplementedError

  def copyin(self, handle, data: bytes | bytearray | memoryview) -> None:
    raise NotImplementedError

  def copyout(self, handle) -> bytes:
    raise NotImplementedError

  def copyout_many(self, handles: list) -> list[bytes]:
    """The bytes of each buffer in `handles`, read back together (WEBGPU: one submit and one
    map for them all); by default one copyout each."""
    return [self.copyout(handle) for handle in handles]

  def copy(self, source, target, nbytes: int) -> None:
    """Copy the first `nbytes` bytes of buffer `source` into buffer `target`, after the work
    run so far; by default through the host (a copyout and a copyin)."""
    self.copyin(target, self.copyout(source)[:nbytes])

  def free(self, handle) -> None:
    """Release a buffer (optional: garbage collection is enough for most runtimes)."""

  def prepare(self, kernel: CompiledKernel) -> None:
    """Start getting `kernel` ready to run, while the caller goes on (optional: WEBGPU builds its
    pipeline on a thread of its own); `run` waits for what it needs."""

  def ready(self, kernel: CompiledKernel) -> bool:
    """Whether `kernel`, once prepared, runs without waiting for its build: a kept plan swaps in
    a larger kernel only then (realize._swap), the smaller one running meanwhile. True unless the
    runtime builds in the background and can tell (the page's WEBGPU; natively lavapipe compiles
    at the first dispatch anyway, so the swap is at once there)."""
    return True

  def run(self, kernel: CompiledKernel, handles: list, var_values: dict[str, int]) -> float | None:
    """Run `kernel` with `handles` in binding-slot order; returns the seconds it took if timed."""
    raise NotImplementedError

  def run_many(self, launches: list, var_values: dict[str, int], keep: dict | None = None) -> None:
    """Run [(kernel, handles, key)] in order (a recorded program's replay). Runtimes that can
    queue them as one submission override it; `keep` is a dict they may keep per-launch state
    in under `key` (not None: the launch binds the same handles every time)."""
    for kernel, handles, _ in launches:
      self.run(kernel, handles, var_values)

  def time_run(self, kernel: CompiledKernel, handles: list, var_values: dict[str, int],
               repeat: int = 1) -> float:
    """Run `kernel`, wait for it, and return the seconds it took on the device (what the search
    mode compares); `repeat` > 1: the mean of that many runs (WEBGPU and CUDA time them back to
    back between one pair of timestamps, for kernels shorter than the timer's noise). Runtimes
    whose `run` returns its time need nothing more."""
    total = 0.0
    for _ in range(max(1, repeat)):
      seconds = self.run(kernel, handles, var_values)
      if seconds is None:
        from ..errors import DeviceError
        raise DeviceError(f"device {self.name} cannot time kernels, so the search mode cannot "
                          f"run on it: unset KERNELGEN_SEARCH")
      total += seconds
    return total / max(1, repeat)
