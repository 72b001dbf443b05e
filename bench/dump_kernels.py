"""Every kernel's source for a fixed corpus, written to a folder: a refactor's byte-identity check.

    python bench/dump_kernels.py OUT_DIR [--seeds N]
    diff -r BEFORE_DIR AFTER_DIR        # clean when the refactor changed no generated code

The corpus: the fuzzer's seeded programs 0..N-1, 600 by default (tests/helpers/fuzz_runner.py's
program_for: random, sized and deep programs as `./build.sh fuzz` makes them), each compiled for
python, wgsl and ptx (the arch fuzz_runner picks for the seed), plus the bench kernels
(compile_latency.KERNELS and the peers.py rows at their tiny sizes) for python, wgsl and ptx
sm_80, and a few symbolic kernels (_symbolic_corpus). One file per kernel, and one per variant of
a symbolic kernel (lowering/variants.py: its dim and range first); a compile that raises writes the error's type and first line instead.

    --adapter NAME[,NAME...]  also compile every wgsl kernel with adapter=NAME (the adapter table's
                              options: render/wgsl/adapters.py), into files marked with the name
    --light MODEL[,MODEL...]  also the light ONNX models' kernels (tests/helpers/onnx_corpus.py)
    --runs N                  compile every --adapter kernel with runs=N (lowering/compile_cost.py:
                              N=100, RUNS_MANY, is a kept plan's steady state; 1, the default,
                              a one-off run's kernels, capped by the compile budget)
    --subgroups               compile every --adapter kernel with subgroups=True (as a device with
                              the feature: the tables' quad_weights then apply, quad_share.py)
    --cached                  compile through the compile cache (cache.cached_compile, as realize
                              does: a kernel of the same structure as an earlier one is rendered
                              from it) instead of kg.compile; the files must not change
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "core"))
sys.path.insert(0, str(ROOT / "bench"))
for sub in ("tests/helpers",):
  sys.path.insert(0, str(ROOT / sub))

import numpy as np  # noqa: E402

import kernelgen as kg  # noqa: E402


OPTIONS = {"adapters": [], "cached": False, "runs": 0, "subgroups": False}


def _compile(tensor, target: str, arch: str | None, options: dict) -> list:
  """kg.compile's kernels, or with --cached the compile cache's for the same schedule."""
  if not OPTIONS["cached"]:
    return kg.compile(tensor, target=target, arch=arch, **options)
  from kernelgen.cache import cached_compile
  from kernelgen.graph.schedule import row_limit, schedule
  from kernelgen.render.targets import get_target
  t = get_target(target)
  options = dict(t.check_options({**options, **({"arch": arch} if arch else {})}))
  items = schedule([tensor.node], t.buffer_limit(options), row_limit(options))
  return [cached_compile(item, t, options) for item in items if item.out.size]


def write(out: Path, stem: str, tensor_fn, target: str, arch: str | None) -> int:
  """Compile `tensor_fn()` for the target (and with each --adapter for wgsl); write each kernel
  (or the error); the kernel count."""
  count = _write(out, stem, tensor_fn, target, arch, {})
  for adapter in OPTIONS["adapters"] if target == "wgsl" else ():
    runs = {"runs": OPTIONS["runs"]} if OPTIONS["runs"] else {}
    runs.update({"subgroups": True} if OPTIONS["subgroups"] else {})
    count += _write(out, f"{stem}-{adapter}", tensor_fn, target, arch, {"adapter": adapter, **runs})
  return count


def _write(out: Path, stem: str, tensor_fn, target: str, arch: str | None, options: dict) -> int:
  try:
    kernels = _compile(tensor_fn(), target, arch, options)
  except Exception as error:  # noqa: BLE001 - the error itself is part of the output
    first = (str(error).splitlines() or [""])[0]
    (out / f"{stem}.error").write_text(f"{type(error).__name__}: {first}\n")
    return 0
  for i, kernel in enumerate(kernels):
    (out / f"{stem}.{i:02d}.{kernel.name}.src").write_text(kernel.source)
    for j, (dim, most, variant) in enumerate(getattr(kernel, "variants", ()) or (), 1):
      (out / f"{stem}.{i:02d}.{kernel.name}.v{j}.src").write_text(
        f"// variant for {dim} <= {most}\n{variant.source}")
  return len(kernels)


def targets_for(arch: str) -> list:
  return [("python", None), ("wgsl", None), ("ptx", arch)]


def dump_fuzz(out: Path, seeds: int) -> int:
  from fuzz_programs import RandomChooser
  from fuzz_runner import PTX_ARCHS, build, program_for
  count = 0
  for seed in range(seeds):
    program = program_for(seed, RandomChooser(seed))
    for target, arch in targets_for(PTX_ARCHS[seed % len(PTX_ARCHS)]):
      stem = f"fuzz{seed:04d}.{target}{'-' + arch if arch else ''}"
      count += write(out, stem, lambda: build(program, "PYTHON"), target, arch)
  return count


def dump_bench(out: Path) -> int:
  import compile_latency
  import peers
  from kernelgen.dtype import dtypes
  count = 0
  maker = compile_latency._Maker(
    lambda shape, name: kg.Tensor.empty(*shape, dtype=name, device="PYTHON"), dtypes.from_name)
  for name, source in compile_latency.KERNELS.items():
    slug = "latency-" + "".join(ch if ch.isalnum() else "_" for ch in name)
    for target, arch in targets_for("sm_80"):
      count += write(out, f"{slug}.{target}", lambda: maker.build(source), target, arch)
  for name, row in peers.rows(np, tiny=True).items():
    def expr(row=row):
      tensors = [kg.Tensor(a, device="PYTHON") for a in row["inputs"]]
      return row["lib"](peers.KernelgenLib(), *tensors)
    slug = "peers-" + "".join(ch if ch.isalnum() else "_" for ch in name)
    for target, arch in targets_for("sm_80"):
      count += write(out, f"{slug}.{target}", expr, target, arch)
  return count


def _symbolic_corpus() -> dict:
  """Kernels over a symbolic dim (issue 34; bench/symbolic_static.py's workloads at small sizes,
  and a leading dim masked before a reduction), whose variants the files hold too."""
  def empty(*shape, name="x"):
    return kg.Tensor.empty(*shape, device="PYTHON", name=name)
  dim = lambda hi: kg.Dim("n", 1, hi)       # noqa: E731
  return {
    "matmul_m": lambda: empty(dim(2048), 512) @ empty(512, 512, name="w"),
    "matmul_m_small": lambda: empty(dim(256), 16) @ empty(16, 64, name="w"),
    "matmul_n": lambda: empty(64, 512, name="a") @ empty(512, dim(2048)),
    "matmul_k": lambda: (lambda x: x @ x.T)(empty(64, dim(2048))),
    "matmul_m_relu": lambda: (empty(dim(512), 64) @ empty(64, 96, name="w")).relu() + 1,
    "softmax_rows": lambda: empty(64, dim(4096)).softmax(-1),
    "softmax_leading": lambda: (empty(dim(256), 16) @ empty(16, 64, name="w")).softmax(0),
    "sdpa": lambda: (lambda kv: kg.scaled_dot_product_attention(empty(1, 8, 1, 64, name="q"), kv,
                                                                kv))(empty(1, 8, dim(2048), 64)),
  }


def dump_symbolic(out: Path) -> int:
  count = 0
  for name, fn in _symbolic_corpus().items():
    for target, arch in targets_for("sm_80"):
      count += write(out, f"symbolic-{name}.{target}", fn, target, arch)
  return count


def dump_light(out: Path, models: list) -> int:
  """The kernels of the light ONNX models `models` (short names, as bench/onnx_light_native.py)."""
  import onnx_corpus
  count = 0
  for name in models:
    model = kg.onnx.load(str(onnx_corpus.data_dir() / "light" / f"light_{name}.onnx"))
    shape = tuple(d if isinstance(d, int) and d > 0 else 1
                  for d in model.input_shapes[model.input_names[0]])

    def expr(model=model, shape=shape):
      x = kg.Tensor.empty(*shape, device="PYTHON")
      return model.run({model.input_names[0]: x}, device="PYTHON")[model.output_names[0]]
    for target, arch in targets_for("sm_80")[1:]:
      count += write(out, f"light-{name}.{target}", expr, target, arch)
  return count


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("out")
  parser.add_argument("--seeds", type=int, default=600)
  parser.add_argument("--adapter", default="")
  parser.add_argument("--light", default="")
  parser.add_argument("--cached", action="store_true")
  parser.add_argument("--runs", type=int, default=0)
  parser.add_argument("--subgroups", action="store_true")
  args = parser.parse_args(argv)
  OPTIONS["adapters"] = [a for a in args.adapter.split(",") if a]
  OPTIONS["cached"] = args.cached
  OPTIONS["runs"] = args.runs
  OPTIONS["subgroups"] = args.subgroups
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  fuzz, bench = dump_fuzz(out, args.seeds), dump_bench(out)
  bench += dump_light(out, [m for m in args.light.split(",") if m]) + dump_symbolic(out)
  errors = len(list(out.glob("*.error")))
  print(f"{fuzz} fuzz kernels, {bench} bench kernels, {errors} compile errors -> {out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
