"""Post-processors of Hugging Face tokenizer files: the ids of the encoded text(s) -> the final
ids (special tokens added around them)."""
from __future__ import annotations

from ..errors import TokenizerError
from .components import field, kind_of, unsupported

ROLE = "post_processor"


def _template_items(template, special: dict) -> list:
  """A template (a list of {"SpecialToken": ...} / {"Sequence": ...} items, or the string form
  "<s> $A </s>") as a list of ("A" | "B") and id lists."""
  if isinstance(template, str):
    template = [{"Sequence": {"id": w[1:] or "A"}} if w.startswith("$")
                else {"SpecialToken": {"id": w}} for w in template.split()]
  items = []
  for item in template:
    if "Sequence" in item:
      items.append(item["Sequence"]["id"].split(":")[0])
    elif "SpecialToken" in item:
      name = item["SpecialToken"]["id"]
      if name not in special:
        raise TokenizerError(f"the tokenizer file's TemplateProcessing uses special token {name!r} "
                             "but does not list it in special_tokens")
      items.append(list(special[name]["ids"]))
    else:
      raise TokenizerError(f"the tokenizer file's TemplateProcessing has an item {item!r}")
  return items


def _template(spec: dict):
  special = field(spec, "special_tokens", ROLE, {})
  single = _template_items(field(spec, "single", ROLE, required=True), special)
  pair = _template_items(field(spec, "pair", ROLE, ["$A", "$B"]), special)

  def run(a: list, b: list | None) -> list:
    out = []
    for item in single if b is None else pair:
      out.extend(item if isinstance(item, list) else a if item == "A" else b or [])
    return out
  return run


def _sequence(spec: dict):
  steps = [build(s) for s in field(spec, "processors", ROLE, required=True)]
  templates = [s for s in steps if s is not _byte_level]
  if len(templates) > 1:
    raise TokenizerError("the tokenizer file's post_processor Sequence has more than one "
                         "processor that adds tokens; kernelgen.text applies one")
  return templates[0] if templates else _byte_level


def _byte_level(a: list, b: list | None) -> list:
  """The ByteLevel post-processor only trims offsets: ids pass unchanged."""
  return a + (b or [])


_BUILDERS = {"TemplateProcessing": _template, "ByteLevel": lambda spec: _byte_level,
             "Sequence": _sequence}


def build(spec: dict | None):
  """The post-processor: (ids_a, ids_b or None) -> ids; TokenizerError naming a type kernelgen
  does not implement."""
  if spec is None:
    return _byte_level
  kind = kind_of(spec, ROLE)
  if kind not in _BUILDERS:
    raise unsupported(ROLE, kind, _BUILDERS)
  return _BUILDERS[kind](spec)
