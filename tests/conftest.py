"""Shared fixtures. The helpers themselves live in tools.py and browser_util.py, importable from
any test (`from tools import ptxas_check, wgsl_validate`); tests/ is on pytest's pythonpath."""

from __future__ import annotations

import pytest

import tools
from browser_util import StaticServer, launch_chromium

tools.ensure_xdg_runtime_dir()


# --- native WebGPU (wgpu-py) ---


@pytest.fixture(scope="session")
def wgpu_adapter():
    """The wgpu adapter: Mesa lavapipe (Vulkan on the CPU) on machines with no GPU."""
    return tools.wgpu_adapter()


@pytest.fixture(scope="session")
def wgpu_device(wgpu_adapter):
    """A wgpu device with the adapter's limits and its standard WebGPU features."""
    return tools.wgpu_device()


# --- ptxas ---


@pytest.fixture(scope="session")
def ptxas12():
    return tools.ptxas12()


@pytest.fixture(scope="session")
def ptxas13():
    return tools.ptxas13()


# --- browser ---


@pytest.fixture(scope="session")
def playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        tools.missing_tool("Playwright", "pip install playwright")
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="session")
def chromium(playwright):
    """Headless Chromium with WebGPU enabled (SwiftShader adapter), on a closed network."""
    browser = launch_chromium(playwright, webgpu=True)
    yield browser
    browser.close()


@pytest.fixture(scope="session")
def chromium_no_webgpu(playwright):
    """Headless Chromium without WebGPU: navigator.gpu.requestAdapter() resolves to null."""
    browser = launch_chromium(playwright, webgpu=False)
    yield browser
    browser.close()


@pytest.fixture
def serve():
    """serve(directory, mounts=None, headers=None) -> a started StaticServer, stopped after."""
    servers = []

    def start(directory, mounts=None, headers=None):
        server = StaticServer(directory, mounts=mounts, headers=headers).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
