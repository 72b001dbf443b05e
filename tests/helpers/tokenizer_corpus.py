"""A varied text corpus for the tokenizer tests: code, several scripts, emoji (ZWJ sequences,
flags, skin tones), whitespace runs, numbers, control characters, special-token look-alikes."""
import inspect
import json
import textwrap

PROSE = [
  "The quick brown fox jumps over the lazy dog. I'M sure they'll say we've done it, don't you?",
  "Съешь же ещё этих мягких французских булок, да выпей чаю. Привет, мир!",
  "我能吞下玻璃而不伤身体。你好，世界！今日は良い天気ですね。한국어 텍스트도 있습니다.",
  "مرحبا بالعالم! هذه جملة عربية للاختبار ١٢٣٤٥.",
  "नमस्ते दुनिया। यह हिंदी में एक वाक्य है। संख्या १२३",
  "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Ünïcödé çàfé naïve résumé ß ſ Kelvin K",
  "emoji: 👩‍👩‍👧‍👦 👨🏽‍💻 🏳️‍🌈 🇫🇷🇯🇵 ❤️‍🔥 👍🏿 😀😃😄 ✨",
  "numbers: 0 1 12 123 1234 12345 3.14159 -42 1e-9 0xFF 1_000_000 ½ ² Ⅻ ٣",
  "whitespace:  two   three    four\t\ttabs\n\nnewlines\r\ncrlf \u00a0nbsp\u3000ideographic "
  "\u2028ls \x1c\x1d\x1e\x1f seps \x85nel \u200bzwsp\ufeffbom   ",
  "   leading spaces and trailing   \n",
  "special look-alikes: <|endoftext|> <s> </s> <unk> <0x41> <|begin_of_text|>hello<|endoftext|>",
  "mixed: naïve café 東京 Москва 😀 x+y=z; a_b-c.d e,f g!h?i",
  "",
  " ",
  "\n",
  "a",
  "   ",
]


def python_source() -> list:
  """Code: this module, json's and textwrap's source, split into chunks of 40 lines."""
  lines = []
  for module in (json.decoder, json.encoder, textwrap):
    lines += inspect.getsource(module).splitlines(keepends=True)
  return ["".join(lines[i:i + 40]) for i in range(0, len(lines), 40)]


def corpus() -> list:
  """All texts: prose, code, and the prose lines joined in pairs."""
  return PROSE + python_source() + [a + " " + b for a, b in zip(PROSE, PROSE[1:])]
