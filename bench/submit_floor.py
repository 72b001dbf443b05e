"""What a tiny workload's time is on one adapter in Chromium (issue 22's digits row): the same
page and timing as bench/peers.py (submit -> onSubmittedWorkDone of one command buffer), for
programs of trivial kernels (one thread storing one value) dispatched 0, 1, 3 and 6 times, one
dispatch of 5 workgroups, and the digits demo's forward pass as kernelgen and tinygrad compile
it, all interleaved round after round; best, first quartile and median of every sample.

On a loaded machine the trivial programs alone show the floor: any program of more than one
dispatch takes about as long as the digits row, whatever its kernels do (SwiftShader, load ~8:
medians 0.7 / 1.6 / 2.9 / 3.2 ms for 0 / 1 / 3 / 6 trivial dispatches; kernelgen's 3 kernels
3.3, tinygrad's 6 3.3), so the best of a few rounds decides that row by luck. At idle (load
0.9, 10 rounds of 3) the floor is one dispatch: medians 0.8 / 3.05 / 3.0 / 3.15 ms for 0 / 1 /
3 / 6 trivial dispatches, both digits programs 3.3. So is one kernel for the whole MLP
(graph/schedule.py, the note at RECOMPUTE_LENGTH): no faster. On a faster machine (AMD EPYC Zen4,
load 0.7, 15 rounds of 3), best / median ms: SwiftShader trivial x1 0.4 / 2.5, x6 2.4 / 2.7,
kernelgen digits 0.6 / 2.6, tinygrad digits 2.4 / 2.7; lavapipe trivial x1 2.6 / 2.8, kernelgen
and tinygrad digits 2.6 / 3.0 and 2.5 / 3.0.

    python bench/submit_floor.py [--adapter swiftshader|lavapipe] [--rounds N] [--per-round K]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "tests" / "helpers"))
import peers  # noqa: E402

DIGITS = "digits classification (demo)"
TRIVIAL = ("@group(0) @binding(0) var<storage, read_write> b0: array<f32>;\n"
           "@compute @workgroup_size(1) fn k() { b0[0] = 1.0f; }\n")


def programs(folder: Path, adapter: str) -> dict:
  """name -> program file under folder (kernelgen's and tinygrad's digits, trivial ones)."""
  peers.prepare(folder, [DIGITS], False, [adapter])
  ours = json.loads((folder / f"r0-kg-{adapter}.json").read_text())
  out = {"kernelgen digits": f"r0-kg-{adapter}.json", "tinygrad digits": "tinygrad-0.json"}
  kernel = {"source": TRIVIAL, "entry": "k", "bindings": [[0, 0, False]], "uniform": None,
            "dispatch": [1, 1, 1]}
  shapes = {f"trivial x{n}": [kernel] * n for n in (0, 1, 3, 6)}
  shapes["trivial x1, 5 groups"] = [dict(kernel, dispatch=[5, 1, 1])]
  for name, kernels in shapes.items():
    program = copy.deepcopy(ours)
    program["kernels"] = kernels
    file = name.replace(" ", "_").replace(",", "") + ".json"
    (folder / file).write_text(json.dumps(program))
    out[name] = file
  return out


def measure(adapter: str, rounds: int, per_round: int) -> dict:
  from playwright.sync_api import sync_playwright
  from browser_util import StaticServer, launch_chromium
  samples = {}
  with tempfile.TemporaryDirectory(prefix="kg-floor-") as tmp:
    folder = Path(tmp)
    files = programs(folder, adapter)
    mounts = {"/bench/": ROOT, "/data/": folder}
    with StaticServer(ROOT, mounts=mounts) as server, sync_playwright() as playwright:
      browser = launch_chromium(playwright, webgpu=True, lavapipe=adapter == "lavapipe")
      page = browser.new_context().new_page()
      page.goto(server.url("bench/web/peers.html" + ("?compat" if adapter == "lavapipe" else "")))
      page.wait_for_selector("body[data-ready]", state="attached", timeout=120_000)
      for name, file in files.items():
        spec = {"kind": "program", "program": server.url(f"data/{file}"),
                "ref": server.url("data/r0-ref.bin"), "rtol": 1e-3, "atol": 1e-3}
        page.evaluate("([k, s]) => window.peers.prepare(k, s)", [name, spec])
        samples[name] = []
      for r in range(rounds):
        for name in peers.round_order(list(files), r):
          page.wait_for_timeout(50)
          samples[name] += page.evaluate("([k, n]) => window.peers.time(k, n)", [name, per_round])
      browser.close()
  return samples


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description="tiny programs' submit-to-done times")
  parser.add_argument("--adapter", default="swiftshader", choices=peers.ADAPTERS)
  parser.add_argument("--rounds", type=int, default=15)
  parser.add_argument("--per-round", type=int, default=3)
  args = parser.parse_args(argv)
  samples = measure(args.adapter, args.rounds, args.per_round)
  print(f"{'program':24s} {'best':>6s} {'q25':>6s} {'median':>6s}  (ms, {args.adapter})")
  for name, times in samples.items():
    times = sorted(times)
    print(f"{name:24s} {times[0]:6.2f} {times[len(times) // 4]:6.2f} "
          f"{statistics.median(times):6.2f}")
  print(f"{args.rounds} interleaved rounds of {args.per_round} runs each; the machine is shared "
        f"(load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
