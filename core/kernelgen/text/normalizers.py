"""Normalizers of Hugging Face tokenizer files: functions str -> str."""
from __future__ import annotations

import unicodedata

from .components import field, kind_of, replace_all, split_pattern, unsupported
from .pattern import is_whitespace

ROLE = "normalizer"


def _strip(spec: dict):
  left, right = field(spec, "strip_left", ROLE, True), field(spec, "strip_right", ROLE, True)

  def strip(text: str) -> str:
    start, end = 0, len(text)
    while left and start < end and is_whitespace(text[start]):
      start += 1
    while right and end > start and is_whitespace(text[end - 1]):
      end -= 1
    return text[start:end]
  return strip


def _prepend(spec: dict):
  prefix = field(spec, "prepend", ROLE, required=True)
  return lambda text: prefix + text if text else text


def _replace(spec: dict):
  pattern, content = split_pattern(spec, ROLE), field(spec, "content", ROLE, required=True)
  return lambda text: replace_all(pattern, text, content)


def _unicode(form: str):
  return lambda spec: (lambda text: unicodedata.normalize(form, text))


def _sequence(spec: dict):
  steps = [build(s) for s in field(spec, "normalizers", ROLE, required=True)]

  def run(text: str) -> str:
    for step in steps:
      text = step(text)
    return text
  return run


_BUILDERS = {"NFC": _unicode("NFC"), "NFD": _unicode("NFD"), "NFKC": _unicode("NFKC"),
             "NFKD": _unicode("NFKD"), "Lowercase": lambda spec: str.lower,
             "Strip": _strip, "Prepend": _prepend, "Replace": _replace, "Sequence": _sequence}


def build(spec: dict | None):
  """The normalizer a tokenizer file describes (None: the identity); TokenizerError naming a type
  kernelgen does not implement."""
  if spec is None:
    return lambda text: text
  kind = kind_of(spec, ROLE)
  if kind not in _BUILDERS:
    raise unsupported(ROLE, kind, _BUILDERS)
  return _BUILDERS[kind](spec)
