"""Why a row's kernelgen time in bench/peers.py's page depends on what else the page prepared
(issue 22, lavapipe): one row's programs in the same page and timing as bench/peers.py, timed in
phases that add the peers one at a time (prepared only, then run), kernelgen and tinygrad
interleaved in every phase, plus kernelgen variants compiled under other options.

    python bench/peers_probe.py --row blur [--reps 6] [--adapter lavapipe]
        [--variant 'name={"tiles": [[8, 8]]}' ...] [--phases base,tfjs,ort]

Prints each phase's samples (ms, in round order) and best / median per system.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (bench/peers.py: the rows, programs and page)


def spec_urls(server, spec: dict) -> dict:
  s = dict(spec)
  for field in ("program", "model", "ref"):
    if field in s:
      s[field] = server.url(f"data/{s[field]}")
  if "inputs" in s:
    s["inputs"] = [{**e, "file": server.url(f"data/{e['file']}")} for e in s["inputs"]]
  return s


def rounds(page, systems: list, reps: int) -> dict:
  """reps interleaved rounds (the order reversed every other round) of one run per system."""
  samples = {s: [] for s in systems}
  for r in range(reps):
    for system in (systems[::-1] if r % 2 else systems):
      page.wait_for_timeout(peers.SETTLE_MS)
      samples[system] += page.evaluate("(k) => window.peers.time(k, 1)", system)
  return samples


def variant_program(row: dict, adapter: str, options: dict, files: list, folder: Path,
                    tag: str) -> dict:
  """kernelgen's program under more options; "_inner": N sets loop_split.TILE_INNER (how many
  trailing reduced elements a register tile's loop unrolls: the whole 5x5 window at 25)."""
  from kernelgen.lowering import loop_split
  options, saved = dict(options), loop_split.TILE_INNER
  loop_split.TILE_INNER = options.pop("_inner", saved)
  try:
    return peers.kernelgen_program(row, {"adapter": adapter, **options}, files, folder, tag)
  finally:
    loop_split.TILE_INNER = saved


def report(phase: str, samples: dict) -> None:
  print(f"{phase}:", flush=True)
  for system, times in samples.items():
    print(f"  {system:24s} best {min(times):7.3g}  median {statistics.median(times):7.3g}  "
          f"[{' '.join(f'{t:.3g}' for t in times)}]", flush=True)


def probe(row: str, adapter: str, reps: int, variants: dict, phases: list,
          split: bool = False, kernel: int | None = None) -> None:
  import numpy as np
  from playwright.sync_api import sync_playwright
  sys.path.insert(0, str(peers.ROOT / "tests" / "helpers"))
  from browser_util import StaticServer, launch_chromium
  table = peers.rows(np)
  name = next(n for n in table if row in n)
  with tempfile.TemporaryDirectory(prefix="kg-probe-") as tmp:
    folder = Path(tmp)
    spec = peers.prepare(folder, [name], False, [adapter])[name]
    files = [f"r0-in{i}.bin" for i in range(len(table[name]["inputs"]))]
    systems = {"kernelgen": spec[f"kernelgen@{adapter}"], "tinygrad": spec["tinygrad"]}
    for label, options in variants.items():
      program = variant_program(table[name], adapter, options, files, folder, f"v-{label}")
      (folder / f"v-{label}.json").write_text(json.dumps(program))
      systems[f"kg:{label}"] = {**spec[f"kernelgen@{adapter}"], "program": f"v-{label}.json"}
    if kernel is not None:        # every kernelgen program cut down to its kernel `kernel`
      for key in [k for k in systems if k.startswith("kg")] + ["kernelgen"]:
        path = folder / systems[key]["program"]
        program = json.loads(path.read_text())
        k = program["kernels"][kernel]
        print(f"{key}: kernel {kernel} alone: {k['entry']} dispatch {k['dispatch']}")
        (folder / f"only-{path.name}").write_text(json.dumps({**program, "kernels": [k]}))
        systems[key] = {**systems[key], "program": f"only-{path.name}"}
    extra_bytes = []
    if split:
      program = json.loads((folder / spec[f"kernelgen@{adapter}"]["program"]).read_text())
      for i, kernel in enumerate(program["kernels"]):
        (folder / f"k{i}.json").write_text(json.dumps({**program, "kernels": [kernel]}))
        systems[f"kg kernel {i}"] = {**spec[f"kernelgen@{adapter}"], "program": f"k{i}.json"}
        moved = sum(program["buffers"][b]["bytes"] for _, b, _ in kernel["bindings"])
        extra_bytes.append((f"kernel {i}'s buffers", moved))
        print(f"kernel {i} {kernel['entry']}: dispatch {kernel['dispatch']}, its buffers "
              f"{moved} bytes")
    mounts = {"/bench/": peers.ROOT / "bench", "/data/": folder,
              "/tfjs/": peers.ROOT / ".venv-bench" / "npm" / "node_modules"}
    print(f"{name} on {adapter}, load {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs, shared)")
    with StaticServer(peers.ROOT / "bench", mounts=mounts) as server, sync_playwright() as pw:
      browser = launch_chromium(pw, webgpu=True, lavapipe=adapter == "lavapipe")
      page = browser.new_context().new_page()
      page.set_default_timeout(600_000)
      page.goto(server.url("bench/web/peers.html" + ("?compat" if adapter == "lavapipe" else "")))
      page.wait_for_selector("body[data-ready]", state="attached", timeout=120_000)

      def prep(key, s):
        kind = "kernelgen" if key.startswith("kg") else key
        began = time.time()
        got = page.evaluate("([k, s]) => window.peers.prepare(k, s)", [key, spec_urls(server, s)])
        print(f"  prepared {key} ({kind}) in {time.time() - began:.1f} s (pipelines, a warm-up "
              f"run, a check): ok={got.get('ok')} {got.get('error', '')}"
              f"{' (one kernel alone: its output is not the row)' if 'kernel ' in key else ''}",
              flush=True)
      prepared = set()
      for key, s in systems.items():
        prep(key, s)
      timed = list(systems)
      report(f"base: {', '.join(timed)} prepared (load {os.getloadavg()[0]:.1f})",
             rounds(page, timed, reps))
      for phase in phases:
        if phase in ("tfjs", "ort"):
          prep(phase, spec[phase])
          prepared.add(phase)
          report(f"+{phase} prepared, not run (load {os.getloadavg()[0]:.1f})",
                 rounds(page, timed, reps))
          timed = timed + [phase]
          report(f"+{phase} run in the rounds (load {os.getloadavg()[0]:.1f})",
                 rounds(page, timed, max(2, reps // 2)))
          timed.remove(phase)
        elif phase.startswith("decay-"):    # decay-ort: one run of the peer, then the rounds;
          peer = phase[6:]                   # then as long idle, then the rounds again
          if peer not in timed and peer not in prepared:
            prep(peer, spec[peer])
            prepared.add(peer)
          took = page.evaluate("(k) => window.peers.time(k, 1)", peer)[0]
          report(f"right after one {peer} run of {took:.0f} ms (load {os.getloadavg()[0]:.1f})",
                 rounds(page, timed, reps))
          page.wait_for_timeout(took)
          report(f"after {took:.0f} ms idle instead (load {os.getloadavg()[0]:.1f})",
                 rounds(page, timed, reps))
        elif phase == "copy":
          nbytes = sum(a.nbytes for a in table[name]["inputs"]) + \
            np.asarray(table[name]["ref"], np.float32).nbytes
          for label, size in (("inputs + output", nbytes), *extra_bytes):
            ms = page.evaluate("([b, r]) => window.peers.copyMs(b, r)", [size, reps])
            print(f"copy kernel, {label}: {size} bytes in {ms:.3g} ms = {size / ms / 1e6:.3g} GB/s "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
        elif phase == "after":
          report(f"again without peers in the rounds (load {os.getloadavg()[0]:.1f})",
                 rounds(page, timed, reps))
      browser.close()


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--row", default="blur")
  parser.add_argument("--adapter", default="lavapipe")
  parser.add_argument("--reps", type=int, default=6)
  parser.add_argument("--variant", action="append", default=[],
                      help="label=JSON options for another kernelgen program")
  parser.add_argument("--phases", default="tfjs,ort,after",
                      help="tfjs, ort, after, decay-ort, decay-tfjs, copy (comma-separated)")
  parser.add_argument("--split", action="store_true",
                      help="also time each of kernelgen's kernels alone (same buffers)")
  parser.add_argument("--kernel", type=int, help="time only kernel N of each kernelgen program")
  args = parser.parse_args(argv)
  variants = {}
  for v in args.variant:
    label, options = v.split("=", 1)
    variants[label] = json.loads(options)
  probe(args.row, args.adapter, args.reps, variants, [p for p in args.phases.split(",") if p],
        args.split, args.kernel)
  return 0


if __name__ == "__main__":
  sys.exit(main())
