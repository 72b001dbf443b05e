"""A small pytest-like runner, so the page can run core unit test modules inside Pyodide (where
pytest is not installed): `self_test({name: source})` runs every `test_*` function with the
parametrize marks, `pytest.raises`, `approx`, skips and the `monkeypatch` fixture that plain unit
tests use. web_api re-exports `self_test` for the page's worker.
"""
from __future__ import annotations

import sys


class Skipped(Exception):
  """A test (or a whole module) that cannot run here, e.g. one that needs numpy."""


class _Raises:
  def __init__(self, expected, match=None):
    self.expected, self.match, self.value = expected, match, None

  def __enter__(self):
    return self

  def __exit__(self, kind, value, tb):
    import re
    if kind is None:
      raise AssertionError(f"DID NOT RAISE {self.expected}")
    if not issubclass(kind, self.expected):
      return False
    if self.match is not None and not re.search(self.match, str(value)):
      raise AssertionError(f"{value!r} does not match {self.match!r}")
    self.value = value
    return True


def _parametrize(names, cases, **_):
  names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)

  def mark(fn):
    rows = [case if len(names) > 1 else (case,) for case in cases]
    fn._kg_cases = getattr(fn, "_kg_cases", [{}])
    fn._kg_cases = [{**old, **dict(zip(names, row))} for old in fn._kg_cases for row in rows]
    return fn
  return mark


def _skip(reason=""):
  raise Skipped(reason)


def _importorskip(name, *_, **__):
  import importlib
  try:
    return importlib.import_module(name)
  except ImportError:
    raise Skipped(f"needs {name}") from None


def pytest_shim():
  """A stand-in for the parts of pytest that plain unit tests use."""
  import types
  shim = types.ModuleType("pytest")
  shim.raises = _Raises
  shim.skip = _skip
  shim.importorskip = _importorskip
  shim.mark = types.SimpleNamespace(parametrize=_parametrize, slow=lambda fn: fn,
                                    skipif=lambda cond, reason="": (lambda fn: fn))
  shim.fixture = lambda *a, **k: (a[0] if a and callable(a[0]) else (lambda fn: fn))
  shim.approx = lambda value, rel=1e-6, abs=1e-12: _Approx(value, rel, abs)
  return shim


class _Approx:
  def __init__(self, value, rel, abs_):
    self.value, self.rel, self.abs = value, rel, abs_

  def __eq__(self, other):
    return abs(other - self.value) <= max(self.abs, self.rel * abs(self.value))


def _cases(fn) -> list[dict]:
  """The parameter sets of a test: from the shim's marks, or from real pytest's (in CPython)."""
  holder = lambda: None  # noqa: E731 (a carrier for the marks' cases)
  holder._kg_cases = getattr(fn, "_kg_cases", [{}])
  for mark in getattr(fn, "pytestmark", []):
    if mark.name == "parametrize":
      rows = [getattr(row, "values", row) for row in mark.args[1]]
      holder = _parametrize(mark.args[0], rows)(holder)
  return holder._kg_cases


def _test_cases(module):
  import inspect
  for name, fn in vars(module).items():
    if name.startswith("test_") and inspect.isfunction(fn):
      for case in _cases(fn):
        yield name, fn, case


class MonkeyPatch:
  """pytest's `monkeypatch` fixture, the common part: every change is undone afterwards."""

  def __init__(self):
    self._undo = []

  def setattr(self, target, name, value, raising=True):
    old = getattr(target, name)
    self._undo.append(lambda: setattr(target, name, old))
    setattr(target, name, value)

  def setitem(self, mapping, key, value):
    missing = key not in mapping
    old = mapping.get(key)
    self._undo.append(lambda: mapping.pop(key) if missing else mapping.__setitem__(key, old))
    mapping[key] = value

  def setenv(self, name, value):
    import os
    self.setitem(os.environ, name, str(value))

  def delenv(self, name, raising=True):
    import os
    if name in os.environ:
      old = os.environ.pop(name)
      self._undo.append(lambda: os.environ.__setitem__(name, old))

  def undo(self):
    for step in reversed(self._undo):
      step()
    self._undo.clear()


def _run_case(fn, case) -> tuple[str, str]:
  import inspect
  fixtures = {"monkeypatch": MonkeyPatch()}
  args = dict(case)
  for name in inspect.signature(fn).parameters:
    if name not in args and name not in fixtures:
      return "skipped", f"needs fixture {name}"
    args.setdefault(name, fixtures.get(name))
  try:
    fn(**args)
  except Skipped as why:
    return "skipped", str(why)
  except Exception as exc:
    return "failed", f"{type(exc).__name__}: {exc}"
  finally:
    fixtures["monkeypatch"].undo()
  return "passed", ""


def _load_module(name: str, source: str):
  import types
  module = types.ModuleType(name)
  module.__file__ = name
  try:
    exec(compile(source, name, "exec"), vars(module))
  except (ImportError, Skipped) as why:
    raise Skipped(f"module {name}: {why}") from None
  return module


def self_test(files) -> dict:
  """Run test modules (name -> source text) with a small pytest-like runner."""
  sys.modules.setdefault("pytest", pytest_shim())
  report = {"ok": True, "passed": 0, "failed": [], "skipped": []}
  for name, source in dict(files).items():
    try:
      module = _load_module(name, source)
    except Skipped as why:
      report["skipped"].append(str(why))
      continue
    for test, fn, case in _test_cases(module):
      outcome, detail = _run_case(fn, case)
      label = f"{name}::{test}{case or ''}"
      if outcome == "passed":
        report["passed"] += 1
      else:
        report[outcome].append(f"{label}: {detail}")
  return report
