"""Browser test plumbing: a local static HTTP server and headless Chromium on a closed network.

    with StaticServer(site_dir, mounts={"/pyodide/": pyodide_dir()}) as server:
        browser = launch_chromium(playwright, webgpu=True)
        with local_page(browser) as page:
            page.goto(server.url("index.html"))

`local_page` aborts, records and finally fails on any request to a host other than 127.0.0.1:
the app must load everything (Pyodide, wheels, scripts) from its own origin.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import subprocess
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tools import chromium_path

REPO_ROOT = Path(__file__).resolve().parents[2]

LAVAPIPE_ICD = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"

# Flags for a machine with no network but loopback (shared/ENVIRONMENT.md). Never add a
# --disable-features= of our own: it would replace Playwright's list.
CLOSED_NETWORK_ARGS = [
    "--no-sandbox",  # we run as root
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1 , EXCLUDE localhost",
]


@functools.cache
def assembled_site() -> Path:
    """site/, assembled by `./build.sh site` once per test session (by the first test module
    that serves it: a build takes ~10 s idle, and some 35 modules serve it), or
    KERNELGEN_TEST_SITE: an already assembled copy that no build rewrites mid-test."""
    assembled = os.environ.get("KERNELGEN_TEST_SITE")
    if assembled:
        return Path(assembled)
    subprocess.run(["./build.sh", "site"], cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL)
    return REPO_ROOT / "site"


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the server's root directory, plus mounted directories under URL prefixes."""

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".wasm": "application/wasm",
        ".json": "application/json",
        ".whl": "application/zip",
        ".zip": "application/zip",
    }

    def __init__(self, *args, mounts: dict[str, Path], headers: dict[str, str], **kwargs):
        self.mounts = mounts
        self.extra_headers = headers
        super().__init__(*args, **kwargs)

    def translate_path(self, path: str) -> str:
        url_path = unquote(urlsplit(path).path)
        for prefix, directory in self.mounts.items():
            if url_path.startswith(prefix):
                relative = url_path[len(prefix):]
                resolved = (directory / relative).resolve()
                if resolved.is_relative_to(directory):
                    return str(resolved)
                return str(directory / "__outside__")
        return super().translate_path(path)

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        for name, value in self.extra_headers.items():
            self.send_header(name, value)
        super().end_headers()

    def log_message(self, format: str, *args) -> None:
        pass  # quiet: pytest shows failures, not every GET


class StaticServer:
    """A threaded static HTTP server on 127.0.0.1 with a free port, for one directory.

    `mounts` maps URL prefixes ("/pyodide/") to more directories; `headers` are added to every
    response (e.g. COOP/COEP for cross-origin isolation). Use as a context manager, or call
    start() and stop().
    """

    def __init__(self, directory, mounts: dict | None = None, headers: dict | None = None):
        self.directory = Path(directory).resolve()
        normalized = {}
        for prefix, path in (mounts or {}).items():
            normalized["/" + prefix.strip("/") + "/"] = Path(path).resolve()
        handler = functools.partial(
            _Handler, directory=str(self.directory), mounts=normalized, headers=headers or {}
        )
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str = "") -> str:
        """The absolute URL of `path` (relative to the served root)."""
        return f"{self.origin}/{path.lstrip('/')}"

    def start(self) -> "StaticServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "StaticServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# JS statements for a page script: `device`, a device of the default adapter whose
# createComputePipelineAsync counts into `made` the pipelines it has made (resolved)
COUNTED_DEVICE = """  const device = await (await navigator.gpu.requestAdapter()).requestDevice();
  let made = 0;
  const create = device.createComputePipelineAsync.bind(device);
  device.createComputePipelineAsync = async (descriptor) => {
    const pipeline = await create(descriptor);
    made += 1;
    return pipeline;
  };
"""


def chromium_args(webgpu: bool = True, lavapipe: bool = False) -> list[str]:
    """Chromium's command-line flags. `webgpu` enables navigator.gpu (SwiftShader adapter);
    `lavapipe` selects Mesa lavapipe through ANGLE instead (compatibility mode, faster)."""
    args = list(CLOSED_NETWORK_ARGS)
    if webgpu or lavapipe:
        args.append("--enable-unsafe-webgpu")
    if lavapipe:
        args.append("--use-webgpu-adapter=opengles")
    return args


def chromium_env(lavapipe: bool = False) -> dict[str, str]:
    """The environment for Chromium; lavapipe needs the Vulkan loader pointed at Mesa's ICD."""
    env = dict(os.environ)
    if lavapipe:
        env["VK_ICD_FILENAMES"] = LAVAPIPE_ICD
        env["VK_DRIVER_FILES"] = LAVAPIPE_ICD
    return env


def launch_chromium(playwright, webgpu: bool = True, lavapipe: bool = False):
    """Launch the system Chromium headless through Playwright (never a downloaded browser)."""
    return playwright.chromium.launch(
        executable_path=chromium_path(),
        headless=True,
        args=chromium_args(webgpu=webgpu, lavapipe=lavapipe),
        env=chromium_env(lavapipe=lavapipe),
    )


def is_local(url: str) -> bool:
    """True for URLs that stay on this machine (127.0.0.1, or data:/blob:/about: URLs)."""
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about"):
        return True
    return parts.hostname == "127.0.0.1"


class LocalOnly:
    """Blocks and records every request a browser context makes to another host."""

    def __init__(self, context):
        self.outside: list[str] = []
        context.route("**/*", self._route)
        context.on("request", lambda request: self._note(request.url))

    def _note(self, url: str) -> bool:
        if is_local(url):
            return True
        if url not in self.outside:
            self.outside.append(url)
        return False

    def _route(self, route) -> None:
        if self._note(route.request.url):
            route.continue_()
        else:
            route.abort("blockedbyclient")

    def check(self) -> None:
        """AssertionError listing the outside URLs, if any request tried to leave 127.0.0.1."""
        assert not self.outside, "requests to hosts other than 127.0.0.1:\n" + "\n".join(
            self.outside
        )


@contextlib.contextmanager
def local_page(browser, **context_options):
    """A page in a fresh browser context; fails on exit if it asked any host but 127.0.0.1.

    Console errors and page errors are collected in `page.console_errors` for the test to
    look at (they do not fail the test by themselves).
    """
    context = browser.new_context(**context_options)
    guard = LocalOnly(context)
    page = context.new_page()
    page.console_errors = []
    page.on("console", lambda msg: msg.type == "error" and page.console_errors.append(msg.text))
    page.on("pageerror", lambda error: page.console_errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()
    guard.check()
