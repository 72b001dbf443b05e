"""Per-kernel times of one ONNX light model on device WEBGPU (wgpu-py; Mesa lavapipe here): for
each scheduled kernel, the seconds to compile it (optimize, lower, render), to build its
pipeline (the driver's shader compile) and to run it (first and second time (GPU timestamps where the adapter has
them, else wall clock to completion), its launch sizes and loop count, checked at the end against
the model's expected output. Sorted by run time; the WGSL of every kernel is written to --dump.

    nice python bench/onnx_kernel_times.py MODEL [--top N] [--dump DIR]
        MODEL: a light model's short name (squeezenet, inception_v1, densenet121 ...)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "core"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

import kernelgen as kg  # noqa: E402
from kernelgen.compiler import buffer_limit, compile_item  # noqa: E402
from kernelgen.device import Device  # noqa: E402
from kernelgen.graph.lazy import Buffer  # noqa: E402
from kernelgen.graph.schedule import schedule  # noqa: E402


def model_input(model):
  shape = tuple(d if isinstance(d, int) and d > 0 else 1
                for d in model.input_shapes[model.input_names[0]])
  n = int(np.prod(shape))
  return (np.arange(n).reshape(shape) / n).astype(np.float32)


def run_timed(tensor, dump: Path | None, stop: int | None = None) -> list[dict]:
  """Realize `tensor` kernel by kernel (as realize.py does), timing each step of each kernel."""
  runtime = Device["WEBGPU"]
  options = runtime.render_options()
  rows = []
  items = schedule([tensor.node], buffer_limit("wgsl", options))
  for i, item in enumerate(items):
    if stop is not None and i >= stop:
      break
    out = item.out
    buffer = Buffer(out.device, out.dtype, out.size)
    handles = [buffer.handle] + [src.buffer.handle for src in item.inputs]
    t0 = time.perf_counter()
    compiled = compile_item(item, "wgsl", options)
    t1 = time.perf_counter()
    runtime.pipeline(compiled.launch)
    t2 = time.perf_counter()
    bound = [handles[b.slot] for b in compiled.buffers]
    run = runtime.time_run(compiled, bound, {})
    again = runtime.time_run(compiled, bound, {})
    out.buffer, out.src = buffer, ()
    src = compiled.source
    row = {"i": i, "name": compiled.name, "compile": t1 - t0, "pipeline": t2 - t1, "run": run,
           "again": again,
           "global": compiled.global_size, "local": compiled.local_size,
           "loops": src.count("for ("), "lines": src.count("\n"), "size": out.size}
    rows.append(row)
    print(f"{i:4d} {row['name'][:48]:48s} compile {row['compile']:6.2f}  pipeline "
          f"{row['pipeline']:6.2f}  run {run:8.3f} again {again:8.3f}  out {out.size:9d} loops {row['loops']:3d} "
          f"lines {row['lines']:5d} global {compiled.global_size} local {compiled.local_size}",
          flush=True)
    if dump:
      (dump / f"{i:04d}_{compiled.name[:60]}.wgsl").write_text(src)
  return rows


def main(argv: list[str]) -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("model")
  ap.add_argument("--top", type=int, default=15)
  ap.add_argument("--dump", type=Path)
  ap.add_argument("--stop", type=int, help="only the first STOP kernels (no output check)")
  args = ap.parse_args(argv)
  import onnx_corpus
  from kernelgen.onnx.data import read_tensor_file
  path = onnx_corpus.data_dir() / "light" / f"light_{args.model}.onnx"
  started = time.perf_counter()
  model = kg.onnx.load(str(path))
  out = model.run({model.input_names[0]: model_input(model)},
                  device="WEBGPU")[model.output_names[0]]
  built = time.perf_counter()
  if args.dump:
    args.dump.mkdir(parents=True, exist_ok=True)
  rows = run_timed(out, args.dump, args.stop)
  if args.stop is not None:
    return
  got = out.numpy()
  done = time.perf_counter()
  _, _, shape, raw = read_tensor_file(str(path).replace(".onnx", "_output_0.pb"))
  want = np.frombuffer(raw, np.float32).reshape(shape)
  err = float(np.max(np.abs(got - want)))
  ok = bool(np.allclose(got, want, rtol=1e-3, atol=1e-7))
  total = {k: sum(r[k] for r in rows) for k in ("compile", "pipeline", "run")}
  print(f"\n{path.stem}: {len(rows)} kernels; build {built - started:.1f} s, compile "
        f"{total['compile']:.1f} s, pipelines {total['pipeline']:.1f} s, runs {total['run']:.1f} s,"
        f" all {done - started:.1f} s; max |error| {err:.3g}, matches: {ok}")
  print(f"slowest {args.top} runs:")
  for r in sorted(rows, key=lambda r: -r["run"])[:args.top]:
    print(f"  {r['i']:4d} {r['name'][:60]:60s} run {r['run']:8.3f} s  pipeline {r['pipeline']:6.2f}"
          f"  global {r['global']} local {r['local']}")


if __name__ == "__main__":
  main(sys.argv[1:])
