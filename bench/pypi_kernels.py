"""Where a real model's steady time goes, kernel by kernel (issue 42): the models of
bench/pypi_models.py, natively on WEBGPU, each warm call's kernels (the launches a replay
submits) dispatched one at a time and timed (GPU timestamps where the adapter has them), best of
--reps. Prints each model's kernels grouped by name, most time first: the kernel's name and
launch sizes (and "capped" where the compile budget cut its tile for a one-off run and no larger
build was swapped in yet: lowering/compile_cost.py), how many of its kind the call runs, their
total ms and their share of the call's kernel time.

Not a test (no timing is asserted anywhere); say the machine's load when quoting it.

    python bench/pypi_kernels.py [--models ch_PP-OCRv4_det_infer.onnx,...] [--reps 3] [--top 15]
                                 [--cache DIR] [--dump DIR]
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import pypi_models  # noqa: E402  (the wheels, the inputs)


def captured_launches(kg, model, feeds: dict) -> list:
  """[(kernel, handles)] a warm call submits (recorded, then replayed once with them caught)."""
  for _ in range(3):
    pypi_models.read(model.run(feeds, device="WEBGPU"), model)
  runtime, caught = kg.Device["WEBGPU"], []
  many = runtime.run_many

  def catch(launches, *a):
    caught.extend((kernel, handles) for kernel, handles, _ in launches)
    return many(launches, *a)
  runtime.run_many = catch
  try:
    pypi_models.read(model.run(feeds, device="WEBGPU"), model)
  finally:
    del runtime.run_many
  return caught


def profile(kg, raw: bytes, label: str, reps: int, dump: Path | None) -> list:
  """[(name and launch sizes, count, total seconds)] of one model's warm-call kernels, most time
  first."""
  import onnxruntime as ort
  session = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
  model = kg.onnx.load(raw, float64="float32")
  launches = captured_launches(kg, model, pypi_models.feeds_for(label, session))
  runtime = kg.Device["WEBGPU"]
  totals, counts = collections.Counter(), collections.Counter()
  for i, (kernel, handles) in enumerate(launches):
    best = min(runtime.time_run(kernel, handles, {}) for _ in range(reps))
    key = f"{kernel.name} g{kernel.global_size} l{kernel.local_size}" + \
      (" capped" if kernel.capped else "")
    totals[key] += best
    counts[key] += 1
    if dump:
      dump.mkdir(parents=True, exist_ok=True)
      (dump / f"{i:04d}_{kernel.name[:60]}.wgsl").write_text(kernel.source)
  return [(key, counts[key], t) for key, t in totals.most_common()]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--models", default="ch_PP-OCRv4_det_infer.onnx,common_det.onnx")
  parser.add_argument("--reps", type=int, default=3)
  parser.add_argument("--top", type=int, default=15)
  parser.add_argument("--cache", type=Path, default=pypi_models.CACHE)
  parser.add_argument("--dump", type=Path, help="write each kernel's WGSL under DIR/MODEL/")
  args = parser.parse_args()
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  wanted = args.models.split(",")
  for label, raw in pypi_models.models(list(pypi_models.PACKAGES), args.cache):
    if label.split("/")[-1] not in wanted:
      continue
    dump = args.dump / Path(label).stem if args.dump else None
    rows = profile(kg, raw, label, args.reps, dump)
    total = sum(t for _, _, t in rows)
    print(f"{label}: {sum(c for _, c, _ in rows)} kernels, {total * 1e3:.1f} ms of kernel time "
          f"(best of {args.reps} each, one at a time)")
    for name, count, t in rows[:args.top]:
      print(f"  {t * 1e3:8.2f} ms {100 * t / total:5.1f} %  x{count:<3d} {name[:110]}")


if __name__ == "__main__":
  main()
