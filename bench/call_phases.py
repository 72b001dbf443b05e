"""Where a warm call of an exported bundle spends its time in the page (issue 42's Silero VAD
goal: at most 3 ms per 32 ms chunk): bundles kept by `bench/pypi_page.py --keep DIR`, each loaded
by its model.js on one adapter's device in Chromium (SwiftShader; lavapipe through ANGLE,
compatibility mode) and called as a page calls it, with the device's queue and the bundle's
readback wrapped by the bench page (bench/web/call_phases.js) to stamp each WebGPU call with
performance.now(). Per warm call, medians (ms): `before` (run() to submit: input checks, buffer
writes, encoding), `submit` (the submit call itself: on a busy machine the GPU process's threads
take the CPU from the page here), `wait` (submit's return to the readback mapped), `after`
(mapped to run()'s result: the outputs copied out). Beside it, interleaved round by round, the
adapter's floors: one copy and one map with no dispatch (`0 dispatches`), and K trivial
dispatches (one thread storing one value) before them, K = 1 and each bundle's kernel count: what
a call of that many dispatches costs whatever its kernels do. Where the adapter has timestamp
queries (SwiftShader), the kernels' GPU time too: the bundle loaded again with a timed pass per
kernel, best of the runs. Several bundles (`--bundles A,B`: e.g. main's export and a branch's,
kept in one folder) are timed in the same rounds, the order turning each round. Not a test
(nothing is asserted); the load is printed with each table.

    python bench/call_phases.py --keep DIR --bundles silero_vad-swiftshader-b10[,...]
                                [--adapters swiftshader,lavapipe] [--rounds 30] [--gpu-runs 20]

Measured (Silero VAD, silero_vad.onnx as pypi_page.py exports it: 8 kernels, each one
workgroup; 2 CPUs shared with other jobs, load 9-11; 20-40 rounds; median / best ms): SwiftShader
call 3.8-6.2 / 2.6-3.1, of it before 0.16-0.19, submit 1.6-2.1, wait 2.3-3.4, after 0.09-0.11
(the page's own JavaScript about 0.3 ms); kernels' GPU time 1.65-1.67 (STFT conv 0.50, LSTM step
0.44-0.49, first encoder conv 0.28); floors: no dispatch 0.8 / 0.65, 1 dispatch 0.9 / 0.7, 8
trivial dispatches 2.9-3.4 / 0.8-0.9. On SwiftShader a call's time is bimodal, about 1 ms or 3 ms
and more: 1-4 trivial dispatches are mostly fast, 9 or more mostly slow, Silero always slow (its
kernels outlast the first readback check). lavapipe: call 2.4-3.8 / 1.9-3.0, before 0.16-0.20,
submit 0.07-0.77, wait 1.9-2.7, after 0.07-0.12; floors 0.9-1.2 (no dispatch), 1.3-1.8 (8
trivial dispatches: about 0.04 ms a dispatch). Tried on copies of the bundle (not shipped): the
LSTM step and the STFT conv spread over 8 and 3 workgroups: kernels' GPU time 1.38 / 1.36 against
1.39 / 1.41 (load 10: the second core is busy anyway); the state's concat kernel folded into the
LSTM step (7 dispatches): 4.74 / 2.64 against 4.62 / 2.64 on SwiftShader, 2.37 / 1.88 against
2.39 / 1.89 on lavapipe; a queue write every 0.25 ms while the map is pending (to wake the GPU
process sooner): 8 trivial dispatches 2.95 -> 1.9 on SwiftShader, but Silero 7.6 -> 11.2 and
lavapipe worse too (the loop takes CPU from the GPU process).
The kernels run at SwiftShader's one-core rate (about 0.34 GMAC/s here: 1.65 ms for Silero's
~0.56 M multiply-adds): a lone 512 x 256 matvec like the LSTM step's, 128 threads of one
workgroup, takes 0.42 ms (GPU, best of 40, load 12); its weights transposed and read as vec4
along the outputs (32 threads) 0.37, scalar loads of consecutive lanes 0.64.

A bundle folder's name starts with its model's tag (`silero_vad-...`), and its inputs are
DIR/<tag>-<input>.kg.bin (pypi_page.py's layout); a bundle whose name holds another adapter's
name is skipped on that adapter.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from peers import ADAPTERS  # noqa: E402

SETTLE_MS = 30
PHASES = ("ms", "before", "submit", "wait", "after")


def mounts(keep: Path) -> dict:
  """The bench server's folders: the bench page under bench/, the bundles under data/."""
  return {"/bench/": ROOT / "bench", "/data/": keep}


def bundle_files(server, keep: Path, name: str) -> tuple:
  """(its inputs for the page: [{name, dtype, file}], the outputs a call reads: not the state)"""
  spec = json.loads((keep / name / "manifest.json").read_text())
  kept = {s["name"] for s in spec.get("state", [])}
  tag = name.split("-")[0]
  files = [{"name": i["name"], "dtype": i["dtype"],
            "file": server.url(f"data/{tag}-{i['name']}.kg.bin")}
           for i in spec["inputs"] if i["name"] not in kept]
  state_out = {s["output"] for s in spec.get("state", [])}
  return files, [o["name"] for o in spec["outputs"] if o["name"] not in state_out]


def summary(values: list) -> str:
  ordered = sorted(values)
  return (f"{statistics.median(ordered):6.2f} {ordered[0]:6.2f} "
          f"{ordered[len(ordered) // 4]:6.2f}")


def measure(page, server, keep: Path, bundles: list, rounds: int, gpu_runs: int = 0) -> dict:
  """`bundles` (folders in `keep`, served under data/) on the bench page `page`, timed in
  `rounds` interleaved rounds beside the floors: {adapter, load: (start, end), samples: {case:
  [per call: {ms, and for a bundle before, submit, wait, after, calls}]}, gpu: {bundle: best
  timestamped run or None}}."""
  cases, kernels, got = [], {1}, {}
  for name in bundles:
    files, read = bundle_files(server, keep, name)
    got = page.evaluate("([k, b, f, r]) => window.phases.prepare(k, b, f, r, 5)",
                        [name, server.url(f"data/{name}/"), files, read])
    cases.append(name)
    kernels.add(got["kernels"])
  cases += [f"{k} dispatches" for k in sorted(kernels | {0})]
  start = os.getloadavg()
  samples = {c: [] for c in cases}
  for r in range(rounds):
    order = cases[r % len(cases):] + cases[:r % len(cases)]
    for case, value in page.evaluate("([o, s]) => window.phases.round(o, s)",
                                     [order, SETTLE_MS]).items():
      samples[case].append(value)
  load = (start, os.getloadavg())
  gpu = {name: page.evaluate("([k, r]) => window.phases.gpuTimes(k, r)", [name, gpu_runs])
         if got.get("timestamps") and gpu_runs else None for name in bundles}
  return {"adapter": got.get("adapter"), "load": load, "samples": samples, "gpu": gpu}


def report(adapter: str, rounds: int, result: dict) -> None:
  """measure()'s result as a table: per case median, best and first quartile ms, a bundle's
  phase medians and counts, and its kernels' GPU time where measured."""
  start, end = result["load"]
  print(f"== {adapter} ({result['adapter']}): {rounds} rounds, load {start} -> {end}")
  print(f"  {'case':34} {'ms: median   best    p25':26}  phase medians: before submit wait after")
  for case, values in result["samples"].items():
    line = f"  {case:34} {summary([v['ms'] for v in values])}"
    if "before" in values[0]:
      calls = values[0]["calls"]
      line += "  " + " ".join(f"{statistics.median([v[p] for v in values]):6.2f}"
                             for p in PHASES[1:])
      line += f"  d/s/w/r {calls['dispatches']}/{calls['submits']}/{calls['writes']}/" \
              f"{calls['reads']}"
    print(line, flush=True)
  for name, best in result["gpu"].items():
    if best:
      print(f"  {name} kernels' GPU time (timestamps, a pass each, best run): "
            f"{best['total']:.2f} ms; " + ", ".join(f"{k['name']} {k['ms']:.2f}"
                                                    for k in best["kernels"]), flush=True)


def open_page(pw, server, adapter: str, stack):
  """A fresh browser on `adapter` with the bench page loaded (closed with `stack`)."""
  from browser_util import launch_chromium, local_page
  browser = launch_chromium(pw, lavapipe=adapter == "lavapipe")
  stack.callback(browser.close)
  page = stack.enter_context(local_page(browser))
  page.set_default_timeout(600_000)
  page.goto(server.url("bench/web/call_phases.html" + ("?compat" if adapter == "lavapipe" else "")))
  page.wait_for_selector("body[data-ready]", state="attached", timeout=120_000)
  return page


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--keep", type=Path, required=True, help="pypi_page.py's --keep folder")
  parser.add_argument("--bundles", required=True, help="bundle folders in it, comma-separated")
  parser.add_argument("--adapters", default=",".join(ADAPTERS))
  parser.add_argument("--rounds", type=int, default=30)
  parser.add_argument("--gpu-runs", type=int, default=20)
  args = parser.parse_args(argv)
  from playwright.sync_api import sync_playwright

  from browser_util import StaticServer
  isolated = {"Cross-Origin-Opener-Policy": "same-origin",
              "Cross-Origin-Embedder-Policy": "require-corp"}
  with contextlib.ExitStack() as stack:
    server = stack.enter_context(StaticServer(ROOT / "bench", mounts=mounts(args.keep),
                                              headers=isolated))
    pw = stack.enter_context(sync_playwright())
    for adapter in args.adapters.split(","):
      others = [a for a in ADAPTERS if a != adapter]
      mine = [b for b in args.bundles.split(",") if not any(a in b for a in others)]
      page = open_page(pw, server, adapter, stack)
      report(adapter, args.rounds, measure(page, server, args.keep, mine, args.rounds,
                                           args.gpu_runs))
  return 0


if __name__ == "__main__":
  sys.exit(main())
