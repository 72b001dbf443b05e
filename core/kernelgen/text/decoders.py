"""Decoders of Hugging Face tokenizer files: a list of token strings -> a list of strings, joined
at the end."""
from __future__ import annotations

import re

from .components import char_bytes, field, kind_of, replace_all, split_pattern, unsupported

ROLE = "decoder"
_BYTE_TOKEN = re.compile(r"<0x(\+?[0-9A-Fa-f]{1,2})>")


def _byte_level(spec: dict):
  table = char_bytes()

  def run(tokens: list) -> list:
    data = bytearray()
    for token in tokens:
      if all(c in table for c in token):
        data.extend(table[c] for c in token)
      else:
        data.extend(token.encode("utf-8"))
    return [data.decode("utf-8", errors="replace")]
  return run


def _flush(pending: bytearray, out: list) -> None:
  if pending:
    try:
      out.append(pending.decode("utf-8"))
    except UnicodeDecodeError:
      out.extend("\ufffd" for _ in pending)
    pending.clear()


def _byte_fallback(spec: dict):
  def run(tokens: list) -> list:
    out, pending = [], bytearray()
    for token in tokens:
      match = _BYTE_TOKEN.fullmatch(token) if len(token) == 6 else None
      if match:
        pending.append(int(match.group(1), 16))
        continue
      _flush(pending, out)
      out.append(token)
    _flush(pending, out)
    return out
  return run


def _strip(spec: dict):
  content = field(spec, "content", ROLE, " ")
  start, stop = int(field(spec, "start", ROLE, 0)), int(field(spec, "stop", ROLE, 0))

  def one(token: str) -> str:
    head = 0
    while head < min(start, len(token)) and token[head] == content:
      head += 1
    tail = 0
    while tail < min(stop, len(token)) and token[len(token) - 1 - tail] == content:
      tail += 1
    # the reference keeps (UTF-8 length - cuts) characters after the head cut
    keep = max(0, len(token.encode("utf-8")) - head - tail)
    return token[head:head + keep]
  return lambda tokens: [one(t) for t in tokens]


def _replace(spec: dict):
  pattern, content = split_pattern(spec, ROLE), field(spec, "content", ROLE, required=True)
  return lambda tokens: [replace_all(pattern, t, content) for t in tokens]


def _metaspace(spec: dict):
  from .pretokenizers import prepend_scheme
  mark, scheme = field(spec, "replacement", ROLE, "\u2581"), prepend_scheme(spec)

  def run(tokens: list) -> list:
    out = []
    for i, token in enumerate(tokens):
      drop = i == 0 and scheme != "never"
      out.append("".join("" if c == mark and drop else " " if c == mark else c for c in token))
    return out
  return run


def _sequence(spec: dict):
  steps = [build(s) for s in field(spec, "decoders", ROLE, required=True)]

  def run(tokens: list) -> list:
    for step in steps:
      tokens = step(tokens)
    return tokens
  return run


_BUILDERS = {"ByteLevel": _byte_level, "ByteFallback": _byte_fallback,
             "Fuse": lambda spec: (lambda tokens: ["".join(tokens)]), "Strip": _strip,
             "Replace": _replace, "Metaspace": _metaspace, "Sequence": _sequence}


def build(spec: dict | None):
  """The decoder a tokenizer file describes (None: tokens joined by spaces, as the reference
  does); TokenizerError naming a type kernelgen does not implement."""
  if spec is None:
    return lambda tokens: [" ".join(tokens)]
  kind = kind_of(spec, ROLE)
  if kind not in _BUILDERS:
    raise unsupported(ROLE, kind, _BUILDERS)
  return _BUILDERS[kind](spec)
