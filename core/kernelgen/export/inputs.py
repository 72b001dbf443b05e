"""An ONNX model's graph inputs as `Tensor.empty` inputs of a bundle, with the caller's shapes.

`model_feeds(model, shapes)` checks every name in `shapes` against the model's inputs (a name it
does not have is an `InputError` listing the ones it has), checks a given shape against the
declared one (rank, fixed dimensions), and fixes each symbolic dimension not given to 1. It
returns the feeds and one note per input whose symbolic dimensions it fixed: the CLI prints them,
`kg.export(model, ...)` warns with them (`SymbolicDimWarning`).
"""
from __future__ import annotations

from ..errors import InputError
from ..tensor.tensor import Tensor


def _is_fixed(dim) -> bool:
  return isinstance(dim, int) and dim > 0


def _dims(shape) -> str:
  return "x".join(str(d) for d in shape)


def check_names(model, shapes: dict) -> None:
  """InputError when `shapes` names an input `model` does not have."""
  unknown = [name for name in shapes if name not in model.input_names]
  if unknown:
    valid = ", ".join(model.input_names) or "none"
    raise InputError(f"the model has no input named {', '.join(map(repr, unknown))}: its inputs "
                     f"are {valid} (give their shapes as NAME=D0xD1..., e.g. "
                     f"{(model.input_names or ['x'])[0]}=1x3x224x224)")


def _given_shape(name: str, declared: tuple, given: tuple) -> tuple:
  """`given`, checked against the declared shape (its rank and its fixed dimensions)."""
  if declared and len(given) != len(declared):
    raise InputError(f"input {name!r} has {len(declared)} dimensions ({_dims(declared)}), but "
                     f"its shape was given as {_dims(given)}: give {len(declared)} sizes")
  for axis, (want, got) in enumerate(zip(declared, given)):
    if _is_fixed(want) and want != got:
      raise InputError(f"input {name!r}: axis {axis} is fixed at {want} in the model "
                       f"({_dims(declared)}), but was given as {got}")
  if any(not isinstance(d, int) or d < 0 for d in given):
    raise InputError(f"input {name!r}: sizes must be integers >= 0, got {_dims(given)}")
  return tuple(given)


def fixed_shape(name: str, declared: tuple) -> tuple[tuple, str | None]:
  """The declared shape with each symbolic dimension 1, and a note naming them (or None)."""
  shape = tuple(d if _is_fixed(d) else 1 for d in declared)
  symbolic = [f"{d!r} (axis {axis})" if d is not None and d != "" else f"axis {axis}"
              for axis, d in enumerate(declared) if not _is_fixed(d)]
  if not symbolic:
    return shape, None
  note = (f"input {name!r}: symbolic dimension{'s' if len(symbolic) > 1 else ''} "
          f"{', '.join(symbolic)} set to 1, so its shape is {_dims(shape)}; choose sizes with "
          f"--input-shape {name}={_dims(shape)} (kg.export: input_shapes={{{name!r}: ...}})")
  return shape, note


def model_feeds(model, shapes: dict | None = None) -> tuple[dict, list[str]]:
  """({input name: Tensor.empty}, notes) for every graph input of ONNX `model`; `shapes`
  ({name: (d0, d1, ...)}) gives some of them their shapes."""
  shapes = dict(shapes or {})
  check_names(model, shapes)
  feeds, notes = {}, []
  for name in model.input_names:
    declared = tuple(model.input_shapes.get(name) or ())
    if name in shapes:
      shape = _given_shape(name, declared, tuple(shapes[name]))
    else:
      shape, note = fixed_shape(name, declared)
      notes.extend([note] if note else [])
    dtype = model.input_dtypes.get(name) or "float32"
    ident = buffer_name(name, {t.name for t in _buffers(feeds)})
    feeds[name] = Tensor.empty(*shape, dtype=dtype, device="PYTHON", name=ident)
    if ident != name:
      next(_buffers({name: feeds[name]})).public_name = name
  return feeds, notes


def buffer_name(name: str, taken: set) -> str:
  """`name` where kernels can use it as a buffer name; else a sanitized identifier (tensor/
  names.suggest: 'gpu_0/data_0' -> 'gpu_0_data_0') with the first free suffix `_2`, `_3`...
  The manifest keeps the model's own name (Buffer.public_name), so callers use that."""
  from ..tensor.names import IDENTIFIER, suggest
  if IDENTIFIER.fullmatch(name) and name not in taken:
    return name
  base = suggest(name)[:60]
  ident, k = base, 2
  while ident in taken:
    ident, k = f"{base}_{k}", k + 1
  return ident


def _buffers(feeds: dict):
  """The input buffer under each feed tensor (a symbolic input is a view of one)."""
  for tensor in feeds.values():
    node = tensor.node
    while getattr(node, "buffer", None) is None and node.src:
      node = node.src[0]
    yield node.buffer


def is_model(value) -> bool:
  """True for a loaded ONNX model (kg.onnx.load) rather than tensors."""
  return hasattr(value, "input_names") and hasattr(value, "input_shapes") and \
    callable(getattr(value, "run", None))
