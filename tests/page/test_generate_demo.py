"""The Generate demo (web/demos/generate.html) in headless Chromium on WebGPU: it boots on its
exported bundle with no Python, generates (greedy decoding gives the ids numpy's forward pass of
the committed weights predicts), streams text that is the tokenizer's decode of those ids,
reports tokens/s, stops on Stop, and shows a TokenizerError for a bad tokenizer.json."""
from __future__ import annotations

import json

import pytest

import kernelgen as kg
from lm_reference import next_logits, numpy_weights
from test_demos import open_demo, site  # noqa: F401 (the site fixture)
from tools import REPO_ROOT

pytestmark = pytest.mark.timeout(900)

LM = REPO_ROOT / "web" / "demos" / "lm"
if not (LM / "weights.safetensors").exists():
  pytest.skip("no committed language model (examples/train_lm.py writes it)",
              allow_module_level=True)


@pytest.fixture(scope="module")
def demo(site, chromium):  # noqa: F811
  manager, page = open_demo(chromium, site, "generate")
  yield page
  manager.__exit__(None, None, None)


def run_generate(page, prompt: str, tokens: int, temperature: float = 0.0) -> dict:
  page.fill("#prompt", prompt)
  page.fill("#max-tokens", str(tokens))
  page.fill("#temperature", str(temperature))
  return page.evaluate("() => generateDemo.generate().then((s) => ({...s}))")


def test_generate_boots_on_the_bundle(demo):
  assert demo.inner_text("#device") == "WEBGPU"
  assert "no Python" in demo.inner_text("#adapter")


def test_greedy_generation_matches_numpy(demo):
  """Temperature 0: each id is the argmax of numpy's logits for the window so far (a near-tie
  of the two best logits, within float32 noise, may pick either)."""
  prompt = "import os\n\ndef main("
  stats = run_generate(demo, prompt, 12)
  tok = kg.text.Tokenizer.from_file(LM / "tokenizer.json")
  w, config = numpy_weights(LM)
  ids = tok.encode(prompt)
  assert stats["tokens"] >= 1 and stats["ids"]
  for got in stats["ids"]:
    logits = next_logits(w, config, ids)
    best = int(logits.argmax())
    assert got == best or logits[best] - logits[got] < 1e-3 * max(1.0, abs(logits[best]))
    ids.append(got)
  assert stats["text"] == tok.decode(stats["ids"])
  assert demo.inner_text("#output-new") == stats["text"]
  assert float(demo.inner_text("#stat-rate")) > 0
  print(f"generate: {stats['tokens']} tokens in {stats['seconds']:.2f} s "
        f"({stats['tokens'] / stats['seconds']:.1f} tokens/s), GPU ms per token "
        f"{demo.inner_text('#stat-gpu')}")
  demo.screenshot(path=str(REPO_ROOT / "tests" / "artifacts" / "generate.png"))


def test_sampling_is_seeded(demo):
  demo.fill("#seed", "7")
  a = run_generate(demo, "class ", 8, temperature=0.9)
  b = run_generate(demo, "class ", 8, temperature=0.9)
  assert a["ids"] == b["ids"]


def test_stop_stops(demo):
  demo.fill("#prompt", "def ")
  demo.fill("#max-tokens", "100000")
  demo.fill("#temperature", "1.0")
  demo.uncheck("#stop-at-end")
  demo.click("#generate")
  demo.wait_for_function("Number(document.body.dataset.tokens || 0) >= 3 && "
                         "document.body.dataset.generating === 'true'")
  demo.click("#stop")
  demo.wait_for_function("document.body.dataset.generating === 'false'")
  stats = demo.evaluate("({...generateDemo.state.last})")
  assert stats["stopped"] and 3 <= stats["tokens"] < 100000
  demo.wait_for_timeout(500)
  assert demo.evaluate("generateDemo.state.last.tokens") == stats["tokens"]
  assert demo.get_attribute("#stop", "disabled") is not None


@pytest.mark.parametrize("bad, message", [
  (b"{not json", "TokenizerError: a tokenizer file must be JSON"),
  (json.dumps({"model": {"type": "WordPiece", "vocab": {}}}).encode(), "TokenizerError: "),
])
def test_bad_tokenizer_file_is_a_typed_error(demo, bad, message):
  before = int(demo.evaluate("Number(document.body.dataset.tokenizerLoads || 0)"))
  demo.set_input_files("#tokenizer-file", files=[{"name": "tokenizer.json",
                                                  "mimeType": "application/json",
                                                  "buffer": bad}])
  demo.wait_for_function(f"Number(document.body.dataset.tokenizerLoads || 0) > {before}")
  assert demo.inner_text("#tokenizer-error").startswith(message)
  assert "WordPiece" in demo.inner_text("#tokenizer-error") or b"not json" in bad
