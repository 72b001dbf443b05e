"""Keys of a scheduled kernel's compiled code (cache.py's compile cache; compiler.compile_plan's
sharing of one program's kernels of one structure): `kernel_key`, what a kernel's compiled code
depends on (cache.py's module docstring says what it holds), and `shape_key`, the same without
the names only the renderer reads.
"""
from __future__ import annotations

from enum import Enum

from .schedule import ScheduleItem
from .view import View


def value_key(value):
  """An exact, hashable key of a node argument, or raise TypeError for a type it does not know.
  Types are part of the key (1 == 1.0 == True in Python, and 0.0 == -0.0)."""
  kind = type(value)
  if value is None or kind is str or isinstance(value, Enum):
    return value
  if kind in (bool, int):
    return (kind.__name__, value)
  if kind is float:
    return ("float", repr(value))    # exact, and tells -0.0 and nan apart from 0.0
  if kind is tuple:
    return tuple(value_key(v) for v in value)
  if kind is View:
    return ("view", value.shape, value.strides, value.offset, value.mask)
  raise TypeError(f"no cache key for a {kind.__name__}")


def options_key(options: dict):
  """A hashable, exact key of an options dict (TypeError where some value has none)."""
  return tuple(sorted((name, value_key(v)) for name, v in options.items()))


def kernel_key(item: ScheduleItem, target, options: dict | None) -> tuple | None:
  """What the compiled code of `item` depends on (see the module docstring); None when some
  part of it has no exact key (then the kernel is not cached)."""
  slots = {id(n): i + 1 for i, n in enumerate(item.inputs)}
  index: dict[int, int] = {}
  rows: list = []
  stack = [(n, False) for n in reversed(item.extra)] + [(item.out, False)]
  try:
    while stack:
      node, expanded = stack.pop()
      if id(node) in index:
        continue
      slot = slots.get(id(node)) if node is not item.out else None
      if slot is not None:
        rows.append(("in", slot, node.dtype.name, node.dtype.count, node.shape,
                     getattr(node.buffer, "name", None)))
      elif not expanded:
        if node.realized and node is not item.out:
          return None    # a realized node that is not an input: not a kernel the key knows
        stack.append((node, True))
        stack.extend((s, False) for s in reversed(node.src) if id(s) not in index)
        continue
      else:
        rows.append((node.op, node.dtype.name, node.dtype.count, node.shape,
                     value_key(node.arg), tuple(index[id(s)] for s in node.src)))
      index[id(node)] = len(rows) - 1
    again = tuple(index[id(r)] for r in item.recomputed)
    again += (("extra",) + tuple(index[id(e)] for e in item.extra),) if item.extra else ()
    # the output's symbolic sizes (as expressions): they set a run-time grid (Launch.grid)
    return (target.name, options_key(options or {}), item.name, item.rows, again, item.out.sym,
            tuple(rows))
  except TypeError:
    return None


def shape_key(key: tuple) -> tuple:
  """`key` (kernel_key's) without the kernel's name and its inputs' buffer names: kernels with
  the same shape key compile to the same linearized kernel (their names are the renderer's)."""
  name_at = 2
  rows = tuple(row[:5] if row[0] == "in" else row for row in key[-1])
  return key[:name_at] + key[name_at + 1:-1] + (rows,)


__all__ = ["value_key", "options_key", "kernel_key", "shape_key"]
