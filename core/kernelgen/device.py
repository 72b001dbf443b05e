"""Devices: names users type ("PYTHON", "WEBGPU", "CUDA", "PTXSIM") -> runtime objects.

Runtimes are imported lazily, by name, the first time a device is used, so the core imports with
the standard library alone. `Device.DEFAULT` is WEBGPU where an adapter is available (the page,
or CPython with wgpu and an adapter), otherwise PYTHON; the environment variable
KERNELGEN_DEVICE overrides it, and assigning `Device.DEFAULT = "PYTHON"` sets it.
"""
from __future__ import annotations

import importlib
import os
import sys

from .errors import DeviceError, KernelgenError

# device name -> (module, class) of its runtime; WEBGPU differs inside Pyodide (the page)
RUNTIMES = {
  "PYTHON": ("runtime.python", "PythonRuntime"),
  "WEBGPU": ("runtime.webgpu_native", "WebGPURuntime"),
  "CUDA": ("runtime.cuda", "CUDARuntime"),
  "PTXSIM": ("runtime.ptxsim", "PTXSimRuntime"),
}
BROWSER_RUNTIMES = {"WEBGPU": ("runtime.webgpu_browser", "BrowserWebGPU")}


def _in_browser() -> bool:
  return sys.platform == "emscripten"


class _Devices:
  """The registry of open devices; `Device[name]` opens (once) and returns a runtime."""

  def __init__(self):
    self._open: dict = {}
    self._default: str | None = None

  @staticmethod
  def canonical(name: str) -> str:
    """The device's canonical name: `name` upper-cased, without a ":index" suffix ("webgpu:0" ->
    "WEBGPU"). Opens nothing.

    Raises DeviceError for a name that is not a string or not one of PYTHON, WEBGPU, CUDA,
    PTXSIM."""
    if not isinstance(name, str):
      raise DeviceError(f"a device name is a string like 'PYTHON', got {name!r}")
    base = name.split(":")[0].upper()
    if base not in RUNTIMES:
      raise DeviceError(f"unknown device {name!r}: use one of {', '.join(RUNTIMES)}")
    return base

  def register(self, name: str, runtime) -> None:
    """Use `runtime` for device `name` (the page installs its WEBGPU this way)."""
    self._open[self.canonical(name)] = runtime

  def __getitem__(self, name: str):
    name = self.canonical(name)
    if name not in self._open:
      self._open[name] = _open_runtime(name)
    return self._open[name]

  def available(self, name: str) -> bool:
    """Whether device `name` can be opened here (opening it if it can), a bool; False for an
    unknown name too."""
    try:
      self[name]
      return True
    except KernelgenError:
      return False

  @property
  def DEFAULT(self) -> str:
    """The device tensors are made on when none is named: the KERNELGEN_DEVICE environment variable
    if set, else what was assigned (`kg.Device.DEFAULT = "PYTHON"`), else WEBGPU where an adapter
    is available and PYTHON otherwise. Assigning an unknown name raises DeviceError."""
    env = os.environ.get("KERNELGEN_DEVICE")
    if env:
      return self.canonical(env)
    if self._default is None:
      self._default = "WEBGPU" if self.available("WEBGPU") else "PYTHON"
    return self._default

  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None:
    self._default = self.canonical(name)


def _open_runtime(name: str):
  module_name, cls_name = (BROWSER_RUNTIMES if _in_browser() else {}).get(name, RUNTIMES[name])
  try:
    module = importlib.import_module(f".{module_name}", __package__)
    return getattr(module, cls_name)()
  except KernelgenError as error:
    raise DeviceError(f"device {name} is not available here: {error}. Valid devices: "
                      f"{', '.join(RUNTIMES)}; PYTHON works everywhere") from error
  except (ImportError, AttributeError, OSError, RuntimeError) as error:
    raise DeviceError(f"device {name} is not available here ({type(error).__name__}: {error}). "
                      f"Valid devices: {', '.join(RUNTIMES)}; PYTHON works everywhere") from error


Device = _Devices()
