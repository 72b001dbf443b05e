"""Every operator the importer implements, one family per module: importing this package
registers them all (each module adds its operators to registry.OPS with the @op decorator)."""
from __future__ import annotations

from . import (contrib, conv_transpose, control, grid, indexing, llm, losses,  # noqa: F401
               math, nn, quant, quant_nbits, random, sequence, shape, signal, text, training)
# (importing them registers their operators)
from ..registry import DOMAIN_OPS, OPS, check_supported, implementation

__all__ = ["DOMAIN_OPS", "OPS", "check_supported", "implementation"]
