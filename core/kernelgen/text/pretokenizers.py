"""Pre-tokenizers of Hugging Face tokenizer files.

A pre-tokenizer maps a list of pieces to a list of pieces; a piece is (text, at_start), at_start
saying whether the piece begins at the start of the encoded text (Metaspace's "first" scheme
asks). The model then tokenizes each piece on its own.
"""
from __future__ import annotations

import unicodedata

from ..errors import TokenizerError
from .components import field, find_matches, kind_of, split_pattern, to_byte_chars, unsupported
from .pattern import is_whitespace, translate

ROLE = "pre_tokenizer"
GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


def _merge(matches: list, behavior: str) -> list:
  """Apply a split behavior to [(start, end, is_match)]: the spans of the resulting pieces."""
  if behavior == "Removed":
    return [(s, e) for s, e, m in matches if not m]
  if behavior == "Isolated":
    return [(s, e) for s, e, _ in matches]
  order = matches[::-1] if behavior == "MergedWithNext" else matches
  spans, previous = [], False
  for start, end, is_match in order:
    if behavior == "Contiguous":
      join = is_match == previous
    else:
      join = is_match and not previous
    if join and spans:
      last = spans[-1]
      spans[-1] = (start, last[1]) if behavior == "MergedWithNext" else (last[0], end)
    else:
      spans.append((start, end))
    previous = is_match
  return spans[::-1] if behavior == "MergedWithNext" else spans


def split_pieces(pieces: list, pattern, behavior: str, invert: bool = False) -> list:
  """Each piece split by pattern (a split_pattern, or ("chars", predicate): each matching
  character one match) under behavior; empty pieces dropped."""
  out = []
  for text, at_start in pieces:
    matches = find_matches(pattern, text)
    if invert:
      matches = [(s, e, not m) for s, e, m in matches]
    out.extend((text[s:e], at_start and s == 0) for s, e in _merge(matches, behavior) if e > s)
  return out


def _behavior(spec: dict) -> str:
  behavior = field(spec, "behavior", ROLE, "Isolated")
  if behavior not in BEHAVIORS:
    raise TokenizerError(f"the tokenizer file's Split has behavior {behavior!r}; "
                         f"kernelgen knows {', '.join(BEHAVIORS)}")
  return behavior


def _split(spec: dict):
  pattern, behavior = split_pattern(spec, ROLE), _behavior(spec)
  invert = bool(field(spec, "invert", ROLE, False))
  return lambda pieces: split_pieces(pieces, pattern, behavior, invert)


def _byte_level(spec: dict):
  prefix = bool(field(spec, "add_prefix_space", ROLE, True))
  regex = ("regex", translate(GPT2_PATTERN)) if field(spec, "use_regex", ROLE, True) else None

  def run(pieces: list) -> list:
    if prefix:
      pieces = [(t if t.startswith(" ") else " " + t, a) for t, a in pieces]
    if regex:
      pieces = split_pieces(pieces, regex, "Isolated")
    return [(to_byte_chars(t), a) for t, a in pieces]
  return run


def prepend_scheme(spec: dict) -> str:
  """Metaspace's prepend scheme (always, first, never), from prepend_scheme or the older
  add_prefix_space."""
  if "prepend_scheme" in spec and spec["prepend_scheme"] is not None:
    scheme = spec["prepend_scheme"]
  else:
    scheme = "always" if field(spec, "add_prefix_space", ROLE, True) else "never"
  if scheme not in ("always", "first", "never"):
    raise TokenizerError(f"the tokenizer file's Metaspace has prepend_scheme {scheme!r}; "
                         "kernelgen knows always, first, never")
  return scheme


def _metaspace(spec: dict):
  mark = field(spec, "replacement", ROLE, "\u2581")
  scheme, split = prepend_scheme(spec), bool(field(spec, "split", ROLE, True))

  def run(pieces: list) -> list:
    out = []
    for text, at_start in pieces:
      text = text.replace(" ", mark)
      wanted = scheme == "always" or (scheme == "first" and at_start)
      if wanted and not text.startswith(mark):
        text = mark + text
      out.append((text, at_start))
    return split_pieces(out, ("string", mark), "MergedWithNext") if split else out
  return run


def _digits(spec: dict):
  each = bool(field(spec, "individual_digits", ROLE, False))
  numeric = ("chars", lambda c: unicodedata.category(c)[0] == "N")
  return lambda pieces: split_pieces(pieces, numeric, "Isolated" if each else "Contiguous")


def _whitespace_split(spec: dict):
  return lambda pieces: split_pieces(pieces, ("chars", is_whitespace), "Removed")


def _whitespace(spec: dict):
  words = ("regex", translate(r"\w+|[^\w\s]+"))
  return lambda pieces: split_pieces(pieces, words, "Removed", invert=True)


def _sequence(spec: dict):
  steps = [build(s) for s in field(spec, "pretokenizers", ROLE, required=True)]

  def run(pieces: list) -> list:
    for step in steps:
      pieces = step(pieces)
    return pieces
  return run


_BUILDERS = {"ByteLevel": _byte_level, "Split": _split, "Metaspace": _metaspace,
             "Digits": _digits, "WhitespaceSplit": _whitespace_split, "Whitespace": _whitespace,
             "Sequence": _sequence}


def build(spec: dict | None):
  """The pre-tokenizer a tokenizer file describes (None: each piece stays whole);
  TokenizerError naming a type kernelgen does not implement."""
  if spec is None:
    return lambda pieces: pieces
  kind = kind_of(spec, ROLE)
  if kind not in _BUILDERS:
    raise unsupported(ROLE, kind, _BUILDERS)
  return _BUILDERS[kind](spec)
