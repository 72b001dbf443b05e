"""Every operator the importer implements, one family per module: importing this package
registers them all (each module adds its operators to registry.OPS with the @op decorator)."""
from __future__ import annotations

from . import (conv_transpose, control, grid, indexing, llm, math, nn, quant,  # noqa: F401
               random, sequence, shape, signal, text, training)
# (importing them registers their operators)
from ..registry import OPS, check_supported

__all__ = ["OPS", "check_supported"]
