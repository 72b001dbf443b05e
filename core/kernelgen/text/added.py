"""Added tokens of a Hugging Face tokenizer file: strings matched whole before the model runs.

Tokens marked "normalized": false are found in the raw text; the rest in each normalized piece
(their own text normalized the same way). Among matches the leftmost wins, the longest among
those starting at the same place; lstrip / rstrip take the whitespace beside a match with it,
single_word only matches between non-word characters.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import TokenizerError
from .pattern import is_whitespace


@dataclass(frozen=True)
class AddedToken:
  """One entry of the file's added_tokens."""
  id: int              # its id (the model's id when the model's vocab has the text too)
  content: str         # the text it matches
  special: bool        # skipped by decode(skip_special_tokens=True)
  normalized: bool     # matched in normalized text (True) or in the raw text (False)
  lstrip: bool = False
  rstrip: bool = False
  single_word: bool = False

  @classmethod
  def from_spec(cls, spec: dict) -> "AddedToken":
    """An AddedToken from its JSON object; TokenizerError when id or content is missing."""
    if not isinstance(spec.get("id"), int) or not isinstance(spec.get("content"), str):
      raise TokenizerError(f"the tokenizer file's added token {spec!r} lacks an id or content")
    return cls(spec["id"], spec["content"], bool(spec.get("special")),
               bool(spec.get("normalized", not spec.get("special"))), bool(spec.get("lstrip")),
               bool(spec.get("rstrip")), bool(spec.get("single_word")))


def _is_word(ch: str) -> bool:
  return ch.isalnum() or ch == "_"


class Matcher:
  """Finds a set of added tokens in text (leftmost, then longest)."""

  def __init__(self, tokens: list, texts: list):
    self.by_text = {}
    for token, text in zip(tokens, texts):
      self.by_text.setdefault(text, token)
    ordered = sorted((t for t in self.by_text if t), key=len, reverse=True)
    self.regex = re.compile("|".join(map(re.escape, ordered))) if ordered else None

  def split(self, text: str) -> list:
    """[(piece, AddedToken or None)] covering text, empty pieces dropped."""
    if self.regex is None or not text:
      return [(text, None)] if text else []
    out, done = [], 0
    for match in self.regex.finditer(text):
      token, start, stop = self.by_text[match.group()], match.start(), match.end()
      if token.single_word and ((start and _is_word(text[start - 1]))
                                or (stop < len(text) and _is_word(text[stop]))):
        continue
      if token.lstrip:
        while start > done and is_whitespace(text[start - 1]):
          start -= 1
      if token.rstrip:
        while stop < len(text) and is_whitespace(text[stop]):
          stop += 1
      if start < done:
        continue
      if done < start:
        out.append((text[done:start], None))
      out.append((text[start:stop], token))
      done = stop
    if done < len(text):
      out.append((text[done:], None))
    return out
