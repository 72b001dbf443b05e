"""Every public name a user reaches has a docstring: `kg.*` (kernelgen.__all__), the `Tensor`
methods and properties, `kg.nn` (its layers and Module's methods), `kg.optim`, `kg.onnx`, the
export bundle, `kg.jit`, `kg.compile`'s kernels and the errors; and a Tensor method's function
carries its public name (`Tensor.exp.__name__ == "exp"`), aliases excepted (below), so `help()`
and tracebacks show the name users type. The API reference page (site/api/, pdoc) is made from
these docstrings.
"""
from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

import kernelgen as kg
from kernelgen import errors
from kernelgen.export import Bundle
from kernelgen.uop.program import CompiledKernel

# alias -> the method it names (one function, documented under the second name)
TENSOR_ALIASES = {
  "arccos": "acos", "arccosh": "acosh", "arcsin": "asin", "arcsinh": "asinh", "arctan": "atan",
  "arctanh": "atanh", "arctan2": "atan2", "astype": "cast", "broadcast_to": "expand",
  "expand_dims": "unsqueeze", "view": "reshape",
}


def public(obj) -> list[str]:
  return sorted(name for name in dir(obj) if not name.startswith("_"))


def function_of(attr):
  """The function behind a class attribute (static/class methods, properties), or None."""
  if isinstance(attr, (staticmethod, classmethod)):
    return attr.__func__
  if isinstance(attr, property):
    return attr
  return attr if callable(attr) else None


def has_doc(obj) -> bool:
  """A docstring someone wrote (a dataclass's generated `Name(field: type, ...)` is not one)."""
  doc = inspect.getdoc(obj)
  if inspect.isclass(obj) and doc and doc.startswith(obj.__name__ + "("):
    return False
  return bool(doc and doc.strip())


def class_members(prefix: str, cls) -> dict[str, object]:
  """{"prefix.name": function} for the public methods and properties kernelgen's classes give
  `cls` (inherited ones included once per class that shows them; object's and Exception's
  are not ours)."""
  out = {}
  for name in public(cls):
    owner = next((c for c in cls.__mro__ if name in vars(c)), None)
    if owner is None or not owner.__module__.startswith("kernelgen"):
      continue
    fn = function_of(inspect.getattr_static(cls, name))
    if fn is not None and not inspect.isclass(fn):
      out[f"{prefix}.{name}"] = fn
  return out


def classes_and_functions(prefix: str, names, module) -> dict[str, object]:
  out = {}
  for name in names:
    obj = getattr(module, name)
    if not inspect.ismodule(obj) and not callable(obj) and type(obj).__module__.startswith(
        "kernelgen"):        # an object users call methods of (kg.Device)
      out.update(class_members(f"{prefix}.{name}", type(obj)))
    if inspect.ismodule(obj) or not callable(obj):
      continue
    out[f"{prefix}.{name}"] = obj
    if inspect.isclass(obj):
      out.update(class_members(f"{prefix}.{name}", obj))
  return out


def optim_names() -> list[str]:
  return [name for name, obj in vars(kg.optim).items() if not name.startswith("_")
          and getattr(obj, "__module__", None) == kg.optim.__name__]


def error_names() -> list[str]:
  return [name for name, obj in vars(errors).items() if inspect.isclass(obj)
          and issubclass(obj, Exception) and obj.__module__ == errors.__name__]


def public_names() -> dict[str, object]:
  names = classes_and_functions("kg", kg.__all__, kg)
  names.update(classes_and_functions("kg.nn", kg.nn.__all__, kg.nn))
  names.update(classes_and_functions("kg.optim", optim_names(), kg.optim))
  names.update(classes_and_functions("kg.onnx", kg.onnx.__all__, kg.onnx))
  names.update(classes_and_functions("kg.errors", error_names(), errors))
  names.update(classes_and_functions("kg.export", ["Bundle"], SimpleNamespace(Bundle=Bundle)))
  kernels = SimpleNamespace(CompiledKernel=CompiledKernel)
  names.update(classes_and_functions("kg.compile", ["CompiledKernel"], kernels))
  return names


def test_the_walk_sees_the_api():
  names = public_names()
  for name in ["kg.Tensor.softmax", "kg.Tensor.shape", "kg.Tensor.arange", "kg.nn.Linear",
               "kg.nn.Module.parameters", "kg.optim.Adam", "kg.optim.Adam.step",
               "kg.onnx.load", "kg.onnx.Model.run", "kg.export.Bundle.run", "kg.jit",
               "kg.errors.ShapeError", "kg.compile", "kg.compile.CompiledKernel",
               "kg.Device.canonical"]:
    assert name in names, name
  assert len(names) > 400


def test_every_public_name_has_a_docstring():
  missing = [name for name, obj in public_names().items() if not has_doc(obj)]
  assert not missing, f"{len(missing)} public names without a docstring:\n" + "\n".join(missing)


@pytest.mark.parametrize("name", public(kg.Tensor))
def test_tensor_methods_carry_their_public_name(name):
  fn = function_of(inspect.getattr_static(kg.Tensor, name))
  if fn is None or isinstance(fn, property):
    return
  assert has_doc(fn), f"Tensor.{name} has no docstring"
  assert fn.__name__ == TENSOR_ALIASES.get(name, name), (name, fn.__name__)


def test_aliases_are_documented_aliases():
  for alias, name in TENSOR_ALIASES.items():
    same = [function_of(inspect.getattr_static(kg.Tensor, n)) for n in (alias, name)]
    assert same[0] is same[1], alias
