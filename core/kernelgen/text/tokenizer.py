"""Tokenizer: Hugging Face `tokenizer.json` files (BPE models) read and run in pure Python.

    tok = kg.text.Tokenizer.from_file("tokenizer.json")
    ids = tok.encode("def f(x):")        # [int, ...], special tokens added as the file says
    tok.decode(ids)                      # "def f(x):"
    stream = tok.decode_stream()         # text as ids arrive; incomplete UTF-8 is held back

Encoding runs the file's pipeline: added tokens split out, the normalizer, the pre-tokenizer,
the BPE model on each piece, the post-processor. Decoding maps ids to tokens and runs the
decoder. Byte-level BPE (GPT-2, Qwen2, Llama 3, SmolLM) and SentencePiece-style BPE with byte
fallback (Llama 2, TinyLlama) are covered; any other component is a TokenizerError naming it.
"""
from __future__ import annotations

import json

from ..errors import TokenizerError
from . import decoders, normalizers, pretokenizers, processors
from .added import AddedToken, Matcher
from .bpe import BPE


def _check_top(spec) -> None:
  if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
    raise TokenizerError("a tokenizer file is a JSON object with a \"model\" (Hugging Face "
                         "tokenizers' tokenizer.json); this one has none")
  kind = spec["model"].get("type", "BPE" if "merges" in spec["model"] else None)
  if kind != "BPE":
    raise TokenizerError(f"the tokenizer file's model is of type {kind!r}; kernelgen.text "
                         "implements BPE")
  for option in ("truncation", "padding"):
    if spec.get(option) is not None:
      raise TokenizerError(f"the tokenizer file sets {option!r}, which kernelgen.text does not "
                           f"implement: set it to null")


class Tokenizer:
  """A tokenizer read from a Hugging Face tokenizer.json (see the module docstring)."""

  def __init__(self, spec: dict):
    _check_top(spec)
    self.spec = spec
    self.model = BPE.from_spec(spec["model"])
    self.normalize = normalizers.build(spec.get("normalizer"))
    self.pre_tokenize = pretokenizers.build(spec.get("pre_tokenizer"))
    self.post_process = processors.build(spec.get("post_processor"))
    self.decoder = decoders.build(spec.get("decoder"))
    self.added = [AddedToken.from_spec(t) for t in spec.get("added_tokens") or []]
    self.id_to_added = {t.id: t for t in self.added}
    raw = [t for t in self.added if not t.normalized]
    normal = [t for t in self.added if t.normalized]
    self._raw = Matcher(raw, [t.content for t in raw])
    self._normal = Matcher(normal, [self.normalize(t.content) for t in normal])

  @classmethod
  def from_str(cls, text: str) -> "Tokenizer":
    """A Tokenizer from the text of a tokenizer.json; TokenizerError if it is not one."""
    try:
      spec = json.loads(text)
    except (json.JSONDecodeError, TypeError) as error:
      raise TokenizerError(f"a tokenizer file must be JSON: {error}") from None
    return cls(spec)

  @classmethod
  def from_file(cls, path) -> "Tokenizer":
    """A Tokenizer from a tokenizer.json file (a path)."""
    with open(path, encoding="utf-8") as f:
      return cls.from_str(f.read())

  def to_str(self) -> str:
    """The tokenizer.json text of this tokenizer (the object it was read from)."""
    return json.dumps(self.spec, ensure_ascii=False)

  @property
  def vocab_size(self) -> int:
    """The number of ids: the model's vocabulary and the added tokens."""
    return max(list(self.model.id_to_token) + list(self.id_to_added)) + 1

  def token_to_id(self, token: str) -> int | None:
    """The id of a token (added tokens first), or None."""
    for added in self.added:
      if added.content == token:
        return added.id
    return self.model.vocab.get(token)

  def id_to_token(self, id: int) -> str | None:
    """The token string of an id, or None."""
    added = self.id_to_added.get(id)
    return added.content if added else self.model.id_to_token.get(id)

  def _encode_one(self, text: str) -> list:
    ids, first = [], True
    for piece, token in self._raw.split(text):
      if token is not None:
        ids.append(token.id)
        first = False
        continue
      for part, token2 in self._normal.split(self.normalize(piece)):
        if token2 is not None:
          ids.append(token2.id)
        else:
          for word, _ in self.pre_tokenize([(part, first)]):
            ids.extend(self.model.tokenize(word))
        first = False
    return ids

  def encode(self, text: str, pair: str | None = None, add_special_tokens: bool = True) -> list:
    """The token ids of text (and of a second text, for pair templates), with the
    post-processor's special tokens unless add_special_tokens is False."""
    if not isinstance(text, str) or (pair is not None and not isinstance(pair, str)):
      raise TokenizerError(f"Tokenizer.encode takes str, not {type(text).__name__}")
    a = self._encode_one(text)
    b = self._encode_one(pair) if pair is not None else None
    if add_special_tokens:
      return self.post_process(a, b)
    return a + (b or [])

  def decode(self, ids, skip_special_tokens: bool = True) -> str:
    """The text of token ids, special tokens left out unless skip_special_tokens is False.
    Raises TokenizerError for an id the tokenizer does not have."""
    tokens = []
    for i in ids:
      token = self.id_to_token(int(i))
      if token is None:
        raise TokenizerError(f"token id {i} is not in this tokenizer "
                             f"(ids 0..{self.vocab_size - 1})")
      added = self.id_to_added.get(int(i))
      if skip_special_tokens and added is not None and added.special:
        continue
      tokens.append(token)
    return "".join(self.decoder(tokens))

  def decode_stream(self, skip_special_tokens: bool = True) -> "DecodeStream":
    """A DecodeStream over this tokenizer."""
    return DecodeStream(self, skip_special_tokens)


class DecodeStream:
  """Text as token ids arrive one by one: `step(id)` returns the new text ("" while the ids so
  far end inside a UTF-8 sequence or a token the decoder needs more context for); `flush()`
  returns what is still held back."""

  CONTEXT = 4   # at least this many ids (whole emitted chunks, so each starts a character) are
                # kept before the pending ones, so decoders that look at neighbours agree

  def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True):
    self.tokenizer, self.skip = tokenizer, skip_special_tokens
    self.context, self.pending, self.chunks = [], [], []

  def _new_text(self) -> str:
    decode = self.tokenizer.decode
    base = decode(self.context, self.skip)
    full = decode(self.context + self.pending, self.skip)
    if not full.startswith(base):
      return full   # the decoder rewrote the context (not for BPE decoders)
    return full[len(base):]

  def step(self, id: int) -> str:
    """Take one id; the text it completes ("" when it is held back)."""
    self.pending.append(int(id))
    text = self._new_text()
    if not text or text.endswith("\ufffd"):
      return ""
    self.chunks.append(self.pending)
    while len(self.chunks) > 1 and sum(map(len, self.chunks[1:])) >= self.CONTEXT:
      self.chunks.pop(0)
    self.context = [i for chunk in self.chunks for i in chunk]
    self.pending = []
    return text

  def flush(self) -> str:
    """The text still held back (incomplete UTF-8 shows as U+FFFD), and the stream reset."""
    text = self._new_text() if self.pending else ""
    self.context, self.pending, self.chunks = [], [], []
    return text
