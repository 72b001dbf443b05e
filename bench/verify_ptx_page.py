"""Verify PTX in the page, per example of the editor (web/examples.js), on SwiftShader WebGPU.

Boots the app (index.html of an assembled site/, ./build.sh site) in headless Chromium and, for
each example, presses Verify PTX twice through the page's own code path (kgApp.verify): the first
press compiles the example's kernels (WGSL and PTX) and runs them, the second finds them
compiled. Prints, per press, the wall time of the whole action, the simulator's own time
(PTXSIM's run), and the engine the simulator used for the kernels (fused: pure Python, as the
page's Pyodide has no numpy; fast: numpy). With --engines fused,reference, each
example is then verified again on each engine named (set from a program run in the page), for
a before/after in the same page (--reference is --engines reference).

    python bench/verify_ptx_page.py [SITE_DIR] [--engines E,...] [--reference]
    (prints a table and JSON)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

BOOT_MS = 180_000

VERIFY = """async (code) => {
  kgApp.setCode(code);
  const start = performance.now();
  const r = await kgApp.verify();
  const ms = performance.now() - start;
  if (!r || r.error) return { ms, error: r ? r.error : 'busy' };
  return { ms, ptxsim_s: r.ptxsim.seconds, other_s: r.other.seconds,
           engines: r.ptxsim.engines || null, match: r.comparison.match };
}"""


# a program for the page's Run that picks the simulator's engine for the rest of the session
SET_ENGINE = ("from kernelgen.ptxsim import machine as _machine\n"
              "_machine.ENGINE['name'] = {engine!r}\nout = Tensor([1.0])\n")


def table(rows: dict) -> None:
  print(f"{'example':12s} {'first s':>8s} {'sim s':>7s} {'again s':>8s} {'sim s':>7s}  engines")
  for name, (first, again) in rows.items():
    if "error" in first or "error" in again:
      print(f"{name:12s} error: {first.get('error') or again.get('error')}")
      continue
    print(f"{name:12s} {first['ms'] / 1e3:8.2f} {first['ptxsim_s']:7.2f} "
          f"{again['ms'] / 1e3:8.2f} {again['ptxsim_s']:7.2f}  {again['engines']}")


def main() -> None:
  from playwright.sync_api import sync_playwright
  from browser_util import StaticServer, launch_chromium, local_page
  argv = sys.argv[1:]
  named = argv[argv.index("--engines") + 1] if "--engines" in argv else ""
  engines = [e for e in named.split(",") if e] + (["reference"] if "--reference" in argv else [])
  args = [a for a in argv if not a.startswith("--") and a != named]
  site = Path(args[0]) if args else ROOT / "site"
  rows, others = {}, {}
  with StaticServer(site) as server, sync_playwright() as pw:
    browser = launch_chromium(pw, webgpu=True)
    with local_page(browser, service_workers="block") as page:
      page.goto(server.url("index.html"))
      page.wait_for_selector("body[data-ready]", timeout=BOOT_MS)
      page.set_default_timeout(600_000)
      examples = page.evaluate("async () => (await import('/web/examples.js')).EXAMPLES")
      for name, code in examples.items():
        rows[name] = [page.evaluate(VERIFY, code) for _ in range(2)]
      for engine in engines:
        page.evaluate("async (code) => { kgApp.setCode(code); await kgApp.run(); }",
                      SET_ENGINE.format(engine=engine))
        others[engine] = {name: [page.evaluate(VERIFY, code) for _ in range(2)]
                          for name, code in examples.items()}
    browser.close()
  table(rows)
  for engine, got in others.items():
    print(f"the {engine} engine, in the same page:")
    table(got)
  print(json.dumps({"default": rows, **others}))


if __name__ == "__main__":
  main()
