"""`python -m kernelgen export`: a program (PROGRAM.py) or an ONNX model (MODEL.onnx) as a bundle.

A program names its result `out` (or `--output NAME`): a Tensor, a list, or a dict name -> Tensor;
its inputs are its `Tensor.empty(..., name=)` tensors; a `state` variable ({input name: output
name}) makes those inputs state the bundle keeps between runs (export/state.py). An ONNX model is
read with kg.onnx.load; its graph inputs become named inputs (symbolic dimensions are 1 unless
--input-shape gives them:
a note on stderr names each one fixed; an --input-shape name the model lacks is an InputError).

The output language is `--target wgsl | ptx`, as for `render`; `--format webgpu | ptx` is the
older spelling and still works (webgpu is the same as wgsl).
"""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import KernelgenError, UnsupportedError
from ..tensor.names import name_inputs
from .bundle import export
from .plan import ModelOutputs
from .inputs import model_feeds


class UsageError(KernelgenError):
  """Options of the command that do not fit together (not a failure of the program)."""


# --target / --format values -> kg.export's bundle format
BUNDLE_FORMATS = {"wgsl": "webgpu", "webgpu": "webgpu", "ptx": "ptx"}

EXAMPLE = """example:
  $ cat prog.py
  import kernelgen as kg
  x = kg.Tensor.empty(1, 64, name="x")
  w = kg.Tensor.randn(64, 10, seed=0).realize()
  out = {"y": (x @ w).softmax(axis=-1)}
  $ python -m kernelgen export prog.py --out bundle/
  $ python -m kernelgen export prog.py --out ptx/ --target ptx --arch sm_80

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
  cmd.add_argument("--target", "--format", dest="target", choices=["wgsl", "ptx", "webgpu"],
                   default="wgsl", help="the output language: wgsl (a WebGPU bundle with "
                   "model.js) or ptx; --format webgpu|ptx is the older spelling")
  cmd.add_argument("--arch", default=None, help="PTX arch for --target ptx (default sm_80)")
  cmd.add_argument("--output", default="out", help="the program's variable holding the result")
  cmd.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0xD1...",
                   help="an ONNX input's shape (for symbolic dimensions), e.g. x=1x3x224x224")


def export_command(args) -> int:
  fmt = BUNDLE_FORMATS[args.target]
  if args.arch is not None and fmt != "ptx":
    raise UsageError("--arch is for --target ptx: a WebGPU (wgsl) bundle has no arch")
  if args.program.lower().endswith(".onnx"):
    outputs, state = onnx_outputs(args.program, parse_shapes(args.input_shape)), None
  else:
    if args.input_shape:
      raise UsageError("--input-shape is for ONNX models; a program's inputs have their "
                           "shapes already (Tensor.empty(..., name=))")
    outputs, state = program_outputs(args.program, args.output, with_state=True)
  bundle = export(outputs, args.out, format=fmt, arch=args.arch, state=state)
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


def program_outputs(path: str, name: str, with_state: bool = False):
  """The value PROGRAM.py assigns to `name`: a Tensor, list/tuple or dict of Tensors; with_state:
  (that, the program's `state` or None: {input: output} buffers the bundle keeps, state.py)."""
  namespace = run_program(path)
  if name not in namespace:
    raise KernelgenError(f"the program does not define `{name}`: assign the result (a Tensor or a "
                         f"dict name -> Tensor) to it, or pass --output NAME")
  return (namespace[name], namespace.get("state")) if with_state else namespace[name]


def parse_shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
  shapes = {}
  for item in items:
    name, _, dims = item.partition("=")
    if not name or not dims:
      raise UsageError(f"--input-shape {item!r}: write NAME=D0xD1..., e.g. x=1x3x224x224")
    try:
      shapes[name] = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
      raise UsageError(f"--input-shape {item!r}: write NAME=D0xD1..., e.g. "
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
  feeds, notes = model_feeds(model, shapes)
  for note in notes:
    print(f"note: {note}", file=sys.stderr)
  return ModelOutputs(model.run(feeds, device="PYTHON", replay=False))   # the lazy graph
