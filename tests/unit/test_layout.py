"""The package layout stays true: core/kernelgen's imports, parsed with `ast` (standard library
only; nothing is imported or run).

What is counted: every `import` and `from ... import` statement of kernelgen's own modules, at any
depth (module level, inside functions and classes, under `if TYPE_CHECKING`), relative or absolute.
`from pkg import name` counts as an import of module `pkg.name` when that is a module, else of
`pkg`. Not counted: `importlib.import_module` by a computed name (device.py's table of runtimes,
which open by device name at run time).

- No import cycles: the graph of those imports between modules has no strongly connected
  component of more than one module.
- No import runs back up a layer: each module belongs to a stage (LAYERS, lowest first) and imports
  only modules of its own stage or lower ones.
- No name with a leading underscore is imported from another module (dunders aside).
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "core" / "kernelgen"

# the stages, lowest first; a stage is a top-level module or folder of core/kernelgen
LAYERS = (
  ("errors", "dtype", "version"),        # the floor
  ("limits",),                           # named limits on sizes and work, confined file reads
  ("device",),                           # device names -> runtimes (opened by name)
  ("uop", "ptxsim"),                     # the UOp IR; the PTX simulator (standalone)
  ("rules",),                            # rewrite rules on UOps
  ("graph",),                            # lazy graph, views, scheduler
  ("render",),                           # targets and their renderers
  ("lowering",),                         # kernel -> UOps, optimizer's launch options
  ("runtime",),                          # devices running kernels
  ("compiler", "search", "realize", "cache", "stored"),  # the pipeline, autotuning, running kernels
  ("tensor",),                           # front end: Tensor, its operation families (ops/)
  ("nn",),                               # front end: kg.nn, kg.optim, safetensors
  ("onnx",),                             # front end: the ONNX importer (operators/ by family)
  ("export",),                           # (the export issue)
  ("text",),                             # tokenizers (kg.text)
  ("web_selftest",),                     # the page's small test runner
  ("__init__", "__main__", "web_api"),   # the public face, CLI, page bridge
)
RANK = {stage: rank for rank, stages in enumerate(LAYERS) for stage in stages}


def module_files() -> dict[str, tuple[Path, bool]]:
  """Dotted module name -> (file, is a package __init__)."""
  out = {}
  for path in sorted(PACKAGE.rglob("*.py")):
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
      parts = parts[:-1]
    out[".".join(["kernelgen", *parts])] = (path, is_package)
  return out


def imports() -> list[tuple[str, str, str]]:
  """(importing module, imported module, imported name) for every import of our own modules."""
  modules, found = module_files(), []
  for name, (path, is_package) in modules.items():
    package = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.ImportFrom):
        if node.level:
          base = package[:len(package) - node.level + 1] + ([node.module] if node.module else [])
          target = ".".join(base)
        elif (node.module or "").split(".")[0] == "kernelgen":
          target = node.module
        else:
          continue
        for alias in node.names:
          sub = f"{target}.{alias.name}"
          found.append((name, sub if sub in modules else target, alias.name))
      elif isinstance(node, ast.Import):
        found += [(name, a.name, "") for a in node.names if a.name.split(".")[0] == "kernelgen"]
  return found


def stage(module: str) -> str:
  parts = module.split(".")
  return parts[1] if len(parts) > 1 else "__init__"


def cycles(edges) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan's algorithm)."""
  graph: dict[str, set] = {}
  for a, b in edges:
    if a != b:
      graph.setdefault(a, set()).add(b)
  index, low, stack, on_stack, out = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        out.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def test_every_module_has_a_stage():
  unknown = sorted({stage(m) for m in module_files()} - set(RANK))
  assert not unknown, f"modules outside every stage of LAYERS: {unknown}"


def test_no_import_cycles():
  found = cycles((a, b) for a, b, _ in imports())
  assert not found, f"import cycles: {found}"


def test_no_import_runs_back_up_a_layer():
  back = sorted({(a, b) for a, b, _ in imports() if RANK[stage(b)] > RANK[stage(a)]})
  assert not back, f"imports from a higher stage: {back}"


def test_no_underscore_name_is_imported_across_modules():
  private = sorted({(a, b, n) for a, b, n in imports()
                    if n.startswith("_") and not n.startswith("__")})
  assert not private, f"private names imported from another module: {private}"


def test_the_checks_see_what_they_should():
  """The parser finds the imports it must (a cycle and a back-import are caught)."""
  found = imports()
  assert ("kernelgen.compiler", "kernelgen.lowering.lower", "lower") in found   # function level
  assert ("kernelgen.tensor.tensor", "kernelgen.graph.lazy", "lazy") in found  # `from .. import`
  assert cycles([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]) == [["a", "b", "c"]]
  assert RANK[stage("kernelgen.uop.ops")] < RANK[stage("kernelgen.lowering.lower")]


def test_only_the_runtime_imports_the_interpreter():
  """The interpreter is a device: lowering and renderers read shared facts from the IR's own
  modules (the WMMA fragment layouts: uop/wmma.py), never from it."""
  users = sorted({a for a, b, _ in imports() if b == "kernelgen.uop.interpret"})
  assert users and all(stage(a) == "runtime" for a in users), users


# ---- one Target travels (render/target.py) --------------------------------------------------

TARGET_NAMES = ("python", "wgsl", "ptx")
# modules where names are what the user typed (CLI flags, export formats, bundle manifests)
NAMES_TYPED = ("kernelgen.__main__", "kernelgen.web_api", "kernelgen.export")
# where a target name becomes its Target: kg.compile, the compiler's public functions (scripts and
# tests call them with names) and a device's target (compiler.target_of)
RESOLVES = {"kernelgen": {"compile"},
            "kernelgen.compiler": {"compile_kernel", "compile_plan", "buffer_limit",
                                   "compile_item", "target_of", "with_one_row_joins",
                                   "compile_plan_twice"}}
PIPELINE = ("compiler", "cache", "realize", "search", "lowering", "graph", "uop", "rules")


def _name_tests(tree) -> list[int]:
  """Lines comparing something with a target name literal (==, !=, in)."""
  lines = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Compare):
      sides = [node.left, *node.comparators]
      if any(isinstance(s, ast.Constant) and s.value in TARGET_NAMES for s in sides):
        lines.append(node.lineno)
  return lines


def test_no_module_outside_render_compares_a_target_name():
  """The target travels as a Target: its facts and steps say what differs, not its name."""
  found = {}
  for name, (path, _) in module_files().items():
    if stage(name) == "render" or name.startswith(NAMES_TYPED):
      continue
    lines = _name_tests(ast.parse(path.read_text(), str(path)))
    if lines:
      found[name] = lines
  assert not found, f"target names compared (use the Target's facts): {found}"


def test_get_target_is_called_only_where_a_target_is_named():
  calls = {}
  for name, (path, _) in module_files().items():
    for fn in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for node in ast.walk(fn):
          if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "get_target":
            calls.setdefault(name, set()).add(fn.name)
  calls.pop("kernelgen.render.targets", None)
  assert calls and all(fns <= RESOLVES.get(m, set()) for m, fns in calls.items()), calls


def test_the_pipeline_imports_no_target_language():
  """Lowering and the rest of the pipeline import no renderer package (render/wgsl, render/ptx):
  the Target calls its own (Target.renderer)."""
  languages = ("kernelgen.render.wgsl", "kernelgen.render.ptx")
  bad = sorted({(a, b) for a, b, _ in imports()
                if stage(a) in PIPELINE and b.startswith(languages)})
  assert not bad, f"the pipeline imports a target language: {bad}"


def test_the_name_checks_see_what_they_should():
  assert _name_tests(ast.parse('if t.name != "wgsl": pass\nx = "ptx" in ts')) == [1, 2]
  assert _name_tests(ast.parse('x = t.name == "other"')) == []


def test_a_module_over_500_lines_says_why():
  """No file over 500 lines unless it is one concept and its docstring says so ("past 500")."""
  long = []
  for name, (path, _) in module_files().items():
    text = path.read_text()
    doc = ast.get_docstring(ast.parse(text)) or ""
    if text.count("\n") > 500 and "past 500" not in " ".join(doc.split()):
      long.append(name)
  assert not long, f"modules over 500 lines whose docstring does not say why: {long}"
