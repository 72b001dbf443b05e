"""The reference interpreter: every hand-built kernel of kernels.py against numpy, memory errors,
gates, variables, tensor-core fragment layouts, and the PYTHON runtime."""
from __future__ import annotations

import numpy as np
import pytest

from kernels import ALL_KERNELS, F32, I32, Case, c, gid, param, run_python, sink
from kernelgen.compiler import compile_kernel
from kernelgen.errors import ExecutionError
from kernelgen.uop.interpret import execute, wmma_layout, wmma_warp
from kernelgen.uop.ops import Ops, UOp
from kernelgen.runtime.python import PythonRuntime


@pytest.mark.parametrize("name", ALL_KERNELS)
def test_kernel_matches_numpy(name):
  case = ALL_KERNELS[name]()
  case.check(run_python(case, name))


def test_a_wrong_expected_output_fails():
  case = ALL_KERNELS["row_sum"]()
  case.expected = case.expected + 1
  with pytest.raises(AssertionError):
    case.check(run_python(case))


def _bytes(*arrays):
  return [bytearray(a.tobytes()) for a in arrays]


def test_out_of_bounds_load_names_instruction_thread_and_index():
  out, x = param(0, F32, 4), param(1, F32, 4)
  i = gid(0, 4)
  kernel = compile_kernel(sink(out.store(i, x.load(i + c(1)))), "oob", "python")
  with pytest.raises(ExecutionError, match=r"out-of-bounds read of buf1\[4\] \(size 4, 1 element"
                                           r"\(s\)\) by workgroup \(3, 0, 0\), thread \(0, 0, 0\) at"
                                           r"\n  %\d+ = load %1, %\d+ : float32"):
    execute(kernel, _bytes(np.zeros(4, np.float32), np.zeros(4, np.float32)))


def test_out_of_bounds_store_is_reported():
  out = param(0, I32, 2)
  kernel = compile_kernel(sink(out.store(gid(0, 3), c(1))), "oob_store", "python")
  with pytest.raises(ExecutionError, match=r"out-of-bounds write of buf0\[2\]"):
    execute(kernel, _bytes(np.zeros(2, np.int32)))


def test_gated_load_does_not_touch_memory_when_false():
  out, x = param(0, I32, 4), param(1, I32, 1)
  i = gid(0, 4)
  value = x.load(i * c(1000), i.eq(c(0)), -5)   # index 1000..3000 would be out of bounds
  kernel = compile_kernel(sink(out.store(i, value)), "gated", "python")
  bufs = _bytes(np.zeros(4, np.int32), np.array([42], np.int32))
  execute(kernel, bufs)
  assert np.frombuffer(bytes(bufs[0]), np.int32).tolist() == [42, -5, -5, -5]


def test_missing_variable_says_how_to_pass_it():
  case = ALL_KERNELS["zero_trip_loop"]()
  kernel = compile_kernel(case.sink, "zero", "python")
  with pytest.raises(ExecutionError, match=r"needs a value for the variable 'n': pass var_values"):
    execute(kernel, _bytes(*case.buffers))
  with pytest.raises(ExecutionError, match=r"'n' = 9 is outside its range 0..4"):
    execute(kernel, _bytes(*case.buffers), {"n": 9})


def test_loop_runs_n_times_for_a_variable_trip_count():
  case = ALL_KERNELS["zero_trip_loop"]()
  case.var_values = {"n": 3}
  case.expected = np.full(4, 7 + 1 + 2 + 3, np.int32)
  case.check(run_python(case))


def test_too_small_buffer_is_refused():
  kernel = compile_kernel(ALL_KERNELS["row_sum"]().sink, "small", "python")
  with pytest.raises(ExecutionError, match=r"has 4 bytes; the kernel needs 20 \(5 x float32\)"):
    execute(kernel, [bytearray(4), bytearray(140)])


# ---- tensor cores ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape,dtype_in", [((16, 8, 16), "float16"), ((16, 8, 16), "bfloat16"),
                                            ((16, 8, 8), "float16"), ((16, 8, 8), "float32")])
def test_wmma_layouts_cover_each_matrix_element_once(shape, dtype_in):
  m, n, k = shape
  for operand, (rows, cols) in (("a", (m, k)), ("b", (k, n)), ("c", (m, n))):
    cells = [rc for lane in wmma_layout(shape, operand, dtype_in) for rc in lane]
    assert sorted(cells) == [(r, q) for r in range(rows) for q in range(cols)], operand


def test_wmma_layouts_match_the_ptx_isa_examples():
  a16 = wmma_layout((16, 8, 16), "a", "float16")
  assert a16[0] == [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]
  assert a16[5][0] == (1, 2)                     # groupID 1, threadID_in_group 1
  assert wmma_layout((16, 8, 16), "b", "float16")[5] == [(2, 1), (3, 1), (10, 1), (11, 1)]
  assert wmma_layout((16, 8, 8), "a", "float32")[6] == [(1, 2), (9, 2), (1, 6), (9, 6)]
  assert wmma_layout((16, 8, 8), "b", "float32")[6] == [(2, 1), (6, 1)]
  assert wmma_layout((16, 8, 8), "b", "float16")[6] == [(4, 1), (5, 1)]
  assert wmma_layout((16, 8, 8), "c", "float16")[31] == [(7, 6), (7, 7), (15, 6), (15, 7)]


@pytest.mark.parametrize("shape,dtype_in", [((16, 8, 16), "float16"), ((16, 8, 8), "float16")])
def test_wmma_warp_is_a_matmul(shape, dtype_in):
  m, n, k = shape
  rng = np.random.default_rng(0)
  A, B = rng.integers(-4, 5, (m, k)).astype(float), rng.integers(-4, 5, (k, n)).astype(float)
  C = rng.integers(-4, 5, (m, n)).astype(float)

  def frags(mat, operand):
    return [tuple(mat[r][q] for r, q in lane) for lane in wmma_layout(shape, operand, dtype_in)]
  d = wmma_warp(("mma", shape, dtype_in, "float32"), frags(A, "a"), frags(B, "b"), frags(C, "c"))
  D = np.zeros((m, n))
  for lane, positions in enumerate(wmma_layout(shape, "d", dtype_in)):
    for e, (r, q) in enumerate(positions):
      D[r, q] = d[lane][e]
  np.testing.assert_array_equal(D, A @ B + C)


def test_tf32_operands_drop_low_mantissa_bits():
  shape = (16, 8, 8)
  a = [tuple([1.0 + 2.0 ** -20] * 4)] * 32     # not representable in tf32: reads as 1.0
  b = [tuple([1.0] * 2)] * 32
  d = wmma_warp(("mma", shape, "float32", "float32"), a, b, [(0.0,) * 4] * 32)
  assert d[0] == (8.0,) * 4


def test_unknown_wmma_shape_lists_the_known_ones():
  with pytest.raises(ExecutionError, match="no tensor-core shape m16n8k4"):
    wmma_layout((16, 8, 4), "a", "float16")


# ---- runtime ---------------------------------------------------------------------------------

def test_python_runtime_runs_a_kernel():
  case: Case = ALL_KERNELS["add_gated"]()
  rt = PythonRuntime()
  assert (rt.name, rt.target) == ("PYTHON", None)
  kernel = compile_kernel(case.sink, "add", "python")
  handles = []
  for b in case.buffers:
    h = rt.alloc(b.nbytes)
    rt.copyin(h, b.tobytes())
    handles.append(h)
  assert rt.run(kernel, handles, {}) >= 0
  case.check(np.frombuffer(rt.copyout(handles[0]), np.float32))
  with pytest.raises(ExecutionError, match="cannot copy 8 bytes into a buffer of 4 bytes"):
    rt.copyin(rt.alloc(4), bytes(8))
