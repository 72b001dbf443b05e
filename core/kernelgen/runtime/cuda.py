"""Device CUDA: PTX kernels run through the NVIDIA driver API, called with ctypes on libcuda.

It consumes a kernel's `Launch` (program.py): `cuModuleLoadData` JIT-compiles the PTX source, the
bindings become `.u64` pointer arguments in slot order followed by the `.s32` scalar arguments
(`launch.uniforms`), and `cuLaunchKernel` runs `launch.dispatch` blocks of
`launch.workgroup_size` threads. The arch the renderer targets is the device's compute
capability (the newest arch render/ptx.py knows that is not newer than the device).

Importing this module never touches the driver; creating a `CUDARuntime` where there is no
driver raises DeviceError.
"""
from __future__ import annotations

import ctypes
import ctypes.util

from ..errors import CompileError, DeviceError
from ..uop.program import CompiledKernel, Launch, launch_dispatch, variant_for
from .base import Runtime

# shared-library names of the driver, tried in order
DRIVER_NAMES = ("libcuda.so.1", "libcuda.so", "nvcuda.dll", "libcuda.dylib")

# CUdevice_attribute values
ATTRIBUTE_CC_MAJOR, ATTRIBUTE_CC_MINOR = 75, 76
# CUjit_option values: where the JIT writes its error log
JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE = 5, 6
LOG_SIZE = 1 << 14


def _load_driver():
  for name in DRIVER_NAMES + ((ctypes.util.find_library("cuda") or ""),):
    if not name:
      continue
    try:
      return ctypes.CDLL(name)
    except OSError:
      continue
  raise DeviceError("no CUDA driver found (libcuda could not be loaded): device CUDA needs an "
                    "NVIDIA GPU with its driver; use device PTXSIM to run PTX on the CPU, or "
                    "download the PTX")


class _Buffer:
  """A device allocation and the byte count the caller asked for."""
  __slots__ = ("ptr", "nbytes")

  def __init__(self, ptr: int, nbytes: int):
    self.ptr, self.nbytes = ptr, nbytes


class CUDARuntime(Runtime):
  name = "CUDA"
  target = "ptx"

  def __init__(self, ordinal: int = 0):
    self.lib = _load_driver()
    self._check(self.lib.cuInit(0), "cuInit")
    device = ctypes.c_int()
    self._check(self.lib.cuDeviceGet(ctypes.byref(device), ordinal), f"cuDeviceGet({ordinal})")
    self.device = device.value
    self.arch = self._arch()
    context = ctypes.c_void_p()
    self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), self.device),
                "cuDevicePrimaryCtxRetain")
    self._check(self.lib.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    self.context = context
    self._functions: dict[str, tuple] = {}

  # ---- driver calls ----
  def _check(self, status: int, what: str) -> None:
    if status == 0:
      return
    text = ctypes.c_char_p()
    self.lib.cuGetErrorString(status, ctypes.byref(text))
    detail = text.value.decode() if text.value else "unknown error"
    raise DeviceError(f"CUDA driver call {what} failed with error {status}: {detail}")

  def _arch(self) -> str:
    from ..render.ptx.target import ISA_VERSION
    major, minor = ctypes.c_int(), ctypes.c_int()
    for value, attribute in ((major, ATTRIBUTE_CC_MAJOR), (minor, ATTRIBUTE_CC_MINOR)):
      self._check(self.lib.cuDeviceGetAttribute(ctypes.byref(value), attribute, self.device),
                  "cuDeviceGetAttribute")
    capability = major.value * 10 + minor.value
    known = [sm for sm in ISA_VERSION if sm <= capability]
    if not known:
      raise DeviceError(f"this GPU has compute capability {major.value}.{minor.value}; kernelgen's "
                        f"PTX needs sm_75 or newer")
    return f"sm_{max(known)}"

  def render_options(self) -> dict:
    return {"arch": self.arch}

  # ---- memory ----
  def alloc(self, nbytes: int) -> _Buffer:
    ptr = ctypes.c_uint64()
    self._check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 4))),
                f"cuMemAlloc({nbytes})")
    return _Buffer(ptr.value, nbytes)

  def copyin(self, handle: _Buffer, data) -> None:
    data = bytes(data)
    if len(data) > handle.nbytes:
      raise DeviceError(f"copyin of {len(data)} bytes into a buffer of {handle.nbytes}")
    self._check(self.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(handle.ptr), data,
                                         ctypes.c_size_t(len(data))), "cuMemcpyHtoD")

  def copyout(self, handle: _Buffer) -> bytes:
    out = ctypes.create_string_buffer(max(handle.nbytes, 1))
    self._check(self.lib.cuMemcpyDtoH_v2(out, ctypes.c_uint64(handle.ptr),
                                         ctypes.c_size_t(handle.nbytes)), "cuMemcpyDtoH")
    return out.raw[:handle.nbytes]

  def free(self, handle: _Buffer) -> None:
    if handle.ptr:
      self.lib.cuMemFree_v2(ctypes.c_uint64(handle.ptr))
      handle.ptr = 0

  # ---- kernels ----
  def function(self, launch: Launch):
    """The loaded kernel function for a launch (the PTX is JIT-compiled once per source)."""
    if launch.source not in self._functions:
      module = self._load_module(launch.source)
      function = ctypes.c_void_p()
      self._check(self.lib.cuModuleGetFunction(ctypes.byref(function), module,
                                               launch.entry_point.encode()), "cuModuleGetFunction")
      self._functions[launch.source] = (module, function)
    return self._functions[launch.source][1]

  def _load_module(self, source: str):
    module, log = ctypes.c_void_p(), ctypes.create_string_buffer(LOG_SIZE)
    options = (ctypes.c_int * 2)(JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE)
    values = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p).value, LOG_SIZE)
    status = self.lib.cuModuleLoadDataEx(ctypes.byref(module), source.encode() + b"\0", 2,
                                         options, values)
    if status != 0:
      raise CompileError(f"the CUDA driver rejected the PTX (error {status}):\n"
                         f"{log.value.decode(errors='replace')}", source=source)
    return module

  def _arguments(self, launch: Launch, handles: list, var_values: dict):
    if len(handles) != len(launch.bindings):
      raise DeviceError(f"kernel needs {len(launch.bindings)} buffers, got {len(handles)}")
    missing = [name for name, _ in launch.uniforms if name not in var_values]
    if missing:
      raise DeviceError(f"no value given for the kernel argument(s) {', '.join(missing)}")
    values = [ctypes.c_uint64(h.ptr) for h in handles]
    values += [ctypes.c_int32(int(var_values[name])) for name, _ in launch.uniforms]
    pointers = (ctypes.c_void_p * max(len(values), 1))(
      *[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
    return values, pointers

  def time_run(self, kernel: CompiledKernel, handles: list, var_values: dict[str, int],
               repeat: int = 1) -> float:
    return self.run(kernel, handles, var_values, timed=True, repeat=repeat)

  def run(self, kernel: CompiledKernel, handles: list, var_values: dict[str, int] | None = None,
          timed: bool = False, repeat: int = 1) -> float | None:
    """Launch `kernel` (its variant for `var_values`); with `timed`, wait for it and return its
    seconds (CUDA events; `repeat` > 1: that many launches between the events, their mean)."""
    kernel = variant_for(kernel, var_values)
    launch = kernel.launch
    function = self.function(launch)
    keep_alive, params = self._arguments(launch, handles, var_values or {})
    events = self._events() if timed else None
    if events:
      self._check(self.lib.cuEventRecord(events[0], None), "cuEventRecord")
    count = max(1, repeat) if timed else 1
    for _ in range(count):
      self._check(self.lib.cuLaunchKernel(function, *launch_dispatch(launch, var_values),
                                          *launch.workgroup_size, 0,
                                          None, params, None), f"cuLaunchKernel({kernel.name})")
    if not events:
      return None
    self._check(self.lib.cuEventRecord(events[1], None), "cuEventRecord")
    self._check(self.lib.cuEventSynchronize(events[1]), "cuEventSynchronize")
    millis = ctypes.c_float()
    self._check(self.lib.cuEventElapsedTime(ctypes.byref(millis), *events), "cuEventElapsedTime")
    for event in events:
      self.lib.cuEventDestroy_v2(event)
    return millis.value * 1e-3 / count

  def _events(self):
    events = (ctypes.c_void_p(), ctypes.c_void_p())
    for event in events:
      self._check(self.lib.cuEventCreate(ctypes.byref(event), 0), "cuEventCreate")
    return events

  def synchronize(self) -> None:
    self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")
