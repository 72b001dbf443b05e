"""kernelgen: tensor code in Python, fused into GPU kernels, rendered as WGSL and PTX.

    import kernelgen as kg
    x = kg.Tensor([[1.0, 2.0], [3.0, 4.0]])
    y = (x @ kg.Tensor.randn(2, 3, seed=0)).relu().sum(axis=1, keepdim=True)
    y.tolist()                                  # runs on kg.Device.DEFAULT
    kernels = kg.compile(y, target="wgsl")      # or "ptx" (arch="sm_80") or "python"
"""
from .device import Device
from .dtype import DType, dtypes
from .errors import (CompileError, DeviceError, DTypeError, ExecutionError, KernelgenError,
                     LimitError, ModelError, ShapeError, UnsupportedError, VerifyError)
from .tensor import Tensor, cat, stack, where
from .frontend import onnx

__version__ = "0.1.0"


def compile(tensors, target: str = "wgsl", arch: str | None = None, print_after=(), **options):
  """The kernels that compute `tensors` (a Tensor or a list), rendered for `target`.

  Returns a list of CompiledKernel in launch order (name, source, global_size, local_size,
  buffers); its length is the number of kernels the program becomes. Nothing is run.
  """
  from .compiler import compile_program
  tensors = tensors if isinstance(tensors, (list, tuple)) else [tensors]
  if arch is not None:
    options["arch"] = arch
  return compile_program([t.node for t in tensors], target, options, print_after)


__all__ = ["Tensor", "dtypes", "DType", "Device", "compile", "where", "cat", "stack", "onnx",
           "KernelgenError", "DTypeError", "ShapeError", "DeviceError", "UnsupportedError",
           "LimitError", "ModelError", "CompileError", "ExecutionError", "VerifyError"]
