"""Helpers for the PTX simulator tests: hand-written PTX kernels and a way to run them on arrays.

`elementwise(lines, inputs, out_type)` wraps instruction lines that read `%a`, `%b`, `%c` and
write `%d` into a kernel where thread i loads element i of each input and stores `%d` to
element i of the output, in the style our renderer emits.
"""
from __future__ import annotations

import numpy as np

from kernelgen import ptxsim

HEADER = ".version 7.8\n.target sm_80\n.address_size 64\n"
# PTX type -> (register declaration, numpy dtype of memory)
PTX_TYPES = {"f32": ("f32", np.float32), "f64": ("f64", np.float64), "f16": ("b16", np.float16),
             "bf16": ("b16", np.uint16), "u8": ("b16", np.uint8), "s8": ("b16", np.int8),
             "u16": ("b16", np.uint16), "s16": ("b16", np.int16), "b16": ("b16", np.uint16),
             "u32": ("b32", np.uint32), "s32": ("b32", np.int32), "b32": ("b32", np.uint32),
             "u64": ("b64", np.uint64), "s64": ("b64", np.int64), "b64": ("b64", np.uint64)}
MEM_TYPE = {"bf16": "b16"}


def entry(name: str, params: list[str], body: str, regs: str = "") -> str:
  """A PTX module with one .visible .entry; params are `.param .u64 NAME` unless typed."""
  plist = ",\n".join(p if p.strip().startswith(".param") else f"\t.param .u64 {p}" for p in params)
  return f"{HEADER}\n.visible .entry {name}(\n{plist}\n)\n{{\n{regs}\n{body}\n}}\n"


_INDEX = """\
\tmov.u32 %i0, %ctaid.x;
\tmov.u32 %i1, %ntid.x;
\tmov.u32 %i2, %tid.x;
\tmad.lo.s32 %i3, %i0, %i1, %i2;
\tld.param.s32 %i4, [n];
\tsetp.ge.s32 %pn, %i3, %i4;
\t@%pn bra $Ldone;
"""


def _load(k: int, name: str, t: str) -> str:
  size = np.dtype(PTX_TYPES[t][1]).itemsize
  return (f"\tld.param.u64 %q{k}, [in{k}];\n\tcvta.to.global.u64 %q{k}, %q{k};\n"
          f"\tmul.wide.s32 %o{k}, %i3, {size};\n\tadd.s64 %q{k}, %q{k}, %o{k};\n"
          f"\tld.global.{MEM_TYPE.get(t, t)} {name}, [%q{k}];\n")


def elementwise_ptx(lines: str, in_types: list[str], out_type: str, extra_regs: str = "") -> str:
  names = ["%a", "%b", "%c"][:len(in_types)]
  regs = ["\t.reg .pred %pn, %p, %q;", "\t.reg .b32 %i<5>;", "\t.reg .b64 %q<4>, %o<4>;",
          f"\t.reg .{PTX_TYPES[out_type][0]} %d;", extra_regs]
  regs += [f"\t.reg .{PTX_TYPES[t][0]} {n};" for n, t in zip(names, in_types)]
  body = _INDEX + "".join(_load(k, n, t) for k, (n, t) in enumerate(zip(names, in_types)))
  body += "".join(f"\t{ln.strip()};\n" for ln in lines.split(";") if ln.strip())
  size = np.dtype(PTX_TYPES[out_type][1]).itemsize
  body += (f"\tld.param.u64 %q3, [out];\n\tcvta.to.global.u64 %q3, %q3;\n"
           f"\tmul.wide.s32 %o3, %i3, {size};\n\tadd.s64 %q3, %q3, %o3;\n"
           f"\tst.global.{MEM_TYPE.get(out_type, out_type)} [%q3], %d;\n$Ldone:\n\tret;")
  params = ["out"] + [f"in{k}" for k in range(len(in_types))] + ["\t.param .s32 n"]
  return entry("elementwise", params, body, "\n".join(regs))


def run_buffers(src: str, arrays: list, grid, block, scalars=(), check_races=True) -> list:
  """Run the first entry of `src` with one global buffer per array (in order, then scalars);
  returns the buffers' final contents as arrays of the same dtypes."""
  mem = ptxsim.GlobalMemory()
  bufs = []
  for k, arr in enumerate(arrays):
    arr = np.ascontiguousarray(arr)
    buf = mem.alloc(arr.nbytes, f"buffer{k}")
    buf.data[:] = arr.tobytes()
    bufs.append((buf, arr.dtype, arr.shape))
  ptxsim.run(src, grid, block, [b.base for b, _, _ in bufs] + list(scalars), mem,
             check_races=check_races)
  return [np.frombuffer(bytes(b.data), dtype=dt).reshape(shape) for b, dt, shape in bufs]


def elementwise(lines: str, inputs: list[tuple[str, object]], out_type: str,
                extra_regs: str = "") -> np.ndarray:
  """Run `lines` on each element of the inputs ((ptx type, values) pairs); returns %d's."""
  arrays = [np.asarray(v, dtype=PTX_TYPES[t][1]).ravel() for t, v in inputs]
  n = arrays[0].size
  out = np.zeros(n, dtype=PTX_TYPES[out_type][1])
  src = elementwise_ptx(lines, [t for t, _ in inputs], out_type, extra_regs)
  block = 64
  return run_buffers(src, [out] + arrays, (-(-n // block), 1, 1), (block, 1, 1), [n])[0]


def f32(*xs) -> np.ndarray:
  return np.array(xs, dtype=np.float32)


def bits32(x) -> np.ndarray:
  return np.asarray(x, dtype=np.float32).view(np.uint32)
