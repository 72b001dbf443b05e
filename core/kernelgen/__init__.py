"""kernelgen: tensor code in Python, fused into GPU kernels, rendered as WGSL and PTX."""
from .dtype import DType, dtypes
from .errors import (CompileError, DeviceError, DTypeError, ExecutionError, KernelgenError,
                     LimitError, ShapeError, UnsupportedError, VerifyError)

__version__ = "0.1.0"
