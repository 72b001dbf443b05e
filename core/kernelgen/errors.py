"""Typed errors. Every error a user can cause is one of these, with a message that says what to do.
An exception from inside compile or realize that is none of these is a bug: `internal_errors`
re-raises it as a CompileError / ExecutionError that says so and chains the original."""

import contextlib


class KernelgenError(Exception):
  """Base class of every error kernelgen raises on purpose."""


class DTypeError(KernelgenError, TypeError):
  """An unknown dtype, or operands whose dtypes do not fit together."""


class ShapeError(KernelgenError, ValueError):
  """Shapes that do not broadcast, a bad axis, a bad reshape."""


class IndexOutOfRangeError(ShapeError, IndexError):
  """An index past the end of an axis (an int, a list, a numpy array known when the program is
  built); an IndexError too, so Python's sequence protocol (a `for` loop over a tensor through
  __getitem__) stops there."""


class BufferNameError(KernelgenError, ValueError):
  """A buffer name (`Tensor.empty(..., name=)`) that is not an identifier kernels can use."""


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
  """A kernel needs more than the device allows (buffers, workgroup size, memory), or an input
  asks for more than one of kernelgen's limits (kernelgen/limits.py) allows; `limit` names that
  limit ("" where the device sets it)."""

  def __init__(self, message: str, *, limit: str = ""):
    super().__init__(message)
    self.limit = limit


class ManifestError(KernelgenError, ValueError):
  """A bundle manifest that is not one kg.export writes: malformed JSON, a missing or mistyped
  field, a value out of range, an index that points nowhere."""


class PathError(KernelgenError, ValueError):
  """A file a bundle manifest or a model names that lies outside its folder (through `..`, an
  absolute path or a symlink), or that is not a regular file (a folder, a FIFO, a device)."""


class CompileError(KernelgenError):
  """A backend compiler (a WebGPU shader compiler, ptxas, the CUDA driver) rejected our source."""

  def __init__(self, message: str, *, source: str = "", line: int | None = None):
    super().__init__(message)
    self.source, self.line = source, line


class ModelError(KernelgenError, ValueError):
  """A model file that cannot be read as one: damaged protobuf, dangling names, cycles, attributes
  of the wrong type (the ONNX importer)."""


class InputError(KernelgenError, ValueError):
  """An input the program or model does not have (a misspelled name), or a shape for one that
  does not fit its declared shape; the message lists the valid inputs."""


class SymbolicDimWarning(UserWarning):
  """kernelgen gave a symbolic dimension of a model input a size the caller did not choose."""


class ExecutionError(KernelgenError):
  """A kernel did something invalid while running (out-of-bounds access, uninitialised read)."""


class StoppedError(ExecutionError):
  """A run stopped on request: its progress callback returned False (PTXSIM, bundles)."""


REPORT = ("This is a bug in kernelgen, not in your program: please report it, with the program "
          "that triggered it (the Python that builds the tensors, and the target, arch and "
          "options or the device it ran on), to the kernelgen issue tracker.")


@contextlib.contextmanager
def internal_errors(pass_name: str, kernel: str = "", error: type = CompileError):
  """Re-raise an exception kernelgen did not raise on purpose (anything but a KernelgenError,
  MemoryError or a BaseException such as KeyboardInterrupt) as `error` (CompileError while
  compiling, ExecutionError while running) naming the pass and the kernel, chained to it.
  The typed error has `pass_name` and `kernel` attributes."""
  try:
    yield
  except (KernelgenError, MemoryError):
    raise
  except Exception as cause:
    where = f" on kernel {kernel!r}" if kernel else ""
    typed = error(f"internal error in kernelgen's {pass_name!r} pass{where}: "
                  f"{type(cause).__name__}: {cause}\n{REPORT}")
    typed.pass_name, typed.kernel = pass_name, kernel
    raise typed from cause


class TokenizerError(KernelgenError, ValueError):
  """A tokenizer file kernelgen cannot read (damaged JSON, a component it does not implement,
  a merge that names a missing token), or ids a tokenizer does not know (kernelgen.text)."""
