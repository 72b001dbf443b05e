"""The BPE model of a Hugging Face tokenizer file: a piece of text -> token ids.

Each character of a piece starts as its own token (an unknown character becomes byte-fallback
tokens `<0xXX>`, else the unk token, else is dropped); then adjacent pairs merge, always the pair
of lowest merge rank first (the leftmost among equal ranks), until no listed pair remains.
"""
from __future__ import annotations

import heapq

from ..errors import TokenizerError

ROLE = "model"


def _pairs(merges) -> list:
  """The merges list as (left, right) pairs: "a b" strings or [a, b] lists."""
  pairs = []
  for merge in merges:
    if isinstance(merge, str):
      parts = merge.split(" ")
    elif isinstance(merge, list) and all(isinstance(p, str) for p in merge):
      parts = merge
    else:
      parts = []
    if len(parts) != 2:
      raise TokenizerError(f"the tokenizer file's BPE merge {merge!r} is not a pair of tokens "
                           "(\"a b\" or [\"a\", \"b\"])")
    pairs.append(tuple(parts))
  return pairs


class BPE:
  """A BPE model: vocab {token: id}, merges [(left, right)] in rank order, and its options."""

  def __init__(self, vocab: dict, merges: list, unk_token: str | None = None,
               byte_fallback: bool = False, fuse_unk: bool = False, ignore_merges: bool = False):
    self.vocab = dict(vocab)
    self.id_to_token = {i: t for t, i in self.vocab.items()}
    self.unk_token, self.byte_fallback = unk_token, byte_fallback
    self.fuse_unk, self.ignore_merges = fuse_unk, ignore_merges
    self.ranks = {}
    for rank, (left, right) in enumerate(merges):
      for token in (left, right, left + right):
        if token not in self.vocab:
          raise TokenizerError(f"the tokenizer file's BPE merge {left!r} + {right!r} uses "
                               f"{token!r}, which is not in its vocab")
      self.ranks[(self.vocab[left], self.vocab[right])] = (rank, self.vocab[left + right])
    if unk_token is not None and unk_token not in self.vocab:
      raise TokenizerError(f"the tokenizer file's BPE unk_token {unk_token!r} is not in its vocab")
    self._cache: dict = {}

  @classmethod
  def from_spec(cls, spec: dict) -> "BPE":
    """The BPE model of a tokenizer file's "model" object."""
    for option in ("continuing_subword_prefix", "end_of_word_suffix", "dropout"):
      if spec.get(option):
        raise TokenizerError(f"the tokenizer file's BPE model sets {option}={spec[option]!r}, "
                             "which kernelgen.text does not implement")
    vocab = spec.get("vocab")
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
      raise TokenizerError("the tokenizer file's BPE model has no vocab {token: id}")
    return cls(vocab, _pairs(spec.get("merges") or []), spec.get("unk_token"),
               bool(spec.get("byte_fallback")), bool(spec.get("fuse_unk")),
               bool(spec.get("ignore_merges")))

  def tokenize(self, piece: str) -> list:
    """The token ids of one pre-tokenized piece."""
    ids = self._cache.get(piece)
    if ids is None:
      if self.ignore_merges and piece in self.vocab:
        ids = [self.vocab[piece]]
      else:
        ids = self._merge_all(self._initial(piece))
      if len(self._cache) < 100_000:
        self._cache[piece] = ids
    return list(ids)

  def _initial(self, piece: str) -> list:
    """The ids of the piece's characters before any merge (unknowns handled as the class says)."""
    ids, unk = [], None   # unk: the pending unknown run's id, or None
    for ch in piece:
      if ch in self.vocab:
        if unk is not None:
          ids.append(unk)
          unk = None
        ids.append(self.vocab[ch])
        continue
      if self.byte_fallback:
        names = [f"<0x{b:02X}>" for b in ch.encode("utf-8")]
        if all(n in self.vocab for n in names):
          ids.extend(self.vocab[n] for n in names)
          continue
      if self.unk_token is not None:
        if unk is not None and not self.fuse_unk:
          ids.append(unk)
        unk = self.vocab[self.unk_token]
    if unk is not None:
      ids.append(unk)
    return ids

  def _merge_all(self, ids: list) -> list:
    """Merge adjacent pairs by rank (lowest first, leftmost among equals) until none applies."""
    n = len(ids)
    nxt, prv, alive = list(range(1, n + 1)), list(range(-1, n - 1)), [True] * n
    heap = [(*self.ranks[p], i) for i, p in enumerate(zip(ids, ids[1:])) if p in self.ranks]
    heap = [(rank, i, new) for rank, new, i in heap]
    heapq.heapify(heap)
    while heap:
      rank, i, new = heapq.heappop(heap)
      j = nxt[i]
      if not alive[i] or j >= n or self.ranks.get((ids[i], ids[j]), (0, None))[1] != new:
        continue
      ids[i], alive[j] = new, False
      nxt[i] = nxt[j]
      if nxt[j] < n:
        prv[nxt[j]] = i
      if prv[i] >= 0 and (ids[prv[i]], new) in self.ranks:
        r, made = self.ranks[(ids[prv[i]], new)]
        heapq.heappush(heap, (r, prv[i], made))
      if nxt[i] < n and (new, ids[nxt[i]]) in self.ranks:
        r, made = self.ranks[(new, ids[nxt[i]])]
        heapq.heappush(heap, (r, i, made))
    return [t for t, keep in zip(ids, alive) if keep]
