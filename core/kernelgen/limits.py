"""Limits on what a file or a program may make kernelgen do, and the checks that apply them.

kernelgen opens files that come from strangers (bundles, ONNX models, safetensors weights) and
runs programs typed into a page. Every size, count, depth and amount of work such an input can
ask for is checked here against a limit *before* anything is allocated or looped over; past a
limit the input gets a LimitError that names the limit and how to raise it:

    import kernelgen as kg
    kg.limits.set(file_bytes=1 << 36)          # trust larger files
    with kg.limits.raised(interpreted_work=1 << 30):  # for one block
      ...

Work that cannot be bounded before it runs is counted as it runs: PTXSIM's loop trips per
warp (ptxsim_work) and, for the web page's commands, the clock (page_seconds: `timed()` around a
command, `tick()` where work goes round). INDEX_ELEMENTS is not a setting: GPU kernels index
with int32 (`index_elements`).

`confined(folder, name, what)` is the one way to open a file that a bundle or a model names: the
name is resolved inside its folder (symlinks resolved, then checked with real paths), must be a
regular file, and errors name the path without quoting any of its bytes.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time

from .errors import LimitError, PathError

# name -> (default, what it bounds)
DEFAULTS = {
  "file_bytes": (1 << 34, "bytes in one file a bundle or a model names"),
  "external_bytes": (1 << 32, "bytes of external data of one ONNX model, all tensors together"),
  "json_depth": (64, "nesting depth of a manifest or a safetensors header"),
  "manifest_entries": (1 << 20, "entries in one list of a bundle manifest"),
  "dims": (64, "dimensions of one tensor"),
  "buffer_bytes": (1 << 37, "bytes in one buffer a program allocates"),
  "elements": (1 << 48, "elements in one tensor a program builds"),
  "interpreted_work": (1 << 26, "loop iterations of one kernel on the PYTHON device"),
  "ptxsim_work": (1 << 18, "loop iterations of one warp (32 threads) in a PTXSIM launch: the "
                  "backward branches it takes, so a launch may run this many times its warps "
                  "in all"),
  "page_seconds": (300, "seconds one command of the web page may run (web_api: the page's own "
                   "time limit, besides Stop)"),
  "unrolled_copies": (1 << 8, "copies of a loop body one unrolled loop may emit"),
  "resize_weights": (1 << 22, "entries of one ONNX Resize's per-axis weight matrix (built in "
                    "Python)"),
}
_values = {name: default for name, (default, _) in DEFAULTS.items()}


# GPU targets (WGSL, PTX) index elements with int32: a kernel over this many elements or more
# would wrap its indices and compute the wrong elements, silently; not a setting (no fix here)
INDEX_ELEMENTS = 1 << 31


def index_elements(size: int, what: str, target: str) -> int:
  """`size` if a kernel for GPU target `target` may index that many elements with int32; a
  LimitError (limit "index_elements") otherwise, saying how to get the result anyway."""
  if size >= INDEX_ELEMENTS:
    raise LimitError(f"{what} has {size} elements: {target} kernels index with int32, so they "
                     f"take fewer than 2**31 = {INDEX_ELEMENTS} elements (limit index_elements; "
                     f"more would wrap and compute wrong values): split the tensor into parts "
                     f"under 2**31 elements, or run it on the PYTHON device",
                     limit="index_elements")
  return size


def get(name: str) -> int:
  """The current value of limit `name` (see DEFAULTS)."""
  if name not in _values:
    raise KeyError(f"no limit named {name!r}: the limits are {', '.join(DEFAULTS)}")
  return _values[name]


def set(**limits: int) -> dict:
  """Set limits by name (`kg.limits.set(file_bytes=1 << 36)`); returns their previous values."""
  old = {}
  for name, value in limits.items():
    get(name)
    if type(value) is not int or value < 0:
      raise ValueError(f"limit {name} must be a non-negative int, got {value!r}")
    old[name], _values[name] = _values[name], value
  return old


@contextlib.contextmanager
def raised(**limits: int):
  """Set limits for the duration of a `with` block."""
  old = set(**limits)
  try:
    yield
  finally:
    _values.update(old)


def check(name: str, value: int, what: str) -> int:
  """`value` if it is within limit `name`, else a LimitError saying `what` asked for it."""
  limit = get(name)
  if value > limit:
    raise LimitError(f"{what} is {value}, over kernelgen's limit {name} = {limit} "
                     f"({DEFAULTS[name][1]}): if the input is trusted, raise it with "
                     f"kernelgen.limits.set({name}=...)", limit=name)
  return value


_started: list = [None]    # when the timed command (timed()) began; None: nothing is timed


@contextlib.contextmanager
def timed():
  """Time the block against the page_seconds limit: tick() inside it raises a LimitError once
  the block has run longer (the web page's commands run in one; nested blocks keep the outer
  start). The limit is read at each tick, so a program may raise it for its own command."""
  outer = _started[0]
  if outer is None:
    _started[0] = time.monotonic()
  try:
    yield
  finally:
    _started[0] = outer


def tick() -> None:
  """A LimitError if the timed command (timed()) has run past the page_seconds limit; nothing
  otherwise. Called where long work goes round: each kernel compiled and run, each workgroup
  of the interpreter, each block of PTXSIM, each loop trip and call of a page's program."""
  start = _started[0]
  if start is not None:
    elapsed = time.monotonic() - start
    if elapsed > _values["page_seconds"]:
      raise LimitError(f"the command has run {elapsed:.1f} s, over kernelgen's limit "
                       f"page_seconds = {_values['page_seconds']} ({DEFAULTS['page_seconds'][1]})"
                       f": to give it longer, put kg.limits.set(page_seconds=...) at the top of "
                       f"the program (or press Stop to end a command sooner)",
                       limit="page_seconds")


def confined(folder: str, name, what: str) -> str:
  """The real path of file `name` inside `folder`, checked: a relative path with no `..`, whose
  real path (symlinks resolved) lies inside the folder's real path, naming a regular file within
  the file_bytes limit. PathError (naming the path, quoting none of its contents) otherwise."""
  relative_name(folder, name, what)
  root = os.path.realpath(folder)
  real = os.path.realpath(os.path.join(root, name))
  if os.path.commonpath([root, real]) != root or real == root:
    raise PathError(f"{what} names {name!r}, which resolves (through a symlink) to {real}, "
                    f"outside its folder {root}: copy the file into the folder instead")
  regular_size(real, what)
  return real


def relative_name(folder: str, name, what: str) -> str:
  """`name` if it is a relative path with no `..` part (so it stays inside `folder` unless a
  symlink leads out, which `confined` checks); PathError otherwise."""
  if not isinstance(name, str) or not name or "\0" in name:
    raise PathError(f"{what} names the file {name!r}: it must be a file name inside {folder}")
  parts = name.replace("\\", "/").split("/")
  if os.path.isabs(name) or name.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
    raise PathError(f"{what} names {name!r}, outside its folder {folder}: a file it names must "
                    f"be a relative path inside that folder, with no '..'")
  return name


def regular_size(path: str, what: str) -> int:
  """The size of regular file `path` within the file_bytes limit; PathError for a missing file,
  a folder, a FIFO or a device (reading one could block or never end)."""
  try:
    info = os.stat(path)
  except OSError as error:
    raise PathError(f"{what}: cannot open {path} ({error.strerror or error})") from None
  if not stat.S_ISREG(info.st_mode):
    kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a FIFO, socket " \
                                                         "or device)"
    raise PathError(f"{what}: {path} is {kind}: name a regular file")
  return check("file_bytes", info.st_size, f"{what}: the size of {path}")


def read_file(path: str, what: str, mode: str = "rb"):
  """The contents of regular file `path` (checked by regular_size first)."""
  regular_size(path, what)
  try:
    with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
      return f.read()
  except UnicodeDecodeError:
    raise PathError(f"{what}: {path} is not UTF-8 text") from None
  except OSError as error:
    raise PathError(f"{what}: cannot read {path} ({error.strerror or error})") from None


def json_depth(text: str, what: str) -> None:
  """LimitError if JSON `text` nests deeper than the json_depth limit (checked before parsing, so
  json.loads never recurses past it); brackets inside strings do not count."""
  depth, deepest = 0, 0
  for bracket in _BRACKETS.findall(_STRINGS.sub("", text)):
    depth += 1 if bracket in "[{" else -1
    deepest = max(deepest, depth)
  check("json_depth", deepest, f"{what}: JSON nesting depth")


def json_load(text: str, what: str):
  """json.loads(text) after the depth check; ValueError (a JSONDecodeError) if malformed."""
  json_depth(text, what)
  return json.loads(text)


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")
