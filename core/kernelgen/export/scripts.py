"""A webgpu bundle's browser side: model.js, joined from loader.js and the parts it imports, and
generate.js.

model.js is one file on purpose (a page copies it next to its bundle and imports it alone); its
source is split by responsibility into ES modules next to this file, each of which imports the
names it uses from the others:

    loader.js            the entry: model.js's documentation and load()
    loader_common.js     the loader's Error, dtypes' typed arrays, symbolic sizes and layouts
    loader_manifest.js   the bundle's files: manifest checks, URLs, fetching, safetensors
    loader_device.js     WebGPU: the device's features and limits, writes, pipelines, timestamps
    loader_forms.js      which form of each kernel runs: subgroups (after a probe) or plain
    loader_builds.js     variants: which launch a step takes, when a variant is built (ski rental)
    loader_model.js      class Model: buffers, run(), state, weights, generate(), destroy()

`model_js` joins them: loader.js first (its header documents model.js, and load() is a function
declaration, so it may come before what it calls), then every part after the parts it imports
(a class after its base class), each without its imports and, but for loader.js, without the
`export` of its declarations: model.js exports load() alone, as one file did before the split.
"""
from __future__ import annotations

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
ENTRY = "loader.js"
# a part's imports of the others, one or more lines each (`import { a, b } from './x.js';`),
# and the blank line after them
_IMPORTS = re.compile(r"^(?:import \{[^}]*\} from '\./[\w.]+\.js';\n)+\n?", re.M)
_IMPORTED = re.compile(r"^import \{[^}]*\} from '\./([\w.]+\.js)';$", re.M)
# `export` before a top-level declaration
_EXPORT = re.compile(r"^export (?=(?:const|let|function|async function|class) )", re.M)


def scripts(read=None) -> dict[str, str]:
  """The browser files kg.export writes into a webgpu bundle, {name: text}: model.js (model_js)
  and generate.js (model.js's generate(), which it imports on its first call). read: as in
  model_js."""
  read = read or _read
  return {"model.js": model_js(read), "generate.js": read("generate.js")}


def model_js(read=None) -> str:
  """model.js's text: loader.js, then the parts it imports, each after those it imports, with
  their imports and (but for loader.js's) their exports dropped. read(name) gives a file's text
  (default: the file next to this module; a bench reads another git ref's). A loader.js that
  imports nothing (before the split) comes back unchanged."""
  read = read or _read
  order: list[str] = []
  seen: set[str] = set()

  def visit(name: str) -> None:
    seen.add(name)
    for part in _IMPORTED.findall(read(name)):
      if part not in seen:
        visit(part)
    order.append(name)

  visit(ENTRY)
  texts = []
  for name in [ENTRY] + order[:-1]:
    text = _IMPORTS.sub("", read(name))
    texts.append(text if name == ENTRY else _EXPORT.sub("", text))
  return "\n".join(texts)


def _read(name: str) -> str:
  with open(os.path.join(HERE, name), encoding="utf-8") as f:
    return f.read()
