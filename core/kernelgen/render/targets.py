"""The registry of backends: every Target by name, and `get_target`, which resolves a name
the user typed ("python", "wgsl", "ptx") into its Target once, at the entry points (kg.compile,
the compiler's public functions, a device's target, export); the object travels from there.

Adding a backend: a folder render/<lang>/ (its Target in target.py with backend="<lang>", and
`legalize`, `render`, optionally `buffer_limit` in __init__.py) plus its line in TARGETS below.
"""
from __future__ import annotations

from ..errors import UnsupportedError
from .ptx.target import PTX
from .target import Target
from .wgsl.target import WGSL

# the reference interpreter runs the linearized kernel itself (no renderer); it models PTX's
# tensor cores (WMMA shapes and archs), so forced tensor cores run there too
PYTHON = Target(name="python", title="python", renderer_options=("subgroups", "arch"),
                max_local=64, max_local_bytes=1 << 20, upcast=0,
                subgroup_dtypes=("float16", "float32", "int32", "uint32"),
                register_tiles=False, stage_threads=(8, 8), mma_shapes=PTX.mma_shapes,
                arch_number=PTX.arch_number)

TARGETS = {t.name: t for t in (PYTHON, WGSL, PTX)}


def get_target(target) -> Target:
  """The Target named `target` (a Target passes through); UnsupportedError for unknown names."""
  if isinstance(target, Target):
    return target
  if target not in TARGETS:
    raise UnsupportedError(f"unknown target {target!r}: use one of {', '.join(TARGETS)}",
                           target=str(target))
  return TARGETS[target]
