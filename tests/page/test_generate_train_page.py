"""The Generate demo's "Continue training in the page" (web/demos/generate_train.js, lm_train.py)
in headless Chromium: kernelgen boots in the worker, the committed model trains a few AdamW steps
on the standard library's source (two chunks: the loss plot gets two points), and the weights it
returns are written into the exported bundle: the bundle's logits are then numpy's forward pass
of those weights (not of the committed ones), and Generate writes with them."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from lm_reference import next_logits, numpy_weights
from test_demos import open_demo, site  # noqa: F401 (the site fixture)
from tools import REPO_ROOT

pytestmark = pytest.mark.timeout(1500)

LM = REPO_ROOT / "web" / "demos" / "lm"
if not (LM / "weights.safetensors").exists():
  pytest.skip("no committed language model (examples/train_lm.py writes it)",
              allow_module_level=True)

LOGITS = """async (ids) => {    // the bundle's cached decode step, token by token from empty
  const model = generateDemo.state.model;
  model.reset();
  let out = null;
  for (let i = 0; i < ids.length; i++) {
    out = await model.run({ ids: Int32Array.of(ids[i]), positions: Int32Array.of(i),
      temperature: Float32Array.of(0), seed: Int32Array.of(0) });
  }
  return Array.from(out.logits);
}"""


def test_training_in_the_page_updates_the_plot_and_the_bundle(site, chromium):  # noqa: F811
  manager, page = open_demo(chromium, site, "generate")
  try:
    page.fill("#prompt", "def main(")
    page.fill("#temperature", "0")
    page.fill("#max-tokens", "4")
    page.fill("#train-steps", "8")
    page.click("#train")
    page.wait_for_function("['stopped', 'failed'].includes(document.body.dataset.training)",
                           timeout=1_400_000)
    training = page.evaluate("({...generateDemo.training, weights: null, kg: null})")
    assert training["status"] == "stopped", (training["error"], page.inner_text("#train-info"))
    assert [p["step"] for p in training["history"]] == [4, 8]
    assert all(np.isfinite(p["loss"]) for p in training["history"])
    assert page.get_attribute("#train-plot", "data-points") == "2"
    assert "step 8 of 8" in page.inner_text("#train-info")
    page.wait_for_function("document.body.dataset.runs === '1' && "
                           "document.body.dataset.generating === 'false'")
    assert page.evaluate("document.body.dataset.trainedSteps") == "8"
    trained = page.evaluate("Object.fromEntries(Object.entries(generateDemo.training.weights)"
                            ".map(([k, v]) => [k, Array.from(v)]))")
    committed, config = numpy_weights(LM)
    new = {k: np.array(trained[k.replace(".", "_")], np.float32).reshape(v.shape)
           for k, v in committed.items()}
    assert max(float(np.abs(new[k] - committed[k]).max()) for k in new) > 1e-4
    ids = kg.text.Tokenizer.from_file(LM / "tokenizer.json").encode("import os\n")
    got = np.array(page.evaluate(LOGITS, ids))
    want, before = next_logits(new, config, ids), next_logits(committed, config, ids)
    assert np.abs(got - want).max() < 1e-3 * max(1.0, np.abs(want).max())
    assert np.abs(want - before).max() > 10 * np.abs(got - want).max()
    stats = page.evaluate("({...generateDemo.state.last})")
    assert stats["tokens"] >= 1 and page.inner_text("#output-new") == stats["text"]
    page.screenshot(path=str(REPO_ROOT / "tests" / "artifacts" / "generate_train.png"))
  finally:
    manager.__exit__(None, None, None)
