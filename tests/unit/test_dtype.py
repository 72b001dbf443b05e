"""dtype.py: names, vectors, pointers, numpy promotion, exact value semantics of constants."""
from __future__ import annotations

import math

import numpy as np
import pytest

from kernelgen.dtype import (bitcast, dtypes, from_bits, least_upper_float, promote_types, to_bits,
                             truncate)
from kernelgen.errors import DTypeError

NP = [d for d in dtypes.all if d != dtypes.bfloat16]


def test_unknown_dtype_lists_the_known_ones():
  with pytest.raises(DTypeError, match=r"unknown dtype 'float8': use one of bool, int8"):
    dtypes.from_name("float8")
  assert dtypes.from_name("half") is dtypes.float16 and dtypes.from_name("bf16") is dtypes.bfloat16


def test_vectors_and_pointers():
  v = dtypes.float32.vec(4)
  assert (v.count, v.nbytes, v.scalar, str(v)) == (4, 16, dtypes.float32, "float32x4")
  assert dtypes.float32.vec(1) is dtypes.float32
  with pytest.raises(DTypeError, match="cannot make a vector of the vector type"):
    v.vec(2)
  p = dtypes.int8.ptr(10, local=True)
  assert (p.base, p.size, p.local, str(p)) == (dtypes.int8, 10, True, "local int8*[10]")


@pytest.mark.parametrize("a", NP, ids=str)
@pytest.mark.parametrize("b", NP, ids=str)
def test_promotion_matches_numpy(a, b):
  assert promote_types(a, b).name == np.promote_types(a.name, b.name).name


def test_least_upper_float_matches_numpy_sqrt():
  for d in NP:
    if d != dtypes.bool:
      want = np.sqrt(np.ones(1, d.name)).dtype.name
      assert least_upper_float(d).name == want, d


@pytest.mark.parametrize("dt", [d for d in NP if d.is_int()], ids=str)
def test_int_truncate_wraps_like_numpy(dt):
  for v in (-(2 ** 70) - 3, -129, -1, 0, 255, 256, 2 ** 40 + 7, 2 ** 64 + 1):
    assert truncate(v, dt) == int(np.array(v % 2 ** 64, dtype=np.uint64).astype(dt.name))


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.float32], ids=str)
def test_float_truncate_rounds_like_numpy(dt):
  rng = np.random.default_rng(0)
  for v in list(rng.standard_normal(200) * 1e3) + [1e300, -1e300, 1e-300, 65519.99, 65520.0]:
    want = float(np.array([v]).astype(dt.name)[0])
    assert truncate(v, dt) == want or (math.isnan(want) and math.isnan(truncate(v, dt)))


def test_float_to_int_truncates_and_saturates():
  assert truncate(-2.7, dtypes.int32) == -2
  assert truncate(1e20, dtypes.int16) == 32767 and truncate(math.nan, dtypes.uint8) == 0


def test_bits_round_trip_and_bitcast():
  for dt in dtypes.all:
    for bits in (0, 1, (1 << dt.bits) - 1, 1 << (dt.bits - 1)):
      if dt.kind == "b":
        bits &= 1
      v = from_bits(bits, dt)
      if not (isinstance(v, float) and math.isnan(v)):
        assert to_bits(v, dt) == bits, (dt, bits)
  assert to_bits(1.0, dtypes.bfloat16) == 0x3F80
  assert bitcast(1.0, dtypes.float32, dtypes.uint32) == 0x3F800000
  with pytest.raises(DTypeError, match="bitcast needs dtypes of one width.*use cast"):
    bitcast(1.0, dtypes.float32, dtypes.int16)


def test_bfloat16_rounds_to_nearest_even_once():
  assert truncate(1 + 2 ** -8, dtypes.bfloat16) == 1.0                 # tie -> even
  assert truncate(1 + 3 * 2 ** -8, dtypes.bfloat16) == 1 + 2 ** -6     # tie -> even (up)
  assert truncate(1 + 2 ** -8 + 2 ** -40, dtypes.bfloat16) == 1 + 2 ** -7
  assert math.isnan(truncate(math.nan, dtypes.bfloat16))


def test_dtypes_are_interned():
  # equal dtypes are one object (hash and == are identity), however they are built
  import copy
  import pickle
  from dataclasses import replace

  from kernelgen.dtype import DType, PtrDType
  v4 = dtypes.float32.vec(4)
  assert v4 is DType("float32", 4, "f", "f", 4) is DType(name="float32", itemsize=4, kind="f",
                                                          fmt="f", count=4)
  assert pickle.loads(pickle.dumps(v4)) is v4 and copy.deepcopy(v4) is v4
  assert replace(v4, count=1) is dtypes.float32 and DType("int8", 1, "i", "b") is dtypes.int8
  p = dtypes.int8.ptr(16, local=True)
  assert p is dtypes.int8.ptr(16, local=True) and pickle.loads(pickle.dumps(p)) is p
  assert p != dtypes.int8.ptr(16) and p != dtypes.int8.ptr(8, local=True) and p != dtypes.int8
  assert isinstance(p, PtrDType) and p.base is dtypes.int8
  assert {v4: 1}[dtypes.float32.vec(4)] == 1 and v4 != dtypes.float32.vec(2)
  assert v4.scalar is dtypes.float32 and p.scalar is dtypes.int8
  assert (v4.bits, v4.nbytes, dtypes.float16.bits, p.nbytes) == (32, 16, 16, 1)
