"""web/demos/tokenizer.js (the Generate demo's tokenizer, no Python in the page) under Node,
against kernelgen.text on the tokenizer corpus: identical ids and decodes for byte-level BPE
files (trained here by the `tokenizers` package and by kg.text.train_bpe) and SentencePiece-style
files with byte fallback (Llama 2 and Metaspace layouts), the stream decoder's text equal to the
decode, files with no decoder as the `tokenizers` package decodes them, and TokenizerErrors
naming what it does not read."""
import json
import shutil
import subprocess

import pytest

import kernelgen as kg
from tokenizer_corpus import corpus
from tools import REPO_ROOT

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="needs node")

SCRIPT = """
import { Tokenizer } from '%s';
import { readFileSync } from 'node:fs';
const { files, texts } = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const out = files.map((file) => {
  try {
    const tok = Tokenizer.fromString(file);
    return texts.map((t) => {
      const ids = tok.encode(t);
      const stream = tok.decodeStream({ skipSpecialTokens: false });
      const pieces = ids.map((id) => stream.step(id));
      const streamed = pieces.join('') + stream.flush();
      const kept = tok.decode(ids, { skipSpecialTokens: false });
      return [ids, tok.decode(ids), streamed, pieces, kept];
    });
  } catch (error) {
    return { error: error.name, message: error.message };
  }
});
process.stdout.write(JSON.stringify(out));
""" % (REPO_ROOT / "web" / "demos" / "tokenizer.js").as_uri()


def run_js(tmp_path, files: list, texts: list) -> list:
  (tmp_path / "run.mjs").write_text(SCRIPT)
  (tmp_path / "in.json").write_text(json.dumps({"files": files, "texts": texts}))
  done = subprocess.run([NODE, str(tmp_path / "run.mjs"), str(tmp_path / "in.json")],
                        capture_output=True, text=True, timeout=300, check=True)
  return json.loads(done.stdout)


def test_js_tokenizer_agrees_with_python(tmp_path):
  import test_tokenizer as families
  files = [families.gpt2().to_str(), families.llama3().to_str(), families.qwen2().to_str(),
           families.smollm().to_str(), kg.text.train_bpe(corpus(), vocab_size=1000).to_str(),
           json.dumps(families.gpt2_layout()), families.llama2().to_str(),
           families.metaspace().to_str(), json.dumps(families.llama2_layout())]
  texts = corpus()
  results = run_js(tmp_path, files, texts)
  for file, result in zip(files, results):
    ours = kg.text.Tokenizer.from_str(file)
    assert not isinstance(result, dict), result
    for text, (ids, decoded, streamed, *_) in zip(texts, result):
      assert ids == ours.encode(text), text[:80]
      assert decoded == ours.decode(ids)
      assert streamed == ours.decode(ids, skip_special_tokens=False)


def test_js_tokenizer_with_no_decoder_agrees_with_tokenizers(tmp_path):
  """Files with decoder null (byte-level and SentencePiece-style, trained by the `tokenizers`
  package): the ids, both decodes and each streamed piece are that package's (tokens joined by
  spaces; its DecodeStream step by step)."""
  tokenizers = pytest.importorskip("tokenizers")
  import test_tokenizer as families
  oracles = [make() for make in families.NO_DECODER.values()]
  texts = corpus()
  results = run_js(tmp_path, [o.to_str() for o in oracles], texts)
  for oracle, result in zip(oracles, results):
    assert not isinstance(result, dict), result
    for text, (ids, decoded, streamed, pieces, kept) in zip(texts, result):
      assert ids == oracle.encode(text).ids, text[:80]
      assert decoded == oracle.decode(ids)
      assert kept == streamed == oracle.decode(ids, skip_special_tokens=False)
      theirs = tokenizers.decoders.DecodeStream(skip_special_tokens=False)
      assert pieces == [theirs.step(oracle, i) or "" for i in ids], text[:80]


def test_js_tokenizer_rejects_what_it_does_not_read(tmp_path):
  import test_tokenizer as families
  llama2 = json.loads(families.llama2().to_str())
  bert = dict(llama2, normalizer={"type": "BertNormalizer"})
  wordpiece = dict(llama2, decoder={"type": "Sequence", "decoders": [{"type": "WordPiece"}]})
  bad = ["{", json.dumps({"model": {"type": "Unigram", "vocab": []}}), json.dumps(bert),
         json.dumps(wordpiece)]
  results = run_js(tmp_path, bad, ["x"])
  assert [r["error"] for r in results] == ["TokenizerError"] * 4
  assert "JSON" in results[0]["message"] and "Unigram" in results[1]["message"]
  assert "BertNormalizer" in results[2]["message"] and "WordPiece" in results[3]["message"]
