"""Shared fixtures. The helpers themselves live in tests/helpers/ (tools.py, browser_util.py, ...),
importable from any test (`from tools import ptxas_check, wgsl_validate`): helpers/ is on pytest's
pythonpath (pyproject.toml), as are the test folders (tests/README.md says what each needs).

The `device` fixture runs a test on each device of tools.ALL_DEVICES (PYTHON, PTXSIM, WEBGPU and
CUDA where a GPU is here), the device also the default during the test; a test parametrized by
device takes tools.DEVICES (`@pytest.mark.parametrize("device", DEVICES)`) or a subset of it.

The `tools` marker: every test that needs wgpu, ptxas, Tint (node) or Chromium is marked `tools`
at collection (see `needs_tools`), so `pytest -m "not tools"` runs the tool-free tests alone (in
seconds to minutes) and `pytest -m tools` the rest; plain `pytest` (./build.sh test) runs all.
With KERNELGEN_CHECK_MARKERS=1 a test without the marker that reaches a tool fails, naming it."""

from __future__ import annotations

import ast
import inspect
import os
import sys

import pytest

import tools
from browser_util import StaticServer, launch_chromium

tools.ensure_xdg_runtime_dir()


# --- the `tools` marker ---

# fixtures that open a tool, and names (of tools.py / browser_util.py helpers, devices) whose use
# in a test, or in a module-level helper it calls, needs one
TOOL_FIXTURES = {"wgpu_adapter", "wgpu_device", "ptxas12", "ptxas13", "playwright", "chromium",
                 "chromium_no_webgpu", "serve"}
TOOL_NAMES = {"wgpu_adapter", "wgpu_device", "ptxas12", "ptxas13", "ptxas_check", "wgsl_validate",
              "tint_validate", "chromium_path", "pyodide_dir", "launch_chromium", "local_page",
              "StaticServer", "wgpu", "WEBGPU", "CUDA"}


def pytest_configure(config):
  config.addinivalue_line("markers", "tools: needs wgpu, ptxas, Tint (node) or Chromium "
                          "(deselect with -m \"not tools\")")


def _names(node) -> set:
  """Identifiers, attribute names and string constants used under an ast node."""
  out = set()
  for n in ast.walk(node):
    if isinstance(n, ast.Name):
      out.add(n.id)
    elif isinstance(n, ast.Attribute):
      out.add(n.attr)
    elif isinstance(n, ast.Constant) and isinstance(n.value, str):
      out.update(n.value.replace(",", " ").split())
  return out


_TOOL_HELPERS: dict = {}


def _tool_helpers(module) -> set:
  """The module's functions and classes that (through each other) use a tool name."""
  if module.__name__ not in _TOOL_HELPERS:
    tree = ast.parse(inspect.getsource(module))
    defs = {n.name: _names(n) for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("test_")}
    helpers, grew = set(), True
    while grew:
      grew = False
      for name, used in defs.items():
        if name not in helpers and used & (TOOL_NAMES | helpers):
          helpers.add(name)
          grew = True
    _TOOL_HELPERS[module.__name__] = helpers
  return _TOOL_HELPERS[module.__name__]


def needs_tools(item) -> bool:
  """Whether a test uses a tool: a tool fixture, a tool device among its parameters, or a tool
  name in its code or in the module-level helpers it calls (and their decorators' arguments)."""
  if TOOL_FIXTURES & set(getattr(item, "fixturenames", ())):
    return True
  params = getattr(getattr(item, "callspec", None), "params", {})
  if any(word in repr(params) for word in ("WEBGPU", "CUDA")):
    return True
  function = getattr(item, "function", None)
  if function is None:
    return False
  try:
    used = _names(ast.parse(inspect.getsource(function).strip()))
  except (OSError, TypeError, SyntaxError):
    return False
  return bool(used & (TOOL_NAMES | _tool_helpers(item.module)))


def pytest_collection_modifyitems(config, items):
  for item in items:
    if item.get_closest_marker("tools") is None and needs_tools(item):
      item.add_marker(pytest.mark.tools)


@pytest.fixture(autouse=True)
def _tool_guard(request, monkeypatch):
  """With KERNELGEN_CHECK_MARKERS=1, a test without the `tools` marker fails on reaching one."""
  if os.environ.get("KERNELGEN_CHECK_MARKERS") != "1" or \
      request.node.get_closest_marker("tools") is not None:
    yield
    return

  def refuse(*args, **kwargs):
    pytest.fail(f"{request.node.nodeid} uses a tool but is not marked `tools` (conftest.py: "
                f"add the name it uses to TOOL_NAMES)", pytrace=False)

  for name in ("_import_wgpu", "_ptxas", "_tint", "chromium_path", "pyodide_dir"):
    monkeypatch.setattr(tools, name, refuse)
  monkeypatch.setitem(sys.modules, "wgpu", None)     # `import wgpu` (kernelgen's WEBGPU) fails
  yield


@pytest.fixture(autouse=True)
def _fresh_compile_cache():
  """Each test starts with an empty compile cache (kernelgen/cache.py), so a test that patches a
  pipeline stage (optimize, lower, a renderer, a lowering constant) compiles with the patch."""
  import kernelgen as kg
  kg.clear_cache()
  yield


# --- the devices ---

device = tools.device_fixture(tools.ALL_DEVICES)


# --- native WebGPU (wgpu-py) ---


@pytest.fixture(scope="session")
def wgpu_adapter():
    """The wgpu adapter: Mesa lavapipe (Vulkan on the CPU) on machines with no GPU."""
    return tools.wgpu_adapter()


@pytest.fixture(scope="session")
def wgpu_device(wgpu_adapter):
    """A wgpu device with the adapter's limits and its standard WebGPU features."""
    return tools.wgpu_device()


# --- ptxas ---


@pytest.fixture(scope="session")
def ptxas12():
    return tools.ptxas12()


@pytest.fixture(scope="session")
def ptxas13():
    return tools.ptxas13()


# --- browser ---


@pytest.fixture(scope="session")
def playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        tools.missing_tool("Playwright", "pip install playwright")
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="session")
def chromium(playwright):
    """Headless Chromium with WebGPU enabled (SwiftShader adapter), on a closed network."""
    browser = launch_chromium(playwright, webgpu=True)
    yield browser
    browser.close()


@pytest.fixture(scope="session")
def chromium_no_webgpu(playwright):
    """Headless Chromium without WebGPU: navigator.gpu.requestAdapter() resolves to null."""
    browser = launch_chromium(playwright, webgpu=False)
    yield browser
    browser.close()


@pytest.fixture
def serve():
    """serve(directory, mounts=None, headers=None) -> a started StaticServer, stopped after."""
    servers = []

    def start(directory, mounts=None, headers=None):
        server = StaticServer(directory, mounts=mounts, headers=headers).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
