"""The command line: render a program's kernels to files, or export it as a bundle.

    python -m kernelgen render PROGRAM.py --target ptx --arch sm_80 --out DIR [--output NAME]
    python -m kernelgen export PROGRAM.py | MODEL.onnx --out DIR [--format webgpu | ptx --arch sm_XX]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

EXAMPLE = """example:
  $ cat prog.py
  import kernelgen as kg
  x = kg.Tensor.randn(64, 32, seed=0)
  w = kg.Tensor.randn(32, 16, seed=1)
  out = (x @ w).relu()
  $ python -m kernelgen render prog.py --target ptx --arch sm_80 --out build/
  build/r_64_16__32.ptx
  build/manifest.json

The program is ordinary Python; the tensor it assigns to NAME (default `out`; a list or tuple
of tensors works too) is compiled, nothing is run. manifest.json lists the kernels in launch
order with their files, launch sizes and buffers; an input buffer is called by the variable
holding it (here `x`, `w`) unless it has a name (Tensor.empty(64, 32, name="x"))."""

SUFFIX = {"ptx": ".ptx", "wgsl": ".wgsl", "python": ".uops"}


def parser() -> argparse.ArgumentParser:
  name = "kernelgen" if os.path.basename(sys.argv[0]) == "kernelgen" else "python -m kernelgen"
  top = argparse.ArgumentParser(prog=name, description="kernelgen: tensor "
                                "programs to WGSL and PTX kernels.", epilog=EXAMPLE,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = top.add_subparsers(dest="command", required=True)
  render = sub.add_parser("render", help="render a program's kernels to files",
                          description="Run PROGRAM.py, compile the tensor(s) it names, and "
                          "write one source file per kernel plus manifest.json.",
                          epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
  render.add_argument("program", help="a Python file that builds tensors")
  render.add_argument("--target", choices=["ptx", "wgsl", "python"], default="wgsl")
  render.add_argument("--arch", default="sm_80", help="PTX arch, e.g. sm_75, sm_80, sm_90")
  render.add_argument("--out", required=True, help="the directory to write into")
  render.add_argument("--output", default="out", help="the program's variable holding the result")
  from .export.cli import add_parser
  add_parser(sub)
  return top


def load_outputs(path: str, name: str) -> list:
  from .errors import KernelgenError
  from .tensor.tensor import Tensor
  from .export.cli import run_program
  namespace = run_program(path)
  if name not in namespace:
    raise KernelgenError(f"{path} does not define `{name}`: assign the result tensor to it "
                         f"or pass --output NAME")
  value = namespace[name]
  values = list(value) if isinstance(value, (list, tuple)) else [value]
  if not values or not all(isinstance(v, Tensor) for v in values):
    raise KernelgenError(f"`{name}` must be a Tensor or a list of Tensors")
  return values


def manifest_entry(kernel, filename: str) -> dict:
  return {"name": kernel.name, "file": filename, "global_size": list(kernel.global_size),
          "local_size": list(kernel.local_size),
          "buffers": [{"slot": b.slot, "name": b.name, "dtype": b.dtype.name, "size": b.size,
                       "access": b.access} for b in kernel.buffers]}


def render(args) -> int:
  import kernelgen
  tensors = load_outputs(args.program, args.output)
  options = {"arch": args.arch} if args.target == "ptx" else {}
  kernels = kernelgen.compile(tensors, target=args.target, **options)
  os.makedirs(args.out, exist_ok=True)
  entries = []
  for k in kernels:
    filename = k.name + SUFFIX[args.target]
    with open(os.path.join(args.out, filename), "w", encoding="utf-8") as f:
      f.write(k.source)
    entries.append(manifest_entry(k, filename))
    print(os.path.join(args.out, filename))
  manifest = {"target": args.target, "arch": args.arch if args.target == "ptx" else None,
              "kernels": entries}
  with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
    json.dump(manifest, f, indent=2)
  print(os.path.join(args.out, "manifest.json"))
  return 0


def main(argv=None) -> int:
  from .errors import KernelgenError
  args = parser().parse_args(argv)
  try:
    if args.command == "export":
      from .export.cli import export_command
      return export_command(args)
    return render(args)
  except (KernelgenError, OSError) as error:
    if getattr(error, "pass_name", None) and error.__cause__ is not None:   # a bug: for the report
      traceback.print_exception(error.__cause__, file=sys.stderr)
    print(f"error: {error}", file=sys.stderr)
    return 1


if __name__ == "__main__":
  sys.exit(main())
