"""The external tools the tests check kernelgen's output with, and how to find them.

Every rendered kernel is checked by a real tool (shared/RENDERER-SPEC.md):

    ptxas12(), ptxas13()          paths to NVIDIA's ptxas 12.9 and 13.x (pip wheels)
    ptxas_check(ptx, arch)        assemble PTX for sm_XX, AssertionError with ptxas's errors
    wgpu_adapter(), wgpu_device() wgpu-py on Mesa lavapipe (session-wide, cached)
    wgsl_validate(wgsl)           WGSL checked by wgpu (naga), AssertionError on any error
    tint_validate(wgsl)           WGSL checked by Dawn/Tint (npm `webgpu`, null backend)
    chromium_path()               the Chromium that Playwright drives
    pyodide_dir()                 the npm `pyodide` runtime files

Policy: a missing tool fails the test when CI=true or KERNELGEN_REQUIRE_ALL=1 (`./build.sh test`
sets it): a green run that skipped the WebGPU, PTX or browser tests would prove nothing. Elsewhere
(a bare `pytest` on a half set-up machine) it skips, with a message saying how to install it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS_DIR = REPO_ROOT / "tests"
NODE_MODULES = REPO_ROOT / "node_modules"

# the one list of devices the tests run on: every machine that runs the suite has these (WEBGPU is
# wgpu on lavapipe where there is no GPU; missing, it fails under KERNELGEN_REQUIRE_ALL=1)
DEVICES = ("PYTHON", "PTXSIM", "WEBGPU")
# every device kernelgen has (the fuzzer's names; CUDA only runs where a GPU and driver are)
DEVICE_NAMES = DEVICES + ("CUDA",)


def _with_cuda() -> tuple:
  import kernelgen as kg
  return DEVICES + (("CUDA",) if kg.Device.available("CUDA") else ())


# DEVICES and CUDA where it is here: the `device` fixture's list (conftest.py)
ALL_DEVICES = _with_cuda()

# ---------------------------------------------------------------------------------------------
# Missing tools: fail in CI, skip elsewhere


def require_all() -> bool:
    """True when every tool must be present (CI, or `./build.sh test`)."""
    ci = os.environ.get("CI", "").lower() in ("true", "1")
    return ci or os.environ.get("KERNELGEN_REQUIRE_ALL") == "1"


def missing_tool(what: str, how: str) -> None:
    """Fail (CI) or skip (elsewhere) because `what` is not installed; `how` says how to fix it."""
    message = f"{what} is not available: {how} (or run ./build.sh test, which installs it)"
    if require_all():
        pytest.fail(message + " [CI / KERNELGEN_REQUIRE_ALL=1: missing tools fail]", pytrace=False)
    pytest.skip(message)


def device_runtime(name: str):
    """kg.Device[name]; a device that cannot start (WEBGPU without wgpu or a Vulkan driver) is a
    missing tool: a failure under KERNELGEN_REQUIRE_ALL=1, else a skip."""
    import kernelgen as kg
    try:
        return kg.Device[name]
    except kg.KernelgenError as error:
        missing_tool(f"device {name}", "pip install wgpu; apt-get install mesa-vulkan-drivers "
                     f"({error})")


def forced_options(device: str, monkeypatch, **options) -> str:
    """`device`, its realizing forced to use `options` for one test (a missing device: a missing
    tool, as device_runtime)."""
    runtime = device_runtime(device)
    base = runtime.render_options
    monkeypatch.setattr(runtime, "render_options", lambda: {**base(), **options})
    return device


def run_named(runtime, kernel, data: dict, values: dict, out_fill: float | None = None):
  """`kernel` run once on `runtime` with its buffers named in `data` filled from those arrays
  (float32 bytes), the others (the output) left as allocated or filled with `out_fill`; the
  output buffer back as a flat float32 numpy array."""
  import numpy as np
  handles = [runtime.alloc(spec.size * 4) for spec in kernel.buffers]
  for spec, handle in zip(kernel.buffers, handles):
    if spec.name in data:
      runtime.copyin(handle, np.asarray(data[spec.name], np.float32).tobytes())
    else:
      out = handle
      if out_fill is not None:
        runtime.copyin(handle, np.full(spec.size, out_fill, np.float32).tobytes())
  runtime.run(kernel, handles, values)
  return np.frombuffer(runtime.copyout(out), np.float32)


# ---------------------------------------------------------------------------------------------
# ptxas 12.9 and 13.x
#
# Both come from PyPI and install side by side in one environment: nvidia-cuda-nvcc-cu12 puts
# ptxas under nvidia/cuda_nvcc/bin, nvidia-cuda-nvcc (13.x) under nvidia/cu13/bin.
# KERNELGEN_PTXAS12 / KERNELGEN_PTXAS13 override the search.

PTXAS_WHEEL_PATHS = {
    "12": ("nvidia/cuda_nvcc/bin/ptxas", "nvidia-cuda-nvcc-cu12==12.9.*"),
    "13": ("nvidia/cu13/bin/ptxas", "nvidia-cuda-nvcc==13.*"),
}


def _site_dirs() -> list[Path]:
    dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path]
    return [Path(d) for d in dict.fromkeys(dirs) if d]


@functools.cache
def _find_ptxas(which: str) -> str | None:
    override = os.environ.get(f"KERNELGEN_PTXAS{which}")
    if override:
        return override if os.access(override, os.X_OK) else None
    relative, _ = PTXAS_WHEEL_PATHS[which]
    for site_dir in _site_dirs():
        candidate = site_dir / relative
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _ptxas(which: str) -> str:
    path = _find_ptxas(which)
    if path is None:
        _, package = PTXAS_WHEEL_PATHS[which]
        missing_tool(f"ptxas {which}.x", f"pip install '{package}' or set KERNELGEN_PTXAS{which}")
    return path


def ptxas12() -> str:
    """Path to ptxas 12.9 (PTX ISA <= 8.8, sm_75..sm_90)."""
    return _ptxas("12")


def ptxas13() -> str:
    """Path to ptxas 13.x (newest PTX ISA and archs, nothing older than sm_75)."""
    return _ptxas("13")


def _sm_number(arch: str) -> int:
    match = re.fullmatch(r"(?:sm_)?(\d+)[af]?", arch)
    if match is None:
        raise ValueError(f"arch must look like 'sm_90', 'sm_90a' or '90', not {arch!r}")
    return int(match.group(1))


def ptxas_check(ptx_source: str, arch: str, which: str | None = None) -> None:
    """Assemble `ptx_source` for `arch` ('sm_86', 'sm_90a' or '86') with ptxas `which`.

    `which` is '12' or '13'; by default 12.9 for archs up to sm_90 and 13.x above. Raises
    AssertionError with ptxas's messages when it rejects the code.
    """
    if which is None:
        which = "12" if _sm_number(arch) <= 90 else "13"
    ptxas = _ptxas(which)
    sm = arch if arch.startswith("sm_") else f"sm_{arch}"
    with tempfile.TemporaryDirectory(prefix="kernelgen-ptx-") as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx_source)
        result = subprocess.run(
            [ptxas, f"-arch={sm}", "-o", os.devnull, str(source)],
            capture_output=True, text=True, timeout=120,
        )
    if result.returncode != 0:
        raise AssertionError(
            f"ptxas {which} rejected the PTX for {sm} (exit {result.returncode}):\n"
            f"{result.stderr.strip()}\n{_numbered(ptx_source)}"
        )


def _numbered(source: str) -> str:
    """The source with line numbers, so an error's `line N` can be found."""
    return "\n".join(f"{n:4} | {line}" for n, line in enumerate(source.splitlines(), 1))


# ---------------------------------------------------------------------------------------------
# wgpu-py (native WebGPU; Mesa lavapipe on a machine with no GPU)

# Features of the WebGPU standard: the device asks for these (when the adapter has them) and no
# wgpu-native extras, so WGSL valid here is valid in a browser too.
WEBGPU_FEATURES = ("shader-f16", "subgroups", "timestamp-query", "float32-filterable")


def ensure_xdg_runtime_dir() -> None:
    """Mesa warns on every start unless XDG_RUNTIME_DIR names a writable folder."""
    current = os.environ.get("XDG_RUNTIME_DIR")
    if current and os.access(current, os.W_OK):
        return
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="kernelgen-xdg-")


def _import_wgpu():
    try:
        import wgpu
    except ImportError:
        missing_tool("wgpu-py", "pip install 'wgpu==0.32.*'; apt-get install mesa-vulkan-drivers")
    return wgpu


@functools.cache
def _adapter():
    ensure_xdg_runtime_dir()
    wgpu = _import_wgpu()
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except RuntimeError as error:
        return error
    return adapter if adapter is not None else RuntimeError("no adapter found")


def wgpu_adapter():
    """The wgpu adapter (on this machine: lavapipe, Vulkan on the CPU)."""
    adapter = _adapter()
    if isinstance(adapter, Exception):
        missing_tool("a wgpu adapter", f"apt-get install mesa-vulkan-drivers ({adapter})")
    return adapter


@functools.cache
def _device():
    adapter = wgpu_adapter()
    features = [name for name in WEBGPU_FEATURES if name in adapter.features]
    return adapter.request_device_sync(
        required_features=features, required_limits=dict(adapter.limits)
    )


def wgpu_device():
    """One wgpu device for the whole session, with the adapter's real limits and features."""
    return _device()


def wgsl_validate(source: str, entry_point: str | None = None) -> None:
    """Check WGSL with wgpu (naga). With `entry_point`, also build that compute pipeline,
    which catches what only pipeline creation checks (e.g. oversized workgroups)."""
    wgpu = _import_wgpu()
    device = wgpu_device()
    try:
        module = device.create_shader_module(code=source)
        if entry_point is not None:
            device.create_compute_pipeline(
                layout="auto", compute={"module": module, "entry_point": entry_point}
            )
    except wgpu.GPUError as error:
        raise AssertionError(f"wgpu rejected the WGSL:\n{error}\n{_numbered(source)}") from None


# ---------------------------------------------------------------------------------------------
# Dawn/Tint: a second, independent WGSL validator (npm `webgpu`, null backend, no GPU needed)
#
# One node process (tests/helpers/tint_validate.mjs) serves the whole session: one JSON line in, one
# JSON line out per shader, ~1 ms each instead of ~150 ms for a fresh process.


class _TintProcess:
    def __init__(self, node: str):
        script = Path(__file__).resolve().with_name("tint_validate.mjs")
        self.stderr = tempfile.TemporaryFile(mode="w+")  # read back if node dies
        self.process = subprocess.Popen(
            [node, str(script)], cwd=REPO_ROOT, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
        )
        self.lock = threading.Lock()

    def check(self, source: str, entry_point: str | None) -> dict:
        request = json.dumps({"code": source, "entryPoint": entry_point})
        with self.lock:
            try:
                self.process.stdin.write(request + "\n")
                self.process.stdin.flush()
                reply = self.process.stdout.readline()
            except BrokenPipeError:
                reply = ""
        if not reply:
            self.stderr.seek(0)
            raise RuntimeError(
                f"tint_validate.mjs exited ({self.process.wait()}):\n{self.stderr.read()[-2000:]}"
            )
        return json.loads(reply)


@functools.cache
def _tint() -> _TintProcess | str:
    node = shutil.which("node")
    if node is None:
        return "node is not on PATH"
    if not (NODE_MODULES / "webgpu" / "package.json").exists():
        return f"npm package `webgpu` is not installed in {NODE_MODULES}"
    return _TintProcess(node)


def tint_validate(source: str, entry_point: str | None = None) -> None:
    """Check WGSL with Dawn's Tint. With `entry_point`, also build that compute pipeline."""
    tint = _tint()
    if isinstance(tint, str):
        missing_tool("Dawn/Tint (npm webgpu)", f"npm install webgpu ({tint})")
    result = tint.check(source, entry_point)
    if result["errors"]:
        raise AssertionError(
            "Tint rejected the WGSL:\n" + "\n".join(result["errors"]) + "\n" + _numbered(source)
        )


# ---------------------------------------------------------------------------------------------
# Browser and Pyodide


def chromium_path() -> str:
    """The Chromium binary (Debian's package; KERNELGEN_CHROMIUM overrides)."""
    path = os.environ.get("KERNELGEN_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        missing_tool("Chromium", "apt-get install chromium")
    return path


def pyodide_dir() -> Path:
    """The Pyodide runtime (npm `pyodide`: pyodide.mjs, the wasm, the stdlib; no wheels)."""
    path = NODE_MODULES / "pyodide"
    if not (path / "pyodide.mjs").exists():
        missing_tool("Pyodide", "npm install pyodide")
    return path


@contextlib.contextmanager
def default_device(monkeypatch, name: str):
  """Make `name` kernelgen's default device for one test (KERNELGEN_DEVICE cleared), then
  restore the previous default."""
  import kernelgen as kg
  monkeypatch.delenv("KERNELGEN_DEVICE", raising=False)
  previous = kg.Device._default
  kg.Device.DEFAULT = name
  try:
    yield
  finally:
    kg.Device._default = previous


def device_fixture(names):
  """A `device` fixture that runs a test on each device of `names` (a missing WEBGPU fails under
  KERNELGEN_REQUIRE_ALL=1); the name is also the default device during the test. conftest.py's
  `device` is device_fixture(ALL_DEVICES); a module that needs fewer makes its own."""
  @pytest.fixture(params=names)
  def device(request, monkeypatch):
    name = request.param
    if name == "WEBGPU":
      import kernelgen as kg
      try:
        kg.Device["WEBGPU"]
      except kg.DeviceError as error:
        missing_tool("device WEBGPU", f"pip install wgpu; apt-get install mesa-vulkan-drivers "
                                      f"({error})")
    with default_device(monkeypatch, name):
      yield name
  return device
