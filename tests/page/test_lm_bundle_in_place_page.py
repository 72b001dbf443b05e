"""model.js `generate` of an ONNX causal LM bundle (export/onnx_lm.py, bench/lm_models.py's tiny LM)
in headless Chromium (SwiftShader) writes the KV caches in place: onnxruntime's (CPU) greedy
tokens, and per decode step the page encodes no copy into a cache state (model.calls, the last
run's counts: copies 0) and dispatches the program's kernels once each (but those whose `runs`
leave out one token), where the only kernels
writing a cache are its writes of the new rows (the manifest's bindings). Structure only: nothing here is timed."""
from __future__ import annotations

import sys

import pytest

import kernelgen as kg
from browser_util import local_page
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from tools import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import lm_models  # noqa: E402
from bundle_state import GENERATE  # noqa: E402

pytestmark = pytest.mark.timeout(600)
PROMPT, TOKENS, CONTEXT = [1, 5, 9, 2, 7, 3, 4, 8], 10, 32


@pytest.mark.parametrize("dtype,step", [("q4", 4), ("fp32", 1)])
def test_bundle_generate_in_the_page_copies_no_cache(chromium, serve, tmp_path, dtype, step):
  pytest.importorskip("onnxruntime")
  from kernelgen.export.onnx_lm import causal_program
  model = lm_models.build(lm_models.CONFIGS["tiny"], dtype)
  want = lm_models.ort_greedy(model, PROMPT, TOKENS)
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), step, CONTEXT)
  bundle = kg.export(outputs, str(tmp_path / "lm"), format="webgpu", state=state)
  (tmp_path / "index.html").write_text("<!doctype html><title>lm</title>")
  server = serve(tmp_path)
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    got = page.evaluate(GENERATE, ["lm", PROMPT, TOKENS])
    assert page.console_errors == [], page.console_errors
  assert got["tokens"] == want and len(set(want)) > 1
  seen = got["seen"]
  assert all(c["copies"] == 0 for c in seen), seen          # no state copied, prefill included
  # a decode run's kernels: all but those whose `runs` leave out one token (a symbolic step's
  # gate and up pairs, each replaced by one kernel: graph/one_row.py), each once
  one = [k for k in bundle.manifest["kernels"]
         if "runs" not in k or k["runs"]["lo"] <= 1 <= k["runs"]["hi"]]
  assert (len(one) < len(bundle.manifest["kernels"])) == (step > 1)
  kernels = len(one)
  per_step = [c["dispatches"] for c in seen[1:]]          # model.calls: the last run's counts
  assert per_step == [kernels] * (TOKENS - 1), per_step     # the program's kernels, once each
  assert all(c["submits"] == 1 for c in seen), seen
  caches = {b["id"] for s in bundle.manifest["state"] for i in bundle.manifest["inputs"]
            if i["name"] == s["name"] for b in bundle.manifest["buffers"] if b["id"] == i["buffer"]}
  # each cache written by one kernel of a run: its write of the new rows, or (a one-token bundle)
  # the QKV projection the rotated key's write joined (graph/join.py read_member), or (a decode
  # run of a symbolic step) both cut to one row (graph/one_row.py write_joined_at); never an
  # elementwise kernel computing a whole present (the concat this test was written against)
  for seq in {1, step}:
    writers = [k["name"] for k in bundle.manifest["kernels"] for b in k["bindings"]
               if b["buffer"] in caches and b["access"] != "read" and
               ("runs" not in k or k["runs"]["lo"] <= seq <= k["runs"]["hi"])]
    assert len(writers) == len(caches), (seq, writers)
    assert all(n.startswith(("write_", "r_")) for n in writers), writers
