"""The Models view opens a causal LM's Generate panel (web/models_generate.js): a tiny Optimum-
layout LM (bench/lm_models.py, fp32, its vocabulary widened to fit a byte-level tokenizer)
opened through the file input, plus a tokenizer.json trained here by kg.text.train_bpe, writes
from a prompt through kg.generate in the worker: the greedy tokens are onnxruntime's, the text
shown is the tokenizer's decode of them, tokens/s is reported; a bad tokenizer file is a
TokenizerError in the panel, and a model that is no LM shows no panel. SentencePiece-style
tokenizers (Llama 2 and Metaspace layouts with byte fallback, trained here by the `tokenizers`
package) give that package's ids and decodes in the panel over the varied tokenizer corpus, round
trip exactly, and a Llama 2-layout LM writes onnxruntime's tokens; a file using a part the page
does not read names it. Stop ends a generation, the page stays usable with the prompt kept, and a
second Generate writes without reopening the model, also where Stop restarted Python."""
from __future__ import annotations

import dataclasses

import pytest

import kernelgen as kg
from browser_util import StaticServer, local_page
from test_browser import app, boot, site  # noqa: F401 (fixtures)
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


# ---- SentencePiece-style tokenizers (Llama 2 / TinyLlama layouts) in the panel ----

PAGE_TOKENIZE = """(texts) => {
  const tok = kgApp.models.generate.state.tokenizer;
  return texts.map((t) => {
    const ids = tok.encode(t);
    const bare = tok.encode(t, { addSpecialTokens: false });
    return [ids, tok.decode(ids, { skipSpecialTokens: false }), tok.decode(ids),
            tok.decode(bare, { skipSpecialTokens: false })];
  });
}"""


def sp_families() -> dict:
  """The `tokenizers` package's trainer on the tokenizer corpus: Llama 2's layout (Prepend and
  Replace normalizers, byte fallback, Replace/ByteFallback/Fuse/Strip decoders, a BOS template)
  and the Metaspace layout (pre-tokenizer and decoder)."""
  import test_tokenizer as families
  return {"llama2": families.llama2(), "metaspace": families.metaspace()}


@pytest.fixture(scope="module")
def sp_lm(tmp_path_factory):
  """(families {name: the `tokenizers` oracle}, the model proto, its .onnx path): an LM whose
  vocabulary fits the largest of them."""
  pytest.importorskip("tokenizers")
  folder = tmp_path_factory.mktemp("sp_lm")
  oracles = sp_families()
  vocab = max(o.get_vocab_size(with_added_tokens=True) for o in oracles.values())
  model = lm_models.build(dataclasses.replace(lm_models.CONFIGS["tiny"], vocab=vocab), "fp32")
  (folder / "sp_lm.onnx").write_bytes(model.SerializeToString())
  return oracles, model, folder / "sp_lm.onnx"


def round_trips(family: str, text: str) -> bool:
  """Whether decode(encode(text)) is the text for this family, as test_tokenizer's round trip
  says: Llama 2's normalizer also prefixes the text after a special token, the Metaspace decoder
  drops the ▁ of the first token's leading spaces (in the `tokenizers` package too)."""
  if family == "llama2":
    return not any(s in text for s in ("<s>", "</s>", "<unk>"))
  return not text.startswith(" ")


def test_sentencepiece_tokenizers_in_the_panel_agree_with_tokenizers(app, sp_lm):  # noqa: F811
  from tokenizer_corpus import corpus
  oracles, _, path = sp_lm
  if not app.is_visible("#models-view"):
    app.click("#models-tab")
  open_model(app, path)
  assert app.get_attribute("#models-view", "data-last") == "load", app.inner_text("#model-error")
  texts = corpus()
  for family, oracle in oracles.items():
    pick_tokenizer(app, f"{family}.json", oracle.to_str().encode())
    assert app.inner_text("#model-tokenizer-error") == "", family
    results = app.evaluate(PAGE_TOKENIZE, texts)
    compared = 0
    for text, (ids, decoded, skipped, bare) in zip(texts, results):
      assert ids == oracle.encode(text).ids, (family, text[:80])
      assert decoded == oracle.decode(ids, skip_special_tokens=False), (family, text[:80])
      assert skipped == oracle.decode(ids), (family, text[:80])
      if round_trips(family, text):
        assert bare == text, (family, text[:80])
      compared += len(ids)
    print(f"{family}: {len(texts)} texts, {compared} tokens identical to the tokenizers package")


def test_a_sentencepiece_lm_writes_onnxruntimes_tokens(app, sp_lm):  # noqa: F811
  """Greedy tokens after a Llama 2-layout prompt (<s> first) are onnxruntime's, stopping at </s>;
  the text shown is the prompt plus what the tokens add to it (the space before a word kept)."""
  oracles, model, path = sp_lm
  oracle = oracles["llama2"]
  if not app.is_visible("#models-view"):
    app.click("#models-tab")
  if not app.is_visible("#model-generate"):
    open_model(app, path)
  pick_tokenizer(app, "tokenizer.json", oracle.to_str().encode())
  runs = int(app.evaluate(f"{PANEL}.runs"))
  prompt = "The quick brown fox"
  app.fill("#model-prompt", prompt)
  app.fill("#model-temperature", "0")
  app.fill("#model-max-tokens", "6")
  app.click("#model-generate-run")
  app.wait_for_function(f"{PANEL}.runs === {runs + 1} && !{STATE}.busy", timeout=1_100_000)
  last = app.evaluate(f"({{...{PANEL}.last}})")
  assert not last.get("error"), last
  ids = oracle.encode(prompt).ids
  assert ids[0] == oracle.token_to_id("<s>")
  end = oracle.token_to_id("</s>")
  want = ort_greedy(model, ids, 6)
  want = want[:want.index(end) + 1] if end in want else want
  assert last["tokens"] == want
  assert app.inner_text("#model-gen-output") == oracle.decode(ids + want)


def test_a_tokenizer_using_something_else_names_it_in_the_panel(app, sp_lm):  # noqa: F811
  import json
  oracles, _, path = sp_lm
  if not app.is_visible("#models-view"):
    app.click("#models-tab")
  if not app.is_visible("#model-generate"):
    open_model(app, path)
  spec = json.loads(oracles["llama2"].to_str())
  spec["decoder"]["decoders"].append({"type": "CTC", "pad_token": "<pad>"})
  pick_tokenizer(app, "tokenizer.json", json.dumps(spec).encode())
  error = app.inner_text("#model-tokenizer-error")
  assert error.startswith("TokenizerError: ") and '"CTC"' in error, error
  assert app.is_disabled("#model-generate-run")


# ---- Stop in the panel ----

@pytest.fixture(scope="module")
def long_lm(tmp_path_factory):
  """(its .onnx path, a tokenizer.json with no end-of-text token, so only Stop or the token
  limit ends a generation): a tiny LM with room for 2048 positions."""
  folder = tmp_path_factory.mktemp("long_lm")
  tok = kg.text.train_bpe(TEXT, vocab_size=300)
  config = dataclasses.replace(lm_models.CONFIGS["tiny"], vocab=300, max_positions=2048)
  (folder / "long_lm.onnx").write_bytes(lm_models.build(config, "fp32").SerializeToString())
  text = tok.to_str().replace("<|endoftext|>", "<|unused|>")
  (folder / "tokenizer.json").write_text(text, encoding="utf-8")
  return folder / "long_lm.onnx", folder / "tokenizer.json"


def start_generating(app, limit: int) -> int:
  """Click Generate and wait for 3 tokens; the panel's run count before."""
  runs = int(app.evaluate(f"{PANEL}.runs"))
  app.fill("#model-max-tokens", str(limit))
  app.click("#model-generate-run")
  app.wait_for_function(f"({PANEL}.last?.tokens.length ?? 0) >= 3 && {STATE}.busy",
                        timeout=1_100_000)
  return runs


def stop_and_generate_again(app, long_lm) -> str:
  """Stop ends the generation where it is (well short of the limit, no token after it), the
  page stays usable (its header and the Models view ready), the panel stays open with the prompt
  kept, and a second Generate, with no reopening, writes onnxruntime's tokens (where Stop
  restarted Python the panel gives the model to the new Python). Returns how Stop stopped
  (interrupted, restarted)."""
  path, tokenizer_path = long_lm
  if not app.is_visible("#models-view"):
    app.click("#models-tab")
  open_model(app, path)
  pick_tokenizer(app, "tokenizer.json", tokenizer_path.read_bytes())
  prompt = "class Point:\n    def "
  app.fill("#model-prompt", prompt)
  app.fill("#model-temperature", "1")
  runs = start_generating(app, 1900)
  at_click = int(app.evaluate(f"{PANEL}.last.tokens.length"))
  app.click("#stop")
  app.wait_for_function(f"{PANEL}.runs === {runs + 1} && !{STATE}.busy && "
                        "document.body.dataset.ready === 'true'")
  stopped = app.evaluate(f"({{...{PANEL}.last}})")
  how = app.evaluate("kgApp.models.state.app.lastStop().how")
  print(f"Stop: {at_click} tokens at the click, {len(stopped['tokens'])} when it ended ({how})")
  assert stopped["error"]["type"] == "Stopped", stopped
  assert 3 <= len(stopped["tokens"]) < 1900
  app.wait_for_timeout(1000)   # tokens after a Stop would show up here
  assert int(app.evaluate(f"{PANEL}.last.tokens.length")) == len(stopped["tokens"])
  assert app.input_value("#model-prompt") == prompt
  assert app.get_attribute("#stop", "disabled") is not None
  assert "Stopped by you" in app.inner_text("#model-error")
  if how != "interrupted":     # a restarted Python forgot the model: the view says so
    assert "gives it to Python again" in app.inner_text("#model-error")
    assert app.inner_text("#model-info") == ""
  assert app.is_visible("#model-generate") and not app.is_disabled("#model-generate-run")
  assert app.input_value("#model-prompt") == prompt
  runs = int(app.evaluate(f"{PANEL}.runs"))
  app.fill("#model-temperature", "0")
  app.fill("#model-max-tokens", "4")
  app.click("#model-generate-run")
  app.wait_for_function(f"{PANEL}.runs === {runs + 1} && !{STATE}.busy", timeout=1_100_000)
  last = app.evaluate(f"({{...{PANEL}.last}})")
  assert not last.get("error"), last
  tok = kg.text.Tokenizer.from_file(str(tokenizer_path))
  assert last["tokens"] == ort_greedy(lm_models.build(dataclasses.replace(
    lm_models.CONFIGS["tiny"], vocab=300, max_positions=2048), "fp32"), tok.encode(prompt), 4)
  assert app.inner_text("#model-gen-output") == prompt + last["text"]
  return how


def test_stop_ends_a_generation_and_the_panel_generates_again(app, long_lm):  # noqa: F811
  """On a page that is not cross-origin isolated Stop restarts Python: the view forgets the
  model's facts and kernels, but the Generate panel stays open with its prompt and tokenizer, and
  its next Generate reads the model's file again for the new Python (no reopening)."""
  assert stop_and_generate_again(app, long_lm) == "restarted"


def test_stop_on_an_isolated_page_keeps_the_model(site, chromium, long_lm):  # noqa: F811
  """Cross-origin isolated, Stop raises KeyboardInterrupt in the worker's Python in place (a
  restart where that does not end it within the page's grace time): the panel stays open with
  the model loaded, and the next Generate needs no reopening."""
  headers = {"Cross-Origin-Opener-Policy": "same-origin",
             "Cross-Origin-Embedder-Policy": "require-corp"}
  with StaticServer(site.directory, headers=headers) as isolated, \
       local_page(chromium, viewport={"width": 1440, "height": 900},
                  service_workers="block") as page:
    boot(page, isolated.url("index.html"))
    assert page.evaluate("crossOriginIsolated && kgApp.state.kg.info.interrupt !== null")
    print(f"isolated page: Stop {stop_and_generate_again(page, long_lm)}")
