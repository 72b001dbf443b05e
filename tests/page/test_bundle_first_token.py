"""A causal LM bundle's first token waits only for the kernels a prompt runs (issue 37): model.js
load() builds each kernel's pipeline but a decode step's one-row kernels (graph/one_row.py: a
kernel whose `runs` is one value of its dim), which it builds after the first run that does not
launch them (the prompt's), all at once, before the first decode step; a first run that does
launch them (a one-token prompt) waits for their builds. Both give onnxruntime's (CPU) greedy
tokens, in headless Chromium (SwiftShader). The order of the builds and the runs' submits is
logged by wrapping the device's calls. Structure only: nothing here is timed."""
from __future__ import annotations

import sys

import pytest

import kernelgen as kg
from browser_util import local_page
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from tools import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import lm_models  # noqa: E402

pytestmark = pytest.mark.timeout(600)
PROMPT, TOKENS, CONTEXT = [1, 5, 9, 2, 7, 3, 4, 8], 6, 32

# JS: load the bundle under /NAME/ on a device that logs each pipeline build ('build', its shader
# module's label: the kernel's name) and each submit, then generate; the log (with 'loaded' and
# each 'token'), load()'s progress calls and the tokens
LOGGED = """async ([name, prompt, steps]) => {
  const { load } = await import(`/${name}/model.js`);
  const device = await (await navigator.gpu.requestAdapter()).requestDevice();
  const log = [];
  const create = device.createComputePipelineAsync.bind(device);
  device.createComputePipelineAsync = (descriptor) => {
    log.push(['build', descriptor.compute.module.label]);
    return create(descriptor);
  };
  const submit = device.queue.submit.bind(device.queue);
  device.queue.submit = (buffers) => {
    log.push(['submit']);
    return submit(buffers);
  };
  const progress = [];
  const model = await load({ device, onProgress: (p) => progress.push([p.done, p.total]) });
  log.push(['loaded']);
  const tokens = await model.generate(prompt, { maxNewTokens: steps,
    onToken: () => log.push(['token']) });
  model.destroy();
  return { log, progress, tokens };
}"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
  """The tiny LM (q4) exported with its step symbolic up to the prompt's length: (folder, the
  manifest, the model)."""
  pytest.importorskip("onnxruntime")
  from kernelgen.export.onnx_lm import causal_program
  folder = tmp_path_factory.mktemp("first-token")
  model = lm_models.build(lm_models.CONFIGS["tiny"], "q4")
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), len(PROMPT), CONTEXT)
  exported = kg.export(outputs, str(folder / "lm"), format="webgpu", state=state)
  (folder / "index.html").write_text("<!doctype html><title>lm</title>")
  return folder, exported.manifest, model


def _generate(chromium, serve, bundle, prompt) -> dict:
  folder, _, _ = bundle
  server = serve(folder)
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    got = page.evaluate(LOGGED, ["lm", prompt, TOKENS])
    assert page.console_errors == [], page.console_errors
  return got


def _one_row(manifest) -> tuple:
  """The names of the kernels launched at one value of their dim only (the decode's one-row
  kernels), and of the others."""
  one = {k["name"] for k in manifest["kernels"] if "runs" in k and
         k["runs"]["lo"] == k["runs"]["hi"]}
  return one, {k["name"] for k in manifest["kernels"]} - one


def _built(log, start: int, end: int) -> set:
  """The labels of the pipelines whose builds the log has from `start` to `end`."""
  return {e[1] for e in log[start:end] if e[0] == "build"}


def test_first_token_comes_before_the_one_row_kernels_are_built(chromium, serve, bundle):
  _, manifest, model = bundle
  one, rest = _one_row(manifest)
  assert one and {k["runs"]["lo"] for k in manifest["kernels"] if k["name"] in one} == {1}
  got = _generate(chromium, serve, bundle, PROMPT)
  assert got["tokens"] == lm_models.ort_greedy(model, PROMPT, TOKENS)
  log = got["log"]
  loaded = log.index(["loaded"])
  first = log.index(["submit"], loaded)                            # the prompt's run
  second = log.index(["submit"], first + 1)                        # the first decode step's
  # load() built the prompt's kernels (layers that share a pipeline build it once), and said so
  assert _built(log, 0, loaded) and _built(log, 0, loaded) <= rest, _built(log, 0, loaded) & one
  assert got["progress"][-1] == [len(_built(log, 0, loaded))] * 2, got["progress"]
  # no one-row kernel before the prompt's run was submitted; all of them after it, before the
  # first decode step, which comes after the first token
  assert not _built(log, 0, first) & one, log
  assert _built(log, first, second) & one, log
  assert not _built(log, second, len(log)) & one, log
  assert first < log.index(["token"]) < second, log


def test_a_one_token_prompt_waits_for_the_one_row_kernels(chromium, serve, bundle):
  _, manifest, model = bundle
  one, _ = _one_row(manifest)
  got = _generate(chromium, serve, bundle, PROMPT[:1])
  assert got["tokens"] == lm_models.ort_greedy(model, PROMPT[:1], TOKENS)
  log = got["log"]
  # its first run launches them: their builds start after load(), before its submit
  loaded = log.index(["loaded"])
  assert _built(log, loaded, log.index(["submit"], loaded)) & one, log
