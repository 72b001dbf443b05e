"""Every backend's Target by name: "python" (the reference interpreter), "wgsl", "ptx"."""
from __future__ import annotations

from ..errors import UnsupportedError
from .ptx.target import PTX
from .target import PYTHON, Target
from .wgsl.target import WGSL

TARGETS = {t.name: t for t in (PYTHON, WGSL, PTX)}


def get_target(target) -> Target:
  """The Target named `target` (a Target passes through); UnsupportedError for unknown names."""
  if isinstance(target, Target):
    return target
  if target not in TARGETS:
    raise UnsupportedError(f"unknown target {target!r}: use one of {', '.join(TARGETS)}",
                           target=str(target))
  return TARGETS[target]
