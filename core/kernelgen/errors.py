"""Typed errors. Every error a user can cause is one of these, with a message that says what to do."""


class KernelgenError(Exception):
  """Base class of every error kernelgen raises on purpose."""


class DTypeError(KernelgenError, TypeError):
  """An unknown dtype, or operands whose dtypes do not fit together."""


class ShapeError(KernelgenError, ValueError):
  """Shapes that do not broadcast, a bad axis, a bad reshape."""


class VerifyError(KernelgenError):
  """A UOp graph breaks an invariant of the stage it is in; the message names the node."""


class RewriteError(KernelgenError):
  """A rule set did not reach a fixed point (a rule keeps undoing another)."""


class UnsupportedError(KernelgenError):
  """The target cannot do this dtype/op; raised before any source is emitted."""

  def __init__(self, message: str, *, target: str = "", dtype=None):
    super().__init__(message)
    self.target, self.dtype = target, dtype


class DeviceError(KernelgenError):
  """An unknown device name, or a device that is not available here."""


class LimitError(KernelgenError):
  """A kernel needs more than the device allows (buffers, workgroup size, memory)."""


class CompileError(KernelgenError):
  """A backend compiler (a WebGPU shader compiler, ptxas, the CUDA driver) rejected our source."""

  def __init__(self, message: str, *, source: str = "", line: int | None = None):
    super().__init__(message)
    self.source, self.line = source, line


class ModelError(KernelgenError, ValueError):
  """A model file that cannot be read as one: damaged protobuf, dangling names, cycles, attributes
  of the wrong type (the ONNX importer)."""


class ExecutionError(KernelgenError):
  """A kernel did something invalid while running (out-of-bounds access, uninitialised read)."""
