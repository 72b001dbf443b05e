"""The Generate demo's decode rate in headless Chromium on both CPU adapters: the demo page
(web/demos/generate.html, running the bundle ./build.sh site exported from the committed model)
greedily writes --tokens tokens after a short prompt (Stop at <|endoftext|> off), once to warm
up (pipelines compiled) and then --runs times, on SwiftShader (Chromium's WebGPU) and on Mesa
lavapipe through ANGLE. Prints, per adapter, the page's own figures (tokens/s over the whole
generation, prefill included, ms per token, GPU ms per token where timestamp queries exist) and
the machine's load before and after, as JSON lines.

    ./build.sh site && python bench/generate_rate.py [--tokens 64] [--runs 2] [--site site]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

from browser_util import StaticServer, launch_chromium, local_page  # noqa: E402

PROMPT = "import os\n\ndef main("
GENERATE = """async ([prompt, tokens]) => {
  document.getElementById('prompt').value = prompt;
  document.getElementById('max-tokens').value = String(tokens);
  document.getElementById('temperature').value = '0';
  document.getElementById('stop-at-end').checked = false;
  const s = await generateDemo.generate();
  return { tokens: s.tokens, seconds: s.seconds, gpuMs: s.gpuMs, hasGpuTimes: s.hasGpuTimes,
           model: document.getElementById('model-info').textContent };
}"""


def rates(browser, server, tokens: int, runs: int) -> dict:
  """The page's figures for `runs` generations after one warm-up, on `browser`'s adapter."""
  with local_page(browser, service_workers="block") as page:
    page.goto(server.url("web/demos/generate.html"))
    page.wait_for_selector("body[data-ready]", timeout=300_000)
    page.set_default_timeout(600_000)
    page.evaluate(GENERATE, [PROMPT, 4])
    loads = [os.getloadavg()[0]]
    got = [page.evaluate(GENERATE, [PROMPT, tokens]) for _ in range(runs)]
    loads.append(os.getloadavg()[0])
  return {"tokens_per_s": [round(g["tokens"] / g["seconds"], 2) for g in got],
          "ms_per_token": [round(1000 * g["seconds"] / g["tokens"], 1) for g in got],
          "gpu_ms_per_token": [round(g["gpuMs"] / g["tokens"], 2) if g["hasGpuTimes"] else None
                               for g in got],
          "tokens": tokens, "load_1min": loads, "model": got[0]["model"]}


def main() -> None:
  """Run the command line."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--tokens", type=int, default=64)
  parser.add_argument("--runs", type=int, default=2)
  parser.add_argument("--site", type=Path, default=ROOT / "site")
  args = parser.parse_args()
  from playwright.sync_api import sync_playwright
  with StaticServer(args.site) as server, sync_playwright() as playwright:
    for adapter in ("swiftshader", "lavapipe"):
      browser = launch_chromium(playwright, webgpu=True, lavapipe=adapter == "lavapipe")
      try:
        print(json.dumps({"adapter": adapter, **rates(browser, server, args.tokens, args.runs)}),
              flush=True)
      finally:
        browser.close()


if __name__ == "__main__":
  main()
