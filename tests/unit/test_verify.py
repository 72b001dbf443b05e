"""verify.py: malformed graphs raise VerifyError naming the node and saying what is wrong."""
from __future__ import annotations

import pytest

from kernelgen.dtype import dtypes
from kernelgen.errors import VerifyError
from kernelgen.uop.ops import Ops, UOp
from kernelgen.uop.verify import verify, verify_linear

I32, F32 = dtypes.int32, dtypes.float32
buf = UOp(Ops.PARAM, F32.ptr(4), (), 0)
i = UOp(Ops.SPECIAL, I32, (), ("gid", 0, 4))


def test_mixed_operand_dtypes():
  bad = UOp(Ops.ADD, F32, (UOp.const(F32, 1.0), UOp.const(I32, 1)))
  with pytest.raises(VerifyError, match=r"ADD mixes operand dtypes float32 and int32; cast one"
                                        r"(.|\n)*> %2 = add %0, %1 : float32"):
    verify(bad)


def test_int_only_and_float_only_ops():
  with pytest.raises(VerifyError, match="IDIV needs integer operands, got float32"):
    verify(UOp(Ops.IDIV, F32, (UOp.const(F32, 1.0), UOp.const(F32, 2.0))))
  with pytest.raises(VerifyError, match="SQRT needs float operands, got int32"):
    verify(UOp(Ops.SQRT, I32, (i,)))
  with pytest.raises(VerifyError, match="COS needs float operands, got int32"):
    verify(UOp(Ops.COS, I32, (i,)))
  with pytest.raises(VerifyError, match="COS"):
    verify(UOp(Ops.COS, F32, (i, i)))


def test_memory_checks():
  with pytest.raises(VerifyError, match="index must be int32"):
    verify(UOp(Ops.LOAD, F32, (buf, UOp.const(dtypes.int64, 0))))
  with pytest.raises(VerifyError, match="LOAD of int32 from a buffer of float32"):
    verify(UOp(Ops.LOAD, I32, (buf, i)))
  with pytest.raises(VerifyError, match="needs a buffer"):
    verify(UOp(Ops.LOAD, F32, (i, i)))


def test_comparison_result_and_where():
  with pytest.raises(VerifyError, match="CMPLT of int32 must give bool"):
    verify(UOp(Ops.CMPLT, I32, (i, i)))
  with pytest.raises(VerifyError, match="WHERE needs a bool condition"):
    verify(UOp(Ops.WHERE, I32, (i, i, i)))


def test_linear_order_and_nesting():
  r = UOp(Ops.RANGE, I32, (UOp.const(I32, 2),), 0)
  with pytest.raises(VerifyError, match="not placed before its user"):
    verify_linear([r, r.src[0]])
  with pytest.raises(VerifyError, match="RANGE is never closed"):
    verify_linear([r.src[0], r])
  verify_linear([r.src[0], r, UOp(Ops.ENDRANGE, None, (r,))])


def test_compile_kernel_verifies_what_it_renders():
  # the kernel passes verify once, after the last rewrite; a malformed node is still named
  from kernelgen.compiler import compile_kernel
  out = UOp(Ops.PARAM, F32.ptr(4), (), 0)
  bad = UOp(Ops.ADD, F32, (i, UOp.const(F32, 1.0)))        # int32 + float32
  with pytest.raises(VerifyError, match="ADD mixes operand dtypes"):
    compile_kernel(UOp(Ops.SINK, None, (out.store(i, bad),)), "k", "python")
  odd = UOp(Ops.ADD, I32, (UOp(Ops.CONST, I32, (), "2"), UOp.const(I32, 1)))   # a text constant
  with pytest.raises(VerifyError, match="CONST holds str"):
    compile_kernel(UOp(Ops.SINK, None, (out.store(i, odd.cast(F32)),)), "k", "wgsl")
