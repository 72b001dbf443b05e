"""The page's JavaScript modules (web/*.js) stay small and hang together: none runs past 600
lines, every relative `import { name } from './x.js'` names something x.js exports, every file
the service worker precaches (web/sw.js SHELL) exists, and web/gpu.js's GpuExecutor, loaded
under Node, has every method and field that Python (runtime/webgpu_browser.py) and the worker
use. No browser: the page tests (tests/page) run the modules for real."""
import json
import re
import shutil
import subprocess

import pytest

from tools import REPO_ROOT

WEB = REPO_ROOT / "web"
NODE = shutil.which("node")
MOST_LINES = 600

# import { a, b as c } from './x.js'   (a default or namespace import has no braces)
IMPORT = re.compile(r"^import\s*\{([^}]*)\}\s*from\s*'(\.{1,2}/[^']+)'", re.M)
# export function f / export async function f / export class C / export const X
EXPORT_DECL = re.compile(r"^export\s+(?:async\s+)?(?:function|class|const|let)\s+([\w$]+)", re.M)
# export { a, b as c }
EXPORT_LIST = re.compile(r"^export\s*\{([^}]*)\}", re.M)


def scripts():
  return sorted(path for path in WEB.rglob("*.js") if "vendor" not in path.parts)


def exported(path):
  text = path.read_text()
  names = set(EXPORT_DECL.findall(text))
  for group in EXPORT_LIST.findall(text):
    names |= {part.split(" as ")[-1].strip() for part in group.split(",") if part.strip()}
  return names


def test_no_web_script_runs_past_600_lines():
  long = {str(path.relative_to(REPO_ROOT)): len(path.read_text().splitlines())
          for path in scripts()}
  assert {name: n for name, n in long.items() if n > MOST_LINES} == {}


@pytest.mark.parametrize("path", scripts(), ids=lambda path: str(path.relative_to(WEB)))
def test_every_relative_import_names_an_export(path):
  for group, target in IMPORT.findall(path.read_text()):
    source = (path.parent / target).resolve()
    if not source.is_relative_to(WEB):
      continue                    # ../pyodide/pyodide.mjs: the site's Pyodide, not a web file
    assert source.is_file(), f"{path.name} imports {target}, which does not exist"
    names = {part.split(" as ")[0].strip() for part in group.split(",") if part.strip()}
    assert names <= exported(source), (path.name, target, names - exported(source))


def test_every_precached_file_exists():
  text = (WEB / "sw.js").read_text()
  shell = re.search(r"const SHELL = \[(.*?)\];", text, re.S).group(1)
  files = re.findall(r"'([^']+)'", shell)
  built = {"./", "web/vendor/ace/ace.js"}   # the site's root and build.sh's copy of Ace
  missing = [name for name in files if name not in built and not (REPO_ROOT / name).is_file()]
  assert "web/gpu.js" in files and missing == []


SCRIPT = """
const { GpuExecutor } = await import(process.argv[1]);
const gpu = new GpuExecutor();
const names = new Set(Object.keys(gpu));
for (let p = Object.getPrototypeOf(gpu); p !== Object.prototype; p = Object.getPrototypeOf(p)) {
  for (const name of Object.getOwnPropertyNames(p)) names.add(name);
}
process.stdout.write(JSON.stringify([...names]));
"""


def used_names():
  """What runtime/webgpu_browser.py (`self.gpu.x`, `_call("x"`) and web/worker.js
  (`state.gpu.x`) use of the executor."""
  python = (REPO_ROOT / "core/kernelgen/runtime/webgpu_browser.py").read_text()
  names = set(re.findall(r"self\.gpu\.(\w+)", python))
  names |= set(re.findall(r"_call\(\"(\w+)\"", python))
  names |= set(re.findall(r"getattr\(self\.gpu, \"(\w+)\"", python))
  names |= set(re.findall(r"state\.gpu\.(\w+)", (WEB / "worker.js").read_text()))
  return names


@pytest.mark.skipif(NODE is None, reason="needs node")
def test_gpu_executor_has_what_python_and_the_worker_use():
  names = used_names()
  assert {"alloc", "write", "readMany", "enqueue", "runTimed", "prepare", "init"} <= names
  out = subprocess.run([NODE, "--input-type=module", "-e", SCRIPT, (WEB / "gpu.js").as_uri()],
                       capture_output=True, text=True, check=True, timeout=60).stdout
  assert names - set(json.loads(out)) == set()
