"""bench/lm_page.py's page (bench/web/lm_page.js) cannot rot silently: a tiny causal LM of
bench/lm_models.py (the Optimum layout) exported as ONE bundle whose step is symbolic
(export/onnx_lm.py), on SwiftShader WebGPU in headless Chromium, kernelgen's side only: model.js's
generate (the whole prompt in one run, then one run per token) gives onnxruntime's (CPU) greedy
tokens, so does the forced pass (onnxruntime's tokens fed back run by run); the page reports the
counters the bench prints (dispatches per decode step, live GPU buffer bytes) and the weights are
on the GPU once. fp16 runs with its storage emulated where the adapter has no shader-f16 and
gives the fp32 run's tokens. Structure only: nothing here is timed."""
from __future__ import annotations

import contextlib
import json
import sys

import pytest

import kernelgen as kg
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from tools import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import lm_models  # noqa: E402
import lm_page  # noqa: E402

pytestmark = pytest.mark.timeout(600)
PROMPT, TOKENS = [1, 5, 9, 2, 7, 3, 4, 8], 12


@pytest.fixture(scope="module")
def page(chromium, tmp_path_factory):
  """The bench page on SwiftShader, serving a data folder: (page, server, folder)."""
  data = tmp_path_factory.mktemp("lm-page")
  with contextlib.ExitStack() as stack:
    server = lm_page.serve(stack, data)
    yield lm_page.load_page(chromium, server, "swiftshader", stack), server, data


def _row(page, dtype: str) -> tuple:
  """The kernelgen row of the tiny model in `dtype` (one round), the reference tokens and the
  bundle's manifest."""
  pytest.importorskip("onnxruntime")
  tab, server, data = page
  cfg = lm_models.CONFIGS["tiny"]
  path = data / f"tiny-{dtype}.onnx"
  lm_page.write_model(cfg, dtype, path, last_logits=False)
  want = lm_models.ort_greedy(str(path), PROMPT, TOKENS)
  bundles = lm_page.export_bundle(kg, path, data / f"tiny-{dtype}", "swiftshader", len(PROMPT),
                                  len(PROMPT) + TOKENS)
  specs = lm_page.page_specs(server, data, path, bundles, cfg, dtype, PROMPT,
                             systems=("kernelgen",))
  row = lm_page.run_row(tab, specs, PROMPT, want, rounds=1)["kernelgen"]
  manifest = json.loads((bundles["bundle"] / "manifest.json").read_text())
  return row, want, manifest


def _initializer_bytes(path) -> int:
  from onnx import numpy_helper
  model = onnx.load(str(path))
  return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


@pytest.mark.parametrize("dtype", ["q4", "fp32"])
def test_one_symbolic_step_bundle_generates_onnxruntime_tokens_in_the_page(page, dtype):
  row, want, manifest = _row(page, dtype)
  assert "error" not in row, row
  assert len(set(want)) > 1
  assert row["agree"] == TOKENS and row["top1"] == TOKENS, row      # generate and forced
  seq = [i["symbolic_shape"][1] for i in manifest["inputs"] if i["name"] == "input_ids"][0]
  assert seq["terms"] == [["seq", 1]], seq                      # one bundle, its step symbolic
  assert {d["name"]: d["hi"] for d in manifest["dims"]}["seq"] == len(PROMPT)
  layers = lm_models.CONFIGS["tiny"].layers
  assert 1 <= row["dispatches"] < 40 * layers, row              # counted per decode step
  weights = row["weightBytes"]       # on the GPU once: no more than the ONNX file's initializers
  assert 0 < weights <= _initializer_bytes(page[2] / f"tiny-{dtype}.onnx"), row
  assert row["kernels"] == len(manifest["kernels"]), row
  assert weights <= row["peak_bytes"] < row["plannedBytes"] + 65536, row   # one program's buffers


def test_fp16_gives_the_fp32_tokens_in_the_page(page):
  """SwiftShader has no shader-f16: the f16 weights and caches are stored emulated. (Run after
  the fp32 row in the same page: the peak of live bytes is counted per row.)"""
  row, want, manifest = _row(page, "fp16")
  assert "shader-f16" not in manifest["features"], manifest["features"]
  assert row["agree"] == TOKENS and row["top1"] == TOKENS, row
  assert row["peak_bytes"] < row["plannedBytes"] + 65536, row    # this row's peak, not fp32's
  assert want == lm_models.ort_greedy(lm_models.build(lm_models.CONFIGS["tiny"], "fp32"),
                                      PROMPT, TOKENS)
