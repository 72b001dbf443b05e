"""Kernels with several outputs (graph/join.py), measured: one ONNX LSTM layer (Silero VAD's cell
size by default: hidden 128, input 64, batch 1) run on WEBGPU natively (lavapipe), each call a
replay of the recorded kernels (onnx/replay.py), against the same script under another core (e.g.
a `git archive` of main, where each step is a c' kernel and an h' kernel), interleaved: A B A B
... in fresh processes, each printing its kernel count, outputs checked against numpy, and per
call the median wall ms and CPU ms (this process's user + system: the driver's threads run the
kernels) of CALLS calls after WARM warm-up calls, and the call's kernels each timed alone (GPU
timestamps on lavapipe natively), best of 5 per kernel, summed. Loaded wall times are directions
only: the load average is printed with each row.

Measured (issue 42's branch mo35 against main, 3 interleaved rounds, lavapipe, 2 CPUs shared
with other jobs, load 3.8-5.0): seq 8, hidden 128 (Silero's cell): 20 -> 12 kernels, GPU ms
2.50 / 1.07 / 1.08 -> 1.41 / 0.88 / 0.80, wall ms per replayed call 9.2 / 3.2 / 5.6 -> 4.7 / 2.8
/ 2.2; seq 20, hidden 256: 46 -> 26 kernels, GPU ms 13.9 / 13.7 / 12.2 -> 9.9 / 6.9 / 9.8, wall
17.2 / 17.1 / 23.6 -> 14.1 / 14.1 / 15.3. Outputs within 1.3e-6 of numpy on both.

    python bench/join_outputs_ab.py --cores /tmp/main/core,core [--rounds 3] [--seq 8]
                                    [--hidden 128] [--adapter lavapipe|swiftshader]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ICDS = {"lavapipe": "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
        "swiftshader": "/usr/lib/chromium/vk_swiftshader_icd.json"}
WARM, CALLS = 3, 15


def _model(seq: int, width: int, hidden: int):
  """An ONNX LSTM node (forward, batch 1) with random weights and h0, c0 inputs."""
  import numpy as np
  import onnx
  from onnx import helper, numpy_helper
  rng = np.random.default_rng(0)
  inits = {"w": rng.standard_normal((1, 4 * hidden, width), np.float32) * 0.2,
           "r": rng.standard_normal((1, 4 * hidden, hidden), np.float32) * 0.2,
           "b": rng.standard_normal((1, 8 * hidden), np.float32) * 0.1}
  feeds = {"x": rng.standard_normal((seq, 1, width), np.float32),
           "h0": rng.standard_normal((1, 1, hidden), np.float32),
           "c0": rng.standard_normal((1, 1, hidden), np.float32)}
  node = helper.make_node("LSTM", ["x", "w", "r", "b", "", "h0", "c0"], ["y", "yh", "yc"],
                          hidden_size=hidden)
  vis = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, a.shape)
         for n, a in feeds.items()]
  outs = [onnx.ValueInfoProto(name=n) for n in ("y", "yh", "yc")]
  graph = helper.make_graph([node], "g", vis, outs,
                            [numpy_helper.from_array(v, n) for n, v in inits.items()])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
  return model.SerializeToString(), feeds, inits


def _numpy(feeds: dict, inits: dict):
  import numpy as np
  w, r, b = inits["w"][0], inits["r"][0], inits["b"][0]
  h, c = feeds["h0"][0].astype(np.float64), feeds["c0"][0].astype(np.float64)
  sig = lambda v: 1 / (1 + np.exp(-v))
  for x in feeds["x"]:
    g = x @ w.T + h @ r.T + b[:w.shape[0]] + b[w.shape[0]:]
    i, o, f, z = np.split(g, 4, axis=-1)        # ONNX gate order: i, o, f, c
    c = sig(f) * c + sig(i) * np.tanh(z)
    h = sig(o) * np.tanh(c)
  return h, c


def child(seq: int, width: int, hidden: int) -> None:
  import numpy as np
  import kernelgen as kg
  from kernelgen.compiler import compile_plan
  raw, feeds, inits = _model(seq, width, hidden)
  model = kg.onnx.load(raw)
  outs = model.run(feeds, device="PYTHON", replay=False)
  kernels = len(compile_plan([outs[n].node for n in model.output_names], "wgsl"))
  want_h, want_c = _numpy(feeds, inits)
  walls, cpus, err = [], [], 0.0
  for n in range(WARM + CALLS):
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    got = model.run(feeds, device="WEBGPU")
    yh, yc = got["yh"].numpy(), got["yc"].numpy()
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    if n >= WARM:
      walls.append((t1 - t0) * 1e3)
      cpus.append((r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e3)
    err = max(err, float(np.abs(yh[0, 0] - want_h).max()), float(np.abs(yc[0, 0] - want_c).max()))
  gpu, stamped, timed = _kernel_ms(model, feeds)
  print(f"kernels {kernels} wall_ms {statistics.median(walls):.2f} cpu_ms "
        f"{statistics.median(cpus):.2f} {'gpu' if stamped else 'timed'}_ms {gpu:.3f} "
        f"({timed} kernels) "
        f"max_err {err:.1e}", flush=True)


def _kernel_ms(model, feeds) -> tuple[float, bool, int]:
  """The call's kernels each timed alone (Runtime.time_run: GPU timestamps where the adapter
  has them, else wall up to a read-back), best of 5 per kernel, summed; whether timestamps; how
  many kernels were timed."""
  from kernelgen import realize as realizing
  outs = model.run(feeds, device="WEBGPU", replay=False)     # lazy outputs: realized below
  launches = realizing.recording = []
  try:
    realizing.realize([t.node for t in outs.values()])
  finally:
    realizing.recording = None
  total = 0.0
  for runtime, kernel, _, bound in launches:
    handles = [b.handle for b in bound]
    total += min(runtime.time_run(kernel, handles, {}) for _ in range(5))
  return total * 1e3, bool(launches and launches[0][0].timestamps), len(launches)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--cores", required=True, help="core folders, comma-separated (A,B)")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--seq", type=int, default=8)
  parser.add_argument("--width", type=int, default=64)
  parser.add_argument("--hidden", type=int, default=128)
  parser.add_argument("--adapter", default="lavapipe", choices=sorted(ICDS))
  parser.add_argument("--child", action="store_true")
  args = parser.parse_args()
  if args.child:
    child(args.seq, args.width, args.hidden)
    return
  cores = [str(Path(c).resolve()) for c in args.cores.split(",")]
  print(f"LSTM seq {args.seq} input {args.width} hidden {args.hidden} batch 1, {args.adapter}, "
        f"{os.cpu_count()} CPUs; per call, median of {CALLS} after {WARM} warm-up", flush=True)
  for rnd in range(args.rounds):
    for core in cores:
      env = {**os.environ, "PYTHONPATH": core, "VK_ICD_FILENAMES": ICDS[args.adapter]}
      out = subprocess.run([sys.executable, __file__, "--child", "--cores", core,
                            "--seq", str(args.seq), "--width", str(args.width),
                            "--hidden", str(args.hidden)], env=env, capture_output=True,
                           text=True, timeout=900)
      line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-400:]
      load = " ".join(f"{v:.1f}" for v in os.getloadavg())
      print(f"round {rnd} {core}: {line} (load {load})", flush=True)


if __name__ == "__main__":
  main()
