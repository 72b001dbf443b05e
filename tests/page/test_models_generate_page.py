"""The Models view opens a causal LM's Generate panel (web/models_generate.js): a tiny Optimum-
layout LM (bench/lm_models.py, fp32, its vocabulary widened to fit a byte-level tokenizer)
opened through the file input, plus a tokenizer.json trained here by kg.text.train_bpe, writes
from a prompt through kg.generate in the worker: the greedy tokens are onnxruntime's, the text
shown is the tokenizer's decode of them, tokens/s is reported; a bad tokenizer file is a
TokenizerError in the panel, and a model that is no LM shows no panel."""
from __future__ import annotations

import dataclasses

import pytest

import kernelgen as kg
from test_browser import app, site  # noqa: F401 (fixtures)
from test_generate import lm_models, ort_greedy
from test_models_page import STATE, open_model, tiny_model

pytest.importorskip("onnx")
pytestmark = pytest.mark.timeout(1200)

PANEL = "kgApp.models.generate.state"
TEXT = ["def add(a, b):\n    return a + b\n", "class Point:\n    def __init__(self, x):\n",
        "for i in range(10):\n    print(i)\n"] * 4


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
  """(model proto, its .onnx path, a fitting tokenizer, its tokenizer.json path)."""
  folder = tmp_path_factory.mktemp("lm")
  tok = kg.text.train_bpe(TEXT, vocab_size=300)
  model = lm_models.build(dataclasses.replace(lm_models.CONFIGS["tiny"], vocab=300), "fp32")
  (folder / "tiny_lm.onnx").write_bytes(model.SerializeToString())
  (folder / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
  return model, folder / "tiny_lm.onnx", tok, folder / "tokenizer.json"


def pick_tokenizer(page, name: str, data: bytes) -> None:
  before = int(page.evaluate("Number(document.querySelector('#model-generate').dataset"
                             ".tokenizerLoads || 0)"))
  page.set_input_files("#model-tokenizer", files=[{"name": name, "mimeType": "application/json",
                                                  "buffer": data}])
  page.wait_for_function("Number(document.querySelector('#model-generate').dataset"
                         f".tokenizerLoads || 0) > {before}")


def test_an_lm_opens_the_generate_panel_and_writes_onnxruntimes_tokens(app, lm):  # noqa: F811
  model, path, tok, tokenizer_path = lm
  if not app.is_visible("#models-view"):
    app.click("#models-tab")
  open_model(app, path)
  assert app.get_attribute("#models-view", "data-last") == "load", app.inner_text("#model-error")
  assert app.is_visible("#model-generate")
  assert app.is_disabled("#model-generate-run")      # no tokenizer yet
  pick_tokenizer(app, "tokenizer.json", b"{not json")
  assert app.inner_text("#model-tokenizer-error").startswith("TokenizerError: ")
  assert app.is_disabled("#model-generate-run")
  pick_tokenizer(app, "tokenizer.json", tokenizer_path.read_bytes())
  assert app.inner_text("#model-tokenizer-error") == ""
  assert "300 ids" in app.inner_text("#model-tokenizer-info")
  prompt = "def add(a, b):\n"
  app.fill("#model-prompt", prompt)
  app.fill("#model-temperature", "0")
  app.fill("#model-max-tokens", "6")
  app.click("#model-generate-run")
  app.wait_for_function("document.querySelector('#model-generate').dataset.runs === '1' && "
                        f"!{STATE}.busy", timeout=1_100_000)
  last = app.evaluate(f"({{...{PANEL}.last}})")
  assert not last.get("error"), last
  ids = tok.encode(prompt)
  end = tok.token_to_id("<|endoftext|>")
  want = ort_greedy(model, ids, 6)
  want = want[:want.index(end) + 1] if end in want else want
  assert last["tokens"] == want
  assert last["text"] == tok.decode(want)
  assert app.inner_text("#model-gen-output") == prompt + last["text"]
  assert "tokens/s" in app.inner_text("#model-gen-stats")


def test_a_model_that_is_no_lm_shows_no_panel(app, tmp_path):  # noqa: F811
  if not app.is_visible("#models-view"):
    app.click("#models-tab")
  (tmp_path / "tiny.onnx").write_bytes(tiny_model())
  open_model(app, tmp_path / "tiny.onnx")
  assert app.get_attribute("#models-view", "data-last") == "load"
  assert not app.is_visible("#model-generate")
