"""Oniguruma-style regular expressions (the ones Hugging Face tokenizer files carry) as Python `re`
patterns.

Python's `re` has no `\\p{L}` classes, and its `\\s`, `\\w` differ from Oniguruma's on a few
characters (Python counts U+001C..U+001F as whitespace; Oniguruma does not). `translate` rewrites
`\\p{..}`, `\\P{..}`, `\\s`, `\\S`, `\\w`, `\\W`, `\\d`, `\\D` into explicit character classes built
from `unicodedata` general categories, with Oniguruma's definitions:

    \\s  U+0009..U+000D, U+0085 and the categories Zs, Zl, Zp
    \\w  the categories L*, M*, Nd and Pc
    \\d  the category Nd
"""
from __future__ import annotations

import functools
import re
import unicodedata

from ..errors import TokenizerError

# Planes 4..13 hold no assigned characters, 15..16 only private use (Co): scanning the rest finds
# every category but Co and Cn.
_SCANNED = (range(0, 0x40000), range(0xE0000, 0xE1000))
_CATEGORIES = {"L": ("Lu", "Ll", "Lt", "Lm", "Lo"), "M": ("Mn", "Mc", "Me"),
               "N": ("Nd", "Nl", "No"), "P": ("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"),
               "S": ("Sm", "Sc", "Sk", "So"), "Z": ("Zs", "Zl", "Zp"), "C": ("Cc", "Cf", "Cs")}
_LONG_NAMES = {"Letter": "L", "Mark": "M", "Number": "N", "Punctuation": "P", "Symbol": "S",
               "Separator": "Z", "Other": "C", "Uppercase_Letter": "Lu",
               "Lowercase_Letter": "Ll", "Decimal_Number": "Nd"}


@functools.lru_cache(maxsize=None)
def _ranges_by_category() -> dict:
  """{two-letter category: [(first, last), ...]} over the scanned code points."""
  ranges: dict = {}
  for block in _SCANNED:
    for cp in block:
      runs = ranges.setdefault(unicodedata.category(chr(cp)), [])
      if runs and runs[-1][1] == cp - 1:
        runs[-1][1] = cp
      else:
        runs.append([cp, cp])
  return ranges


def _class_body(ranges) -> str:
  """The inside of a `[...]` class matching the code point ranges."""
  def esc(cp):
    return f"\\U{cp:08x}"
  return "".join(esc(a) if a == b else f"{esc(a)}-{esc(b)}" for a, b in sorted(ranges))


def category_ranges(name: str) -> list:
  """The code point ranges of a Unicode general category ("L", "Nd", "Letter"), as (first, last)
  pairs. Raises TokenizerError for a name that is no general category."""
  name = _LONG_NAMES.get(name, name)
  members = _CATEGORIES.get(name, (name,))
  table = _ranges_by_category()
  if any(m not in table and m not in ("Cs",) for m in members) or not members:
    raise TokenizerError(f"\\p{{{name}}} in a tokenizer pattern: kernelgen knows the Unicode "
                         f"general categories (L, Lu, N, Nd, P, S, Z, ...), not {name!r}")
  return [tuple(r) for m in members for r in table.get(m, [])]


@functools.lru_cache(maxsize=None)
def _named_body(name: str) -> str:
  if name == "s":
    extra = [(0x09, 0x0D), (0x85, 0x85)]
    return _class_body(extra + [r for c in ("Zs", "Zl", "Zp") for r in category_ranges(c)])
  if name == "w":
    cats = ("L", "M", "Nd", "Pc")
    return _class_body([r for c in cats for r in category_ranges(c)])
  if name == "d":
    return _class_body(category_ranges("Nd"))
  return _class_body(category_ranges(name))


def is_whitespace(ch: str) -> bool:
  """Oniguruma's `\\s` (and Rust's char::is_whitespace) for one character."""
  return ch in "\t\n\x0b\x0c\r\x85" or unicodedata.category(ch) in ("Zs", "Zl", "Zp")


def _read_property(pattern: str, i: int) -> tuple[str, int]:
  """The property name after `\\p` at pattern[i] (`{Name}` or one letter), and the index after."""
  if i < len(pattern) and pattern[i] == "{":
    end = pattern.find("}", i)
    if end < 0:
      raise TokenizerError(f"unterminated \\p{{ in tokenizer pattern {pattern!r}")
    return pattern[i + 1:end], end + 1
  if i < len(pattern):
    return pattern[i], i + 1
  raise TokenizerError(f"a pattern ending in \\p: {pattern!r}")


def _escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
  """The Python spelling of the escape starting at pattern[i] (the backslash), and the index
  after it."""
  letter = pattern[i + 1] if i + 1 < len(pattern) else ""
  if letter in ("p", "P"):
    name, after = _read_property(pattern, i + 2)
    body, negate = _named_body(name), letter == "P"
  elif letter in "sSwWdD" and letter:
    body, negate, after = _named_body(letter.lower()), letter.isupper(), i + 2
  else:
    return pattern[i:i + 2], i + 2
  if in_class and negate:
    raise TokenizerError(f"a negated class escape (\\{letter}) inside [...] in tokenizer pattern "
                         f"{pattern!r}: kernelgen cannot translate it to Python's re")
  if in_class:
    return body, after
  return ("[^" if negate else "[") + body + "]", after


@functools.lru_cache(maxsize=64)
def translate(pattern: str) -> re.Pattern:
  """Compile an Oniguruma pattern from a tokenizer file as an equivalent Python pattern.

  Raises TokenizerError when the pattern uses what cannot be translated or Python rejects it."""
  out, i, depth = [], 0, 0
  while i < len(pattern):
    ch = pattern[i]
    if ch == "\\":
      text, i = _escape(pattern, i, depth > 0)
      out.append(text)
      continue
    if ch == "[":
      depth += 1
      if pattern.startswith("[^", i) or (depth == 1 and pattern.startswith("[]", i)):
        out.append(pattern[i:i + 2])
        i += 2
        continue
    elif ch == "]" and depth:
      depth -= 1
    out.append(ch)
    i += 1
  try:
    return re.compile("".join(out))
  except re.error as error:
    raise TokenizerError(f"tokenizer pattern {pattern!r} does not translate to a Python regular "
                         f"expression: {error}") from None
