"""What the web page's worker (web/worker.js) calls for a program given as text: run, compile,
export, compare with the reference interpreter, Verify PTX (the package re-exports it all).

A program is Python that assigns its result tensor to `out` (the CLI's convention); it runs with
`kg`, `kernelgen`, `Tensor`, `dtypes`, `where`, `cat` and `stack` already imported. Every entry
point returns plain data (dicts, lists, str, int, float, bytes) and never raises: a failure is
`{"ok": False, "error": {"type", "message", "line", ...}}` where `line` is the program's line.

Standard library only; the browser runtime (runtime/webgpu_browser.py) is the one module that
touches `js`.
"""
from __future__ import annotations

import contextlib
import linecache
import math
import sys
import traceback

from .. import limits, web_selftest
from . import timelimit

self_test = web_selftest.self_test  # the page's worker calls web_api.self_test

PROGRAM = "<program>"  # the file name user code runs under (tracebacks name it)

# dtype name -> (rtol, atol) when comparing a device's result with the reference interpreter
TOLERANCES = {"float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2), "float32": (1e-4, 1e-5),
              "float64": (1e-9, 1e-12)}

# struct-module formats of each dtype's elements (numpy layout, little-endian)
FORMATS = {"bool": "?", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i",
           "uint32": "I", "int64": "q", "uint64": "Q", "float16": "e", "float32": "f",
           "float64": "d"}


def setup(gpu=None, jspi: bool = True, progress=None) -> dict:
  """Install the page's WEBGPU device when `gpu` (gpu.js's GpuExecutor) is given; what loaded.
  `progress(done, total, kernel, device, running)` (a JS function) hears of each kernel any
  command runs
  (realize.progress: the page's progress bar during Verify PTX, compare with PYTHON, ...)."""
  import kernelgen
  if progress is not None and progress:   # JS null arrives as a falsy jsnull
    from .. import realize
    realize.progress = progress
  device = "PYTHON"
  from .. import stored
  stored.enable()           # the worker keeps compiled kernels in the browser (load_stored)
  if gpu is not None and gpu:  # JS null arrives as a falsy jsnull
    from ..runtime import webgpu_browser
    webgpu_browser.install(gpu, jspi=jspi)
    device = "WEBGPU"
  _set_default_device(device)
  return {"python": sys.version.split()[0], "kernelgen": kernelgen.__version__,
          "file": kernelgen.__file__, "device": device}


def _set_default_device(name: str) -> None:
  from ..device import Device
  Device.DEFAULT = name


def _namespace() -> dict:
  import kernelgen
  from ..tensor import tensor
  names = {"kg": kernelgen, "kernelgen": kernelgen, "__name__": "__program__"}
  for name in ("Tensor", "dtypes", "where", "cat", "stack"):
    value = getattr(kernelgen, name, None) or getattr(tensor, name, None)
    if value is not None:
      names[name] = value
  return names


def execute(code: str, device: str):
  """Run the program with `device` as the default device; returns its `out` tensor."""
  from ..device import Device
  previous = Device.DEFAULT
  Device.DEFAULT = device
  linecache.cache[PROGRAM] = (len(code), None, code.splitlines(True), PROGRAM)  # tracebacks
  try:
    names = _namespace()
    names[timelimit.TICK] = limits.tick        # the page's time limit in the program's loops
    exec(timelimit.compile_ticked(code, PROGRAM), names)
    from ..tensor.names import name_inputs
    name_inputs(names)     # kernels call input buffers by their variables' names
  finally:
    Device.DEFAULT = previous
  if "out" not in names:
    raise ProgramError("the program must assign its result to `out`, e.g. `out = x @ w`")
  out = names["out"]
  if not hasattr(out, "realize") or not hasattr(out, "shape"):
    raise ProgramError(f"`out` must be a Tensor, not {type(out).__name__}: "
                       "wrap values with Tensor(...)")
  return out


class ProgramError(Exception):
  """The program ran but did not leave a result in `out`."""


# ---- errors as plain data ----

def program_line(exc: BaseException) -> int | None:
  """The line of the user's program where `exc` was raised (the innermost program frame)."""
  if isinstance(exc, SyntaxError) and exc.filename == PROGRAM:
    return exc.lineno
  line = None
  for frame, lineno in traceback.walk_tb(exc.__traceback__):
    if frame.f_code.co_filename == PROGRAM:
      line = lineno
  return line


# a module the page's Python lacks -> what to say (Pyodide's wheels of it are not in the site)
MISSING_MODULE = ("{name} is not available in this page: its Python has the standard library and "
                  "kernelgen only. Pyodide's {name} wheel is not part of this site (npm's pyodide "
                  "package ships no wheels, and the page loads nothing from other hosts, such as "
                  "Pyodide's CDN). Build the data with kernelgen instead: Tensor([...]), "
                  "Tensor.arange(n), Tensor.randn(*shape, seed=0); or run the program in CPython "
                  "(kernelgen's CLI), where numpy works")


def error_data(exc: BaseException) -> dict:
  message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
  if isinstance(exc, ModuleNotFoundError) and sys.platform == "emscripten" and exc.name:
    message = f"{message}: " + MISSING_MODULE.format(name=exc.name.split(".")[0])
  data = {"type": type(exc).__name__, "message": message or type(exc).__name__,
          "line": program_line(exc)}
  if getattr(exc, "line", None) is not None and not isinstance(exc, SyntaxError):
    data["source_line"] = exc.line   # a line of the generated source (WGSL/PTX), not the program
  if not _is_kernelgen_error(exc) and not isinstance(exc, (SyntaxError, ProgramError)):
    data["traceback"] = program_traceback(exc)
  elif hasattr(exc, "pass_name") and exc.__cause__ is not None:  # a bug: where, for the report
    data["traceback"] = "".join(traceback.format_exception(exc.__cause__))
  return data


def program_traceback(exc: BaseException) -> str:
  """The traceback from the program's first frame on (all of it when the program has none)."""
  frames = traceback.extract_tb(exc.__traceback__)
  first = next((i for i, f in enumerate(frames) if f.filename == PROGRAM), 0)
  lines = traceback.format_list(frames[first:]) + traceback.format_exception_only(exc)
  return "Traceback (most recent call last):\n" + "".join(lines)


def _is_kernelgen_error(exc: BaseException) -> bool:
  from ..errors import KernelgenError
  return isinstance(exc, KernelgenError)


def guarded(work, timed: bool = True) -> dict:
  """{"ok": True, **work()}, or {"ok": False, "error": error_data(...)} for any failure; with
  `timed`, work runs under the page's time limit (limits.timed, web_api/timelimit.py)."""
  try:
    with limits.timed() if timed else contextlib.nullcontext():
      return {"ok": True, **work()}
  except Exception as exc:  # every failure goes back to the page as data
    return {"ok": False, "error": error_data(exc)}


# ---- compile ----

def kernel_data(kernel, ranges: dict | None = None) -> dict:
  """A compiled kernel as the page shows it; "dims": its symbolic sizes (kg.Dim), each
  {name, lo, hi, uniform: read as a run-time argument, grid: cuts its launch}."""
  return {"name": kernel.name, "target": kernel.target, "source": kernel.source,
          "global_size": list(kernel.global_size), "local_size": list(kernel.local_size),
          "buffers": [{"slot": b.slot, "name": b.name, "dtype": b.dtype.name, "size": b.size,
                       "access": b.access} for b in kernel.buffers],
          "dims": kernel_dims(kernel, ranges or {}), "launch": kernel.launch.to_json()}


def kernel_dims(kernel, ranges: dict) -> list[dict]:
  """The symbolic sizes a compiled kernel reads (its uniforms / PTX parameters) or launches by
  (Launch.grid), by name; a range from the VAR itself, else from `ranges` ({name: (lo, hi)})."""
  dims = {}
  for v in kernel.kernel.vars if kernel.kernel is not None else ():
    name, lo, hi = v.arg
    dims[name] = {"name": name, "lo": lo, "hi": hi, "uniform": True, "grid": False}
  for terms, *_ in kernel.launch.grid:
    for name, _ in terms:
      lo, hi = ranges.get(name, (None, None))
      dims.setdefault(name, {"name": name, "lo": lo, "hi": hi, "uniform": False})["grid"] = True
  return sorted(dims.values(), key=lambda d: d["name"])


def _dim_ranges(out) -> dict:
  """{dim name: (lo, hi)} of the symbolic sizes of `out` (a Tensor or a list of them)."""
  ranges = {}
  for t in out if isinstance(out, (list, tuple)) else [out]:
    for s in getattr(t.node, "sym", None) or ():
      ranges.update(getattr(s, "ranges", {}))
  return ranges


def compile_target(out, target: str, arch: str | None) -> dict:
  import kernelgen
  options = {"arch": arch} if target == "ptx" and arch else {}
  return guarded(lambda: {"kernels": [
      kernel_data(k, _dim_ranges(out)) for k in kernelgen.compile(out, target=target, **options)]})


def compile_program(code: str, arch: str | None = "sm_80", targets: str = "wgsl,ptx") -> dict:
  """The program's kernels for each of `targets` (comma-separated), PTX for `arch`; each target
  succeeds or fails on its own: {"wgsl": {"ok", "kernels" | "error"}, "ptx": ...}. A result
  the browser kept from an earlier page load (stored.py: same program text, arch, targets and
  kernelgen version) comes back without running or compiling anything, with "stored": True."""
  from .. import stored
  key = ("compile_program", code, arch, targets)
  kept = stored.find_data(key)
  if kept is not None:
    return {"ok": True, **kept, "stored": True}

  def work():
    out = execute(code, "PYTHON")
    compiled = {target: compile_target(out, target, arch) for target in targets.split(",")}
    result = {**compiled, "shape": logical_shape(out), "dtype": out.dtype.name}
    if all(part["ok"] for part in compiled.values()):
      stored.keep_data(key, result)
    return result
  return guarded(work)


def export_bundles(code: str, arch: str | None = "sm_80") -> dict:
  """Both bundles (kg.export) of the program's `out`, as files for the page's zip:
  {"files": [{"name": "webgpu/model.js" | "ptx/....ptx" | ..., "base64": ...}]}."""
  def work():
    out = execute(code, "PYTHON")
    files = []
    for fmt in ("webgpu", "ptx"):
      files += _bundle_files(out, fmt, arch)
    return {"files": files}
  return guarded(work)


def _bundle_files(out, fmt: str, arch: str | None) -> list[dict]:
  import base64
  import os
  import tempfile

  import kernelgen
  with tempfile.TemporaryDirectory(prefix="kernelgen-bundle-") as folder:
    kernelgen.export({"out": out}, folder, format=fmt, arch=arch if fmt == "ptx" else None)
    files = []
    for name in sorted(os.listdir(folder)):
      with open(os.path.join(folder, name), "rb") as f:
        files.append({"name": f"{fmt}/{name}", "base64": base64.b64encode(f.read()).decode()})
  return files


# ---- run and compare ----

def tensor_data(out) -> dict:
  return {"shape": logical_shape(out), "dtype": out.dtype.name, "data": out.data().tobytes()}


def logical_shape(out) -> list:
  """The shape of `out` as the page shows it: a symbolic size (kg.Dim) at its bound value (the
  data is that size too, not the padded layout a kernel holds), or its range's top when unbound."""
  from ..graph.dims import Sym
  return [(s.value if s.bound else s.hi) if isinstance(s, Sym) else s for s in out.symbolic_shape]


def values(result: dict) -> list:
  """The flat Python values of a tensor_data result."""
  import struct
  fmt = FORMATS.get(result["dtype"])
  if fmt is None:
    return []
  data = bytes(result["data"])
  return list(struct.unpack(f"<{len(data) // struct.calcsize(fmt)}{fmt}", data))


def _close(a, b, rtol: float, atol: float) -> bool:
  if isinstance(a, float) and (math.isnan(a) or math.isnan(b)):
    return math.isnan(a) and math.isnan(b)
  if isinstance(a, float) and (math.isinf(a) or math.isinf(b)):
    return a == b
  return abs(a - b) <= atol + rtol * abs(b)


def compare(result: dict, reference: dict) -> dict:
  """How `result` matches `reference`: {match, max_abs_error, mismatches, rtol, atol}."""
  if result["shape"] != reference["shape"] or result["dtype"] != reference["dtype"]:
    return {"match": False, "max_abs_error": None, "mismatches": None, "rtol": 0, "atol": 0,
            "reason": f"shape/dtype differ: {result['shape']} {result['dtype']} vs "
                      f"{reference['shape']} {reference['dtype']}"}
  rtol, atol = TOLERANCES.get(result["dtype"], (0, 0))
  got, want = values(result), values(reference)
  bad = [i for i, (a, b) in enumerate(zip(got, want)) if not _close(a, b, rtol, atol)]
  finite = [abs(a - b) for a, b in zip(got, want)
            if not (isinstance(a, float) and not (math.isfinite(a) and math.isfinite(b)))]
  return {"match": not bad, "max_abs_error": float(max(finite, default=0)),
          "mismatches": len(bad), "first_mismatch": bad[0] if bad else None,
          "rtol": rtol, "atol": atol}


def compile_counts(before: dict | None = None) -> dict:
  """{"compiled": kernels compiled (compile-cache misses), "compile_s": the seconds those
  compiles took, "stored": kernels taken from the browser's store instead (stored.py)}: totals
  so far, or with `before` (an earlier call's) those since then."""
  from ..cache import cache_info
  from ..stored import STATS
  info = cache_info()
  now = {"compiled": info["misses"], "compile_s": info["compile_s"], "stored": STATS["hits"]}
  return {k: v - before[k] for k, v in now.items()} if before else now


def _run_on(code: str, device: str) -> dict:
  import time
  start = time.perf_counter()
  before = compile_counts()
  out = execute(code, device)
  data = tensor_data(out.realize())
  data["seconds"] = time.perf_counter() - start
  data["device"] = device
  data.update(compile_counts(before))
  return data


def load_stored(text: str) -> int:
  """Add the compiled kernels the browser kept from earlier page loads (a JSON object of
  stored.py's records, by key); returns how many there are."""
  import json
  from .. import stored
  return stored.load(json.loads(text))


def take_stored() -> str:
  """What the browser's store must write now, as JSON: {"cleared", "records"} (stored.take)."""
  import json
  from .. import stored
  return json.dumps(stored.take())


def _searching(code: str, device: str) -> dict:
  """_run_on with the search mode on (KERNELGEN_SEARCH=1 for this run only)."""
  import os
  from .. import search
  previous = os.environ.get("KERNELGEN_SEARCH")
  os.environ["KERNELGEN_SEARCH"] = "1"
  search.SEARCH_LOG.clear()
  try:
    result = _run_on(code, device)
  finally:
    if previous is None:
      os.environ.pop("KERNELGEN_SEARCH", None)
    else:
      os.environ["KERNELGEN_SEARCH"] = previous
  result["search"] = list(search.SEARCH_LOG)
  return result


def _reference(code: str, result: dict) -> dict:
  try:
    reference = _run_on(code, "PYTHON")
  except Exception as exc:
    return {"ok": False, "error": error_data(exc)}
  return {"ok": True, "seconds": reference["seconds"], **compare(result, reference)}


# the last run on a device, kept until check_reference compares it: {"code", "result"}
_LAST_RUN: dict = {}


def run_program(code: str, device: str = "WEBGPU", reference: bool | str = True,
                search: bool = False) -> dict:
  """Run the program on `device`; with `reference` True, compare with the PYTHON interpreter
  now; with "later", keep the result for `check_reference(code)` (the page shows the result
  first and compares afterwards). With `search`, each kernel's launch options are chosen by
  timing candidates on the device (search.search, cached per kernel for the session); the
  result's "search" lists what was chosen."""
  def work():
    _LAST_RUN.clear()
    result = _searching(code, device) if search else _run_on(code, device)
    if reference == "later" and device != "PYTHON":
      _LAST_RUN.update(code=code, result=result)
    elif reference and device != "PYTHON":
      result["reference"] = _reference(code, result)
    return {"out": result}
  return guarded(work)


def check_reference(code: str) -> dict:
  """The last run of `code` (by run_program with reference="later") compared with the PYTHON
  interpreter: {"ok", "reference": {ok, match, max_abs_error, ...}}."""
  last = dict(_LAST_RUN)
  _LAST_RUN.clear()
  if last.get("code") != code:
    return guarded(lambda: _raise(ProgramError(
      "there is no run of this program to compare: run it on a device first (the reference "
      "compares the last run)")))
  with limits.timed():     # the page's time limit: a LimitError in the reference's data
    return {"ok": True, "reference": _reference(code, last["result"])}


def _raise(exc: Exception):
  raise exc


def release() -> dict:
  """Free the page GPU's buffers that no tensor refers to any more (nothing else frees them);
  {"ok", "freed"}."""
  import gc
  from ..device import Device
  gc.collect()
  runtime = getattr(Device, "_open", {}).get("WEBGPU")  # only a device that is open
  freed = runtime.release_unreachable() if hasattr(runtime, "release_unreachable") else 0
  return {"ok": True, "freed": freed}


def warm() -> dict:
  """Import what a first compile to WGSL needs, so the first Run does not wait for it."""
  import importlib
  for name in WARM_MODULES:
    importlib.import_module(name, "kernelgen")
  return {"ok": True}


# the modules a compile to WGSL imports, in the order it does
WARM_MODULES = (".compiler", ".graph.schedule", ".lowering.optimize", ".lowering.lower",
                ".lowering.vector", ".rules.sums", ".rules.symbolic", ".uop.verify",
                ".uop.linearize", ".render.wgsl.target", ".render.wgsl.legalize",
                ".render.wgsl.expressions", ".render.wgsl.writer", ".render.wgsl")


def verify_ptx(code: str, arch: str = "sm_80", device: str = "WEBGPU") -> dict:
  """Run the program's PTX on the simulator (PTXSIM) and compare it with `device`'s result.
  The PTXSIM result's "engines" counts its launches by the simulator engine that ran them
  ("fast": numpy; "fused": the pure-Python engine, as in Pyodide without numpy)."""
  def work():
    from ..ptxsim.machine import LAUNCHED
    before = dict(LAUNCHED)
    simulated = _run_on(code, "PTXSIM")
    simulated["engines"] = {k: v - before.get(k, 0) for k, v in LAUNCHED.items()
                            if v != before.get(k, 0)}
    other = _run_on(code, device)
    return {"ptxsim": simulated, "other": other, "comparison": compare(simulated, other),
            "arch": arch}
  return guarded(work)
