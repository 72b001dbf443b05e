"""Compiled kernels kept across page loads: the browser's store of the compile cache.

In the web page, the worker reads the kernels it stored earlier (IndexedDB, web/store.js) into
`load(records)` before the first command, and after each command writes what `take()` returns
(the kernels compiled since, and whether `kg.clear_cache()` emptied the store). A kernel the
compile cache (cache.py) misses is looked up here by its kernel key, so a reloaded page that
runs the same program again compiles nothing: the WGSL and launch data come back as they were.

A record's key is a hash of kernelgen's build (`build_id`: its version and its modules'
source, so a rebuilt page with the same version number never reuses an older compiler's code)
and the kernel key's text: a kernel key with no stable text (an object shown by its address) is
not stored. Only WGSL kernels are kept (the page's WEBGPU device runs them from their launch
data alone; the PYTHON interpreter needs the compiler's IR). Off (nothing kept) until
`enable()`: CPython never uses it.

A record is sealed: {"v": build_id, "key": its own key, "kind": "kernel" or "data", "text": its
content as JSON text, "sum": a hash of key and text} (the browser adds "at", when written). One
that is not (another build's, a corrupted or truncated one, one stored under another key,
content that does not parse as a kernel) is rejected: dropped, counted in STATS["rejected"],
and the kernel compiled as if nothing were stored (the new record replaces it in the browser's
store). A stored entry can cost a compile, never a wrong result.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .dtype import dtypes
from .version import __version__
from .uop.program import Binding, BufferSpec, CompiledKernel, Launch

_STATE = {"on": False, "cleared": False, "targets": frozenset()}
_RECORDS: dict[str, dict] = {}    # record key -> record (loaded and made)
_NEW: dict[str, dict] = {}        # made since the last take()
_LOADED: set[str] = set()         # the keys load() gave (an earlier page load's)
# hits: kernels (or results) taken from the store instead of compiled; rejected: records dropped
# as not sealed for this build (the module docstring)
STATS = {"loaded": 0, "hits": 0, "rejected": 0}
_BUILD: list[str] = []            # build_id(), once computed


def build_id() -> str:
  """kernelgen's version and a hash of its modules' source (the files of this package)."""
  if not _BUILD:
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(root.rglob("*.py")):
      digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    _BUILD.append(f"{__version__}+{digest.hexdigest()[:16]}")
  return _BUILD[0]


def enable(on: bool = True, targets=("wgsl",)) -> None:
  """Keep the kernels of `targets` (target names: the page's device runs WGSL) for the browser's
  store (the page's worker turns this on)."""
  _STATE["on"], _STATE["targets"] = bool(on), frozenset(targets)


def record_key(key: tuple) -> str | None:
  """The store's key of a compile-cache key: kernelgen's build and the key's text, hashed;
  None when the text is not stable (some part shows an address)."""
  text = repr(key)
  if " at 0x" in text:
    return None
  return hashlib.sha256(f"{build_id()}\n{text}".encode()).hexdigest()


def _sum(name: str, text: str) -> str:
  return hashlib.sha256(f"{name}\n{text}".encode()).hexdigest()


def seal(name: str, content, kind: str = "data") -> dict:
  """The record stored under `name` for plain JSON `content` (the module docstring); `kind`:
  "kernel" (to_record's: the page's worker prebuilds the pipelines of those its stored launch
  order names at boot, web/worker.js prebuildStored) or "data"."""
  text = json.dumps(content, separators=(",", ":"))
  return {"v": build_id(), "key": name, "kind": kind, "text": text, "sum": _sum(name, text)}


def unsealed(name: str, record) -> object:
  """The content of the record stored under `name`; ValueError when it is not sealed for this
  build under that name."""
  if not isinstance(record, dict) or record.get("v") != build_id() or record.get("key") != name:
    raise ValueError("not this build's record of this key")
  text = record.get("text")
  if not isinstance(text, str) or record.get("sum") != _sum(name, text):
    raise ValueError("its content does not match its checksum")
  return json.loads(text)


def _reject(name: str) -> None:
  _RECORDS.pop(name, None)
  _LOADED.discard(name)
  STATS["rejected"] += 1


def to_record(compiled: CompiledKernel) -> dict:
  """A compiled kernel as plain JSON data (its IR left out)."""
  launch = compiled.launch
  return {"name": compiled.name, "target": compiled.target, "source": compiled.source,
          "global_size": list(compiled.global_size), "local_size": list(compiled.local_size),
          "buffers": [[b.slot, b.name, b.dtype.name, b.size, b.access] for b in compiled.buffers],
          "launch": {**launch.to_json(), "grid": _plain(launch.grid),
                     "work": _plain(launch.work)}}


def _plain(value):
  return [_plain(v) for v in value] if isinstance(value, (tuple, list)) else value


def _tuples(value):
  return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def from_record(record: dict) -> CompiledKernel:
  """The CompiledKernel a record holds (without the compiler's IR)."""
  spec = record["launch"]
  launch = Launch(spec["target"], spec["source"], spec["entry_point"],
                  tuple(Binding(**b) for b in spec["bindings"]),
                  tuple(spec["workgroup_size"]), tuple(spec["dispatch"]),
                  tuple(tuple(u) for u in spec["uniforms"]), tuple(spec["features"]),
                  _tuples(spec["grid"]), _tuples(spec.get("work", [])))
  buffers = tuple(BufferSpec(slot, name, dtypes.from_name(dtype), size, access)
                  for slot, name, dtype, size, access in record["buffers"])
  return CompiledKernel(record["name"], record["target"], record["source"],
                        tuple(record["global_size"]), tuple(record["local_size"]), buffers, launch)


def find(key: tuple) -> CompiledKernel | None:
  """The stored kernel of a compile-cache key, or None."""
  if not _RECORDS:
    return None
  name = record_key(key)
  record = _RECORDS.get(name) if name else None
  if record is None:
    return None
  try:
    compiled = from_record(unsealed(name, record))
  except (ValueError, KeyError, TypeError, IndexError, AttributeError):
    _reject(name)         # compiled instead, and the new record replaces this one
    return None
  STATS["hits"] += 1
  return compiled


def keep(key: tuple, compiled: CompiledKernel) -> None:
  """Keep a kernel just compiled (WGSL only, while enabled) for the next take()."""
  if not _STATE["on"] or compiled.target not in _STATE["targets"]:
    return
  name = record_key(key)
  if name is not None and name not in _RECORDS:
    _RECORDS[name] = _NEW[name] = seal(name, to_record(compiled), "kernel")


def find_data(key: tuple):
  """Plain data kept by keep_data under `key` (a program's compile result) on an earlier page
  load, or None (data kept in this one is not served: a compile in the page runs its passes)."""
  name = record_key(key) if _LOADED else None
  record = _RECORDS.get(name) if name in _LOADED else None
  if record is None:
    return None
  try:
    content = unsealed(name, record)
  except ValueError:
    content = None
  if not isinstance(content, dict) or not isinstance(content.get("data"), dict):
    _reject(name)
    return None
  STATS["hits"] += 1
  return content["data"]


def keep_data(key: tuple, data) -> None:
  """Keep plain JSON data (a dict, while enabled) under `key` for the next take()."""
  name = record_key(key) if _STATE["on"] else None
  if name is not None:
    _RECORDS[name] = _NEW[name] = seal(name, {"data": data})


def load(records: dict) -> int:
  """Add the records the browser stored ({key: record}); returns how many there are now (each
  record is checked when it is first asked for: find, find_data)."""
  if not isinstance(records, dict):
    raise TypeError(f"the stored records are a {type(records).__name__}, not a dict by key")
  records = {k: v for k, v in records.items() if isinstance(k, str)}
  _RECORDS.update(records)
  _LOADED.update(records)
  STATS["loaded"] = len(_RECORDS)
  return len(_RECORDS)


def take() -> dict:
  """{"cleared": whether the store must be emptied first, "records": {key: record}}: what to
  write to the browser's store since the last take()."""
  out = {"cleared": _STATE["cleared"], "records": dict(_NEW)}
  _NEW.clear()
  _STATE["cleared"] = False
  return out


def clear() -> None:
  """Forget every stored kernel, here and (at the next take()) in the browser's store."""
  _RECORDS.clear()
  _NEW.clear()
  _LOADED.clear()
  _STATE["cleared"] = True
  STATS["loaded"] = STATS["hits"] = STATS["rejected"] = 0
