"""The command line: render a program's kernels to files, or export it as a bundle.

    kernelgen render PROGRAM.py --target ptx --arch sm_80 --out DIR [--output NAME]
    kernelgen export PROGRAM.py | MODEL.onnx --out DIR [--target wgsl | ptx --arch sm_XX]
    kernelgen --version

(`python -m kernelgen` is the same.) Both commands name the output language `--target` (wgsl,
ptx; render also python); `--format` (export's older spelling, with webgpu for wgsl) still works.
A failure in the user's program prints one line, `PROGRAM.py:LINE: Type: message`, with no
frames of kernelgen's own; a misspelled option gets the closest valid one.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import traceback

from . import __version__

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
TARGETS = {"wgsl": "wgsl", "webgpu": "wgsl", "ptx": "ptx", "python": "python"}  # --target aliases


class Parser(argparse.ArgumentParser):
  """argparse with a suggestion for a misspelled option (`--targt`: did you mean --target?)."""

  argv: list[str] = []   # the arguments being parsed (main sets them)

  def options(self) -> list[str]:
    """This parser's option strings, and those of the subcommand named in argv."""
    known = []
    for action in self._actions:
      known += action.option_strings
      for word in self.argv if isinstance(action, argparse._SubParsersAction) else ():
        if word in action.choices:
          known += action.choices[word].options()
          break
    return known

  def error(self, message):
    known = self.options()
    hints = []
    for word in self.argv:
      flag = word.split("=", 1)[0]
      if flag.startswith("--") and flag not in known and not any(o.startswith(flag) for o in known):
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
        hints += [f"{flag}: did you mean {close[0]}?"] if close else []
    super().error(message + "".join(f"\n  {hint}" for hint in hints))


def parser() -> argparse.ArgumentParser:
  name = "kernelgen" if os.path.basename(sys.argv[0]) == "kernelgen" else "python -m kernelgen"
  top = Parser(prog=name, description="kernelgen: tensor programs to WGSL and PTX kernels.",
               epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
  top.add_argument("--version", action="version", version=f"kernelgen {__version__}")
  sub = top.add_subparsers(dest="command", required=True, parser_class=Parser)
  render = sub.add_parser("render", help="render a program's kernels to files",
                          description="Run PROGRAM.py, compile the tensor(s) it names, and "
                          "write one source file per kernel plus manifest.json.",
                          epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
  render.add_argument("program", help="a Python file that builds tensors")
  render.add_argument("--target", "--format", dest="target", choices=list(TARGETS),
                      default="wgsl", help="the output language: wgsl, ptx or python (UOps); "
                      "webgpu is the same as wgsl")
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
    raise KernelgenError(f"the program does not define `{name}`: assign the result tensor to it "
                         f"or pass --output NAME")
  value = namespace[name]
  value = list(value.values()) if isinstance(value, dict) else value   # export's dict form too
  values = list(value) if isinstance(value, (list, tuple)) else [value]
  if not values or not all(isinstance(v, Tensor) for v in values):
    raise KernelgenError(f"`{name}` must be a Tensor, a list of Tensors or a dict name -> Tensor")
  return values


def manifest_entry(kernel, filename: str) -> dict:
  return {"name": kernel.name, "file": filename, "global_size": list(kernel.global_size),
          "local_size": list(kernel.local_size),
          "buffers": [{"slot": b.slot, "name": b.name, "dtype": b.dtype.name, "size": b.size,
                       "access": b.access} for b in kernel.buffers]}


def render(args) -> int:
  import kernelgen
  args.target = TARGETS[args.target]
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


def program_error(error: BaseException, path: str) -> str | None:
  """`PATH:LINE: Type: message` for an exception raised by the user's program at PATH (its
  innermost line of the program; `PATH: Type: message` for a kernelgen error raised after the
  program ran, while compiling); None for an exception that did not come from the program."""
  from .errors import KernelgenError
  kind = type(error).__name__
  if isinstance(error, SyntaxError) and error.filename == path:
    return f"{path}:{error.lineno}: {kind}: {error.msg}"
  lines = [n for frame, n in traceback.walk_tb(error.__traceback__)
           if frame.f_code.co_filename == path]
  if not lines and not isinstance(error, KernelgenError):
    return None
  where = f"{path}:{lines[-1]}" if lines else path
  return f"{where}: {kind}: {error}"


def main(argv=None) -> int:
  from .errors import KernelgenError
  Parser.argv = list(sys.argv[1:] if argv is None else argv)
  args = parser().parse_args(argv)
  try:
    if args.command == "export":
      from .export.cli import export_command
      return export_command(args)
    return render(args)
  except Exception as error:  # noqa: BLE001 (only the program's and kernelgen's own are caught)
    if getattr(error, "pass_name", None) and error.__cause__ is not None:   # a bug: for the report
      traceback.print_exception(error.__cause__, file=sys.stderr)
    from .export.cli import UsageError
    line = None if isinstance(error, UsageError) else program_error(error, args.program)
    if line is None and not isinstance(error, (KernelgenError, OSError)):
      raise   # neither the program's nor a typed error: a bug in kernelgen, with its traceback
    print(line or f"error: {error}", file=sys.stderr)
    return 1


if __name__ == "__main__":
  sys.exit(main())
