"""kernelgen: tensor code in Python, fused into GPU kernels, rendered as WGSL and PTX.

    import kernelgen as kg
    x = kg.Tensor([[1.0, 2.0], [3.0, 4.0]])
    y = (x @ kg.Tensor.randn(2, 3, seed=0)).relu().sum(axis=1, keepdim=True)
    y.tolist()                                  # runs on kg.Device.DEFAULT
    kernels = kg.compile(y, target="wgsl")      # or "ptx" (arch="sm_80") or "python"
    kg.export({"y": y}, "DIR", format="webgpu") # a bundle: model.js, WGSL, weights, manifest
    kg.load_bundle("DIR").run({"x": ...})       # run a bundle from Python

Training: `kg.nn` (modules), `kg.optim` (SGD, Adam, AdamW), `t.backward()` / `kg.no_grad()`
(tensor/autograd.py), `kg.save` / `kg.load` (nn/safetensors.py), `kg.jit` (a step's kernels
recorded once and replayed: tensor/jit.py). The Tensor operations live in tensor/ops/ as
mixins of `Tensor`, one family per module; `kg.take`, `kg.einsum`, `kg.interpolate`, `kg.meshgrid`,
`kg.scaled_dot_product_attention`, `kg.cumsum`, `kg.sort`, ... are their function forms.

Reference pages besides this one: `kernelgen.nn`, `kernelgen.nn.optim` (kg.optim),
`kernelgen.onnx`, `kernelgen.export` (kg.export's bundles) and `kernelgen.errors`.
"""
from .device import Device
from .dtype import DType, dtypes
from .errors import (BufferNameError, CompileError, DeviceError, DTypeError, ExecutionError,
                     IndexOutOfRangeError, InputError, KernelgenError, LimitError, ManifestError,
                     ModelError, PathError, ShapeError, StoppedError, SymbolicDimWarning,
                     UnsupportedError, VerifyError)
from . import limits
from .tensor.tensor import Tensor, cat, numpy_of, stack, where
from .graph.dims import Dim, Sym
from .tensor.ops.scan import cummax, cummin, cumprod, cumsum
from .tensor.ops.sort import argsort, sort, topk
from .tensor.ops.einsum import einsum
# (after the subpackage import, `kg.export` is the function, not the package kernelgen.export)
from .export import export, load_bundle  # noqa: E402
from .tensor.ops.advanced_indexing import take
from .tensor.ops.interpolate import interpolate
from .tensor.ops.attention import scaled_dot_product_attention
from .tensor.ops.shape import meshgrid
from .tensor.autograd import AutogradError, enable_grad, is_grad_enabled, no_grad
from . import nn  # noqa: E402
from .nn import optim  # noqa: E402
from .tensor.jit import jit  # noqa: E402
from .nn.safetensors import SafetensorsError, load, save  # noqa: E402
from . import onnx  # noqa: E402
from .onnx.generate import generate  # noqa: E402 (causal LMs: ONNX or kg.nn)
from . import text  # noqa: E402 (tokenizers)
from .errors import TokenizerError  # noqa: E402
from .cache import cache_info, clear_cache, set_cache_size  # noqa: E402 (the compile cache)

from .version import __version__


def compile(tensors, target: str = "wgsl", arch: str | None = None, print_after=(), **options):
  """The kernels that compute `tensors` (a Tensor or a list), rendered for `target`.

  Returns a list of CompiledKernel in launch order (name, source, global_size, local_size,
  buffers); its length is the number of kernels the program becomes. Nothing is run. A kernel
  with a symbolic output axis (or a row kernel over a symbolic row) shows once; where a register
  tile (or the lanes per row) sized for the top of the dim's range would waste small values, its
  `variants` lists the same kernel with smaller tiles (fewer lanes), (dim, most, CompiledKernel)
  each, compiled with it and run where the bound value is at most `most` (lowering/variants.py).

  target: "wgsl", "ptx" or "python" (the reference interpreter's form); arch: the PTX target
  architecture ("sm_80" ...); options: the target's options (WGSL: tile, local, f16, ...);
  print_after: names of compiler passes after which to print the IR.

  Raises UnsupportedError for an unknown target, arch or option; CompileError (and the other
  KernelgenErrors) when a program cannot be compiled for the target.
  """
  from .compiler import compile_program
  from .render.targets import get_target
  target = get_target(target)   # a name (or a Target) resolved once, here; the Target travels
  tensors = tensors if isinstance(tensors, (list, tuple)) else [tensors]
  if arch is not None:
    options["arch"] = arch
  return compile_program([t.node for t in tensors], target, options, print_after)


__all__ = ["Tensor", "Dim", "Sym", "dtypes", "DType", "Device", "compile", "where", "cat", "stack",
           "numpy_of",
           "cumsum", "cumprod", "cummax", "cummin", "sort", "argsort", "topk",
           "einsum", "export", "load_bundle",
           "KernelgenError", "DTypeError", "ShapeError", "DeviceError", "UnsupportedError",
           "LimitError", "CompileError", "ExecutionError", "VerifyError", "IndexOutOfRangeError",
           "BufferNameError", "StoppedError", "InputError", "SymbolicDimWarning",
           "ManifestError", "PathError", "limits",
           "AutogradError", "no_grad", "enable_grad", "is_grad_enabled", "nn", "optim", "jit",
           "save", "load", "SafetensorsError", "onnx", "ModelError", "generate", "text",
           "TokenizerError",
           "clear_cache", "set_cache_size", "cache_info"]
