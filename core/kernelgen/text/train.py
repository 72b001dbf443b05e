"""Our own byte-level BPE trainer: texts -> a Tokenizer in the GPT-2 layout.

    tok = kg.text.train_bpe(texts, vocab_size=2048)
    open("tokenizer.json", "w").write(tok.to_str())

Texts are pre-tokenized as GPT-2 does (its regex, then each UTF-8 byte as a printable
character); the vocabulary starts as the 256 byte characters and the special tokens, then grows
by merging, each round, the adjacent pair of tokens that occurs most often over all words (words
weighted by their counts; ties go to the pair whose merged text sorts first). Pair counts are
kept up to date incrementally: a merge only revisits the words that hold the pair.
"""
from __future__ import annotations

import collections
import heapq
import json

from ..errors import TokenizerError
from .components import byte_chars
from .pretokenizers import build as build_pre_tokenizer
from .tokenizer import Tokenizer

PRE_TOKENIZER = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": True}


def count_words(texts, pre_tokenize=None) -> collections.Counter:
  """{byte-level word: how often it occurs} over texts."""
  pre_tokenize = pre_tokenize or build_pre_tokenizer(PRE_TOKENIZER)
  counts = collections.Counter()
  for text in texts:
    counts.update(word for word, _ in pre_tokenize([(text, True)]))
  return counts


class _Pairs:
  """Pair counts with a lazy max-heap: entries are (-count, merged text, pair), stale ones are
  skipped when popped."""

  def __init__(self):
    self.count = collections.Counter()
    self.where = collections.defaultdict(set)   # pair -> indices of words that hold it
    self.heap = []

  def add(self, pair, n: int, word: int) -> None:
    self.count[pair] += n
    self.where[pair].add(word)

  def push(self, pair) -> None:
    if self.count[pair] > 0:
      heapq.heappush(self.heap, (-self.count[pair], pair[0] + pair[1], pair))

  def best(self):
    while self.heap:
      negative, _, pair = heapq.heappop(self.heap)
      if self.count[pair] == -negative and negative < 0:
        return pair
    return None


def _merge_word(symbols: list, pair) -> list:
  out, i = [], 0
  while i < len(symbols):
    if i + 1 < len(symbols) and symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
      out.append(pair[0] + pair[1])
      i += 2
    else:
      out.append(symbols[i])
      i += 1
  return out


def learn_merges(counts: dict, merges_wanted: int) -> list:
  """Up to merges_wanted merges [(left, right)] learned from {word: count}."""
  words = [list(w) for w in counts]
  weights = list(counts.values())
  pairs = _Pairs()
  for index, symbols in enumerate(words):
    for pair in zip(symbols, symbols[1:]):
      pairs.add(pair, weights[index], index)
  for pair in list(pairs.count):
    pairs.push(pair)
  merges = []
  while len(merges) < merges_wanted:
    pair = pairs.best()
    if pair is None:
      break
    merges.append(pair)
    touched = set()
    for index in list(pairs.where.pop(pair, ())):
      old = words[index]
      for p in zip(old, old[1:]):
        pairs.count[p] -= weights[index]
        touched.add(p)
      words[index] = new = _merge_word(old, pair)
      for p in zip(new, new[1:]):
        pairs.add(p, weights[index], index)
        touched.add(p)
    for p in touched:
      pairs.push(p)
  return merges


def train_bpe(texts, vocab_size: int = 2048, special_tokens=("<|endoftext|>",)) -> Tokenizer:
  """A byte-level BPE Tokenizer (GPT-2 layout) trained on an iterable of str: 256 byte tokens,
  then the special tokens, then vocab_size - 256 - len(special_tokens) merges (fewer if the
  texts run out of pairs). Raises TokenizerError for a vocab_size below 257 + specials."""
  special_tokens = list(special_tokens)
  room = vocab_size - 256 - len(special_tokens)
  if room < 1:
    raise TokenizerError(f"train_bpe(vocab_size={vocab_size}): a byte-level vocabulary needs "
                         f"256 byte tokens and {len(special_tokens)} special ones; ask for more")
  merges = learn_merges(count_words(texts), room)
  vocab = {c: i for i, c in enumerate(byte_chars())}
  added = []
  for token in special_tokens:
    added.append({"id": len(vocab), "content": token, "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": True})
    vocab[token] = len(vocab)
  for left, right in merges:
    vocab.setdefault(left + right, len(vocab))
  return Tokenizer(json.loads(json.dumps(gpt2_layout(vocab, merges, added))))


def gpt2_layout(vocab: dict, merges: list, added: list) -> dict:
  """A tokenizer.json object in the GPT-2 layout."""
  return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": None, "pre_tokenizer": dict(PRE_TOKENIZER),
          "post_processor": {"type": "ByteLevel", "add_prefix_space": False,
                             "trim_offsets": False, "use_regex": True},
          "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None,
                    "continuing_subword_prefix": None, "end_of_word_suffix": None,
                    "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                    "vocab": vocab, "merges": [[a, b] for a, b in merges]}}
