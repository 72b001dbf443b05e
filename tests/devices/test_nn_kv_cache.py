"""kg.nn.KVCache / kg.nn.kv_append (nn/decode.py): a KV cache written in place, in a Python decode
loop and under kg.jit (values against numpy at every step, both ends of the past's range, a
symbolic step of several rows), in an exported bundle (examples/tiny_gpt.py's cached_program:
the same greedy tokens as the bundle whose caches are copied), and the typed errors of its
misuse."""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import nn
from tools import REPO_ROOT, device_fixture

device = device_fixture(("PYTHON", "WEBGPU"))
ROWS, WIDTH = 6, 8


def _zeros(*shape, dtype=kg.dtypes.float32):
  return kg.Tensor.zeros(*shape, dtype=dtype, device="PYTHON")


def _rows(n: int, seed: int) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal((n, WIDTH)).astype(np.float32)


def test_decode_loop_appends_one_row_a_step(device):
  """rows 0..5 appended one a step at past = 0 .. 5 (the Dim's both ends): each step reads
  the rows so far, the last one the whole buffer."""
  past = kg.Dim("past", 0, ROWS - 1)
  cache, want = nn.KVCache(ROWS, WIDTH, device=device), _rows(ROWS, 1)
  for t in range(ROWS):
    grown = nn.kv_append(cache.past(past.bind(t)), kg.Tensor(want[t:t + 1], device=device))
    assert grown.symbolic_shape == (past + 1, WIDTH)
    np.testing.assert_array_equal(grown.numpy(), want[:t + 1])
  np.testing.assert_array_equal(cache.past(past.bind(ROWS - 1)).numpy(), want[:ROWS - 1])


def test_decode_loop_appends_a_symbolic_step_of_rows(device):
  """Steps of s = 1, 2, 3 rows (s a kg.Dim 1..3, past 0..3): the last at both tops, filling it."""
  past, s = kg.Dim("past", 0, ROWS - 3), kg.Dim("s", 1, 3)
  cache, want, at = nn.KVCache(ROWS, WIDTH, device=device), _rows(ROWS, 2), 0
  for n in (1, 2, 3):
    new = kg.Tensor(want[at:at + n], device=device).symbolic(s.bind(n), WIDTH)
    grown = nn.kv_append(cache.past(past.bind(at)), new)
    at += n
    np.testing.assert_array_equal(grown.numpy(), want[:at])
  assert at == ROWS


def test_kv_append_writes_the_cache_and_nothing_else(device):
  """The result is the cache's own buffer (no copy): an earlier row written before stays."""
  past = kg.Dim("past", 0, ROWS - 1)
  cache, want = nn.KVCache(ROWS, WIDTH, name="past_k", device=device), _rows(2, 3)
  nn.kv_append(cache.past(past.bind(0)), kg.Tensor(want[:1], device=device)).realize()
  grown = nn.kv_append(cache.past(past.bind(1)), kg.Tensor(want[1:], device=device)).realize()
  assert grown.node.buffer is cache.buffer.node.buffer
  np.testing.assert_array_equal(grown.numpy(), want)


def test_a_jitted_step_replays_for_every_past_and_compiles_nothing_after_its_second(device):
  """kg.jit over a step that appends a row and sums the rows so far: numpy's sums at past 0..5,
  and no kernel compiled after the second step (structure, not time)."""
  past, want = kg.Dim("past", 0, ROWS - 1), _rows(ROWS, 5)
  cache = nn.KVCache(ROWS, WIDTH, device=device)
  step = kg.jit(lambda new, n: nn.kv_append(cache.past(n), new).sum(0))
  for t in range(ROWS):
    if t == 2:
      misses = kg.cache_info()["misses"]
    got = step(kg.Tensor(want[t:t + 1], device=device), past.bind(t)).numpy()
    np.testing.assert_allclose(got, want[:t + 1].sum(0), rtol=1e-5, atol=1e-6)
  assert kg.cache_info()["misses"] == misses


def test_a_cache_larger_than_its_steps_with_int_and_dim_pasts(device):
  """A cache of 8 rows under a past of 0..3 (the result a prefix of it), then int pasts."""
  past, want = kg.Dim("past", 0, 3), _rows(6, 4)
  cache = nn.KVCache(8, WIDTH, device=device)
  for t in (0, 3):
    np.testing.assert_array_equal(nn.kv_append(cache.past(past.bind(t)), kg.Tensor(
      want[t:t + 1], device=device)).numpy()[t:], want[t:t + 1])
  grown = nn.kv_append(cache.past(4), kg.Tensor(want[4:6], device=device))
  np.testing.assert_array_equal(grown.numpy()[3:], want[3:6])
  assert grown.shape == (6, WIDTH)


@pytest.mark.parametrize("misuse,error,says", [
  (lambda c, p: nn.kv_append(_zeros(ROWS - 1, WIDTH).realize(), _zeros(1, WIDTH)),
   kg.ShapeError, "not a KV cache's rows; make the cache with kg.nn.KVCache"),
  (lambda c, p: nn.kv_append(c.past(p) + 1, _zeros(1, WIDTH)),
   kg.ShapeError, "not a KV cache's rows"),
  (lambda c, p: nn.kv_append(c.past(p), _zeros(1, WIDTH + 1)),
   kg.ShapeError, "new rows (1, 9) for a cache of width 8: give a tensor (s, 8)"),
  (lambda c, p: nn.kv_append(c.past(p), _zeros(WIDTH)),
   kg.ShapeError, "give a tensor (s, 8)"),
  (lambda c, p: nn.kv_append(c.past(p), _zeros(1, WIDTH, dtype=kg.dtypes.int32)),
   kg.DTypeError, "new rows are int32, the cache holds float32: cast them"),
  (lambda c, p: nn.kv_append(c.past(p), _zeros(2, WIDTH)),
   kg.ShapeError, "can reach 7: it would overflow; make the past's top 4"),
  (lambda c, p: c.past(kg.Dim("p", 0, ROWS + 1)),
   kg.ShapeError, "the cache holds 0..6 rows, p can be 0..7"),
  (lambda c, p: nn.KVCache(0, WIDTH), kg.ShapeError, "KVCache rows 0: give a positive int"),
])
def test_misuse_is_a_typed_error_with_a_fix(misuse, error, says):
  cache, past = nn.KVCache(ROWS, WIDTH, device="PYTHON"), kg.Dim("past", 0, ROWS - 1)
  with pytest.raises(error) as caught:
    misuse(cache, past)
  assert says in str(caught.value), caught.value


def test_tiny_gpt_bundle_in_place_generates_the_copying_bundles_tokens(tmp_path):
  """examples/tiny_gpt.py uses only kg's public API; its bundle whose caches are KVCaches
  written in place (cached_program) greedy-decodes the tokens of the bundle whose caches are
  new buffers copied into the state after each run (in_place=False)."""
  source = (REPO_ROOT / "examples" / "tiny_gpt.py").read_text()
  assert not re.findall(r"(?:from|import) kernelgen\.\w+", source)
  sys.path.insert(0, str(REPO_ROOT / "examples"))
  from tiny_gpt import TinyGPT, cached_program
  model = TinyGPT(48, 16, 2, 2, 12).to("PYTHON")         # weights whose greedy tokens vary
  model.tokens.weight = nn.Parameter(kg.Tensor.randn(48, 16, seed=1, device="PYTHON") * 0.2)
  model.positions.weight = nn.Parameter(kg.Tensor.randn(12, 16, seed=2, device="PYTHON"))
  tokens = []
  for in_place in (True, False):
    outputs, state = cached_program(model, in_place=in_place)
    bundle = kg.export(outputs, str(tmp_path / f"lm{in_place}"), format="webgpu", state=state)
    caches = {s["name"] for s in bundle.manifest["state"] if s["in_rows"] == s["out_rows"] == 12}
    assert len(caches) == (4 if in_place else 0), bundle.manifest["state"]
    tokens.append(bundle.generate([3, 5, 7], max_new_tokens=7, device="WEBGPU"))
  assert tokens[0] == tokens[1] and len(set(tokens[0])) > 1, tokens
