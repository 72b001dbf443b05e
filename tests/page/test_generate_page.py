"""kg.generate in the page: the worker's Pyodide loads a small q4 causal LM (bench/lm_models.py:
MatMulNBits, GatherBlockQuantized, GroupQueryAttention ...) from its bytes and generates on the
page's WebGPU (lavapipe through ANGLE), streaming each token to the page (onToken); the greedy
tokens equal onnxruntime's (CPU)."""
from __future__ import annotations

import pytest

from browser_util import launch_chromium, local_page
from test_browser import boot, site  # noqa: F401 (fixture)
from test_generate import PROMPT, lm_models, ort_greedy

pytestmark = pytest.mark.timeout(1800)

GENERATE = """async ([bytes, prompt, steps]) => {
  const kg = kgApp.state.kg;
  const streamed = [];
  const result = await kg.generate(new Uint8Array(bytes), prompt, {
    maxNewTokens: steps, device: 'WEBGPU', onToken: (t) => streamed.push(t) });
  return { ...result, streamed };
}"""


def test_page_generates_the_greedy_tokens_of_onnxruntime(site, playwright):  # noqa: F811
  model = lm_models.build(lm_models.CONFIGS["tiny"], "q4")
  steps = 8
  want = ort_greedy(model, PROMPT, steps)
  browser = launch_chromium(playwright, lavapipe=True)
  try:
    with local_page(browser, service_workers="block") as page:
      boot(page, site.url("index.html?compat"))
      page.set_default_timeout(1_500_000)
      got = page.evaluate(GENERATE, [list(model.SerializeToString()), PROMPT, steps])
  finally:
    browser.close()
  assert got["device"] == "WEBGPU"
  assert got["tokens"] == want and got["streamed"] == want
