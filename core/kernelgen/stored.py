"""Compiled kernels kept across page loads: the browser's store of the compile cache.

In the web page, the worker reads the kernels it stored earlier (IndexedDB, web/store.js) into
`load(records)` before the first command, and after each command writes what `take()` returns
(the kernels compiled since, and whether `kg.clear_cache()` emptied the store). A kernel the
compile cache (cache.py) misses is looked up here by its kernel key, so a reloaded page that
runs the same program again compiles nothing: the WGSL and launch data come back as they were.

A record's key is a hash of kernelgen's version and the kernel key's text: a kernel key with
no stable text (an object shown by its address) is not stored. Only WGSL kernels are kept (the
page's WEBGPU device runs them from their launch data alone; the PYTHON interpreter needs the
compiler's IR). Off (nothing kept) until `enable()`: CPython never uses it.
"""
from __future__ import annotations

import hashlib

from .dtype import dtypes
from .version import __version__
from .uop.program import Binding, BufferSpec, CompiledKernel, Launch

_STATE = {"on": False, "cleared": False, "targets": frozenset()}
_RECORDS: dict[str, dict] = {}    # record key -> record (loaded and made)
_NEW: dict[str, dict] = {}        # made since the last take()
_LOADED: set[str] = set()         # the keys load() gave (an earlier page load's)
STATS = {"loaded": 0, "hits": 0}  # hits: kernels taken from the store instead of compiled


def enable(on: bool = True, targets=("wgsl",)) -> None:
  """Keep the kernels of `targets` (target names: the page's device runs WGSL) for the browser's
  store (the page's worker turns this on)."""
  _STATE["on"], _STATE["targets"] = bool(on), frozenset(targets)


def record_key(key: tuple) -> str | None:
  """The store's key of a compile-cache key: kernelgen's version and the key's text, hashed;
  None when the text is not stable (some part shows an address)."""
  text = repr(key)
  if " at 0x" in text:
    return None
  return hashlib.sha256(f"{__version__}\n{text}".encode()).hexdigest()


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
  STATS["hits"] += 1
  return from_record(record)


def keep(key: tuple, compiled: CompiledKernel) -> None:
  """Keep a kernel just compiled (WGSL only, while enabled) for the next take()."""
  if not _STATE["on"] or compiled.target not in _STATE["targets"]:
    return
  name = record_key(key)
  if name is not None and name not in _RECORDS:
    _RECORDS[name] = _NEW[name] = to_record(compiled)


def find_data(key: tuple):
  """Plain data kept by keep_data under `key` (a program's compile result) on an earlier page
  load, or None (data kept in this one is not served: a compile in the page runs its passes)."""
  name = record_key(key) if _LOADED else None
  record = _RECORDS.get(name) if name in _LOADED else None
  if record is None or "data" not in record:
    return None
  STATS["hits"] += 1
  return record["data"]


def keep_data(key: tuple, data) -> None:
  """Keep plain JSON data (while enabled) under `key` for the next take()."""
  name = record_key(key) if _STATE["on"] else None
  if name is not None:
    _RECORDS[name] = _NEW[name] = {"data": data}


def load(records: dict) -> int:
  """Add the records the browser stored ({key: record}); returns how many there are now."""
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
  STATS["loaded"] = STATS["hits"] = 0
