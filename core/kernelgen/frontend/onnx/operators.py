"""Every operator the importer implements: importing this module registers them all (each
ops_*.py module adds its operators to ops.OPS with the @op decorator)."""
from __future__ import annotations

from . import (grid, ops_contrib, ops_control, ops_convt, ops_index, ops_llm,  # noqa: F401
               ops_math, ops_nn, ops_quant, ops_quant_nbits, ops_random, ops_seq, ops_shape,
               ops_signal, ops_text, ops_train)
# (importing them registers their operators)
from .ops import DOMAIN_OPS, OPS, check_supported, implementation

__all__ = ["DOMAIN_OPS", "OPS", "check_supported", "implementation"]
