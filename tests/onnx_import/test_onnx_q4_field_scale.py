"""MatMulNBits' decode matvec takes each field's 2^-pos on the activation, once per block for
all of a thread's rows (lowering/combine.py _scaled_first): quant_nbits.placed_fields leaves a
field in place (code * 2^pos) and undoes its position with a power-of-two factor; x * (code *
2^-pos) is the same float as (x * 2^-pos) * code, and x * 2^-pos is the same node in every row.
The WGSL at both CPU adapters' defaults: one multiply by a field's factor per field of a block
and trip, not one per field and row. (Values: test_onnx_q4_zero_fold's numpy checks and
test_onnx_quant_nbits' onnxruntime checks run through the same fold.)"""
from __future__ import annotations

import re

import pytest

from kernelgen.render.wgsl.adapters import TABLE
from test_onnx_quant_nbits import q4_matvec_kernel

# the power-of-two factors 2^-4 .. 2^-24 of a 32-bit word's fields 1..7, as the WGSL writes them
FACTORS = {repr(float(2.0 ** -p)) + "f" for p in range(4, 25, 4)} | {"5.960464477539063e-08f"}


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_field_factor_taken_once_per_block_not_per_row(adapter):
  defaults = TABLE[(adapter, "rows")]
  step, rows = defaults["reduce_step"], defaults["reduce_rows"]
  n, k = 256, 576
  src = q4_matvec_kernel(n, k, target="wgsl", adapter=adapter).source
  per_trip = max(b for b in range(1, step // 32 + 1) if (k // 32) % b == 0)
  scaled = [m for m in re.findall(r": f32 = v\d+ \* ([0-9.e+-]+f);", src) if m in FACTORS]
  # 4 words of 8 fields per block: fields 1..7 of each word scaled once, for all `rows` rows
  assert 0 < len(scaled) <= 4 * 7 * per_trip, (len(scaled), rows, src[:3000])
  # and every field still has its own conversion and product (none dropped)
  assert len(re.findall(r": f32 = f32\(v\d+\);", src)) >= rows * per_trip * 32
