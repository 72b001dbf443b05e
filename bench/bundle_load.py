"""A WebGPU bundle's pipelines created in Chromium (issue 37: the first token waits for them),
per adapter (SwiftShader; Mesa lavapipe through ANGLE, compatibility mode), each measurement in
a fresh browser (its shader caches empty):

  load       model.js's load() of each bundle folder: every pipeline created at once, as a page
             does, to the model ready (wall ms, and the pipelines it reported)
  per-kernel (--per-kernel) each distinct pipeline of the manifest created alone, one after
             another: shader module + createComputePipelineAsync, wall ms each (launches whose
             WGSL differs only in the entry point's name, with the same bindings, are one)

Not a test: nothing is asserted; the machine's load is printed with every figure.

    nice python bench/bundle_load.py FOLDER [FOLDER ...] [--adapters swiftshader,lavapipe]
                                     [--per-kernel] [--json OUT]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
PAGE_MS = 3_600_000


@contextlib.contextmanager
def page_on(pw, server, adapter: str):
  """A fresh browser on `adapter` with the bench page loaded."""
  from browser_util import launch_chromium, local_page
  browser = launch_chromium(pw, lavapipe=adapter == "lavapipe")
  try:
    with local_page(browser) as page:
      page.set_default_timeout(PAGE_MS)
      page.goto(server.url("bench/web/bundle_load.html" +
                           ("?compat" if adapter == "lavapipe" else "")))
      page.wait_for_selector("body[data-ready]", state="attached", timeout=120_000)
      yield page
  finally:
    browser.close()


def measure(args) -> list:
  """Every folder's load (and per-kernel rows) on every adapter: a list of result dicts."""
  from playwright.sync_api import sync_playwright

  from browser_util import StaticServer
  folders = [Path(f).resolve() for f in args.folders]
  mounts = {"/bench/": ROOT / "bench", **{f"/b{i}/": f for i, f in enumerate(folders)}}
  out = []
  with StaticServer(ROOT / "bench", mounts=mounts) as server, sync_playwright() as pw:
    for adapter in args.adapters.split(","):
      for i, folder in enumerate(folders):
        base = server.url(f"b{i}/")
        with page_on(pw, server, adapter) as page:
          got = page.evaluate("(b) => window.bundleLoad.load(b)", base)
          info = page.evaluate("window.bundleLoad.info()")
        row = {"adapter": adapter, "folder": str(folder), "device": info["adapter"], **got,
               "load": os.getloadavg()[0]}
        print(f"{adapter:11s} {folder}: load {got['ms'] / 1000:.1f} s, {got['total']} "
              f"pipelines, load avg {row['load']:.1f}", flush=True)
        if args.per_kernel:
          with page_on(pw, server, adapter) as page:
            row["kernels"] = page.evaluate("(b) => window.bundleLoad.perKernel(b)", base)
          for k in row["kernels"]:
            print(f"    {k['name'][:36]:36s} {k['copies']:3d} {k['lines']:6d} {k['ms']:9.0f}",
                  flush=True)
          print(f"    {len(row['kernels'])} pipelines, one after another: "
                f"{sum(k['ms'] for k in row['kernels']) / 1000:.1f} s, load avg "
                f"{os.getloadavg()[0]:.1f}", flush=True)
        out.append(row)
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("folders", nargs="+")
  parser.add_argument("--adapters", default="swiftshader")
  parser.add_argument("--per-kernel", action="store_true")
  parser.add_argument("--json", type=Path)
  args = parser.parse_args(argv)
  rows = measure(args)
  if args.json:
    args.json.write_text(json.dumps(rows, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
