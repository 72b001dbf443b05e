"""Silero VAD's warm streaming call natively (issue 42): wgpu on this machine's adapter (lavapipe
here), chunk after chunk, the state fed back realized, as a Python caller streams it. Per way of
feeding `sr` (a numpy array; a kg.Tensor on PYTHON, as the page's worker feeds it; a kg.Tensor
on WEBGPU): wall and CPU ms per warm call (new chunk in, `output` read back, `stateN` realized;
medians), and how many calls were replays (onnx/replay.py: no node visited, one submit).

With `--cores A,B` (each a core/ folder, e.g. main's and a branch's) every case runs in a child
process per core, the children interleaved round after round, so both sides see the same load.
CPU ms are the steadier figure on a shared machine; loaded wall times are directions only. Not a
test (nothing is asserted); the load is printed.

Measured (silero_vad.onnx, wgpu on lavapipe, 2 CPUs shared with other jobs, load 7.8-13.1; main's
core/ against issue 42's branch, 3 interleaved runs of 30 warm calls; best / median of the runs'
medians, ms): sr as numpy, both 1.5 CPU, replayed; sr as a PYTHON Tensor, main 41.9 / 43.6 CPU
(90 / 136 wall), eager every call (Silero's If on sr == 16000 read the Equal back from the
device), branch 1.5 / 2.2 CPU (1.4 / 4.1 wall), replayed; sr as a WEBGPU Tensor, eager on both
(39-44 CPU: its host copy would cost a device round trip; not taken).

    python bench/silero_warm.py [--model silero_vad.onnx] [--calls 40] [--rounds 3]
                                [--cores /work/main/core,core] [--read output|both]
                                [--sr numpy,PYTHON,WEBGPU]

`--staging-ab` (a core with Runtime.keeps_bindings) compares, in one process, a replay that binds
each call's inputs and outputs (a bind group each launch they touch) with one that copies them
through the program's own buffers: measured (lavapipe, 2 shared CPUs, 40 blocks of 10 calls, load
9.8) host 1.20 -> 0.86 ms median per call (p25 0.91 -> 0.71), bind groups 4 -> 0 per call.

`--read both` reads `stateN` back too (a caller that keeps the state on the host): with
kg.numpy_of, where the core has it (one map), else .numpy() per output; `maps/call` is what the
runtime counted (None on a core without the counter). `host`: CPU ms of the calling thread alone
(time.thread_time: kernelgen's Python and wgpu's calls, not lavapipe's worker threads, which
`cpu` counts too): issue 34's host time per warm call.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEEL = ROOT / ".tools" / "pypi-models" / "silero_vad-6.2.3-py3-none-any.whl"
WARMUP = 6
SR = ("numpy", "PYTHON", "WEBGPU")     # how `sr` is fed


def measure(model_name: str, sr_kind: str, calls: int, read: str = "output") -> dict:
  """One case in this process: {wall_ms, cpu_ms, replays, calls, maps per call}."""
  import numpy as np

  import kernelgen as kg
  raw = zipfile.ZipFile(WHEEL).read(f"silero_vad/data/{model_name}")
  model = kg.onnx.load(raw)
  rng = np.random.default_rng(0)
  sr = np.array(16000, np.int64)
  sr = sr if sr_kind == "numpy" else kg.Tensor(sr, device=sr_kind)
  state = kg.Tensor(np.zeros((2, 1, 128), np.float32), device="WEBGPU")
  wall, cpu, host = [], [], []
  runtime = kg.Device["WEBGPU"]
  for i in range(WARMUP + calls):
    x = kg.Tensor((rng.standard_normal((1, 512)) * 0.1).astype(np.float32), device="WEBGPU")
    if i == WARMUP:
      maps = getattr(runtime, "maps", None)
    t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
    out = model.run({"input": x, "state": state, "sr": sr}, device="WEBGPU")
    if read == "both" and hasattr(kg, "numpy_of"):     # one map for both (a core that has it)
      kg.numpy_of(out["output"], out["stateN"])
    elif read == "both":
      out["output"].numpy(), out["stateN"].numpy()
    else:
      out["output"].numpy()
    state = out["stateN"].realize()
    if i >= WARMUP:
      wall.append((time.perf_counter() - t0) * 1e3)
      cpu.append((time.process_time() - c0) * 1e3)
      host.append((time.thread_time() - h0) * 1e3)
  maps = None if maps is None else (runtime.maps - maps) / calls
  return {"wall_ms": statistics.median(wall), "cpu_ms": statistics.median(cpu),
          "host_ms": statistics.median(host),
          "replays": model.replayer.replays, "calls": WARMUP + calls, "maps": maps}


def staging_ab(model_name: str, calls: int, rounds: int) -> None:
  """In this process: the model loaded twice, one recorded with the runtime's keeps_bindings off
  (a replay binds each call's inputs and outputs: a bind group per launch they touch, as before
  issue 42's staging) and one with it on (onnx/replay.py Program._stage); blocks of 10 warm
  calls alternate between them. Prints host (thread) and process CPU ms per call, bind groups
  and submits per call, and the load."""
  import numpy as np

  import kernelgen as kg
  from kernelgen.runtime.webgpu_native import WebGPURuntime
  raw = zipfile.ZipFile(WHEEL).read(f"silero_vad/data/{model_name}")
  runtime, rng, sr = kg.Device["WEBGPU"], np.random.default_rng(0), np.array(16000, np.int64)

  def caller(keeps: bool):
    WebGPURuntime.keeps_bindings = keeps      # (read when a call is recorded)
    model = kg.onnx.load(raw)
    state = [kg.Tensor(np.zeros((2, 1, 128), np.float32), device="WEBGPU")]

    def call():
      x = kg.Tensor((rng.standard_normal((1, 512)) * 0.1).astype(np.float32), device="WEBGPU")
      out = model.run({"input": x, "state": state[0], "sr": sr}, device="WEBGPU")
      kg.numpy_of(out["output"], out["stateN"])
      state[0] = out["stateN"]
    for _ in range(WARMUP):
      call()
    return call
  sides = {"bind per call": caller(False), "staged": caller(True)}
  WebGPURuntime.keeps_bindings = True
  got = {name: ([], [], [0, 0]) for name in sides}
  load = os.getloadavg()
  for r in range(rounds):
    for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
      host, cpu, counts = got[name]
      for _ in range(calls):
        groups, submits = runtime.bind_groups, runtime.submits
        h0, c0 = time.thread_time(), time.process_time()
        sides[name]()
        host.append((time.thread_time() - h0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
        counts[0] += runtime.bind_groups - groups
        counts[1] += runtime.submits - submits
  print(f"{model_name}: {rounds} alternated blocks of {calls} warm calls per side, one process")
  for name, (host, cpu, (groups, submits)) in got.items():
    print(f"{name:14} host ms median {statistics.median(host):.3f} "
          f"p25 {statistics.quantiles(host, n=4)[0]:.3f}  cpu ms median "
          f"{statistics.median(cpu):.3f}  bind groups/call {groups / len(host):.1f}  "
          f"submits/call {submits / len(host):.1f}")
  print(f"load averages: start {load}, end {os.getloadavg()}")


def child(core: str, model_name: str, sr_kind: str, calls: int, read: str) -> dict:
  env = {**os.environ, "PYTHONPATH": str(Path(core).resolve())}
  done = subprocess.run([sys.executable, __file__, "--child", sr_kind, "--model", model_name,
                         "--calls", str(calls), "--read", read], env=env, capture_output=True,
                        text=True,
                        check=True)
  return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", default="silero_vad.onnx")
  parser.add_argument("--calls", type=int, default=40)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--cores", default=str(ROOT / "core"), help="core/ folders, comma-separated")
  parser.add_argument("--child", choices=SR, help=argparse.SUPPRESS)
  parser.add_argument("--read", choices=("output", "both"), default="output",
                      help="outputs read back per call (both: kg.numpy_of where the core has it)")
  parser.add_argument("--sr", default=",".join(SR), help="ways of feeding sr, comma-separated")
  parser.add_argument("--staging-ab", action="store_true",
                      help="this core only: replays binding each call's buffers against staged "
                           "ones, alternated in one process (--calls per block, --rounds blocks)")
  args = parser.parse_args(argv)
  if args.staging_ab:
    staging_ab(args.model, args.calls, args.rounds)
    return 0
  if args.child:
    print(json.dumps(measure(args.model, args.child, args.calls, args.read)))
    return 0
  cores = args.cores.split(",")
  kinds = args.sr.split(",")
  rows = {(c, s): [] for c in cores for s in kinds}
  start = os.getloadavg()
  for r in range(args.rounds):
    for sr_kind in kinds:
      for core in (cores if r % 2 == 0 else cores[::-1]):
        rows[core, sr_kind].append(child(core, args.model, sr_kind, args.calls, args.read))
  print(f"{args.model}: warm calls natively, ms per call (median of {args.calls} per run; "
        f"best / median over {args.rounds} interleaved runs)")
  print(f"{'core':40} {'sr fed as':10} {'wall best':>9} {'wall med':>9} {'cpu best':>9} "
        f"{'cpu med':>9} {'host best':>9} {'host med':>9} {'replays':>8} {'maps/call':>9}")
  for (core, sr_kind), runs in rows.items():
    wall, cpu, host = ([x[k] for x in runs] for k in ("wall_ms", "cpu_ms", "host_ms"))
    print(f"{core[-40:]:40} {sr_kind:10} {min(wall):9.2f} {statistics.median(wall):9.2f} "
          f"{min(cpu):9.2f} {statistics.median(cpu):9.2f} "
          f"{min(host):9.2f} {statistics.median(host):9.2f} "
          f"{runs[-1]['replays']:>4}/{runs[-1]['calls']} {runs[-1].get('maps')!s:>9}")
  print(f"load averages: start {start}, end {os.getloadavg()}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
