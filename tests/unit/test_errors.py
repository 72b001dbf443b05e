"""The bad-input catalogue: every way a user can get it wrong, with the typed error it gives.

Each row: a name, the bad input (a function), the exact error class, and phrases the message
must contain: what is wrong AND how to fix it. More tables, each with its own row format:
PAGE_PROGRAMS (invalid Python in the page, checked here through web_api and in the page by
test_browser.py), PAGE_STOPS (interrupted runs in the page: the Stop button, tested in
test_browser.py) and INTERRUPTED (Ctrl-C during a realize in CPython).
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
  ("index out of bounds", lambda: A()[2], kg.IndexOutOfRangeError,
   ["index 2 is out of bounds for axis 0 with size 2"]),
  ("too many indices", lambda: A()[0, 0, 0], ShapeError, ["too many indices (3)", "2 dims"]),
  ("two ellipses", lambda: A()[..., ...], ShapeError, ["only one `...`"]),
  ("index list out of bounds", lambda: A()[[0, 2]], kg.IndexOutOfRangeError,
   ["index 2 is out of bounds for axis 0 with size 2"]),
  ("computed bool mask", lambda: A()[A() > 0], kg.UnsupportedError,
   ["depends on the data", "kg.where"]),
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
   ["unknown WGSL option(s) bogus", "max_storage_buffers"]),
  ("misspelled PTX option", lambda: kg.compile(A() + 1, target="ptx", upcst=4), UnsupportedError,
   ["unknown PTX option(s) upcst (did you mean upcast?)", "arch"]),
  ("misspelled python option", lambda: kg.compile(A() + 1, target="python", tiel=(2, 2)),
   UnsupportedError, ["unknown python option(s) tiel (did you mean tile?)", "local"]),
  ("misspelled WGSL option", lambda: kg.compile(A() + 1, target="wgsl", subgroup=True),
   UnsupportedError, ["unknown WGSL option(s) subgroup (did you mean subgroups?)", "f16"]),
  ("option of the wrong type", lambda: kg.compile(A().softmax(), target="wgsl", row_lanes="x"),
   UnsupportedError, ["option row_lanes='x'", "give an int"]),
  ("row_kernels of the wrong type",
   lambda: kg.compile(A().softmax(), target="ptx", arch="sm_80", row_kernels="no"),
   UnsupportedError, ["option row_kernels='no'", "True, False or an int"]),
  ("float64 on WGSL", lambda: kg.compile(A().cast("float64") * 2, target="wgsl"),
   UnsupportedError, ["float64 is not available on target 'wgsl'", "dtype='float32'"]),
  ("int64 on WGSL", lambda: kg.compile(A().cast("int64") * 2, target="wgsl"),
   UnsupportedError, ["int64 is not available on target 'wgsl'", "dtype='int32'"]),
  ("uint64 on WGSL", lambda: kg.compile(A().cast("uint64") * 2, target="wgsl"),
   UnsupportedError, ["uint64 is not available", "dtype='uint32'"]),
  ("bfloat16 on WGSL", lambda: kg.compile(A().cast("bfloat16") * 2, target="wgsl"),
   UnsupportedError, ["bfloat16 is not available", "float16", "target 'ptx'"]),
  ("too many storage buffers for WGSL, and no way to split the kernel",
   lambda: kg.compile(many_inputs(2), target="wgsl", max_storage_buffers=2,
                     max_uniform_buffers=1),
   LimitError, ["uses 3 storage buffers", "allows 2 per shader stage", "split the computation",
                "here none can"]),
  ("buffer too large for the WebGPU adapter",
   lambda: kg.compile(Tensor.ones(2 ** 30, device=P) * 2, target="wgsl"), LimitError,
   ["buffer out (1073741824 x float32) has 4294967296 bytes", "at most 134217728 bytes",
    "maxStorageBufferBindingSize", "split the tensor", "max_buffer_bytes"]),
  ("buffer over an adapter's own limit",
   lambda: kg.compile(Tensor.ones(300, device=P) * 2, target="wgsl", max_buffer_bytes=1024),
   LimitError, ["buffer out (300 x float32) has 1200 bytes", "at most 1024 bytes"]),
]


# ---- invalid Python in the page ----
# The page's worker runs a program through web_api (compile_program, then run_program); the error
# it gets back is what the page shows next to the code. Each row: a name, the program, the error
# type the page shows, the program line it points at (None: no line) and phrases of its message.
# The same rows run in the page itself in tests/page/test_browser.py (test_invalid_program_in_the_page),
# which also checks that the editor keeps the text.
PAGE_PROGRAMS = [
  ("syntax error in the page", "x = Tensor([1.0, 2.0])\nout = (x +\n", "SyntaxError", 2,
   ["'(' was never closed"]),
  ("indentation error in the page", "x = Tensor([1.0])\n  out = x\n", "IndentationError", 2,
   ["unexpected indent"]),
  ("undefined name in the page", "x = Tensor([1.0, 2.0])\n\nout = x + not_defined\n",
   "NameError", 3, ["name 'not_defined' is not defined"]),
  ("exception raised mid-program in the page",
   "x = Tensor([1.0, 2.0])\nscale = 1 / 0\nout = x * scale\n", "ZeroDivisionError", 2,
   ["division by zero"]),
  ("user raise in the page",
   "x = Tensor([1.0, 2.0])\nraise ValueError('the input is not normalised')\nout = x\n",
   "ValueError", 2, ["the input is not normalised"]),
  ("unknown Tensor method in the page", "x = Tensor([1.0])\nout = x.no_such_method()\n",
   "AttributeError", 2, ["no attribute 'no_such_method'"]),
  ("kernelgen typed error in the page", "a = Tensor([[1.0, 2.0]])\nout = a @ a\n", "ShapeError",
   2, ["matmul of shapes (1, 2) and (1, 2)", "inner dims 2 and 1 must match", "transpose"]),
  ("typed error inside a program's function",
   "def total(t):\n  return t.sum(axis=3)\n\nout = total(Tensor([1.0, 2.0]))\n", "ShapeError", 2,
   ["axis 3 is out of range for a tensor with 1 dims", "-1..0"]),
  ("a string in a page expression", "out = Tensor([1.0]) + 'x'\n", "DTypeError", 1,
   ["cannot use str in a tensor expression", "use a Tensor or a Python number"]),
  ("program without out", "x = Tensor([1.0, 2.0])\nresult = x * 2\n", "ProgramError", None,
   ["must assign its result to `out`", "out = x @ w"]),
  ("out not a tensor", "out = 3\n", "ProgramError", None,
   ["`out` must be a Tensor, not int", "wrap values with Tensor(...)"]),
]

# ---- interrupted runs ----
# In the page: the Stop button (or Esc, Ctrl/Cmd+.) ends the worker and boots a fresh one (on a
# cross-origin isolated page it raises KeyboardInterrupt in Python first). What the page shows
# is asserted in tests/page/test_browser.py, in the test each row names.
PAGE_STOPS = [
  ("stop an endless loop in the page", "test_stop_ends_an_endless_loop_and_the_next_run_works"),
  ("stop during a WebGPU dispatch", "test_stop_during_a_webgpu_dispatch_leaves_no_stale_result"),
  ("late reply of a stopped run", "test_a_late_reply_of_a_stopped_run_is_ignored"),
  ("stop during compile", "test_stop_during_compile_and_compile_again"),
  ("run clicked twice", "test_run_clicked_twice_runs_once"),
  ("stop while offline", "test_stop_restarts_python_offline"),
  ("stop on a cross-origin isolated page",
   "test_stop_on_an_isolated_page_interrupts_python_in_place"),
  ("stop a run's background reference check", "test_stop_ends_a_background_reference_check"),
]


@pytest.mark.parametrize("code, error, line, phrases",
                         [pytest.param(c, e, ln, ph, id=name)
                          for name, c, e, ln, ph in PAGE_PROGRAMS])
def test_invalid_program_gives_what_the_page_shows(code, error, line, phrases):
  from kernelgen import web_api
  for result in (web_api.compile_program(code, "sm_80", "wgsl"),
                 web_api.run_program(code, "PYTHON")):
    assert result["ok"] is False, result
    shown = result["error"]
    assert (shown["type"], shown["line"]) == (error, line), shown
    for phrase in phrases:
      assert phrase in shown["message"], f"{phrase!r} missing from: {shown['message']}"


def test_each_page_stop_is_tested_in_the_browser():
  source = (__import__("pathlib").Path(__file__).parent.parent / "page" / "test_browser.py").read_text()
  for name, test in PAGE_STOPS:
    assert f"def {test}(" in source, f"{name}: no {test} in test_browser.py"


# In CPython: Ctrl-C (KeyboardInterrupt) while a realize of a 6-kernel program is running. Each
# row: a name, the device, the function that is interrupted ("runtime.run": a runtime method;
# "linearize": a compiler pass) and on which of its calls. The interrupt must come through as
# itself, the result must not be marked realized with partial data, and realizing again (and a
# fresh copy of the program) must give numpy's numbers.
INTERRUPTED = [
  ("Ctrl-C after the first kernel on PYTHON", "PYTHON", "run", 2),
  ("Ctrl-C after the first kernel on PTXSIM", "PTXSIM", "run", 2),
  ("Ctrl-C after the first kernel on WEBGPU", "WEBGPU", "run", 2),
  ("Ctrl-C in the last kernel on PYTHON", "PYTHON", "run", 4),
  ("Ctrl-C while uploading an input on PYTHON", "PYTHON", "copyin", 1),
  ("Ctrl-C while uploading an input on WEBGPU", "WEBGPU", "copyin", 2),
  ("Ctrl-C while compiling the second kernel", "PYTHON", "linearize", 2),
  ("Ctrl-C while reading the result back", "PYTHON", "copyout", 1),
]

# 5 columns: reductions of up to 4 elements would be recomputed where they are read (schedule.py
# RECOMPUTE_LENGTH), and the test wants 4 kernels to interrupt
X = [[1.0, 2.0, 3.0, -1.0, 0.5], [4.0, 5.0, 6.0, 2.0, -2.0]]
WEIGHT = [[1.0, -1.0], [0.5, 2.0], [-3.0, 1.0], [0.25, -0.5], [1.5, 0.75]]


def interrupted_program(device: str) -> Tensor:
  x, w = Tensor(X, device=device), Tensor(WEIGHT, device=device)
  return (x @ w).relu().softmax(axis=1) + (x.sum(axis=0).reshape(1, 5) @ w)


def interrupted_expected():
  import numpy as np
  x, w = np.array(X, np.float32), np.array(WEIGHT, np.float32)
  h = np.maximum(x @ w, 0)
  e = np.exp(h - h.max(axis=1, keepdims=True))
  return e / e.sum(axis=1, keepdims=True) + x.sum(axis=0, keepdims=True) @ w


@pytest.mark.parametrize("device, where, call",
                         [pytest.param(d, w, c, id=name) for name, d, w, c in INTERRUPTED])
def test_interrupted_realize_leaves_kernelgen_consistent(monkeypatch, device, where, call):
  import numpy as np
  from kernelgen.uop import linearize
  from kernelgen.device import Device
  from kernelgen.graph.schedule import schedule
  if device == "WEBGPU":
    from tools import wgpu_adapter
    wgpu_adapter()                                   # skips (or fails) without an adapter
  out = interrupted_program(device)
  assert len(schedule([out.node])) == 4      # the softmax is one row kernel
  owner = linearize if where == "linearize" else type(Device[device])
  real, calls = getattr(owner, where), []

  def interrupt(*args, **kwargs):
    calls.append(where)
    if len(calls) == call:
      raise KeyboardInterrupt
    return real(*args, **kwargs)

  monkeypatch.setattr(owner, where, interrupt)
  with pytest.raises(KeyboardInterrupt) as info:
    out.numpy()
  assert type(info.value) is KeyboardInterrupt and len(calls) == call
  assert out.node.realized is (where == "copyout"), out.node
  monkeypatch.setattr(owner, where, real)
  expected = interrupted_expected()
  np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(interrupted_program(device).numpy(), expected, rtol=1e-5, atol=1e-5)


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
  names = [name for table in (CATALOGUE, PAGE_PROGRAMS, PAGE_STOPS, INTERRUPTED)
           for name, *_ in table]
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
