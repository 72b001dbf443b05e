"""The WGSL renderer (render/wgsl.py): hand-built kernels rendered, validated by wgpu (naga) and by
Dawn/Tint, and checked for the typed errors, names, limits and determinism of RENDERER-SPEC W1-W14.
Running the kernels and comparing with numpy is in test_webgpu_native.py; the kernel builders
below are shared with it."""
from __future__ import annotations

import math
import re

import pytest

from kernelgen.dtype import dtypes
from kernelgen.errors import LimitError, UnsupportedError
from kernelgen.uop.ops import Ops, UOp, toposort
from kernelgen.uop.program import BufferSpec, Kernel, buffer_access, launch_sizes
from kernelgen.render import wgsl
from kernelgen.uop.verify import verify
from tools import tint_validate, wgsl_validate

I32, F32 = dtypes.int32, dtypes.float32


# ---- building kernels ----------------------------------------------------------------------------

def param(slot: int, dtype, size: int) -> UOp:
  return UOp(Ops.PARAM, dtype.ptr(size), (), slot)


def special(kind: str, dim: int, extent: int) -> UOp:
  return UOp(Ops.SPECIAL, I32, (), (kind, dim, extent))


def const(dtype, value) -> UOp:
  return UOp.const(dtype, value)


def _linearize(sink: UOp, name: str, names: dict[int, str]) -> Kernel:
  """The project's linearizer when it exists; else a topological order (enough for these
  kernels, whose loop-independent values all come before their loops)."""
  try:
    from kernelgen.uop.linearize import make_kernel, linearize
  except ImportError:
    uops = toposort([sink])
    params = sorted((u for u in uops if u.op is Ops.PARAM), key=lambda u: u.arg)
    buffers = tuple(BufferSpec(p.arg, names.get(p.arg, f"buf{p.arg}"), p.dtype.base.scalar,
                               p.dtype.size, buffer_access(uops, p.arg)) for p in params)
    grid, block = launch_sizes(uops)
    variables = tuple(u for u in uops if u.op is Ops.VAR)
    return Kernel(name, tuple(uops), buffers, grid, block, variables)
  return make_kernel(name, linearize(sink), names)


def build(sink: UOp, name: str = "kernel", names: dict[int, str] | None = None, validate=True,
          **options):
  """verify -> legalize -> linearize -> render, and check the WGSL with wgpu and Tint."""
  verify(sink)
  legal = wgsl.legalize(sink, **options)
  verify(legal)
  compiled = wgsl.render(_linearize(legal, name, names or {}), **options)
  if validate:
    check_wgsl(compiled)
  return compiled


def check_wgsl(compiled) -> None:
  """wgpu builds the pipeline on this device; Tint (whose null device has WebGPU's default
  limits) builds it too when the kernel fits those limits, else checks the module alone."""
  launch = compiled.launch
  wgsl_validate(launch.source, launch.entry_point)
  fits_defaults = len(launch.bindings) <= 8
  tint_validate(launch.source, launch.entry_point if fits_defaults else None)


def flat_index(n: int, local: int = 64):
  """(index, in-bounds gate, grid) of a 1-D launch of `n` threads in workgroups of `local`."""
  groups = -(-n // local)
  idx = special("gid", 0, groups) * local + special("lid", 0, local)
  return idx, idx.lt(n), groups


def elementwise(fn, in_dtypes, out_dtype, n: int, local: int = 64, gated_loads=True) -> UOp:
  """out[i] = fn(*ins[i]) for i < n: buffer 0 is the output, 1.. the inputs."""
  idx, gate, _ = flat_index(n, local)
  ins = [param(k + 1, dt, n) for k, dt in enumerate(in_dtypes)]
  loads = [b.load(idx, gate, 0) if gated_loads else b.load(idx) for b in ins]
  out = param(0, out_dtype, n)
  return UOp(Ops.SINK, None, (out.store(idx, fn(*loads), gate),))


def row_sum(rows: int, cols: int, dtype=dtypes.float32) -> UOp:
  """out[r] = sum(x[r, :]), one thread per row, a counted loop with an accumulator."""
  x, out = param(1, dtype, rows * cols), param(0, dtype, rows)
  row = special("gid", 0, rows)
  acc = UOp(Ops.DEFINE_ACC, dtype, (const(dtype, 0),), 0)
  r = UOp(Ops.RANGE, I32, (const(I32, cols),), 0)
  update = UOp(Ops.ASSIGN, dtype, (acc, acc + x.load(row * cols + r)))
  end = UOp(Ops.ENDRANGE, None, (r, update))
  total = UOp(Ops.AFTER, dtype, (acc, end))
  return UOp(Ops.SINK, None, (out.store(row, total),))


def reverse_in_workgroup(local: int, groups: int, dtype=dtypes.float32) -> UOp:
  """out[g*L + l] = x[g*L + L-1-l] through workgroup memory and a barrier."""
  n = local * groups
  x, out = param(1, dtype, n), param(0, dtype, n)
  shared = UOp(Ops.DEFINE_LOCAL, dtype.ptr(local, local=True), (), 0)
  g, lid = special("gid", 0, groups), special("lid", 0, local)
  fill = shared.store(lid, x.load(g * local + lid))
  barrier = UOp(Ops.BARRIER, None, (fill,))
  after = UOp(Ops.AFTER, shared.dtype, (shared, barrier))
  value = after.load((local - 1) - lid)
  return UOp(Ops.SINK, None, (out.store(g * local + lid, value),))


def isnan(x: UOp) -> UOp:
  return x.ne(x)


# ---- W1: the 32-bit types render for every operator ---------------------------------------------

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.uint32])
def test_w1_binary_ops_render_for_32_bit_types(dtype):
  ops = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.MIN, Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE]
  ops += [Ops.FDIV] if dtype.is_float() else [Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR,
                                               Ops.SHL, Ops.SHR]
  for op in ops:
    def fn(a, b, op=op):
      out = a.alu(op, b)
      return out.where(const(dtype, 1), const(dtype, 0)) if out.dtype == dtypes.bool else out
    build(elementwise(fn, [dtype, dtype], dtype, 10), name=f"k_{op.name.lower()}")


def test_w1_where_renders_as_select_with_false_value_first():
  compiled = build(elementwise(lambda a, b: a.lt(b).where(a, b), [I32, I32], I32, 8))
  assert re.search(r"select\(v\d+, v\d+, v\d+\)", compiled.source)


# ---- W3/W4: storage layout ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype,words", [(dtypes.int8, 3), (dtypes.uint8, 3), (dtypes.bool, 3),
                                         (dtypes.int16, 5), (dtypes.uint16, 5)])
def test_w3_narrow_buffers_are_u32_words_written_atomically(dtype, words):
  n = 10
  compiled = build(elementwise(lambda a: a, [dtype], dtype, n))
  source, bindings = compiled.source, compiled.launch.bindings
  assert "array<atomic<u32>>" in source and "atomicOr" in source and "atomicAnd" in source
  assert re.search(r"var<storage, read> b1\w*: array<u32>;", source)
  assert [b.nbytes for b in bindings] == [words * 4, words * 4]


def test_w4_f16_native_enables_f16_and_packed_path_does_not():
  kernel = elementwise(lambda a, b: a * b + a, [dtypes.float16] * 2, dtypes.float16, 6)
  native = build(kernel, f16=True).source
  packed = build(kernel, f16=False).source
  assert native.startswith("enable f16;") and "array<f16>" in native
  assert "enable f16" not in packed and "<f16>" not in packed
  assert "pack2x16float" in packed and "unpack2x16float" in packed


# ---- W5: 64-bit types are a typed error before any source -----------------------------------------

@pytest.mark.parametrize("dtype,fix", [(dtypes.float64, "float32"), (dtypes.int64, "int32"),
                                       (dtypes.uint64, "uint32")])
def test_w5_64_bit_dtypes_raise_unsupported_naming_dtype_target_and_fix(dtype, fix):
  with pytest.raises(UnsupportedError) as info:
    build(elementwise(lambda a: a + a, [dtype], dtype, 4))
  message = str(info.value)
  assert dtype.name in message and "wgsl" in message and fix in message and "ptx" in message
  assert info.value.target == "wgsl" and info.value.dtype == dtype


def test_w5_64_bit_intermediate_is_refused_too():
  fn = lambda a: a.cast(dtypes.float64).cast(dtypes.float32)  # noqa: E731
  with pytest.raises(UnsupportedError, match="float64"):
    build(elementwise(fn, [dtypes.float32], dtypes.float32, 4))


# ---- W6: NaN and inf are never constant expressions ------------------------------------------------

def test_w6_nan_and_inf_constants_come_from_bits_at_run_time():
  fn = lambda a: a + const(dtypes.float32, math.inf) + const(dtypes.float32, math.nan)  # noqa
  source = build(elementwise(fn, [dtypes.float32], dtypes.float32, 4)).source
  assert "var<private> kg_special" in source and "bitcast<f32>(kg_special.y)" in source
  assert "inf" not in source.replace("kg_special", "").lower().replace("info", "")


def test_w6_isnan_is_a_bit_test_not_x_ne_x():
  source = build(elementwise(lambda a: isnan(a), [dtypes.float32], dtypes.bool, 4)).source
  assert "0x7fffffff" in source and not re.search(r"(v\d+) != \1\b", source)



def test_w6_zero_results_are_bit_selects_the_driver_cannot_fold():
  """x - x, x + -x, x * 0.0, fma(x, 0.0, y): never as float ALU a compiler may fold to 0 (IEEE
  gives NaN for inf and NaN x); x - y, x * 2.0 and fma(x, y, z) stay plain."""
  f32 = dtypes.float32
  for fn in (lambda a: a / (a - a), lambda a: a + -a, lambda a: a * 0.0,
             lambda a: UOp(Ops.MULACC, f32, (const(f32, -0.0), a, a))):
    source = build(elementwise(fn, [f32], f32, 4)).source
    assert "0x7fc00000u" in source and "0x7f800000u" in source, source
    # (a gated load's default, `select(0.0f, ...)`, is no ALU)
    assert not re.search(r"(v\d+) [-+*] -?\(?\1\b|(?<!select)[*(,] *\(?-?0\.0f|fma\(", source), \
      source
  source = build(elementwise(lambda a, b: UOp(Ops.MULACC, f32, (a - b, a * 2.0, b)), [f32, f32],
                             f32, 4)).source
  assert re.search(r"v\d+ - v\d+", source) and "* 2.0f" in source and "fma(" in source
  assert "0x7fc00000u" not in source


def test_w6_divisors_the_compiler_could_prove_zero_are_unknowable_and_constants_plain():
  f32, v4 = dtypes.float32, dtypes.float32.vec(4)
  source = build(elementwise(lambda a, b: a / b + UOp(Ops.RECIP, f32, (b,)), [f32, f32], f32,
                             4)).source
  # (a / b: both sides opaque, a numerator the compiler proves 0 must still give 0 / 0 = NaN)
  assert source.count("| u32(kg_nwg.x == 0u))") == 3 and "@builtin(num_workgroups) kg_nwg" in source
  splat = lambda a: UOp(Ops.VECTORIZE, v4, (a,) * 4)  # noqa: E731
  source = build(elementwise(lambda a, b: (splat(a) / splat(b)).gep(1), [f32, f32], f32, 4)).source
  assert "bitcast<vec4<u32>>(" in source and "vec4<u32>(u32(kg_nwg.x == 0u))" in source
  source = build(elementwise(lambda a: a / 3.0 + a / const(f32, 0.0) + splat(a).gep(0) /
                             splat(a.const_like(2.0)).gep(0) + a * a - a, [f32], f32, 4)).source
  assert "kg_nwg" not in source and "/ 3.0f" in source

# ---- W8: grids over 65535 workgroups fold --------------------------------------------------------

def test_w8_large_grid_is_folded_and_re_derived():
  n = 70_000 * 2
  compiled = build(elementwise(lambda a: a, [I32], I32, n, local=2))
  launch = compiled.launch
  assert max(launch.dispatch) <= 65535 and math.prod(launch.dispatch) >= 70_000
  assert "kg_group" in compiled.source and compiled.global_size == (70_000, 1, 1)


def test_w8_workgroup_size_comes_from_local_dims():
  compiled = build(elementwise(lambda a: a, [I32], I32, 100, local=32))
  assert "@workgroup_size(32, 1, 1)" in compiled.source
  assert compiled.launch.workgroup_size == (32, 1, 1)


def test_w8_oversized_workgroup_is_a_limit_error():
  with pytest.raises(LimitError, match="512"):
    build(elementwise(lambda a: a, [I32], I32, 1024, local=512))


# ---- W9: workgroup memory -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int8, dtypes.float16])
def test_w9_workgroup_array_sized_in_elements(dtype):
  source = build(reverse_in_workgroup(64, 2, dtype)).source
  assert re.search(r"var<workgroup> l0: array<\w+, 64>;", source)
  assert "workgroupBarrier();" in source


# ---- W10: scalar arguments ----------------------------------------------------------------------

def test_w10_vars_are_fields_of_a_uniform_struct_after_the_buffers():
  n = UOp(Ops.VAR, I32, (), ("n", 1, 1000))
  compiled = build(elementwise(lambda a: a * n, [I32], I32, 64))
  assert "var<uniform> kg_vars" in compiled.source and "u0_n: i32" in compiled.source
  assert "@group(0) @binding(2) var<uniform>" in compiled.source
  assert compiled.launch.uniforms == (("n", "int32"),)


# ---- W12: binding limits ------------------------------------------------------------------------

def _sum_of_inputs(count: int) -> UOp:
  return elementwise(lambda *xs: sum(xs[1:], xs[0]), [dtypes.float32] * count, dtypes.float32, 8)


def test_w12_too_many_storage_buffers_is_a_limit_error_naming_count_and_limit():
  with pytest.raises(LimitError) as info:
    build(_sum_of_inputs(8), max_uniform_buffers=1)     # no uniform buffer to spare
  assert "9 storage buffers" in str(info.value) and "allows 8" in str(info.value)


def test_w12_a_small_read_only_input_over_the_storage_buffers_binds_as_a_uniform_buffer():
  """9 buffers of 8 floats at 8 storage buffers: one input is `array<vec4<f32>, 2>` in the
  uniform address space (target.py uniform_slots), its binding of kind "uniform", 32 bytes."""
  compiled = build(_sum_of_inputs(8))
  uniform = [b for b in compiled.launch.bindings if b.kind == "uniform"]
  assert [(b.access, b.nbytes) for b in uniform] == [("read", 32)]
  assert f"@binding({uniform[0].slot}) var<uniform>" in compiled.source
  assert "array<vec4<f32>, 2>" in compiled.source


def test_w12_a_device_with_more_buffers_renders_it():
  compiled = build(_sum_of_inputs(8), max_storage_buffers=10, validate=False)
  assert len(compiled.launch.bindings) == 9


# ---- W13: names ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["fn", "max", "3d kernel", "__x", "v1", "naïve-sum", "", "loop"])
def test_w13_any_kernel_and_buffer_name_gives_valid_identifiers(name):
  compiled = build(elementwise(lambda a: a + a, [I32], I32, 4), name=name,
                   names={0: name, 1: "in put ✓"})
  assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", compiled.launch.entry_point)


def test_w13_a_plain_kernel_name_is_kept():
  assert build(elementwise(lambda a: a, [I32], I32, 4), name="E_4").launch.entry_point == "E_4"


# ---- both: determinism, options -----------------------------------------------------------------

def test_rendering_is_deterministic():
  def make():
    return elementwise(lambda a, b: (a * b).maximum(a) + const(dtypes.float32, math.nan),
                       [dtypes.float32] * 2, dtypes.float32, 100)
  first = build(make()).source
  assert all(build(make(), validate=False).source == first for _ in range(3))


def test_unknown_option_is_a_typed_error():
  with pytest.raises(UnsupportedError, match="f16"):
    build(elementwise(lambda a: a, [I32], I32, 4), fp16=True)


def test_launch_is_plain_json_data():
  import json
  launch = build(elementwise(lambda a: a, [dtypes.uint8], dtypes.uint8, 4)).launch.to_json()
  again = json.loads(json.dumps(launch))
  assert again["bindings"][0]["dtype"] == "uint8" and again["dispatch"] == [1, 1, 1]


def test_loop_with_accumulator_renders_a_for_loop():
  source = build(row_sum(4, 5)).source
  assert re.search(r"for \(var r\d+: i32 = 0i; r\d+ < 5i; r\d+\+\+\)", source)


# ---- W14: vec4 memory access ---------------------------------------------------------------------

def _vec4_copy(dtype, offset: int, size: int = 256, extra_scalar: bool = False) -> UOp:
  """out[4t..4t+3] = reversed(x[4t+offset ..]) (+ x[t] when extra_scalar)."""
  v4 = dtype.vec(4)
  x, out = param(1, dtype, size + 4), param(0, dtype, size)
  i = special("gid", 0, size // 4) * 4
  v = x.load(i + offset, dtype=v4)
  w = UOp(Ops.VECTORIZE, v4, tuple(v.gep(3 - k) for k in range(4)))
  if extra_scalar:
    w = w + UOp(Ops.VECTORIZE, v4, (x.load(i // 4),) * 4)
  return UOp(Ops.SINK, None, (out.store(i, w),))


@pytest.mark.parametrize("dtype", [F32, I32, dtypes.uint32], ids=lambda d: d.name)
def test_w14_aligned_vector_access_uses_vec4_words(dtype):
  source = build(_vec4_copy(dtype, 4)).source
  t = {"float32": "f32", "int32": "i32", "uint32": "u32"}[dtype.name]
  assert source.count(f"array<vec4<{t}>>") == 2
  assert re.search(r"b1_\w*\[u32\(\w+\) >> 2u\]", source)
  assert re.search(r"b0_\w*\[u32\(\w+\) >> 2u\] = ", source)


def test_w14_unaligned_access_stays_scalar():
  source = build(_vec4_copy(F32, 1)).source
  assert source.count("array<vec4<f32>>") == 1            # the output's aligned stores only
  assert re.search(r"var<storage, read> b1_\w*: array<f32>;", source)


def test_w14_scalar_loads_beside_vector_loads_read_one_lane():
  """A buffer read as aligned vec4 words and as single elements stays vec4 words: the single
  element is lane i & 3 of word i >> 2 (a row kernel's vector passes and its row's first
  element, as layernorm's shift)."""
  source = build(_vec4_copy(F32, 4, extra_scalar=True)).source
  assert source.count("array<vec4<f32>>") == 2
  assert re.search(r"b1_\w*\[u32\((\w+)\) >> 2u\]\[u32\(\1\) & 3u\]", source)


def test_w14_scalar_store_beside_vector_store_stays_scalar():
  """Stores stay whole words: a single element written among vec4 words keeps the buffer
  scalar (a lane store could be a read-modify-write of its neighbours' word)."""
  x, out = param(1, F32, 8), param(0, F32, 8)
  g = special("gid", 0, 2) * 4
  stores = (out.store(g, x.load(g, dtype=F32.vec(4))), out.store(g + 1, x.load(g + 1)))
  source = build(UOp(Ops.SINK, None, stores)).source
  assert re.search(r"b0_\w*: array<f32>;", source)


def test_w14_buffer_size_not_divisible_by_four_stays_scalar():
  x, out = param(1, F32, 10), param(0, F32, 8)
  v = x.load(special("gid", 0, 2) * 4, dtype=F32.vec(4))
  source = build(UOp(Ops.SINK, None, (out.store(special("gid", 0, 2) * 4, v),))).source
  assert re.search(r"b1_\w*: array<f32>;", source) and re.search(r"b0_\w*: array<vec4<f32>>;", source)


def test_same_uops_under_other_names_render_as_written_anew():
  """The renderer keeps each module it wrote with its names left open (wgsl/__init__.py's
  templates): the same linearized uops under other kernel and buffer names (compiler.renamed)
  give exactly what writing them anew gives, names cleaned as always."""
  import dataclasses

  import kernelgen as kg
  first = kg.compile((kg.Tensor.empty(4, 8, name="a", device="PYTHON") * 2).sum(-1),
                     target="wgsl")[0].kernel
  sources = []
  for name, names in (("other kernel", ("out 2", "a-b")), ("fn", ("", "kg_x")),
                      (first.name, ("out", "a"))):
    kernel = dataclasses.replace(first, name=name, buffers=tuple(
      dataclasses.replace(b, name=n) for b, n in zip(first.buffers, names)))
    fresh = dataclasses.replace(kernel, uops=tuple(list(kernel.uops)))   # nothing kept for it
    got, want = wgsl.render(kernel), wgsl.render(fresh)
    assert (got.source, got.launch) == (want.source, want.launch)
    assert "\0" not in got.source
    sources.append(got.source)
  assert "fn other_kernel(" in sources[0] and " b0_out_2[" in sources[0]
  assert " b1_a_b[" in sources[0]
  assert "fn k_fn(" in sources[1] and " b0: array<" in sources[1] and " b1_kg_x[" in sources[1]
