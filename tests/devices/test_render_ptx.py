"""The PTX renderer (render/ptx.py): every kernel assembles with ptxas for every supported arch,
and the known failure modes render the instructions that get them right.

Kernels here are hand-built UOp graphs in the lowered-kernel form of IR.md, linearized by
`linear()` (a toposort, valid for these graphs: straight-line code and loops closed by ENDRANGE).
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from kernelgen.dtype import dtypes
from kernelgen.errors import LimitError, UnsupportedError
from kernelgen.uop.ops import Ops, UOp
from kernelgen.uop.program import BufferSpec, Kernel, buffer_access, launch_sizes
from kernelgen.render import ptx
from kernelgen.render.ptx import target as ptx_target
from tools import ptxas_check

# every (arch, ptxas) pair a kernel must assemble with (RENDERER-SPEC P13)
ARCHS = [("sm_75", "12"), ("sm_80", "12"), ("sm_86", "12"), ("sm_89", "12"), ("sm_90", "12"),
         ("sm_90", "13"), ("sm_100", "13"), ("sm_120", "13")]

f16, bf16, f32, f64 = dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64
i8, u8, i32, u32, i64, u64 = (dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32,
                              dtypes.int64, dtypes.uint64)


# ---- building kernels ------------------------------------------------------------------------

def buf(slot: int, dt, size: int = 64, local: bool = False) -> UOp:
  if local:
    return UOp(Ops.DEFINE_LOCAL, dt.ptr(size, local=True), (), slot)
  return UOp(Ops.PARAM, dt.ptr(size), (), slot)


def gid(dim: int = 0, n: int = 2) -> UOp:
  return UOp(Ops.SPECIAL, i32, (), ("gid", dim, n))


def lid(dim: int = 0, n: int = 32) -> UOp:
  return UOp(Ops.SPECIAL, i32, (), ("lid", dim, n))


def thread() -> UOp:
  return gid() * 32 + lid()


def alu(op: Ops, *src: UOp) -> UOp:
  return src[0].alu(op, *src[1:])


def unary(op: Ops, x: UOp) -> UOp:
  return UOp(op, x.dtype, (x,))


def sink(*stores: UOp) -> UOp:
  return UOp(Ops.SINK, None, stores)


def kernel(name: str, root: UOp, arch: str = "sm_80") -> Kernel:
  """Legalize for `arch`, linearize by toposort (definitions first), and wrap as a Kernel."""
  root = ptx.legalize(root, arch)
  uops = root.toposort()
  first = [u for u in uops if u.op in (Ops.PARAM, Ops.VAR, Ops.DEFINE_LOCAL, Ops.SPECIAL)]
  uops = first + [u for u in uops if u not in first]
  params = sorted({u.arg: u for u in uops if u.op is Ops.PARAM}.items())
  buffers = tuple(BufferSpec(slot, f"buf {slot}", p.dtype.base.scalar, p.dtype.size,
                             buffer_access(uops, slot)) for slot, p in params)
  grid, block = launch_sizes(uops)
  return Kernel(name, tuple(uops), buffers, grid, block,
                tuple(u for u in uops if u.op is Ops.VAR))


def source(name: str, root: UOp, arch: str = "sm_80") -> str:
  return ptx.render(kernel(name, root, arch), arch).source


def elementwise(dt_in, dt_out, fn, n_inputs: int = 2) -> UOp:
  i = thread()
  loads = [buf(s + 1, dt_in).load(i) for s in range(n_inputs)]
  return sink(buf(0, dt_out).store(i, fn(*loads)))


def reduce_loop(dt, end: UOp) -> UOp:
  """out[0] = sum(inp[0..end-1]) with a counted loop."""
  acc = UOp(Ops.DEFINE_ACC, dt, (UOp.const(dt, 0),), 0)
  r = UOp(Ops.RANGE, i32, (end,), 0)
  update = UOp(Ops.ASSIGN, dt, (acc, acc + buf(1, dt).load(r)))
  done = UOp(Ops.AFTER, dt, (acc, UOp(Ops.ENDRANGE, None, (r, update))))
  return sink(buf(0, dt).store(0, done))


def wmma_kernel(shape, dt_in) -> UOp:
  m, n, k = shape
  a_len, b_len = m * k // 32, k * n // 32
  t = lid()
  a = UOp(Ops.VECTORIZE, dt_in.vec(a_len), tuple(buf(1, dt_in, 512).load(t * a_len + j)
                                                  for j in range(a_len)))
  b = UOp(Ops.VECTORIZE, dt_in.vec(b_len), tuple(buf(2, dt_in, 512).load(t * b_len + j)
                                                  for j in range(b_len)))
  c = UOp.const(f32.vec(4), 0.0)
  d = UOp(Ops.WMMA, f32.vec(4), (a, b, c), ("mma", shape, dt_in, f32))
  return sink(*(buf(0, f32, 512).store(t * 4 + j, d.gep(j)) for j in range(4)))


# ---- the corpus: every kernel assembles for every arch --------------------------------------

def _casts(dt_in, dt_outs):
  i = thread()
  x = buf(len(dt_outs), dt_in).load(i)
  return sink(*(buf(s, dt).store(i, x.cast(dt)) for s, dt in enumerate(dt_outs)))


def _gated_vector():
  i = thread()
  vec = buf(1, f32, 256).load(i * 4, dtype=f32.vec(4))
  gated = buf(2, f32).load(i + 3, gate=i.lt(60), alt=-1.0)
  scaled = UOp(Ops.VECTORIZE, f32.vec(4), tuple(vec.gep(j) * gated for j in range(4)))
  return sink(buf(0, f32, 256).store(i * 4, scaled))


def _shared_barrier():
  t = lid()
  smem = buf(0, f32, 32, local=True)
  st = smem.store(t, buf(1, f32).load(t))
  bar = UOp(Ops.BARRIER, None, (st,))
  after = UOp(Ops.AFTER, smem.dtype, (smem, bar))
  return sink(buf(2, f32).store(t, after.load((t + 1) % 32)))


def _bools():
  i = thread()
  a, b = buf(1, dtypes.bool).load(i), buf(2, dtypes.bool).load(i)
  x = buf(3, f32).load(i)
  out = (a ^ b) | (~a & x.ne(x)) | a.ne(b) | a.eq(b) | a.lt(b)
  return sink(buf(0, dtypes.bool).store(i, out.where(b, a)),
              buf(4, f32).store(i, out.cast(f32)), buf(5, i8).store(i, out.cast(i8)))


CORPUS = {
  "f32_alu": lambda: elementwise(f32, f32, lambda a, b: (
    (a + b) * a - b / a).maximum(a.minimum(b)) + unary(Ops.SQRT, a) + unary(Ops.RECIP, b)),
  "f32_transcendental": lambda: elementwise(f32, f32, lambda a, b: unary(Ops.EXP2, a) + unary(
    Ops.LOG2, b) + unary(Ops.SIN, a) + unary(Ops.COS, b) + unary(Ops.TRUNC, b)
    - alu(Ops.MULACC, a, b, a)),
  "i32_alu": lambda: elementwise(i32, i32, lambda a, b: (a * b + a // b - a % b) ^ (
    a >> (b & 7)) | (a << 3) & ~a + a.maximum(b) - (-a).minimum(b)),
  "u32_alu": lambda: elementwise(u32, u32, lambda a, b: (a // b + a % b) ^ (a >> (b & 7)) +
                                 a.maximum(b) + alu(Ops.MULACC, a, b, a)),
  "i8_alu": lambda: elementwise(i8, i8, lambda a, b: (a + b) * a // b - (a >> 1) + a.maximum(b)),
  "u8_alu": lambda: elementwise(u8, u8, lambda a, b: (a + b) * a % b - (a >> 1) + a.minimum(b)),
  "i16_u16": lambda: elementwise(dtypes.int16, dtypes.uint16, lambda a, b: (
    a * b - a // b + (a >> b.bitcast(dtypes.uint16).cast(dtypes.int16))).cast(dtypes.uint16)),
  "i64_alu": lambda: elementwise(i64, i64, lambda a, b: a * b + a // b - a % b + (a >> 5) ^ (
    b << a.bitcast(u64).cast(i64) % 64)),
  "u64_alu": lambda: elementwise(u64, u64, lambda a, b: a * b + a // b + (a >> (b % 64))),
  "f64_alu": lambda: elementwise(f64, f64, lambda a, b: (a + b) / a - unary(Ops.SQRT, b) +
                                 unary(Ops.EXP2, a) + a.maximum(b) + alu(Ops.MULACC, a, b, a)),
  "f16_alu": lambda: elementwise(f16, f16, lambda a, b: (a + b) * a - b / a + unary(
    Ops.SQRT, b) + a.maximum(b) + alu(Ops.MULACC, a, b, a) + a.lt(b).where(a, b)),
  "bf16_alu": lambda: elementwise(bf16, bf16, lambda a, b: (a + b) * a - b / a + unary(
    Ops.EXP2, b) + alu(Ops.MULACC, a, b, a) + a.lt(b).where(a, -b)),
  "casts_f32": lambda: _casts(f32, [i8, u8, dtypes.int16, i32, u32, i64, u64, f16, bf16, f64,
                                    dtypes.bool]),
  "casts_i8": lambda: _casts(i8, [u8, i32, u64, f16, bf16, f32, f64, dtypes.bool]),
  "casts_u8": lambda: _casts(u8, [i8, i32, f32, f64, bf16]),
  "casts_f16": lambda: _casts(f16, [i8, i32, u32, f32, f64, bf16, dtypes.bool]),
  "casts_bf16": lambda: _casts(bf16, [i32, f16, f32, f64, dtypes.bool]),
  "casts_f64": lambda: _casts(f64, [i8, i64, u64, f16, f32]),
  "casts_bool": lambda: _casts(dtypes.bool, [i8, i32, f16, bf16, f32, f64]),
  "bitcasts": lambda: elementwise(f32, u32, lambda a, b: a.bitcast(u32) + UOp(
    Ops.BITCAST, u32, (UOp(Ops.VECTORIZE, f16.vec(2), (a.cast(f16), b.cast(f16))),))),
  "bools": _bools,
  "reduce_loop": lambda: reduce_loop(f32, UOp(Ops.VAR, i32, (), ("n", 0, 64))),
  "gated_vector": _gated_vector,
  "shared_barrier": _shared_barrier,
  "float_ne_nan": lambda: elementwise(f32, dtypes.bool, lambda a, b: a.ne(b)),
}


@pytest.mark.parametrize("arch,which", ARCHS, ids=[f"{a}-ptxas{w}" for a, w in ARCHS])
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_assembles(name, arch, which):
  ptxas_check(source(name, CORPUS[name](), arch), arch, which)


# ---- P1: header and .version per arch --------------------------------------------------------

@pytest.mark.parametrize("arch,version", [("sm_75", "7.8"), ("sm_80", "7.8"), ("sm_90", "7.8"),
                                          ("sm_100", "8.6"), ("sm_120", "8.7"), ("90", "7.8")])
def test_version_per_arch(arch, version):
  assert ptx_target.isa_version(arch) == version


def test_sm_120_gets_a_newer_version_than_sm_90_regression_string_compare():
  text = source("k", CORPUS["f32_alu"](), "sm_120")
  assert ".version 8.7" in text and ".target sm_120" in text
  # "sm_120" < "sm_90" as text
  assert ptx_target.isa_version("sm_120") != ptx_target.isa_version("sm_90")
  ptxas_check(text, "sm_120", "13")


def test_header_and_params():
  text = source("header", CORPUS["reduce_loop"](), "sm_86")
  assert ".target sm_86\n.address_size 64" in text
  assert re.search(r"\.visible \.entry header\(\n\t\.param \.u64 data0_buf_0,"
                   r"\n\t\.param \.u64 data1_buf_1,\n\t\.param \.s32 var_n\n\)", text)


def test_unknown_arch_is_a_typed_error():
  with pytest.raises(UnsupportedError, match="sm_75, sm_80"):
    ptx_target.parse_arch("sm_70")


# ---- known failure modes -------------------------------------------------------------------

def test_int8_casts_use_16bit_registers_and_wrap():
  text = source("i8", CORPUS["casts_i8"](), "sm_80")
  assert "ld.global.s8 %rs" in text          # sign-extends into the 16-bit register
  assert "cvt.s32.s8" in text and "cvt.u64.s8" in text and "cvt.u8.s8" in text
  text = source("f2i8", CORPUS["casts_f32"](), "sm_80")
  assert "cvt.rzi.s8.f32" in text and "cvt.rzi.u8.f32" in text   # saturating float->int


def test_int8_arithmetic_wraps_back_to_8_bits():
  text = source("i8alu", CORPUS["i8_alu"](), "sm_80")
  assert "add.s16" in text and "cvt.s8.s16" in text
  text = source("u8alu", CORPUS["u8_alu"](), "sm_80")
  assert "rem.u16" in text and "cvt.u8.u16" in text and "shr.u16" in text


def test_signed_and_unsigned_shift_and_division():
  signed = source("s", CORPUS["i32_alu"](), "sm_80")
  unsigned = source("u", CORPUS["u32_alu"](), "sm_80")
  assert "shr.s32" in signed and "div.s32" in signed and "rem.s32" in signed
  assert "shr.u32" in unsigned and "div.u32" in unsigned and "rem.u32" in unsigned
  assert "shr.s32" not in unsigned and "div.s32" not in unsigned


def test_float_not_equal_is_unordered_for_nan():
  text = source("ne", CORPUS["float_ne_nan"](), "sm_80")
  assert "setp.neu.f32" in text and "setp.ne.f32" not in text


def test_float_max_propagates_nan():
  text = source("max", elementwise(f32, f32, lambda a, b: a.maximum(b)), "sm_80")
  assert re.search(r"max\.f32 (%f\d+), (%f\d+), (%f\d+);\n\tsetp\.nan\.f32 (%p\d+), \2, \3;\n"
                   r"\t@\4 add\.rn\.f32 \1, \2, \3;", text)


def test_zero_trip_loop_checks_before_the_body():
  text = source("loop", CORPUS["reduce_loop"](), "sm_80")
  body = text[text.index("$Lloop_0:"):]
  lines = [line.strip() for line in body.splitlines()]
  assert lines[1].startswith("setp.ge.s32") and lines[2].startswith("@%p") and "bra $Lloop_0_end" \
      in lines[2]
  assert "bra $Lloop_0;" in text and "$Lloop_0_end:" in text
  assert text.index("ld.global.f32") > text.index("$Lloop_0:")


def test_half_ops_the_arch_lacks_are_computed_in_f32():
  text = source("h", elementwise(f16, f16, lambda a, b: unary(Ops.SQRT, a) + b), "sm_80")
  assert "cvt.f32.f16" in text and "sqrt.rn.f32" in text and "cvt.rn.f16.f32" in text
  assert "add.rn.f16" in text                     # f16 add is native
  bf_add = elementwise(bf16, bf16, lambda a, b: a + b)
  assert "add.rn.f32" in source("b80", bf_add, "sm_80") and "add.rn.bf16" not in source(
    "b80", bf_add, "sm_80")
  assert "add.rn.bf16" in source("b90", bf_add, "sm_90")


def test_bf16_conversion_on_sm_75_rounds_in_integer_ops():
  text = source("b", _casts(f32, [bf16]), "sm_75")
  assert "cvt.rn.bf16.f32" not in text and "shr.u32" in text
  assert "cvt.rn.bf16.f32" in source("b", _casts(f32, [bf16]), "sm_80")


def test_bool_is_a_byte_in_memory_and_a_predicate_in_registers():
  text = source("bools", CORPUS["bools"](), "sm_80")
  assert "ld.global.u8" in text and "setp.ne.u16" in text
  assert "selp.u16" in text and "st.global.u8" in text and "xor.pred" in text


def test_gated_load_and_vector_access():
  text = source("gv", CORPUS["gated_vector"](), "sm_80")
  assert re.search(r"@(%p\d+) ld\.global\.f32 (%f\d+), \[%rd\d+\+12\];\n\t@!\1 mov\.f32 \2, "
                   r"0fBF800000;", text)
  assert "ld.global.v4.f32" in text and "st.global.v4.f32" in text


def test_unaligned_vector_access_is_split():
  i = thread()
  vec = buf(1, f32, 256).load(i * 4 + 1, dtype=f32.vec(2))
  text = source("split", sink(buf(0, f32, 256).store(i, vec.gep(0) + vec.gep(1))), "sm_80")
  assert ".v2" not in text and text.count("ld.global.f32") == 2


def test_shared_memory_sized_in_bytes_and_barrier():
  text = source("smem", CORPUS["shared_barrier"](), "sm_80")
  assert ".shared .align 16 .b8 smem0[128];" in text and "bar.sync 0;" in text
  assert "ld.shared.f32" in text and "st.shared.f32" in text


def test_large_grid_is_folded_into_x():
  i = gid(1, 70000) * 32 + lid()
  k = ptx.render(kernel("fold", sink(buf(0, f32, 1 << 22).store(i, UOp.const(f32, 1.0)))),
                 "sm_80")
  assert k.launch.dispatch == (70000, 1, 1) and "div.u32" in k.source
  ptxas_check(k.source, "sm_80", "12")


def test_too_many_threads_is_a_limit_error():
  i = UOp(Ops.SPECIAL, i32, (), ("lid", 0, 2048))
  with pytest.raises(LimitError, match="1024"):
    ptx.render(kernel("big", sink(buf(0, f32, 2048).store(i, UOp.const(f32, 1.0)))), "sm_80")


# ---- tensor cores ----------------------------------------------------------------------------

MMA_CASES = [((16, 8, 16), f16, "sm_80"), ((16, 8, 16), bf16, "sm_80"), ((16, 8, 8), f16, "sm_75"),
             ((16, 8, 8), f32, "sm_80"), ((16, 8, 8), bf16, "sm_80")]


@pytest.mark.parametrize("shape,dt,oldest", MMA_CASES, ids=[f"m{s[0]}n{s[1]}k{s[2]}-{d}"
                                                           for s, d, _ in MMA_CASES])
def test_tensor_core_shapes_assemble_on_every_arch_that_has_them(shape, dt, oldest):
  ptx_in = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}[dt.name]
  m, n, k = shape
  for arch, which in ARCHS:
    if ptx_target.parse_arch(arch) < ptx_target.parse_arch(oldest):
      continue
    text = source("mma", wmma_kernel(shape, dt), arch)
    assert f"mma.sync.aligned.m{m}n{n}k{k}.row.col.f32.{ptx_in}.{ptx_in}.f32" in text
    ptxas_check(text, arch, which)


def test_tensor_core_shape_the_arch_lacks_is_a_typed_error():
  with pytest.raises(UnsupportedError, match=r"m16n8k16.*needs sm_80.*sm_80, sm_86"):
    ptx.legalize(wmma_kernel((16, 8, 16), f16), "sm_75")
  with pytest.raises(UnsupportedError, match="m16n8k8 float16"):
    ptx.legalize(wmma_kernel((16, 8, 8), f32), "sm_75")


# ---- names and determinism -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["r_4_4", "3d-conv kernel", "é", "", "add", "a.b$c"])
def test_kernel_names_are_valid_ptx_identifiers(name):
  text = source(name, CORPUS["f32_alu"](), "sm_80")
  entry = re.search(r"\.visible \.entry (\S+)\(", text).group(1)
  assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", entry)
  ptxas_check(text, "sm_80", "12")


def test_sanitized_names_stay_distinct():
  assert ptx_target.ptx_identifier("a-b") != ptx_target.ptx_identifier("a_b")
  assert ptx_target.ptx_identifier("r_4_4") == "r_4_4"


def test_rendering_is_deterministic():
  for name, build in CORPUS.items():
    assert source(name, build(), "sm_86") == source(name, build(), "sm_86")


def test_launch_description():
  k = ptx.render(kernel("launch", CORPUS["reduce_loop"]()), "sm_80")
  assert k.launch.target == "ptx" and k.launch.entry_point == "launch"
  assert [(b.slot, b.dtype, b.nbytes) for b in k.launch.bindings] == [(0, "float32", 256),
                                                                     (1, "float32", 256)]
  assert k.launch.uniforms == (("n", "int32"),)   # by the dim's name, as WGSL's


# ---- numbers: the rendered PTX run by the PTX simulator, compared with numpy -------------------

NUMPY = {"float16": "float16", "float32": "float32", "float64": "float64", "int8": "int8",
         "uint8": "uint8", "int16": "int16", "uint16": "uint16", "int32": "int32",
         "uint32": "uint32", "int64": "int64", "uint64": "uint64", "bool": "bool",
         "bfloat16": "uint16"}


def simulate(root: UOp, inputs: dict, arch: str = "sm_80", var_values: dict | None = None,
             fill: int = 0x5A, compiled=None) -> list:
  """Render for `arch` and run it; every buffer's contents afterwards, by slot. The PTX simulator
  runs it, or the GPU when KERNELGEN_PTX_DEVICE=CUDA (tests/gpu/run_all.py sets that)."""
  compiled = compiled or ptx.render(kernel("sim", root, arch), arch)
  initial = {spec.slot: bytes([fill]) * spec.nbytes for spec in compiled.launch.bindings}
  initial.update({slot: array.tobytes() for slot, array in inputs.items()})
  args = [(var_values or {})[v.arg[0]] for v in compiled.kernel.vars]
  run = _run_cuda if os.environ.get("KERNELGEN_PTX_DEVICE") == "CUDA" else _run_ptxsim
  contents = run(compiled, [initial[spec.slot] for spec in compiled.launch.bindings], args)
  outs = [None] * (max(initial) + 1)
  for spec, data in zip(compiled.launch.bindings, contents):
    outs[spec.slot] = np.frombuffer(data, NUMPY[spec.dtype])
  return outs


def _run_ptxsim(compiled, datas: list[bytes], args: list[int]) -> list[bytes]:
  from kernelgen import ptxsim
  memory = ptxsim.GlobalMemory()
  bufs = [memory.alloc(len(data), f"data{i}") for i, data in enumerate(datas)]
  for buffer, data in zip(bufs, datas):
    buffer.data[:] = data
  ptxsim.run(compiled.source, compiled.launch.dispatch, compiled.launch.workgroup_size,
             [b.base for b in bufs] + args, memory)
  return [bytes(b.data) for b in bufs]


def _run_cuda(compiled, datas: list[bytes], args: list[int]) -> list[bytes]:
  from kernelgen.device import Device
  runtime = Device["CUDA"]
  handles = [runtime.alloc(len(data)) for data in datas]
  for handle, data in zip(handles, datas):
    runtime.copyin(handle, data)
  names = [name for name, _ in compiled.launch.uniforms]
  runtime.run(compiled, handles, dict(zip(names, args)))
  return [runtime.copyout(h) for h in handles]


def c_div(a, b):
  """C integer division (truncate toward zero), as IR.md's IDIV."""
  q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
  return (np.where((a < 0) ^ (b < 0), -q, q)).astype(a.dtype)


SPECIAL_F32 = np.array([0.0, -0.0, 1.5, -1.5, 127.9, -128.7, 255.5, 300.0, -300.0, np.nan,
                        np.inf, -np.inf, 1e10, -1e10, 65504.0, 3.4e38] * 4, dtype=np.float32)


def test_sim_float_to_int8_saturates_and_nan_is_zero():
  from kernelgen.dtype import truncate
  outs = simulate(_casts(f32, [i8, u8, i32]), {3: SPECIAL_F32})
  for out, dt in zip(outs, (i8, u8, i32)):
    expected = np.array([truncate(float(x), dt) for x in SPECIAL_F32], NUMPY[dt.name])
    np.testing.assert_array_equal(out, expected)


def test_sim_int8_casts_and_wrapping_arithmetic():
  a = np.arange(-128, 128, 4, dtype=np.int8)
  b = np.arange(127, -129, -4, dtype=np.int8)
  wide, unsigned = simulate(_casts(i8, [i32, u8]), {2: a})[:2]
  np.testing.assert_array_equal(wide, a.astype(np.int32))
  np.testing.assert_array_equal(unsigned, a.astype(np.uint8))
  root = elementwise(i8, i8, lambda x, y: (x + y) * x - (x >> 1) + x.maximum(y))
  out = simulate(root, {1: a, 2: b})[0]
  expected = ((a + b) * a - (a >> 1) + np.maximum(a, b)).astype(np.int8)
  np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dt", [i8, u8])
def test_sim_8bit_wrapping_chain_stays_in_16_bits(dt):
  """A wrapping op (add, sub, mul, and, or, xor) of 8-bit values reads a 16-bit operand that is
  only truncated to 8 bits as it is (no truncate and re-extend between two such ops); every other
  op (shift, max, compare) still reads the 8-bit value re-extended."""
  rng = np.random.default_rng(7)
  a = rng.integers(0, 256, 64).astype(np.uint8).view(NUMPY[dt.name])
  b = rng.integers(0, 256, 64).astype(np.uint8).view(NUMPY[dt.name])
  chain = elementwise(dt, dt, lambda x, y: ((x * y + x) ^ y) - x * x)
  text = source("chain", chain)
  wide = "s16" if dt == i8 else "u16"
  assert text.count(f"cvt.{wide[0]}8.{wide}") == 1     # the result's only
  np.testing.assert_array_equal(simulate(chain, {1: a, 2: b})[0], ((a * b + a) ^ b) - a * a)
  mixed = elementwise(dt, dt, lambda x, y: ((x * y) >> 1) + (x * y).maximum(y))
  expected = ((a * b) >> 1) + np.maximum(a * b, b)
  np.testing.assert_array_equal(simulate(mixed, {1: a, 2: b})[0], expected)


@pytest.mark.parametrize("dt", [i32, u32, i64, dtypes.int16])
def test_sim_signed_and_unsigned_shift_division_remainder(dt):
  rng = np.random.default_rng(1)
  info = np.iinfo(NUMPY[dt.name])
  a = rng.integers(info.min, info.max, 64, dtype=NUMPY[dt.name], endpoint=True)
  b = rng.integers(1, 1000, 64).astype(NUMPY[dt.name]) * np.where(
    np.arange(64) % 2 == 0, 1, -1 if dt.kind == "i" else 1).astype(NUMPY[dt.name])
  x, y = buf(4, dt).load(thread()), buf(5, dt).load(thread())
  results = [x >> 3, x // y, x % y, x << 5]
  root = sink(*[buf(slot, dt).store(thread(), r) for slot, r in enumerate(results)])
  shr, div, rem, shl = simulate(root, {4: a, 5: b})[:4]
  np.testing.assert_array_equal(shr, a >> 3)
  np.testing.assert_array_equal(div, c_div(a, b))
  np.testing.assert_array_equal(rem, a - b * c_div(a, b))
  np.testing.assert_array_equal(shl, a << 5)


def test_sim_float_not_equal_with_nan():
  a = np.array([1.0, np.nan, np.nan, 2.0] * 16, dtype=np.float32)
  b = np.array([1.0, 1.0, np.nan, 3.0] * 16, dtype=np.float32)
  out = simulate(CORPUS["float_ne_nan"](), {1: a, 2: b})[0]
  np.testing.assert_array_equal(out, a != b)


def test_sim_float_max_min_propagate_nan():
  a = np.array([1.0, np.nan, 5.0, -0.5] * 16, dtype=np.float32)
  b = np.array([np.nan, 2.0, 3.0, -1.0] * 16, dtype=np.float32)
  root = sink(buf(0, f32).store(thread(), buf(2, f32).load(thread()).maximum(
    buf(3, f32).load(thread()))), buf(1, f32).store(thread(), buf(2, f32).load(
      thread()).minimum(buf(3, f32).load(thread()))))
  mx, mn = simulate(root, {2: a, 3: b})[:2]
  np.testing.assert_array_equal(mx, np.maximum(a, b))
  np.testing.assert_array_equal(mn, np.minimum(a, b))


@pytest.mark.parametrize("n", [0, -3, 1, 64])
def test_sim_loop_with_zero_trips_runs_zero_times(n):
  data = np.arange(64, dtype=np.float32)
  out = simulate(reduce_loop(f32, UOp(Ops.VAR, i32, (), ("n", -8, 64))), {1: data},
                 var_values={"n": n})[0]
  assert out[0] == data[:max(n, 0)].sum()


def reduce_with(dt, op: Ops, init, n: int = 64) -> UOp:
  """out[0] = op-reduction of inp[0..n-1], the accumulator read as the op's first operand."""
  acc = UOp(Ops.DEFINE_ACC, dt, (UOp.const(dt, init),), 0)
  r = UOp(Ops.RANGE, i32, (UOp.const(i32, n),), 0)
  update = UOp(Ops.ASSIGN, dt, (acc, alu(op, acc, buf(1, dt).load(r))))
  done = UOp(Ops.AFTER, dt, (acc, UOp(Ops.ENDRANGE, None, (r, update))))
  return sink(buf(0, dt).store(0, done))


# (dtype, op, initial value, numpy reduction, arch): legalize computes these ops wider, through
# a conversion of the accumulator that the linearizer places before the loop
WIDENED_REDUCTIONS = [(i8, Ops.MAX, -128, np.max, "sm_80"), (u8, Ops.MIN, 255, np.min, "sm_80"),
                      (i8, Ops.ADD, 0, np.sum, "sm_80"), (f16, Ops.MAX, -np.inf, np.max, "sm_90"),
                      (f16, Ops.MIN, np.inf, np.min, "sm_75"), (bf16, Ops.ADD, 0.0, None, "sm_80")]


@pytest.mark.parametrize("dt,op,init,reduce,arch", WIDENED_REDUCTIONS,
                         ids=[f"{d.name}-{o.name}" for d, o, *_ in WIDENED_REDUCTIONS])
def test_widened_accumulator_conversion_is_not_hoisted_out_of_the_loop_regression(
    dt, op, init, reduce, arch):
  """Regression: int8 max reduction gave the initial value on PTXSIM (the accumulator's
  cvt.s16.s8 was rendered once before the loop, so max compared with the initial value)."""
  rng = np.random.default_rng(7)
  data = rng.integers(-100, 100, 64) if dt.is_int() else rng.integers(-8, 8, 64) / 4
  data = data.astype(NUMPY[dt.name]) if dt != bf16 else \
    (data.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
  from kernelgen.uop.linearize import linearize, make_kernel
  uops = linearize(ptx.legalize(reduce_with(dt, op, init), arch))   # the real linearizer
  compiled = ptx.render(make_kernel("sim", uops, {}), arch)
  assert compiled.source.index("$Lloop_0:") < compiled.source.index("\tcvt.")
  out = simulate(reduce_with(dt, op, init), {1: data}, arch, compiled=compiled)[0]
  if dt == bf16:
    expected = (data.astype(np.uint32) << 16).view(np.float32).sum()
    assert (out.astype(np.uint32) << 16).view(np.float32)[0] == expected
  else:
    assert out[0] == reduce(data).astype(NUMPY[dt.name])


def test_frontend_int8_max_reduction_on_ptxsim_regression():
  import kernelgen as kg
  a = np.random.default_rng(5).integers(-100, 100, (6, 7)).astype(np.int8)
  for axis in (0, 1):
    np.testing.assert_array_equal(kg.Tensor(a, device="PTXSIM").max(axis).numpy(), a.max(axis))
    np.testing.assert_array_equal(kg.Tensor(a.view(np.uint8), device="PTXSIM").min(axis).numpy(),
                                  a.view(np.uint8).min(axis))
  h = (a / 8).astype(np.float16)
  np.testing.assert_array_equal(kg.Tensor(h, device="PTXSIM").max(1).numpy(), h.max(1))


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_sim_half_ops_match_numpy(arch):
  a = np.linspace(0.1, 60, 64).astype(np.float16)
  b = np.linspace(-3, 3, 64).astype(np.float16)
  root = elementwise(f16, f16, lambda x, y: unary(Ops.SQRT, x) + y * x - y / x)
  out = simulate(root, {1: a, 2: b}, arch)[0]
  x, y = a.astype(np.float32), b.astype(np.float32)
  expected = ((np.sqrt(x).astype(np.float16).astype(np.float32) +
               (y * x).astype(np.float16)).astype(np.float16).astype(np.float32) -
              (y / x).astype(np.float16)).astype(np.float16)
  np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_sim_bf16_rounding_and_arithmetic(arch):
  from kernelgen.dtype import bf16_bits, bf16_from_bits
  a = np.concatenate([np.linspace(-5, 5, 60), [np.nan, 1e38, 1.00390625, 1.01171875]])
  a = a.astype(np.float32)
  out = simulate(_casts(f32, [bf16]), {1: a}, arch)[0]
  np.testing.assert_array_equal(out, [bf16_bits(float(x)) for x in a])
  x = out.copy()
  summed = simulate(elementwise(bf16, bf16, lambda p, q: p + q * p), {1: x, 2: x}, arch)[0]
  values = [bf16_from_bits(int(v)) for v in x]
  expected = [bf16_bits(bf16_from_bits(bf16_bits(v * v)) + v) for v in values]
  np.testing.assert_array_equal(summed, expected)


def test_sim_bools_gated_vector_and_shared_memory():
  a = np.arange(64) % 3 == 0
  b = np.arange(64) % 2 == 0
  x = np.where(np.arange(64) % 5 == 0, np.nan, 1.0).astype(np.float32)
  outs = simulate(CORPUS["bools"](), {1: a, 2: b, 3: x})
  logic = (a ^ b) | (~a & (x != x)) | (a != b) | (a == b) | (~a & b)
  np.testing.assert_array_equal(outs[0], np.where(logic, b, a))
  np.testing.assert_array_equal(outs[4], logic.astype(np.float32))
  vec, g = np.arange(256, dtype=np.float32), np.arange(64, dtype=np.float32) * 2
  out = simulate(CORPUS["gated_vector"](), {1: vec, 2: g})[0]
  i = np.arange(64)
  gated = np.where(i < 60, g[np.minimum(i + 3, 63)], -1.0)
  np.testing.assert_array_equal(out, vec * np.repeat(gated, 4))
  data = np.arange(64, dtype=np.float32) * 3
  out = simulate(CORPUS["shared_barrier"](), {1: data})[2]
  np.testing.assert_array_equal(out[:32], data[(np.arange(32) + 1) % 32])


@pytest.mark.parametrize("shape,dt,oldest", MMA_CASES, ids=[f"m{s[0]}n{s[1]}k{s[2]}-{d}"
                                                           for s, d, _ in MMA_CASES])
def test_sim_tensor_core_fragments_match_the_interpreter_layout(shape, dt, oldest):
  from kernelgen.dtype import bf16_bits
  from kernelgen.uop.interpret import wmma_layout
  m, n, k = shape
  rng = np.random.default_rng(2)
  A = rng.integers(-8, 8, (m, k)).astype(np.float32) / 4   # exact in f16, bf16 and tf32
  B = rng.integers(-8, 8, (k, n)).astype(np.float32) / 4
  la, lb, lc = (wmma_layout(shape, operand, dt) for operand in ("a", "b", "c"))
  a_frag = np.array([A[r, c] for lane in la for r, c in lane])
  b_frag = np.array([B[r, c] for lane in lb for r, c in lane])
  encode = {"float16": lambda x: x.astype(np.float16), "float32": lambda x: x.astype(np.float32),
            "bfloat16": lambda x: np.array([bf16_bits(float(v)) for v in x], np.uint16)}[dt.name]
  pad = lambda x: np.concatenate([x, np.zeros(512 - len(x), x.dtype)])  # noqa: E731
  out = simulate(wmma_kernel(shape, dt), {1: pad(encode(a_frag)), 2: pad(encode(b_frag))},
                 oldest)[0]
  D = np.zeros((m, n), np.float32)
  for lane, positions in enumerate(lc):
    for j, (r, c) in enumerate(positions):
      D[r, c] = out[lane * 4 + j]
  np.testing.assert_array_equal(D, A @ B)


# ---- front-end programs: PTX on the simulator vs the reference interpreter, and ptxas ----------

FRONTEND_DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "uint32", "uint64",
                   "float16", "float32", "float64"]


def _frontend_program(x):
  """A small program touching arithmetic, comparisons, casts, a reduction and movement."""
  if x.dtype == dtypes.bool:
    return ((x ^ x.T.T) | x).cast(dtypes.int32).sum(axis=0)
  y = (x + x) * x - x.T.T
  if x.dtype.is_float():
    y = y.maximum(x * 0.5) / 3
  else:
    y = y // 3 + y % 5 - (y >> 1) if x.dtype.is_int() else y
  return y.sum(axis=1) + (y > x).cast(x.dtype).sum(axis=1)


@pytest.mark.parametrize("name", FRONTEND_DTYPES)
def test_frontend_program_on_ptxsim_matches_the_interpreter(name):
  import kernelgen as kg
  rng = np.random.default_rng(3)
  data = (rng.standard_normal((5, 7)) * 40).astype(name)
  got = _frontend_program(kg.Tensor(data, device="PTXSIM")).numpy()
  want = _frontend_program(kg.Tensor(data, device="PYTHON")).numpy()
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("arch,which", ARCHS, ids=[f"{a}-ptxas{w}" for a, w in ARCHS])
def test_frontend_programs_assemble(arch, which):
  import kernelgen as kg
  outputs = [_frontend_program(kg.Tensor(np.ones((5, 7), name), device="PYTHON"))
             for name in FRONTEND_DTYPES]
  half = kg.Tensor(np.ones((32, 48), "float16"), device="PYTHON")
  outputs += [half @ half.T, (half.cast(dtypes.bfloat16) * 2).cast(dtypes.float32).sum()]
  for out in outputs:
    for compiled in kg.compile(out, target="ptx", arch=arch):
      ptxas_check(compiled.source, arch, which)


def test_tensor_core_with_an_unknown_shape_or_accumulator_is_a_typed_error():
  root = wmma_kernel((16, 8, 16), f16)
  wmma = next(u for u in root.toposort() if u.op is Ops.WMMA)
  bad = UOp(Ops.WMMA, wmma.dtype, wmma.src, ("mma", (16, 8, 16), f16, f16))
  with pytest.raises(UnsupportedError, match="accumulating in float32"):
    ptx.legalize(sink(buf(0, f32, 512).store(0, bad.gep(0))), "sm_90")


def test_index_plus_a_constant_only_addressed_is_not_computed():
  """x + c read only as an access's index becomes the access's byte offset ([%rd+c]) and is not
  computed on its own; one the gate compares is."""
  import kernelgen as kg
  from kernelgen.graph import lazy
  n = 1 << 12

  def t(dt, size=n):
    return kg.Tensor(lazy.LazyOp.from_buffer(lazy.Buffer("PYTHON", dt, size), (size,)))

  (k,) = kg.compile(t(u8) + t(u8), "ptx", arch="sm_80", local=256, upcast=4)
  assert re.findall(r"\[%rd\d+\+([123])\]", k.source).count("3") == 3     # 2 loads, a store
  assert not re.search(r"add\.s32 %r\d+, %r\d+, [123];", k.source)
  # each buffer's address once (the output's 4 stores share one), the index scaled once
  assert k.source.count("add.s64") == 3 and k.source.count("mul.wide.s32") == 1
  ptxas_check(k.source, "sm_80", "12")
  (k,) = kg.compile(t(f32, 1020) * 2, "ptx", arch="sm_80", local=64, upcast=4)   # gated
  assert re.search(r"add\.s32 %r\d+, %r\d+, 3;", k.source) and "[%rd" in k.source
  ptxas_check(k.source, "sm_80", "12")


def test_same_uops_under_other_names_render_as_written_anew():
  """The renderer keeps each kernel it wrote with its names left open (render/templates.py):
  the same linearized uops under other kernel and buffer names (compiler.renamed) give exactly
  what writing them anew gives, names cleaned as always."""
  import dataclasses

  import kernelgen as kg
  first = kg.compile((kg.Tensor.empty(4, 8, name="a", device="PYTHON") * 2).sum(-1),
                     target="ptx", arch="sm_80")[0].kernel
  sources = []
  for name, names in (("other kernel", ("out 2", "a-b")), ("9", ("", "x\0y")),
                      (first.name, ("out", "a"))):
    kernel = dataclasses.replace(first, name=name, buffers=tuple(
      dataclasses.replace(b, name=n) for b, n in zip(first.buffers, names)))
    fresh = dataclasses.replace(kernel, uops=tuple(list(kernel.uops)))   # nothing kept for it
    got, want = ptx.render(kernel, "sm_80"), ptx.render(fresh, "sm_80")
    assert (got.source, got.launch) == (want.source, want.launch)
    assert "\0" not in got.source
    sources.append(got.source)
  assert "kernel 'other kernel' for" in sources[0] and "[data0_out_2]" in sources[0]
  assert ".param .u64 data1_a_b" in sources[0]
  assert "kernel '9' for" in sources[1] and "[data0]" in sources[1] and "data1_x_y" in sources[1]
