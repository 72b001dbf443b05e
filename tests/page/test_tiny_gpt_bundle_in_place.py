"""A kg.nn decoder's cached step (examples/tiny_gpt.py, cached_program) exported with `state=`
writes its KV caches in place: each cache state is one buffer of context - 1 + step rows read as
its first `past` rows, the present output IS that buffer, and the only kernels writing it are the
per-block writes of the run's new rows (append_rows). After a run the bundle only counts rows:
Bundle.run (WEBGPU natively, PTXSIM) never copies a cache out or in, model.js encodes no copy
(model.calls.copies 0). Tokens as kg.generate's on the model itself (PYTHON, the whole window
recomputed). Structure only: nothing here is timed."""
from __future__ import annotations

import sys

import pytest

import kernelgen as kg
from browser_util import local_page
from tools import REPO_ROOT, device_runtime

sys.path.insert(0, str(REPO_ROOT / "examples"))
from tiny_gpt import TinyGPT, cached_program  # noqa: E402
from bundle_state import state_buffers, GENERATE  # noqa: E402

pytestmark = pytest.mark.timeout(900)
CONTEXT, PROMPT, STEPS, DIM, LAYERS = 16, [3, 5, 7, 1, 9], 8, 16, 2


@pytest.fixture(scope="module")
def lm():
  """A small TinyGPT whose greedy tokens vary, and kg.generate's greedy tokens on it (PYTHON)."""
  model = TinyGPT(48, DIM, LAYERS, 2, CONTEXT).to("PYTHON")
  model.tokens.weight = kg.nn.Parameter(kg.Tensor.randn(48, DIM, seed=1, device="PYTHON") * 0.2)
  model.positions.weight = kg.nn.Parameter(kg.Tensor.randn(CONTEXT, DIM, seed=2,
                                                           device="PYTHON"))
  want = kg.generate(model, PROMPT, max_new_tokens=STEPS, device="PYTHON")
  assert len(set(want)) > 1
  return model, want


def _export(model, path, fmt: str, step: int):
  outputs, state = cached_program(model, step=step)
  return kg.export(outputs, str(path), format=fmt, state=state)



@pytest.mark.parametrize("fmt", ["webgpu", "ptx"])
@pytest.mark.parametrize("step", [1, 4])
def test_each_cache_is_its_present_and_written_by_its_new_rows_only(lm, tmp_path, fmt, step):
  m = _export(lm[0], tmp_path / "lm", fmt, step).manifest
  caches = state_buffers(m)
  assert len(caches) == 2 * LAYERS
  for name, (past, present) in caches.items():
    assert present["id"] == past["id"], name                 # the present is the state's buffer
    assert past["shape"] == [CONTEXT - 1 + step, DIM], past   # preallocated: p + s at most
    assert past["symbolic_shape"][0] == {"terms": [["past", 1]], "const": 0}, past
  for s in m["state"]:
    assert s["in_rows"] == s["out_rows"] == CONTEXT - 1 + step, s
  ids = {past["id"] for past, _ in caches.values()}
  writers = [k for k in m["kernels"] for b in k["bindings"]
             if b["buffer"] in ids and b["access"] != "read"]
  assert len(writers) == len(caches), [k["name"] for k in writers]   # one write per cache
  for k in writers:                 # over the run's new rows (step of them), never the context:
    stored = sum(b["access"] != "read" for b in k["bindings"])   # a write joined to its
    threads = k["global_size"][0] * k["global_size"][1] * k["global_size"][2]  # projection
    assert threads <= step * DIM * stored < (CONTEXT - 1) * DIM, k   # (graph/join.py) stores q too


def _watch(monkeypatch, runtime, handles: list) -> tuple:
  """(copied out, copied in): the handles runtime.copyout / copyin were given from now on."""
  out, into = [], []
  copyout, copyin = type(runtime).copyout, type(runtime).copyin
  monkeypatch.setattr(type(runtime), "copyout", lambda self, h: out.append(id(h)) or
                      copyout(self, h))
  monkeypatch.setattr(type(runtime), "copyin", lambda self, h, *a, **k: into.append(id(h)) or
                      copyin(self, h, *a, **k))
  return out, into


@pytest.mark.parametrize("device,fmt", [("WEBGPU", "webgpu"), ("PTXSIM", "ptx")])
@pytest.mark.parametrize("step", [1, 4])
def test_bundle_generates_kg_generates_tokens_without_copying_a_cache(lm, tmp_path, monkeypatch,
                                                                     device, fmt, step):
  """Bundle.run: the prompt (token by token, or 4 then 1 with a symbolic step), then a token a
  run; kg.generate's greedy tokens, and no cache is ever read back or written from the host."""
  device_runtime(device)
  model, want = lm
  bundle = _export(model, tmp_path / "lm", fmt, step)
  runtime, handles, _ = bundle._prepare(device)
  caches = {id(handles[bundle._storage_of(s["name"])]) for s in bundle.manifest["state"]}
  out, into = _watch(monkeypatch, runtime, handles)
  assert bundle.generate(PROMPT, max_new_tokens=STEPS, device=device) == want
  assert out and not caches & set(out)          # the outputs read back, never a cache
  assert into and not caches & set(into)        # the inputs written, never a cache
  assert bundle.generate(PROMPT, max_new_tokens=STEPS, device=device) == want   # after reset



def test_model_js_generate_copies_no_cache(lm, chromium, serve, tmp_path):
  """model.js (SwiftShader): kg.generate's tokens, and no run encodes a copy into a cache."""
  model, want = lm
  (tmp_path / "index.html").write_text("<!doctype html><title>lm</title>")
  server = serve(tmp_path)
  bundle = _export(model, tmp_path / "lm", "webgpu", 4)
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    got = page.evaluate(GENERATE, ["lm", PROMPT, STEPS])
    assert page.console_errors == [], page.console_errors
  assert got["tokens"] == want
  seen = got["seen"]
  assert len(seen) == STEPS and all(c["copies"] == 0 and c["submits"] == 1 for c in seen), seen
  # a decode run's kernels, each once: all but those whose `runs` leave out one token (a symbolic
  # step's pairs that one kernel computes for one row: graph/one_row.py, export/README.md)
  kernels = len([k for k in bundle.manifest["kernels"]
                 if "runs" not in k or k["runs"]["lo"] <= 1 <= k["runs"]["hi"]])
  assert [c["dispatches"] for c in seen[1:]] == [kernels] * (STEPS - 1), seen
