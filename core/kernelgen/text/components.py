"""Shared helpers of the tokenizer components: reading a component's JSON, byte-level characters."""
from __future__ import annotations

import functools

from ..errors import TokenizerError
from .pattern import translate


def kind_of(spec: dict, role: str) -> str:
  """The "type" of a component's JSON object; TokenizerError when it is missing."""
  if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
    raise TokenizerError(f"the tokenizer file's {role} is not an object with a \"type\": {spec!r}")
  return spec["type"]


def unsupported(role: str, kind: str, known) -> TokenizerError:
  """The error for a component kernelgen does not implement."""
  return TokenizerError(f"the tokenizer file's {role} is of type {kind!r}, which kernelgen.text "
                        f"does not implement (it reads {', '.join(sorted(known))})")


def field(spec: dict, name: str, role: str, default=None, required: bool = False):
  """spec[name], or default; TokenizerError when a required field is missing."""
  if name not in spec or spec[name] is None:
    if required:
      raise TokenizerError(f"the tokenizer file's {role} {spec.get('type')!r} lacks {name!r}")
    return default
  return spec[name]


def split_pattern(spec: dict, role: str):
  """A {"String": s} or {"Regex": r} pattern as ("string", s) or ("regex", compiled)."""
  pattern = field(spec, "pattern", role, required=True)
  if isinstance(pattern, dict) and isinstance(pattern.get("String"), str):
    return ("string", pattern["String"])
  if isinstance(pattern, dict) and isinstance(pattern.get("Regex"), str):
    return ("regex", translate(pattern["Regex"]))
  raise TokenizerError(f"the tokenizer file's {role} has a pattern that is neither "
                       f"{{\"String\": ...}} nor {{\"Regex\": ...}}: {pattern!r}")


def replace_all(pattern, text: str, content: str) -> str:
  """Every match of a split_pattern in text replaced by content."""
  kind, value = pattern
  if kind == "string":
    return text.replace(value, content) if value else text
  return value.sub(lambda m: content, text)


def find_matches(pattern, text: str) -> list:
  """[(start, end, is_match)] covering text: the matches of a split_pattern (or of ("chars",
  predicate): each character it accepts is one match) and the text between them."""
  kind, value = pattern
  if not text:
    return [(0, 0, False)]
  if kind == "chars":
    spans = [(i, i + 1) for i, c in enumerate(text) if value(c)]
  elif kind == "string":
    spans, at = [], text.find(value) if value else -1
    while at >= 0:
      spans.append((at, at + len(value)))
      at = text.find(value, at + len(value))
  else:
    spans = [m.span() for m in value.finditer(text)]
  pieces, prev = [], 0
  for start, end in spans:
    if prev != start:
      pieces.append((prev, start, False))
    pieces.append((start, end, True))
    prev = end
  if prev != len(text):
    pieces.append((prev, len(text), False))
  return pieces


@functools.lru_cache(maxsize=1)
def byte_chars() -> tuple:
  """The byte-level alphabet: byte b -> the printable character that stands for it (bytes that
  print as themselves keep their character; the rest take U+0100 onwards, in order)."""
  keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
  chars, extra = [], 0
  for b in range(256):
    if b in keep:
      chars.append(chr(b))
    else:
      chars.append(chr(0x100 + extra))
      extra += 1
  return tuple(chars)


@functools.lru_cache(maxsize=1)
def char_bytes() -> dict:
  """The inverse of byte_chars: character -> byte."""
  return {c: b for b, c in enumerate(byte_chars())}


def to_byte_chars(text: str) -> str:
  """text's UTF-8 bytes, each as its byte-level character."""
  table = byte_chars()
  return "".join(table[b] for b in text.encode("utf-8"))
