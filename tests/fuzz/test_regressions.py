"""Bugs the differential fuzzer found (tests/helpers/fuzz_runner.py), shrunk, each named after the bug.

Open bugs are `xfail(strict=True)`: when the fix lands the test passes, pytest reports XPASS as a
failure, and the mark comes off.
"""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from fuzz_programs import Program, Step
from fuzz_runner import available_devices, run_program
from tools import DEVICES, missing_tool


def open_bug(reason: str):
  return pytest.mark.xfail(strict=True, reason=reason)


def test_tensor_from_0d_numpy_array_keeps_shape_0d():
  # found by fuzz seed 2 (fixed in tensor.py: np.ascontiguousarray makes 0-d arrays 1-d)
  x = Tensor(np.array(1.5, dtype=np.float32), device="PYTHON")
  assert x.shape == ()
  assert (x + 1).numpy().shape == ()
  assert (x + 1).item() == 2.5


@pytest.mark.parametrize("device", ["PYTHON", "PTXSIM"])
def test_argmax_over_axis_of_size_1_gives_kernel_its_buffers(device):
  # fuzz seed 47: "kernel r_1__1_n2 takes 1 buffers (out), got 3" on every device (fixed in
  # realize.py: a kernel binds only the buffers it still reads after simplification, by slot)
  assert Tensor([1.5], device=device).argmax(axis=0).item() == 0
  assert Tensor([[2, 7]], device=device).argmin(axis=0).tolist() == [0, 0]


def test_sum_over_two_axes_of_shape_3_1_1_has_nested_loops():
  # fuzz seed 45, and hypothesis in test_fuzz.py: VerifyError "the loops of this node do not
  # nest: RANGE[0], RANGE[1]" (fixed in linearize.py: a loop whose index the body does not use
  # still encloses the accumulator's update)
  b = np.array([True, False, True]).reshape(3, 1, 1)
  assert Tensor(b, device="PYTHON").sum(axis=(0, 1)).tolist() == [2]
  assert Tensor(np.ones((3, 1), np.float32), device="PYTHON").sum(axis=(0, 1)).item() == 3.0


def test_sum_over_an_expanded_axis_counts_every_repeat():
  # found while fixing the loop nesting above: the update was placed outside the unused loop
  x = np.arange(3, dtype=np.float32)
  for device in ("PYTHON", "PTXSIM"):
    got = Tensor(x.reshape(1, 3), device=device).expand(4, 3).sum(axis=(0, 1)).item()
    assert got == np.broadcast_to(x, (4, 3)).sum()
    got = Tensor(x.reshape(3, 1), device=device).expand(3, 5).max(axis=(0, 1)).item()
    assert got == x.max()


def test_compare_sum_with_its_source_after_a_reduce_broadcasts():
  # fuzz seed 122: IndexError: tuple index out of range, on every device (fixed in schedule.py:
  # the reduce was fused into the compare kernel and also made a kernel of its own by the second
  # sum; kernels are now found again until no kernel fuses another kernel's boundary)
  x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
  a = Tensor(x, device="PYTHON").sum(axis=2)
  expected = x.sum(axis=2).sum(axis=0) < x.sum(axis=2)
  np.testing.assert_array_equal((a.sum(axis=0) < a).numpy(), expected)


@pytest.mark.parametrize("op", ["max", "min"])
def test_ptx_int8_reduce_updates_its_accumulator(op):
  # fuzz seeds 8 and 102 (argmax of uint8, min of int8 on PTXSIM): the 8-bit accumulator was
  # sign-extended once before the loop, so max/min returned the last element (fixed in ptx)
  x = np.array([5, -7, 3, 100, -100, 2, 1], dtype=np.int8)
  got = getattr(Tensor(x, device="PTXSIM"), op)(axis=0).item()
  assert got == getattr(x, op)()


def test_ptx_float64_exp_has_float64_precision():
  # fuzz seeds 87 and 1086 (tanh, exp of float64 on PTXSIM): computed with float32
  # approximations, relative error ~1e-8 (fixed: rules/transcendental.py, f64 polynomials)
  x = np.array([0.38, -1.2, 3.0, -30.5, 1e-3], dtype=np.float64)
  np.testing.assert_allclose(Tensor(x, device="PTXSIM").exp().numpy(), np.exp(x), rtol=1e-14)
  reference = Tensor(x, device="PYTHON").tanh().numpy()    # tanh's formula loses bits near 0
  np.testing.assert_allclose(Tensor(x, device="PTXSIM").tanh().numpy(), reference, rtol=1e-14)
  np.testing.assert_allclose(Tensor(x, device="PTXSIM").sin().numpy(), np.sin(x), rtol=1e-14)


def test_ptx_float64_log_of_the_largest_double_is_finite():
  # issue 8: log(1.797e308) gave inf (the argument was cast to float32)
  x = np.array([1.797e308, 5e-324, 0.75], dtype=np.float64)
  np.testing.assert_allclose(Tensor(x, device="PTXSIM").log().numpy(), np.log(x), rtol=1e-14)


# Shrunk fuzz programs, replayed on every device here through the differential runner.
FUZZ_REGRESSIONS = {
  "0d_input_roundtrip": Program(steps=(
    Step("input", (), (("shape", ()), ("dtype", "float32"), ("seed", 8380), ("special", 0.0))),
    Step("neg", (0,)))),
  # seed 3572: pow of a subnormal (1e-45) on WEBGPU (log2 flushes it): the oracle's flush check
  # took an infinite error bound as agreement (fixed in fuzz_oracle_ops._agree)
  "pow_of_a_subnormal_is_undefined_where_flushing_changes_it": Program(steps=(
    Step("input", (), (("shape", (1, 5, 4)), ("dtype", "int32"), ("seed", 2111), ("special", 1.0))),
    Step("bitcast", (0,), (("dtype", "float32"),)),
    Step("input", (), (("shape", (1, 1, 1)), ("dtype", "float32"), ("seed", 1995),
                       ("special", 0.0))),
    Step("pow", (1, 2)))),
  # seed 4372: conv2d with padding and an inf weight: WEBGPU (lavapipe) gives 0 for the padded
  # 0 * inf, numpy NaN; WGSL may assume no inf/NaN, so the oracle leaves it undefined
  "conv2d_padding_times_inf_weight": Program(steps=(
    Step("input", (), (("shape", (1, 3, 4, 6)), ("dtype", "float32"), ("seed", 3307),
                       ("special", 0.0))),
    Step("input", (), (("shape", (3, 3, 3, 1)), ("dtype", "float32"), ("seed", 4498),
                       ("special", 0.3))),
    Step("conv2d", (0, 1), (("stride", 1), ("padding", 1))),
    Step("shrink", (2,), (("bounds", ((0, 1), (0, 1), (0, 2), (0, 1))),)))),
  # seed 5337: an f16 conv2d over padding gives 0.0 + (-0.0) = +0.0, but lavapipe folds 0.0 + x
  # into x (-0.0), which a bitcast to int16 shows; the sign of a zero sum is not defined (the
  # oracle's zero_sign), and every other element must still agree bit for bit
  "bitcast_of_a_zero_conv_sum_has_no_defined_sign": Program(steps=(
    Step("input", (), (("shape", (1, 1, 5, 5)), ("dtype", "float16"), ("seed", 0),
                       ("special", 0.0))),
    Step("input", (), (("shape", (2, 1, 1, 1)), ("dtype", "float16"), ("seed", 4507),
                       ("special", 0.0))),
    Step("conv2d", (0, 1), (("stride", 1), ("padding", 1))),
    Step("bitcast", (2,), (("dtype", "int16"),)),
    Step("sum", (3,), (("axes", (3,)), ("keepdim", False))))),
  # seed 1144: a conv2d with a full(inf) weight: lavapipe unrolls the 2-term sum and factors the
  # common inf out of it, (x0 + x1) * inf, so inf * 0 = NaN becomes inf; WGSL may assume no
  # inf/NaN, so on WEBGPU the oracle accepts +-inf for that NaN (and nothing else)
  "conv2d_with_an_inf_weight_may_factor_the_inf_out": Program(steps=(
    Step("input", (), (("shape", (6, 6, 2, 1)), ("dtype", "float32"), ("seed", 0),
                       ("special", 0.3))),
    Step("input", (), (("shape", (1, 6, 2, 1)), ("dtype", "float32"), ("seed", 5543),
                       ("special", 0.3), ("source", "full"))),
    Step("conv2d", (0, 1), (("stride", 1), ("padding", 0))))),
}


@pytest.mark.parametrize("name", sorted(FUZZ_REGRESSIONS))
def test_shrunk_fuzz_program_agrees_everywhere(name):
  outcome = run_program(FUZZ_REGRESSIONS[name], available_devices(["PYTHON", "PTXSIM", "WEBGPU"]),
                        ptxas=False)
  assert not outcome.failed, outcome.messages


def test_bool_max_over_an_axis_starts_from_false():
  # fuzz seed 293 (new generator): max of a bool compare over an axis was True everywhere; the
  # accumulator of max -> or started at max_value(bool) = True (fixed in lower.py: _identity)
  x = np.array([[False, False], [True, False]])
  for device in ("PYTHON", "PTXSIM"):
    t = Tensor(x, device=device)
    assert t.max(axis=1).tolist() == x.max(axis=1).tolist()
    assert t.min(axis=0).tolist() == x.min(axis=0).tolist()


def test_sum_over_an_axis_of_size_0_reads_nothing():
  # fuzz seed 27 (new generator: zero-size dims): the loads of a zero-trip loop were hoisted out
  # of it and read past an empty buffer (fixed in tensor/ops/reduce.py: such a reduce is its identity)
  a, b = np.zeros((0, 4, 3), np.int32), np.arange(3, dtype=np.int32).reshape(1, 1, 3)
  for device in ("PYTHON", "PTXSIM"):
    got = (Tensor(a, device=device) - Tensor(b, device=device)).sum(axis=0).numpy()
    np.testing.assert_array_equal(got, (a - b).sum(axis=0))
    assert Tensor(a, device=device).prod(axis=(0, 2)).tolist() == [1, 1, 1, 1]


def test_bfloat16_pow_rounds_once():
  # fuzz seed 299 (new generator: pow): bfloat16 ** 3.0 rounded every step of exp2(y log2 x) to
  # bfloat16 (5% off); now computed in float32 and rounded once (elementwise._float_pow)
  x = Tensor([-0.025, 0.7, 3.5, -0.0236], dtype="bfloat16", device="PYTHON")
  exact = x.cast("float32").numpy().astype(np.float64) ** 3
  np.testing.assert_allclose((x ** 3.0).cast("float32").numpy(), exact, rtol=2.0 ** -8)


def test_cat_with_an_empty_piece_keeps_the_other():
  # fuzz seeds 381, 387, 503 (new generator: cat, zero-size dims): ZeroDivisionError "integer
  # modulo by zero" padding an empty tensor (fixed in tensor.py: an empty tensor padded is fill)
  a, b = np.arange(6, dtype=np.int64).reshape(3, 2), np.zeros((0, 2), np.int8)
  for device in ("PYTHON", "PTXSIM"):
    got = kg.cat([Tensor(a, device=device), Tensor(b, device=device)], axis=0).numpy()
    np.testing.assert_array_equal(got, np.concatenate([a, b]))
    assert Tensor(b, device=device).pad(((1, 0), (0, 1)), value=2).tolist() == [[2, 2, 2]]


def test_wgsl_never_renders_a_load_whose_gate_is_false():
  # fuzz seed 335 (slice of a cat with an empty piece, on WEBGPU): `if (false) { v = in2[(-1i)]; }`
  # was rejected by the shader compiler (negative constant index); simplify now folds a load
  # whose gate is constant False to its fallback value, and one whose gate is True to a plain load
  from kernelgen.dtype import dtypes
  from kernelgen.uop.ops import Ops, UOp
  from kernelgen.rules.symbolic import simplify
  buf = UOp(Ops.PARAM, dtypes.float32.ptr(4), (), 1)
  out = UOp(Ops.PARAM, dtypes.float32.ptr(4), (), 0)
  dead = buf.load(UOp.const(dtypes.int32, -1), UOp.const(dtypes.bool, False), 2.5)
  live = buf.load(UOp.const(dtypes.int32, 3), UOp.const(dtypes.bool, True), 0.0)
  sink = UOp(Ops.SINK, None, (out.store(0, dead), out.store(1, live)))
  stores = simplify(sink).src
  assert stores[0].src[2].op is Ops.CONST and stores[0].src[2].arg == 2.5
  assert stores[1].src[2].op is Ops.LOAD and len(stores[1].src[2].src) == 2


def test_cat_keeps_negative_zero():
  # fuzz seed 2608 (stack of float64, then bitcast): cat added the zero-padded pieces, and
  # -0.0 + 0.0 is 0.0 (fixed in tensor.py: float pieces are selected with where)
  a, b = np.array([-0.0, 1.0]), np.array([-0.0])
  for device in ("PYTHON", "PTXSIM"):
    got = kg.cat([Tensor(a, device=device), Tensor(b, device=device)]).numpy()
    assert np.signbit(got).tolist() == [True, False, True]
    got = kg.stack([Tensor(b, device=device), Tensor(-b, device=device)], axis=1).numpy()
    assert np.signbit(got).tolist() == [[True, False]]


@pytest.mark.parametrize("device", DEVICES)
def test_division_by_x_minus_x_gives_inf_and_nan_like_numpy(device):
  # b / (b - b) gave 0 on WEBGPU (lavapipe folds x - x to 0, then the division by that known 0);
  # likewise inf * 0 and inf - inf gave 0 (fixed in render/wgsl/expressions.py: zero_result)
  if not kg.Device.available(device):
    missing_tool(f"device {device}", "pip install wgpu; apt-get install mesa-vulkan-drivers")
  x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
  x[0, :3] = [np.inf, -np.inf, np.nan]
  b = Tensor(x, device=device)
  cases = {"b/(b-b)": lambda t: t / (t - t), "max": lambda t: (t / (t - t)).max(axis=1),
           "*0": lambda t: (t / (t - t)) * 0, "inf-inf": lambda t: (t / (t - t)) - (t / (t - t)),
           "0/0": lambda t: (t - t) / (t - t), "b+-b": lambda t: 1 / (t + -t),
           "0*b": lambda t: 1 / (0 * t), "sum": lambda t: (t / (t * 0)).sum(axis=0)}
  with np.errstate(all="ignore"):
    for name, fn in cases.items():
      np.testing.assert_array_equal(fn(b).numpy(), fn(x), err_msg=name)


@pytest.mark.parametrize("n", [64, 128, 512])
def test_ptx_zeros_matmul_has_no_keyerror_view_in_rules_for(n):
  # issue 17: `Tensor.zeros(n, n) @ Tensor.zeros(n, n)` (and `Tensor.empty` @ `Tensor.empty`
  # while empty was zeros) on PTX: KeyError: View(shape=(n, n, n), strides=(0, 0, 0)) from
  # pattern.py _rules_for. The product folds to one constant, so plan() staged it whole as an
  # operand, and the fused multiply-add in regtile._accumulators computed its factors, a VIEW
  # among them, as if they were elementwise ops (fixed in regtile.py: no fused multiply-add
  # where the product is an operand itself)
  y = Tensor.zeros(n, n) @ Tensor.zeros(n, n)
  for arch in ("sm_75", "sm_80", "sm_90"):
    (k,) = kg.compile(y, target="ptx", arch=arch)
    assert [b.name for b in k.buffers] == ["out"]
  kg.compile(y, target="wgsl", tile=(4, 4), stage=True)
  if n <= 128:
    got = (Tensor.zeros(n, n, device="PTXSIM") @ Tensor.zeros(n, n, device="PTXSIM")).numpy()
    np.testing.assert_array_equal(got, np.zeros((n, n), np.float32))


@pytest.mark.parametrize("n", [64, 128])
def test_ptx_zeros_matmul_of_an_input_has_no_max_of_empty_sequence(n):
  # issue 17: `Tensor.zeros(64, 64) @ x` on PTX: ValueError: max() arg is an empty sequence in
  # regtile._accumulators (the same cause as the KeyError above: with an input as the other
  # factor, compute() reached the input's BUFFER, which has no sources)
  x = np.random.default_rng(n).standard_normal((n, n)).astype(np.float32)
  zeros = np.zeros((n, n), np.float32)
  programs = [(lambda t: Tensor.zeros(n, n, device=t.device) @ t, lambda a: zeros @ a),
              (lambda t: t @ Tensor.zeros(n, n, device=t.device) + 1, lambda a: a @ zeros + 1)]
  for program, expected in programs:
    for arch in ("sm_75", "sm_80", "sm_90"):
      kg.compile(program(Tensor.empty(n, n)), target="ptx", arch=arch)
    kg.compile(program(Tensor.empty(n, n)), target="wgsl", tile=(4, 4), stage=True)
    np.testing.assert_array_equal(program(Tensor(x, device="PTXSIM")).numpy(), expected(x))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_wgsl_zero_divided_by_x_is_nan_for_zero_x(dtype):
  # issue 17's fuzzing (seed 109 of the new generator: `truediv(v1, scalar=0, reverse=True)`):
  # 0 / x gave 0 on WEBGPU where x is 0 or NaN: lavapipe folds 0.0 / x to 0 (fixed in
  # render/wgsl_expressions.py: a constant-zero numerator is read from run-time bits)
  if not kg.Device.available("WEBGPU"):
    missing_tool("device WEBGPU", "pip install wgpu; apt-get install mesa-vulkan-drivers")
  x = np.array([0.0, 1.0, np.inf, -0.0, -2.0, np.nan], dtype)
  for numerator in (0, 0.0, -0.0):
    with np.errstate(all="ignore"):
      want = np.asarray(numerator, dtype) / x
    for device in ("WEBGPU", "PTXSIM"):
      got = (numerator / Tensor(x, device=device)).numpy()
      np.testing.assert_array_equal(got, want)
      zeros = want == 0     # (a NaN's sign is not specified)
      assert np.signbit(got[zeros]).tolist() == np.signbit(want[zeros]).tolist()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_mean_sums_in_float32_so_a_large_mean_is_not_inf(dtype):
  # issue 17's sized fuzzing (seed 14: mean over 2 x 65536 float16 -5.29): NaN on WEBGPU, -inf on
  # PYTHON: mean summed in the half dtype, which overflows past 65504 (fixed in tensor/ops/reduce.py: a
  # half mean sums and divides in float32, as documented for half reductions, and as numpy does)
  x = np.full((1, 20000), -5.29, np.float32)
  want = np.full((1,), -5.29, np.float32)
  for device in ("PYTHON", "PTXSIM"):
    got = Tensor(x, device=device).cast(dtype).mean(axis=1).cast("float32").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-2)


def test_webgpu_nonfinite_sum_rule_is_narrow():
  """The WEBGPU rule for seed 1144 accepts inf only where NaN is expected, and only for programs
  whose float sums read an infinity."""
  from fuzz_oracle import compare, evaluate, reassociates_nonfinite
  program = FUZZ_REGRESSIONS["conv2d_with_an_inf_weight_may_factor_the_inf_out"]
  assert reassociates_nonfinite(program)
  assert not reassociates_nonfinite(
    FUZZ_REGRESSIONS["bitcast_of_a_zero_conv_sum_has_no_defined_sign"])
  expected = evaluate(program)
  nan = np.isnan(expected.a)
  assert nan.any()
  factored = np.where(nan, np.float32(np.inf), expected.a)
  assert compare(expected, factored, nonfinite_sums=False) is not None
  assert compare(expected, factored, nonfinite_sums=True) is None
  assert compare(expected, np.where(nan, np.float32(1.0), expected.a), nonfinite_sums=True)


@pytest.mark.parametrize("device", ["PYTHON", "PTXSIM"])
def test_compared_scatter_writes_negative_zero_bits(device):
  # found by the fuzzer (fuzz_ops_models scatter, then a bitcast): the compared scatter summed
  # the winner's value with +0.0 fills, so a -0.0 source came out as +0.0 (fixed in
  # indexing_ops.scatter: the winner's value is read, as the sorted form does)
  src = Tensor(np.array([[-0.0, 2.0]], np.float32), device=device)
  out = Tensor.ones(2, 2, device=device).scatter(0, Tensor([[1, 0]], device=device), src)
  assert out.numpy().view(np.int32)[1, 0] == np.float32(-0.0).view(np.int32)


@pytest.mark.parametrize("device", DEVICES)
def test_half_layernorm_statistics_do_not_overflow(device):
  # found by the fuzzer (fuzz_nn_ops group_norm, float16): the centered values were squared in
  # float16, so a row with |x - mean| > 256 had an infinite variance and normalized to 0 (fixed in
  # tensor_nn.layernorm: half floats take their statistics in float32, as torch does)
  x = np.array([[-600.0, -300.0, 0.0, 300.0, 600.0, 1.0]], np.float16)
  xf = x.astype(np.float64)
  want = (xf - xf.mean(-1, keepdims=True)) / np.sqrt(xf.var(-1, keepdims=True) + 1e-5)
  got = Tensor(x, device=device).layernorm().numpy()
  assert got.dtype == np.float16
  np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)
  grouped = Tensor(x.reshape(1, 2, 3), device=device).group_norm(1).numpy()
  np.testing.assert_allclose(grouped.astype(np.float64).reshape(1, 6), want, rtol=2e-3,
                             atol=2e-3)
