"""kg.text.train_bpe, our byte-level BPE trainer: the merges it learns on a hand-checkable corpus,
and its tokenizer.json read by the `tokenizers` package (identical ids, exact round trips)."""
import pytest

import kernelgen as kg
from tokenizer_corpus import corpus


def test_first_merges_follow_pair_counts():
  """"aaab" x3, "ab" x2 (one word each: no spaces): pairs aa:6, ab:5 -> merge a+a first; then
  the words are "aa a b" / "a b": ab:5, aa+a:3 -> merge a+b; then aa+ab:3."""
  tok = kg.text.train_bpe(["aaab"] * 3 + ["ab"] * 2, vocab_size=256 + 1 + 3)
  assert tok.spec["model"]["merges"] == [["a", "a"], ["a", "b"], ["aa", "ab"]]
  assert tok.encode("aaab") == [tok.token_to_id("aaab")]


def test_trained_tokenizer_agrees_with_the_tokenizers_package():
  tokenizers = pytest.importorskip("tokenizers")
  texts = corpus()
  ours = kg.text.train_bpe(texts, vocab_size=1200)
  assert ours.vocab_size == 1200
  oracle = tokenizers.Tokenizer.from_str(ours.to_str())
  for text in texts + ["<|endoftext|>def f():\n    return 1<|endoftext|>"]:
    ids = ours.encode(text)
    assert ids == oracle.encode(text).ids
    assert ours.decode(ids, skip_special_tokens=False) == text


def test_too_small_a_vocabulary_is_a_typed_error():
  with pytest.raises(kg.TokenizerError, match="256 byte tokens"):
    kg.text.train_bpe(["abc"], vocab_size=200)
