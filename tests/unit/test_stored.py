"""stored.py (the browser's store of compiled kernels) in CPython: a WGSL kernel compiled while
the store is on comes back from take() as JSON, and after a fresh start (the compile cache
cleared, the records loaded as a reloaded page does) the same kernel is not compiled again and
has the same launch data; clear_cache() empties the store and asks the browser to."""
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
  assert stored.STATS == {"loaded": 0, "hits": 0}


def test_nothing_is_kept_while_the_store_is_off():
  kg.clear_cache()
  stored.take()
  for item in _items():
    cached_compile(item, get_target("wgsl"), {})
  assert stored.take() == {"cleared": False, "records": {}}
