"""Checking a bundle's manifest.json against its schema before anything is read or allocated.

`check(manifest, where)` walks every field `Bundle` uses (export/README.md lists them) and
raises ManifestError naming the field (`kernels[0].workgroup_size[1]`), what it holds and what
it must hold; sizes and counts past kernelgen's limits are LimitErrors (kernelgen/limits.py).
A manifest that passes can be run without a KeyError, an IndexError or a zero-sized launch.
"""
from __future__ import annotations

import os

from .. import limits
from ..dtype import SCALARS, dtypes
from ..errors import ManifestError
from .plan import FORMAT
from . import alternates, device_limits, state as bundle_state

BUNDLES = {"webgpu": "wgsl", "ptx": "ptx"}
ACCESS = ("read", "write", "readwrite")
KINDS = ("storage", "uniform")
MAX_WORKGROUP = 1024             # invocations per workgroup (CUDA's limit; WebGPU's is lower)
MAX_DISPATCH = (1 << 31) - 1     # workgroups per dimension


def check(m, where: str) -> None:
  """ManifestError (or LimitError) unless `m` is a well-formed kernelgen-bundle/1 manifest."""
  _dict(m, "the manifest", where)
  if m.get("format") != FORMAT:
    _fail(where, "format", m.get("format"), f"{FORMAT!r} (re-export the bundle)")
  bundle = _pick(m, "bundle", tuple(BUNDLES), where)
  if m.get("target") != BUNDLES[bundle]:
    _fail(where, "target", m.get("target"), f"{BUNDLES[bundle]!r} for a {bundle} bundle")
  limits.relative_name(os.path.dirname(where) or ".", _str(m, "weights_file", where),
                       "the manifest's weights_file")
  storage = _list(m, "storage", where)
  for i, s in enumerate(storage):
    _dict(s, f"storage[{i}]", where)
    _int(s, "nbytes", where, f"storage[{i}].", hi=limits.get("buffer_bytes"))
  buffers = _list(m, "buffers", where)
  for i, b in enumerate(buffers):
    _buffer(b, f"buffers[{i}].", storage, where)
  for key in ("inputs", "outputs", "weights"):
    for i, spec in enumerate(_list(m, key, where)):
      _spec(spec, f"{key}[{i}].", buffers, where)
  for i, k in enumerate(_list(m, "kernels", where)):
    _kernel(k, f"kernels[{i}].", buffers, storage, where)
    _variants(k, f"kernels[{i}].", buffers, storage, where)
    _runs(k, f"kernels[{i}].", where)
    if alternates.KEY in k:       # its subgroups form (export/alternates.py)
      _form(k, f"kernels[{i}].{alternates.KEY}", buffers, storage, where)
  if "optional_features" in m and (m["optional_features"] != [alternates.KEY] or not any(
      alternates.KEY in k for k in m["kernels"])):
    _fail(where, "optional_features", m["optional_features"],
          f"[{alternates.KEY!r}], present only where a kernel has that form")
  bundle_state.check(m, lambda field, value, wants: _fail(where, field, value, wants))
  device_limits.check(m, lambda field, value, wants: _fail(where, field, value, wants))


def _variants(k: dict, at: str, buffers: list, storage: list, where: str) -> None:
  """A kernel's variants: the same kernel for small bound values, with its bindings."""
  for j, v in enumerate(_list(k, "variants", where, at) if "variants" in k else ()):
    vat = f"{at}variants[{j}]."
    _kernel({**k, **_dict(v, vat.rstrip("."), where)}, vat, buffers, storage, where)
    if "variants" in v:
      _fail(where, vat + "variants", v["variants"], "absent (a variant has none)")
    _str(v, "dim", where, vat)
    _int(v, "most", where, vat)
    if v.get("exact", False) is not True and "exact" in v:   # pinned to `most` (program.py)
      _fail(where, vat + "exact", v["exact"], "true or absent")


def _runs(k: dict, at: str, where: str) -> None:
  """A kernel's `runs`: launched only while its dim is bound within lo..hi (program.runs_at)."""
  if "runs" in k:
    at = at + "runs."
    runs = _dict(k["runs"], at.rstrip("."), where)
    _str(runs, "dim", where, at)
    if _int(runs, "hi", where, at) < _int(runs, "lo", where, at):
      _fail(where, at + "hi", runs["hi"], f"at least lo = {runs['lo']}")


def _form(k: dict, at: str, buffers: list, storage: list, where: str) -> None:
  """A kernel's subgroups form: launch fields only (alternates.FIELDS), each as a kernel's."""
  form = _dict(k[alternates.KEY], at, where)
  extra = sorted(set(form) - set(alternates.FIELDS))
  if extra or not form:
    _fail(where, at, sorted(form), f"an object of launch fields ({', '.join(alternates.FIELDS)})")
  chosen = alternates.chosen(k, True)
  _kernel(chosen, at + ".", buffers, storage, where)
  _variants(chosen, at + ".", buffers, storage, where)


def _buffer(b, at: str, storage: list, where: str) -> None:
  _dict(b, at.rstrip("."), where)
  if b.get("name") is not None and not isinstance(b["name"], str):
    _fail(where, at + "name", b["name"], "a string or null")
  dtype = _dtype(b, at, where)
  size = _int(b, "size", where, at, hi=limits.get("elements"))
  nbytes = _int(b, "nbytes", where, at, hi=limits.get("buffer_bytes"))
  if nbytes != size * dtype.itemsize:
    _fail(where, at + "nbytes", nbytes, f"size x itemsize = {size * dtype.itemsize}")
  index = _int(b, "storage", where, at, hi=len(storage) - 1)
  if storage[index]["nbytes"] < nbytes:
    _fail(where, at + "storage", index, f"a storage of at least {nbytes} bytes")


def _spec(spec, at: str, buffers: list, where: str) -> None:
  _dict(spec, at.rstrip("."), where)
  _str(spec, "name", where, at)
  dtype = _dtype(spec, at, where)
  shape = _list(spec, "shape", where, at, hi=limits.get("dims"))
  count = 1
  for i in range(len(shape)):
    count *= _int(shape, i, where, f"{at}shape", hi=limits.get("elements"))
  index = _int(spec, "buffer", where, at, hi=len(buffers) - 1)
  buffer = buffers[index]
  if buffer["dtype"] != dtype.name or buffer["size"] != count:
    _fail(where, at + "buffer", index, f"a buffer of {count} x {dtype.name} (the shape and "
          f"dtype given), not {buffer['size']} x {buffer['dtype']}")


def _kernel(k, at: str, buffers: list, storage: list, where: str) -> None:
  _dict(k, at.rstrip("."), where)
  for key in ("name", "file", "entry_point"):
    _str(k, key, where, at)
  limits.relative_name(os.path.dirname(where) or ".", k["file"], f"{at}file")
  if not k["entry_point"].isidentifier():
    _fail(where, at + "entry_point", k["entry_point"], "an identifier")
  threads = 1
  for key, lo, hi in (("workgroup_size", 1, MAX_WORKGROUP), ("dispatch", 0, MAX_DISPATCH),
                      ("global_size", 0, MAX_DISPATCH), ("local_size", 1, MAX_WORKGROUP)):
    dims = _list(k, key, where, at, hi=3)
    if len(dims) != 3:
      _fail(where, at + key, dims, "three ints")
    for i in range(3):
      value = _int(dims, i, where, at + key, lo=lo, hi=hi)
      threads *= value if key == "workgroup_size" else 1
  if threads > MAX_WORKGROUP:
    _fail(where, at + "workgroup_size", k["workgroup_size"], f"at most {MAX_WORKGROUP} "
          f"invocations in all")
  for key in ("features", "uniforms"):
    _list(k, key, where, at)
  if not all(isinstance(f, str) for f in k["features"]):
    _fail(where, at + "features", k["features"], "a list of feature names")
  for i, u in enumerate(k["uniforms"]):   # symbolic sizes: [dim name, "int32"]
    if not (isinstance(u, list) and len(u) == 2 and all(isinstance(v, str) for v in u)):
      _fail(where, f"{at}uniforms[{i}]", u, "a [name, dtype] pair of strings")
  if "work" in k and not _work(k["work"]):    # Launch.work: [[[dim, coefficient], ...], const]
    _fail(where, at + "work", k["work"], "a list of [[[dim name, int], ...], int] factors")
  slots = []       # a slot whose buffer the kernel never reads is absent (its source too)
  for i, b in enumerate(_list(k, "bindings", where, at)):
    slots.append(_binding(b, f"{at}bindings[{i}].", buffers, storage, where))
  if 0 not in slots or len(set(slots)) != len(slots):
    _fail(where, at + "bindings", sorted(slots), "slot 0 and other slots, each once")


def _work(work) -> bool:
  int_ = lambda v: isinstance(v, int) and not isinstance(v, bool)   # noqa: E731
  return isinstance(work, list) and all(
    isinstance(f, list) and len(f) == 2 and isinstance(f[0], list) and int_(f[1]) and all(
      isinstance(t, list) and len(t) == 2 and isinstance(t[0], str) and int_(t[1]) for t in f[0])
    for f in work)


def _binding(b, at: str, buffers: list, storage: list, where: str) -> int:
  _dict(b, at.rstrip("."), where)
  slot = _int(b, "slot", where, at, hi=limits.get("manifest_entries"))
  index = _int(b, "buffer", where, at, hi=len(buffers) - 1)
  _pick(b, "access", ACCESS, where, at)
  nbytes = _int(b, "nbytes", where, at, hi=limits.get("buffer_bytes"))
  if "kind" in b:      # a small read-only input bound as a uniform buffer (Binding.kind)
    _pick(b, "kind", KINDS, where, at)
    if b["kind"] == "uniform" and (b["access"] != "read" or nbytes % 16):
      _fail(where, at + "kind", b["kind"], "a read-only binding of a multiple of 16 bytes")
  room = storage[buffers[index]["storage"]]["nbytes"]
  if nbytes > room:
    _fail(where, at + "nbytes", nbytes, f"at most its storage's {room} bytes")
  return slot


def _fail(where: str, field: str, value, wants: str):
  shown = repr(value)
  shown = shown if len(shown) <= 60 else shown[:57] + "..."
  raise ManifestError(f"{where}: {field} is {shown}, it must be {wants}: the manifest is "
                      f"damaged or was not written by kg.export; re-export the bundle")


def _dict(value, field: str, where: str) -> dict:
  if not isinstance(value, dict):
    _fail(where, field, type(value).__name__, "a JSON object")
  return value


def _get(d, key, where: str, at: str):
  if isinstance(d, dict) and key not in d:
    raise ManifestError(f"{where}: {at}{key} is missing: the manifest is damaged or was not "
                        f"written by kg.export; re-export the bundle")
  return d[key]


def _list(d, key, where: str, at: str = "", hi: int | None = None) -> list:
  value = _get(d, key, where, at)
  if not isinstance(value, list):
    _fail(where, at + key, value, "a list")
  limit = "manifest_entries" if hi is None else None
  if limit:
    limits.check(limit, len(value), f"{where}: the length of {at}{key}")
  elif len(value) > hi:
    _fail(where, at + key, value, f"a list of at most {hi}")
  return value


def _int(d, key, where: str, at: str = "", lo: int = 0, hi: int | None = None) -> int:
  value = _get(d, key, where, at)
  field = f"{at}[{key}]" if isinstance(key, int) else at + key
  if type(value) is not int or value < lo or (hi is not None and value > hi):
    _fail(where, field, value, f"an int >= {lo}" + (f" and <= {hi}" if hi is not None else ""))
  return value


def _str(d, key, where: str, at: str = "") -> str:
  value = _get(d, key, where, at)
  if not isinstance(value, str) or not value:
    _fail(where, at + key, value, "a non-empty string")
  return value


def _pick(d, key, choices: tuple, where: str, at: str = "") -> str:
  value = _get(d, key, where, at)
  if value not in choices:
    _fail(where, at + key, value, f"one of {', '.join(map(repr, choices))}")
  return value


def _dtype(d, at: str, where: str):
  name = _get(d, "dtype", where, at)
  if not isinstance(name, str) or name not in SCALARS:
    _fail(where, at + "dtype", name, "a kernelgen dtype name")
  return dtypes.from_name(name)
