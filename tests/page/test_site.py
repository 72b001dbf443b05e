"""`./build.sh serve` assembles site/ and serves it; the page boots Pyodide from its own origin
and loads the kernelgen wheel by name (the rewritten pyodide-lock.json). See web/BUILDING.md."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest

from browser_util import local_page
from tools import REPO_ROOT


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_until_served(url: str, process: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"./build.sh serve exited with {process.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"nothing served at {url} after {seconds} s")


@pytest.fixture(scope="module")
def site_url():
    port = _free_port()
    process = subprocess.Popen(
        ["./build.sh", "serve"], cwd=REPO_ROOT, env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        _wait_until_served(url, process, seconds=300)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _page_status(browser, url: str) -> str:
    with local_page(browser) as page:
        page.goto(url)
        page.wait_for_selector("body[data-ready]", timeout=60_000)
        assert page.get_attribute("body", "data-ready") == "true", page.inner_text("#status")
        return page.inner_text("#status")


def test_site_serves_the_wheels_and_lockfile(site_url):
    site = REPO_ROOT / "site" / "pyodide"
    wheels = sorted(path.name for path in site.glob("*.whl"))
    assert wheels == ["kernelgen-0.1.0-py3-none-any.whl", "micropip-0.11.1-py3-none-any.whl"]
    with urllib.request.urlopen(site_url + "pyodide/pyodide-lock.json") as response:
        packages = json.load(response)["packages"]
    assert packages["kernelgen"]["file_name"] == "kernelgen-0.1.0-py3-none-any.whl"
    assert packages["kernelgen"]["depends"] == []  # no runtime dependencies
    assert packages["micropip"]["version"] == "0.11.1"


def test_page_loads_kernelgen_in_pyodide(site_url, chromium):
    status = _page_status(chromium, site_url)
    assert "kernelgen loaded from /lib/python3.14/site-packages/kernelgen/__init__.py" in status
    assert "WebGPU adapter available" in status


def test_page_without_webgpu_says_so(site_url, chromium_no_webgpu):
    status = _page_status(chromium_no_webgpu, site_url)
    assert "no WebGPU adapter" in status
