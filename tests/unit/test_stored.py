"""stored.py (the browser's store of compiled kernels) in CPython: a WGSL kernel compiled while
the store is on comes back from take() as JSON, and after a fresh start (the compile cache
cleared, the records loaded as a reloaded page does) the same kernel is not compiled again and
has the same launch data; clear_cache() empties the store and asks the browser to. A spoiled
record (corrupted, another build's, under another key, in an older format, not a record) is
dropped and its kernel compiled again: never used."""
from __future__ import annotations

import json

import pytest

import kernelgen as kg
from kernelgen import stored
from kernelgen.cache import cached_compile
from kernelgen.graph.schedule import schedule
from kernelgen.render.targets import get_target


@pytest.fixture
def store():
  kg.clear_cache()
  stored.take()
  stored.enable()
  yield
  stored.enable(False)
  kg.clear_cache()
  stored.take()


def _items():
  x = (kg.Tensor.arange(24).cast(kg.dtypes.float32) * 0.3).reshape(4, 6)
  y = (x @ x.T).relu().sum(axis=1)
  return schedule([y.node])


def test_a_stored_kernel_is_not_compiled_again_after_a_reload(store):
  target = get_target("wgsl")
  first = [cached_compile(item, target, {}) for item in _items()]
  records = json.loads(json.dumps(stored.take()))
  assert not records["cleared"] and len(records["records"]) == len(first)
  kg.clear_cache()                 # a fresh page: nothing compiled, the store read back
  stored.take()
  stored.load(records["records"])
  misses = kg.cache_info()["misses"]
  again = [cached_compile(item, target, {}) for item in _items()]
  assert kg.cache_info()["misses"] == misses      # nothing compiled
  assert [k.launch for k in again] == [k.launch for k in first]
  assert [k.buffers for k in again] == [k.buffers for k in first]
  kg.clear_cache()
  assert stored.take() == {"cleared": True, "records": {}}
  assert stored.STATS == {"loaded": 0, "hits": 0, "rejected": 0}


def test_nothing_is_kept_while_the_store_is_off():
  kg.clear_cache()
  stored.take()
  for item in _items():
    cached_compile(item, get_target("wgsl"), {})
  assert stored.take() == {"cleared": False, "records": {}}


def _spoiled(records: dict, how: str) -> dict:
  """The records with each one spoiled `how` (what a browser's store could hand back)."""
  names = list(records)
  out = {}
  for i, (name, record) in enumerate(records.items()):
    if how == "corrupt text":         # a flipped character in the WGSL
      out[name] = {**record, "text": record["text"].replace("var", "vbr", 1)}
    elif how == "other build":        # another build's record, resealed as that build would
      out[name] = {**record, "v": "0.0.9+0000000000000000"}
    elif how == "swapped":            # another kernel's record under this key
      out[name] = records[names[(i + 1) % len(names)]]
    elif how == "unsealed":           # the format before records were sealed
      out[name] = json.loads(record["text"])
    elif how == "truncated":
      out[name] = {k: v for k, v in record.items() if k != "sum"}
    else:                             # not a record at all
      out[name] = "<html>"
  return out


@pytest.mark.parametrize("how", ["corrupt text", "other build", "swapped", "unsealed",
                                 "truncated", "garbage"])
def test_a_spoiled_stored_kernel_is_compiled_again_never_used(store, how):
  target = get_target("wgsl")
  first = [cached_compile(item, target, {}) for item in _items()]
  records = json.loads(json.dumps(stored.take()))["records"]
  assert len(records) >= 2
  kg.clear_cache()
  stored.take()
  stored.load(_spoiled(records, how))
  misses = kg.cache_info()["misses"]
  again = [cached_compile(item, target, {}) for item in _items()]
  assert kg.cache_info()["misses"] == misses + len(first)     # every kernel compiled
  assert stored.STATS["hits"] == 0 and stored.STATS["rejected"] == len(first)
  assert [k.source for k in again] == [k.source for k in first]
  assert [k.launch for k in again] == [k.launch for k in first]
  assert stored.take()["records"] == records    # the good records replace the spoiled ones


def test_a_spoiled_stored_result_is_computed_again(store):
  key = ("compile_program", "out = x", "sm_80", "wgsl")
  stored.keep_data(key, {"wgsl": {"ok": True, "kernels": []}})
  records = stored.take()["records"]
  kg.clear_cache()
  stored.take()
  stored.load(records)
  assert stored.find_data(key) == {"wgsl": {"ok": True, "kernels": []}}
  kg.clear_cache()
  stored.take()
  # a flipped value: "ok": false would read as a failed compile, had it been believed
  stored.load({k: {**r, "text": r["text"].replace("true", "false")} for k, r in records.items()})
  assert stored.find_data(key) is None and stored.STATS["rejected"] == 1


def test_the_store_key_changes_with_the_compiler_source(store, monkeypatch):
  key = ("compile_program", "out = x", "sm_80", "wgsl")
  before = stored.record_key(key)
  monkeypatch.setattr(stored, "_BUILD", ["0.1.0+ffffffffffffffff"])
  assert stored.record_key(key) != before
