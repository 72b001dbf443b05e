"""`python -m kernelgen export`: a program (PROGRAM.py) or an ONNX model (MODEL.onnx) as a bundle.

A program names its result `out` (or `--output NAME`): a Tensor, a list, or a dict name -> Tensor;
its inputs are its `Tensor.empty(..., name=)` tensors. An ONNX model is read with kg.onnx.load;
its graph inputs become named inputs (symbolic dimensions are 1 unless --input-shape gives them).
"""
from __future__ import annotations

import argparse
import os

from ..errors import KernelgenError, UnsupportedError
from ..tensor.names import name_inputs
from ..tensor.tensor import Tensor
from .bundle import export

EXAMPLE = """example:
  $ cat prog.py
  import kernelgen as kg
  x = kg.Tensor.empty(1, 64, name="x")
  w = kg.Tensor.randn(64, 10, seed=0).realize()
  out = {"y": (x @ w).softmax(axis=-1)}
  $ python -m kernelgen export prog.py --out bundle/
  $ python -m kernelgen export prog.py --out ptx/ --format ptx --arch sm_80

webgpu: bundle/model.js (import { load } from './bundle/model.js'), one .wgsl per kernel,
weights.safetensors, manifest.json. ptx: one .ptx per kernel, weights, manifest.json; run it
with kg.load_bundle("ptx/").run({"x": ...}, device="PTXSIM" or "CUDA")."""


def add_parser(sub) -> None:
  cmd = sub.add_parser("export", help="export a program or ONNX model as a bundle",
                       description="Compile PROGRAM.py's result (or MODEL.onnx) and write a "
                       "standalone bundle: WebGPU (model.js + WGSL) or PTX.", epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
  cmd.add_argument("program", help="a Python file that builds tensors, or an .onnx model")
  cmd.add_argument("--out", required=True, help="the directory to write the bundle into")
  cmd.add_argument("--format", choices=["webgpu", "ptx"], default="webgpu")
  cmd.add_argument("--arch", default=None, help="PTX arch for --format ptx (default sm_80)")
  cmd.add_argument("--output", default="out", help="the program's variable holding the result")
  cmd.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0xD1...",
                   help="an ONNX input's shape (for symbolic dimensions), e.g. x=1x3x224x224")


def export_command(args) -> int:
  if args.arch is not None and args.format != "ptx":
    raise KernelgenError("--arch is for --format ptx: a webgpu bundle has no arch")
  if args.program.lower().endswith(".onnx"):
    outputs = onnx_outputs(args.program, parse_shapes(args.input_shape))
  else:
    outputs = program_outputs(args.program, args.output)
  bundle = export(outputs, args.out, format=args.format, arch=args.arch)
  for name in sorted(os.listdir(args.out)):
    print(os.path.join(args.out, name))
  memory = bundle.manifest["memory"]
  print(f"{len(bundle.manifest['kernels'])} kernels; inputs "
        f"{', '.join(i['name'] for i in bundle.inputs) or 'none'}; outputs "
        f"{', '.join(o['name'] for o in bundle.outputs)}; memory {memory['peak_bytes']} bytes "
        f"(all buffers: {memory['buffer_bytes']})")
  return 0


def run_program(path: str) -> dict:
  """The namespace PROGRAM.py leaves after running (as __kernelgen_program__); both CLI commands
  (render, export) read their tensors from it. Unnamed inputs take their variable's name."""
  namespace = {"__name__": "__kernelgen_program__", "__file__": path}
  with open(path, encoding="utf-8") as f:
    code = compile(f.read(), path, "exec")
  exec(code, namespace)
  name_inputs(namespace)
  return namespace


def program_outputs(path: str, name: str):
  """The value PROGRAM.py assigns to `name`: a Tensor, list/tuple or dict of Tensors."""
  namespace = run_program(path)
  if name not in namespace:
    raise KernelgenError(f"{path} does not define `{name}`: assign the result (a Tensor or a "
                         f"dict name -> Tensor) to it, or pass --output NAME")
  return namespace[name]


def parse_shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
  shapes = {}
  for item in items:
    name, _, dims = item.partition("=")
    try:
      shapes[name] = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
      raise KernelgenError(f"--input-shape {item!r}: write NAME=D0xD1..., e.g. "
                           f"x=1x3x224x224") from None
  return shapes


def onnx_outputs(path: str, shapes: dict) -> dict:
  """{output name: Tensor} of the ONNX model at `path`, its inputs Tensor.empty(name=...)."""
  try:
    from ..onnx import load
  except ModuleNotFoundError as error:
    if error.name not in ("kernelgen.onnx",):
      raise
    raise UnsupportedError("this kernelgen cannot read ONNX models yet (kg.onnx is not "
                           "installed): export a Python program instead") from None
  model = load(path)
  feeds = {}
  for name in model.input_names:
    declared = shapes.get(name) or tuple(d if isinstance(d, int) and d > 0 else 1
                                         for d in model.input_shapes.get(name) or ())
    dtype = model.input_dtypes.get(name) or "float32"
    feeds[name] = Tensor.empty(*declared, dtype=dtype, device="PYTHON", name=name)
  return model.run(feeds, device="PYTHON")
