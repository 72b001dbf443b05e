"""Buffer names: what compiled kernels call their inputs.

A name (`Tensor.empty(..., name="x")`) must be an ASCII letter followed by up to 63 letters,
digits and underscores: an identifier in WGSL, PTX, C, JavaScript and Python alike. Anything
else is a `BufferNameError` when the tensor is made, never silently changed. Kernels use the
name as given in their buffer tables (`kg.compile(...)[i].buffers`, the CLI's manifest.json, the
page's kernel list and downloads); the renderers prefix it with the binding slot (WGSL
`b1_x`, PTX `data1_x`), so it can never clash with a reserved word or with a name the renderer
makes. Within one kernel a repeated name gets the first free suffix `_2`, `_3`...
(program.py's `kernel_buffers`).

Programs run by the CLI and the page name their unnamed input buffers after the variables that
hold them (`x = Tensor.empty(64, 32)` is called `x`): `name_inputs`; a realized result held by a
variable (`w = Tensor.randn(...).realize()`) gets it as its `label`, which export uses as the
weight's key.
"""
from __future__ import annotations

import re

from ..errors import BufferNameError
from ..graph.lazy import L
from .operands import TensorOps

IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def check_name(name) -> str | None:
  """`name` when it is a usable buffer name (or None); BufferNameError saying why otherwise."""
  if name is None:
    return None
  if not isinstance(name, str):
    raise BufferNameError(f"a buffer name must be a str, not {type(name).__name__}: "
                          f"pass name=\"x\" or leave it out")
  if not IDENTIFIER.fullmatch(name):
    raise BufferNameError(f"buffer name {name!r} is not an identifier kernels can use: start "
                          f"with an ASCII letter, then up to 63 letters, digits or underscores "
                          f"(e.g. {suggest(name)!r})")
  return name


def suggest(text: str) -> str:
  """A valid buffer name close to `text` (for error messages and variable names)."""
  clean = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", text)).strip("_")
  clean = clean if clean[:1].isalpha() else "b_" + clean if clean else "buf"
  return clean[:64].rstrip("_")


def name_inputs(namespace: dict) -> None:
  """Give each unnamed input buffer held by a variable of `namespace` (a program's globals)
  that variable's name: the first variable, in definition order, whose name is usable."""
  for var, value in list(namespace.items()):
    if isinstance(value, TensorOps) and value.node.op is L.BUFFER and IDENTIFIER.fullmatch(var):
      buffer = value.node.buffer
      if buffer is not None and buffer.name is None:
        buffer.name = var
    elif isinstance(value, TensorOps) and value.node.realized and IDENTIFIER.fullmatch(var):
      if value.node.buffer.label is None:   # a computed weight: export keys it by `var`
        value.node.buffer.label = var
