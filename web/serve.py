"""Serve the assembled site (./build.sh serve): a static server on 127.0.0.1 with the headers the
page and the pages embedding it need (not copied into site/).

    python web/serve.py --port 8000 --directory site [--cors] [--isolated]

--cors      `Access-Control-Allow-Origin: *` (and `Cross-Origin-Resource-Policy: cross-origin`)
            on every response: a page of another origin can import /web/kernelgen.js, whose
            worker then loads Pyodide and the kernelgen wheel from this site.
--isolated  `Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy:
            require-corp`: the page is cross-origin isolated, so Stop interrupts Python in place
            (KeyboardInterrupt) instead of restarting it.
Port 0 picks a free port; the first line printed names the URL.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import sys

TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm",
         ".json": "application/json", ".whl": "application/zip", ".zip": "application/zip",
         ".webmanifest": "application/manifest+json"}
CORS = {"Access-Control-Allow-Origin": "*", "Cross-Origin-Resource-Policy": "cross-origin"}
ISOLATED = {"Cross-Origin-Opener-Policy": "same-origin",
            "Cross-Origin-Embedder-Policy": "require-corp"}


class Handler(http.server.SimpleHTTPRequestHandler):
  """The site's files, with `headers` on every response."""

  extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **TYPES}

  def __init__(self, *args, headers: dict, **kwargs):
    self.extra_headers = headers
    super().__init__(*args, **kwargs)

  def end_headers(self) -> None:
    for name, value in self.extra_headers.items():
      self.send_header(name, value)
    super().end_headers()

  def do_OPTIONS(self) -> None:  # a CORS preflight
    self.send_response(204)
    if "Access-Control-Allow-Origin" in self.extra_headers:
      self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
      self.send_header("Access-Control-Allow-Headers", "*")
    self.end_headers()


def main(argv=None) -> int:
  """Serve until interrupted."""
  args = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  args.add_argument("--port", type=int, default=8000)
  args.add_argument("--directory", default="site")
  args.add_argument("--cors", action="store_true", help="let pages of other origins embed it")
  args.add_argument("--isolated", action="store_true", help="send COOP/COEP")
  options = args.parse_args(argv)
  headers = {**(CORS if options.cors else {}), **(ISOLATED if options.isolated else {})}
  handler = functools.partial(Handler, directory=options.directory, headers=headers)
  server = http.server.ThreadingHTTPServer(("127.0.0.1", options.port), handler)
  extras = " ".join(f"--{name}" for name in ("cors", "isolated") if getattr(options, name))
  url = f"http://127.0.0.1:{server.server_address[1]}/"
  print(f"serving {options.directory}/ at {url}" + (f" with {extras}" if extras else "") +
        " (Ctrl-C stops)", flush=True)
  try:
    server.serve_forever()
  except KeyboardInterrupt:
    pass
  finally:
    server.server_close()
  return 0


if __name__ == "__main__":
  sys.exit(main())
