"""The bad-input catalogue: every way a user can get it wrong, with the typed error it gives.

Each row: a name, the bad input (a function), the exact error class, and phrases the message
must contain: what is wrong AND how to fix it.
"""
from __future__ import annotations

import sys

import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.errors import (DeviceError, DTypeError, LimitError, ShapeError,
                              UnsupportedError)

P = "PYTHON"


def t(*data, dtype=None):
  return Tensor(list(data) if len(data) != 1 else data[0], dtype=dtype, device=P)


A = lambda: t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])      # (2, 3) float32
IMG = lambda: Tensor.ones(1, 3, 5, 5, device=P)           # NCHW
W = lambda: Tensor.ones(4, 3, 3, 3, device=P)             # OIHW


def many_inputs(n: int) -> Tensor:
  out = Tensor.zeros(4, device=P)
  for i in range(n):
    out = out + Tensor([float(i)] * 4, device=P)
  return out


CATALOGUE = [
  # ---- creation ----
  ("ragged nested lists", lambda: t([[1, 2], [3]]), ShapeError, ["ragged", "pad the rows"]),
  ("strings as data", lambda: t(["a", "b"]), DTypeError, ["str", "use numbers or bools"]),
  ("None as data", lambda: t(None), DTypeError, ["NoneType", "use numbers"]),
  ("unknown dtype name", lambda: t([1.0], dtype="float8"), DTypeError,
   ["unknown dtype 'float8'", "use one of", "bfloat16"]),
  ("complex dtype", lambda: A().astype("complex64"), DTypeError, ["unknown dtype", "float32"]),
  ("negative zeros shape", lambda: Tensor.zeros(2, -1, device=P), ShapeError,
   ["negative dimension", ">= 0"]),
  ("negative rand shape", lambda: Tensor.rand(-3, device=P), ShapeError,
   ["negative dimension", ">= 0"]),
  ("float in a shape", lambda: Tensor.ones(2.5, device=P), ShapeError,
   ["takes ints", "2.5", "int("]),
  ("arange step 0", lambda: Tensor.arange(0, 5, 0, device=P), ShapeError,
   ["step must not be 0", "positive or negative"]),
  ("full with unknown dtype", lambda: Tensor.full((2,), 1, dtype="float128", device=P),
   DTypeError, ["unknown dtype 'float128'", "use one of"]),
  # ---- devices ----
  ("unknown device", lambda: Tensor([1.0], device="TPU"), DeviceError,
   ["unknown device 'TPU'", "PYTHON, WEBGPU, CUDA, PTXSIM"]),
  ("device not a string", lambda: Tensor([1.0], device=3), DeviceError,
   ["a device name is a string", "'PYTHON'"]),
  ("move to unknown device", lambda: A().to("GPU"), DeviceError,
   ["unknown device 'GPU'", "use one of"]),
  ("unknown default device", lambda: setattr(kg.Device, "DEFAULT", "METAL"), DeviceError,
   ["unknown device 'METAL'", "use one of"]),
  ("operands on two devices", lambda: A() + Tensor.ones(2, 3, device="PTXSIM"), DeviceError,
   ["different devices", ".to(device)"]),
  # ---- shapes and broadcasting ----
  ("shapes that do not broadcast", lambda: A() + t([1.0, 2.0]), ShapeError,
   ["(2, 3) and (2,) do not broadcast", "reshape or expand"]),
  ("where condition of another shape", lambda: kg.where(t([True, False, True, False]), A(), 0.0),
   ShapeError, ["do not broadcast", "reshape or expand"]),
  ("reshape to another element count", lambda: A().reshape(4, 2), ShapeError,
   ["cannot reshape (2, 3)", "(4, 2)", "element counts must match"]),
  ("reshape with two -1", lambda: A().reshape(-1, -1), ShapeError, ["only one dim can be -1"]),
  ("reshape to a float size", lambda: A().reshape(2.0, 3), ShapeError, ["takes ints", "int("]),
  ("permute repeating an axis", lambda: A().permute(0, 0), ShapeError,
   ["permute(0, 0)", "give each axis 0..1 once"]),
  ("expand a non-1 dim", lambda: A().expand(4, 3), ShapeError,
   ["(2, 3) and (4, 3) do not broadcast", "must match or be 1"]),
  ("squeeze a non-1 dim", lambda: A().squeeze(0), ShapeError, ["only size-1 dims can go"]),
  ("unsqueeze out of range", lambda: A().unsqueeze(7), ShapeError,
   ["axis 7 is out of range", "use an axis in"]),
  ("pad with negative widths", lambda: A().pad(((0, -1), (0, 0))), ShapeError,
   ["pad widths must be >= 0", "use shrink"]),
  ("pad pairs for the wrong rank", lambda: A().pad(((1, 1),) * 3), ShapeError,
   ["one (before, after) pair per dim (2)", "got 3"]),
  ("pad with a float width", lambda: A().pad(((0.5, 1), (0, 0))), ShapeError,
   ["pad takes ints", "0.5"]),
  ("shrink past the end", lambda: A().shrink(((0, 1), (0, 9))), ShapeError,
   ["0 <= start <= end <= size"]),
  ("cat of mismatched shapes", lambda: kg.cat([A(), Tensor.ones(2, 2, device=P)], axis=0),
   ShapeError, ["cat of shapes (2, 3) and (2, 2)", "every other dim must match"]),
  ("cat of nothing", lambda: kg.cat([]), ShapeError, ["at least one tensor"]),
  ("stack of different shapes", lambda: kg.stack([A(), A().T]), ShapeError,
   ["one shape", "(3, 2)"]),
  ("stack axis out of range", lambda: kg.stack([A(), A()], axis=7), ShapeError,
   ["axis 7 is out of range", "use an axis in"]),
  # ---- axes ----
  ("sum axis out of range", lambda: A().sum(axis=2), ShapeError,
   ["axis 2 is out of range for a tensor with 2 dims", "-2..1"]),
  ("sum with a repeated axis", lambda: A().sum(axis=(1, -1)), ShapeError,
   ["repeats an axis", "name each axis once"]),
  ("sum axis a float", lambda: A().sum(axis=0.5), ShapeError, ["axis takes ints", "0.5"]),
  ("softmax axis out of range", lambda: A().softmax(axis=5), ShapeError,
   ["axis 5 is out of range", "use an axis in"]),
  ("max of an empty axis", lambda: Tensor.ones(0, 3, device=P).max(axis=0), ShapeError,
   ["empty axis has no identity", "(0, 3)"]),
  ("argmax over two axes", lambda: A().argmax(axis=(0, 1)), ShapeError,
   ["argmax takes one axis", "flatten"]),
  ("flip axis out of range", lambda: A().flip(4), ShapeError, ["axis 4 is out of range"]),
  # ---- indexing ----
  ("index out of bounds", lambda: A()[2], ShapeError,
   ["index 2 is out of bounds for axis 0 with size 2"]),
  ("too many indices", lambda: A()[0, 0, 0], ShapeError, ["too many indices (3)", "2 dims"]),
  ("two ellipses", lambda: A()[..., ...], ShapeError, ["only one `...`"]),
  ("fancy index with a list", lambda: A()[[0, 1]], ShapeError,
   ["fancy indexing", "is not supported", "kg.where"]),
  ("float index", lambda: A()[1.5], ShapeError, ["index 1.5 is a float", "ints"]),
  ("slice step 0", lambda: A()[::0], ShapeError, ["step cannot be 0"]),
  ("item of many elements", lambda: A().item(), ShapeError,
   ["item() needs a tensor of one element", "(2, 3)"]),
  # ---- dtypes ----
  ("bitcast to another width", lambda: A().bitcast("int16"), DTypeError,
   ["needs equal widths", "4 vs 2 bytes", "use cast instead"]),
  ("bitwise and of floats", lambda: A() & A(), DTypeError,
   ["bitwise ops need integer or bool tensors", "cast first"]),
  ("shift of floats", lambda: A() << 1, DTypeError, ["got float32", "bitcast"]),
  ("floor division of bools", lambda: t([True]) // t([True]), DTypeError,
   ["not defined for bool", "cast to int32 first"]),
  ("a string in an expression", lambda: A() + "x", DTypeError,
   ["cannot use str in a tensor expression", "use a Tensor or a Python number"]),
  # ---- matmul and conv2d ----
  ("matmul inner dims differ", lambda: A() @ A(), ShapeError,
   ["matmul of shapes (2, 3) and (2, 3)", "inner dims 3 and 2 must match", "transpose"]),
  ("matmul of a 0-d tensor", lambda: A() @ t(2.0), ShapeError, ["at least 1 dim", "use *"]),
  ("conv2d of a 3-d input", lambda: Tensor.ones(3, 5, 5, device=P).conv2d(W()), ShapeError,
   ["4-d NCHW input and OIHW weight", "(3, 5, 5)"]),
  ("conv2d channels vs groups", lambda: IMG().conv2d(Tensor.ones(2, 3, 3, 3, device=P),
                                                     groups=3),
   ShapeError, ["groups=3", "channels/groups = 1"]),
  ("conv2d kernel larger than input", lambda: IMG().conv2d(Tensor.ones(4, 3, 7, 7, device=P)),
   ShapeError, ["larger than the padded input", "more padding"]),
  ("conv2d stride 0", lambda: IMG().conv2d(W(), stride=0), ShapeError, ["must be >= 1"]),
  ("conv2d bias of the wrong size", lambda: IMG().conv2d(W(), bias=Tensor.ones(3, device=P)),
   ShapeError, ["bias has shape (3,)", "one value per output channel", "(4,)"]),
  ("max_pool2d window too large", lambda: IMG().max_pool2d(9), ShapeError,
   ["larger than the padded input"]),
  # ---- targets, archs, options and limits ----
  ("unknown target", lambda: kg.compile(A() + 1, target="metal"), UnsupportedError,
   ["unknown target 'metal'", "python, wgsl, ptx"]),
  ("unknown PTX arch", lambda: kg.compile(A() + 1, target="ptx", arch="sm_20"),
   UnsupportedError, ["unknown PTX arch 'sm_20'", "sm_80"]),
  ("unknown WGSL option", lambda: kg.compile(A() + 1, target="wgsl", bogus=1), UnsupportedError,
   ["unknown WGSL renderer option(s) bogus", "max_storage_buffers"]),
  ("float64 on WGSL", lambda: kg.compile(A().cast("float64") * 2, target="wgsl"),
   UnsupportedError, ["float64 is not available on target 'wgsl'", "cast to float32"]),
  ("int64 on WGSL", lambda: kg.compile(A().cast("int64") * 2, target="wgsl"),
   UnsupportedError, ["int64 is not available on target 'wgsl'", "cast to int32"]),
  ("uint64 on WGSL", lambda: kg.compile(A().cast("uint64") * 2, target="wgsl"),
   UnsupportedError, ["uint64 is not available", "cast to uint32"]),
  ("bfloat16 on WGSL", lambda: kg.compile(A().cast("bfloat16") * 2, target="wgsl"),
   UnsupportedError, ["bfloat16 is not available", "float16", "target 'ptx'"]),
  ("too many storage buffers for WGSL, and no way to split the kernel",
   lambda: kg.compile(many_inputs(2), target="wgsl", max_storage_buffers=2),
   LimitError, ["uses 3 storage buffers", "allows 2 per shader stage", "split the computation",
                "here none can"]),
  ("buffer too large for the WebGPU adapter",
   lambda: kg.compile(Tensor.ones(2 ** 31, device=P) * 2, target="wgsl"), LimitError,
   ["buffer out (2147483648 x float32) has 8589934592 bytes", "at most 134217728 bytes",
    "maxStorageBufferBindingSize", "split the tensor", "max_buffer_bytes"]),
  ("buffer over an adapter's own limit",
   lambda: kg.compile(Tensor.ones(300, device=P) * 2, target="wgsl", max_buffer_bytes=1024),
   LimitError, ["buffer out (300 x float32) has 1200 bytes", "at most 1024 bytes"]),
]


@pytest.mark.parametrize("bad_input, error, phrases",
                         [pytest.param(fn, err, ph, id=name) for name, fn, err, ph in CATALOGUE])
def test_bad_input_gives_typed_error(bad_input, error, phrases):
  default = kg.Device._default
  try:
    with pytest.raises(error) as info:
      bad_input()
  finally:
    kg.Device._default = default
  assert type(info.value) is error, f"raised {type(info.value).__name__}, not {error.__name__}"
  for phrase in phrases:
    assert phrase in str(info.value), f"{phrase!r} missing from: {info.value}"


def test_catalogue_has_at_least_40_distinct_bad_inputs():
  names = [name for name, *_ in CATALOGUE]
  assert len(set(names)) == len(names) >= 40


def test_numpy_missing_gives_device_error_naming_the_alternatives(monkeypatch):
  x = A()
  monkeypatch.setitem(sys.modules, "numpy", None)      # `import numpy` now raises ImportError
  with pytest.raises(DeviceError, match=r"needs numpy.*use \.tolist\(\) or \.data\(\)"):
    x.numpy()


def test_bad_environment_device_names_the_valid_ones(monkeypatch):
  monkeypatch.setenv("KERNELGEN_DEVICE", "QUANTUM")
  with pytest.raises(DeviceError, match="unknown device 'QUANTUM': use one of PYTHON"):
    kg.Device.DEFAULT
