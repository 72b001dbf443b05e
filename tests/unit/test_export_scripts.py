"""export/scripts.py: model.js is one file joined from loader.js and the parts it imports
(loader_*.js): loader.js first, every part after the parts it imports, the parts' imports and
exports dropped (model.js exports load() alone); a bundle ships that text, and Node takes both
the joined file and the parts as ES modules with the same exports."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
import subprocess

import pytest

import kernelgen as kg
from kernelgen.export import scripts

NODE = shutil.which("node")

FAKE = {
    "loader.js": "// the entry\nimport { a } from './p_a.js';\nimport { b } from './p_b.js';\n\n"
                 "export async function load() { return a() + b; }\n",
    "p_a.js": "// part a\nimport { b } from './p_b.js';\n\nexport function a() { return b; }\n",
    "p_b.js": "// part b\nexport const b = 1;\n",
}


def test_model_js_is_the_entry_then_each_part_after_those_it_imports():
  assert scripts.model_js(FAKE.__getitem__) == (
      "// the entry\nexport async function load() { return a() + b; }\n\n"
      "// part b\nconst b = 1;\n\n"
      "// part a\nfunction a() { return b; }\n")


def test_a_loader_js_that_imports_nothing_comes_back_unchanged():
  """As loader.js was before the split (bench/bundle_call_ab.py reads an older git ref's)."""
  whole = "// one file\nconst x = 1;\nexport async function load() { return x; }\n"
  assert scripts.model_js({"loader.js": whole}.__getitem__) == whole


def test_a_webgpu_bundle_ships_the_joined_model_js(tmp_path):
  kg.export({"y": kg.Tensor.empty(8, name="x") * 2}, str(tmp_path), format="webgpu")
  model = (tmp_path / "model.js").read_text(encoding="utf-8")
  assert model == scripts.model_js()
  assert (tmp_path / "generate.js").read_text(encoding="utf-8") == \
      scripts.scripts()["generate.js"]
  lines = model.splitlines()
  assert [line for line in lines if line.startswith(("import ", "export "))] == \
      ["export async function load({ device = null, base = new URL('./', import.meta.url),"]
  assert lines[0].startswith("// A kernelgen WebGPU bundle's loader")   # loader.js's header


# Node: the named module's export names, as JSON
KEYS = "import(process.argv[1]).then((m) => console.log(JSON.stringify(Object.keys(m).sort())))"


@pytest.mark.skipif(NODE is None, reason="needs node")
def test_node_takes_model_js_and_each_part_as_es_modules(tmp_path):
  """The joined file exports load() alone; the parts, side by side, link (every name a part
  imports is one another exports) and loader.js exports load() as model.js does."""
  parts = tmp_path / "parts"
  parts.mkdir()
  (parts / "package.json").write_text('{"type": "module"}')
  names = sorted(p.name for p in Path(scripts.HERE).glob("loader*.js"))
  for name in names:
    (parts / name).write_text(scripts._read(name), encoding="utf-8")
  (parts / "model.js").write_text(scripts.model_js(), encoding="utf-8")
  for name in names + ["model.js"]:
    subprocess.run([NODE, "--check", str(parts / name)], check=True, capture_output=True,
                   timeout=60)

  def keys(name):
    done = subprocess.run([NODE, "-e", KEYS, (parts / name).as_uri()], check=True,
                          capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout)
  assert keys("model.js") == ["load"]
  assert keys("loader.js") == ["load"]
  assert keys("loader_model.js") == ["Model"]
