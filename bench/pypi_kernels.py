"""Where a real model's steady time goes, kernel by kernel (issue 42): the models of
bench/pypi_models.py, natively on WEBGPU, each warm call's kernels (the launches a replay
submits) dispatched one at a time and timed (GPU timestamps where the adapter has them), best of
--reps. Prints each model's kernels grouped by name, most time first: the kernel's name and
launch sizes (and "capped" where the compile budget cut its tile for a one-off run and no larger
build was swapped in yet: lowering/compile_cost.py), how many of its kind the call runs, their
total ms and their share of the call's kernel time.

With --insitu (issue 42, stop 62: "a rec 1x1 conv takes 2x inside rec"): each kernel timed both
ways in alternated rounds, alone (time_run, as above) and inside the call (every launch recorded
in one command buffer, a compute pass with its own pair of timestamps each, one submit), with the
same WGSL, pipeline and buffers; prints the median and best of each per kernel, most time first,
and the load after each round.

Not a test (no timing is asserted anywhere); say the machine's load when quoting it.

    python bench/pypi_kernels.py [--models ch_PP-OCRv4_det_infer.onnx,...] [--reps 3] [--top 15]
                                 [--cache DIR] [--dump DIR] [--insitu]
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import struct
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


def timed_in_call(runtime, launches: list) -> list:
  """Seconds of each launch dispatched in order in one submit, a timestamped pass each."""
  from kernelgen.uop.program import launch_dispatch, variant_for
  wgpu, device, n = runtime.wgpu, runtime.device, len(launches)
  queries = device.create_query_set(type=wgpu.QueryType.timestamp, count=2 * n)
  usage = wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
  resolved = device.create_buffer(size=16 * n, usage=usage)
  encoder = device.create_command_encoder()
  for i, (kernel, handles) in enumerate(launches):
    launch = variant_for(kernel, {}).launch
    pipeline, layout = runtime.pipeline(launch)
    group = runtime._bind_group(launch, layout, handles, {})
    compute = encoder.begin_compute_pass(timestamp_writes={
      "query_set": queries, "beginning_of_pass_write_index": 2 * i,
      "end_of_pass_write_index": 2 * i + 1})
    compute.set_pipeline(pipeline)
    compute.set_bind_group(0, group)
    compute.dispatch_workgroups(*launch_dispatch(launch, {}))
    compute.end()
  encoder.resolve_query_set(queries, 0, 2 * n, resolved, 0)
  device.queue.submit([encoder.finish()])
  stamps = struct.unpack(f"<{2 * n}Q", bytes(device.queue.read_buffer(resolved)))
  return [(stamps[2 * i + 1] - stamps[2 * i]) * 1e-9 for i in range(n)]


def insitu(kg, raw: bytes, label: str, reps: int, top: int) -> None:
  """Prints each of the model's top kernels' ms alone and inside the call (see --insitu)."""
  import onnxruntime as ort
  session = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
  model = kg.onnx.load(raw, float64="float32")
  launches = captured_launches(kg, model, pypi_models.feeds_for(label, session))
  runtime = kg.Device["WEBGPU"]
  if not runtime.timestamps:
    raise SystemExit("--insitu needs an adapter with timestamp queries")
  alone, inside = collections.defaultdict(list), collections.defaultdict(list)
  for r in range(reps):
    for i, (kernel, handles) in enumerate(launches):
      alone[i].append(runtime.time_run(kernel, handles, {}) * 1e3)
    for i, t in enumerate(timed_in_call(runtime, launches)):
      inside[i].append(t * 1e3)
    print(f"round {r}: alone {sum(alone[i][-1] for i in alone):.1f} ms, in the call "
          f"{sum(inside[i][-1] for i in inside):.1f} ms, load "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}", flush=True)
  med = {i: (statistics.median(alone[i]), statistics.median(inside[i])) for i in alone}
  print(f"{label}: medians summed, alone {sum(a for a, _ in med.values()):.1f} ms, in the call "
        f"{sum(b for _, b in med.values()):.1f} ms")
  for i in sorted(med, key=lambda i: -med[i][1])[:top]:
    kernel = launches[i][0]
    print(f"  #{i:<3d} alone {med[i][0]:7.2f} (best {min(alone[i]):6.2f})  in the call "
          f"{med[i][1]:7.2f} (best {min(inside[i]):6.2f}) ms  {kernel.name[:40]} "
          f"g{kernel.global_size} l{kernel.local_size}")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--models", default="ch_PP-OCRv4_det_infer.onnx,common_det.onnx")
  parser.add_argument("--reps", type=int, default=3)
  parser.add_argument("--top", type=int, default=15)
  parser.add_argument("--cache", type=Path, default=pypi_models.CACHE)
  parser.add_argument("--dump", type=Path, help="write each kernel's WGSL under DIR/MODEL/")
  parser.add_argument("--insitu", action="store_true",
                      help="each kernel alone vs inside the call's one submit, alternated")
  args = parser.parse_args()
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  wanted = args.models.split(",")
  for label, raw in pypi_models.models(list(pypi_models.PACKAGES), args.cache):
    if label.split("/")[-1] not in wanted:
      continue
    if args.insitu:
      insitu(kg, raw, label, args.reps, args.top)
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
