"""The web app in headless Chromium: the page boots kernelgen in a worker, runs every example on
WebGPU (SwiftShader, and lavapipe in compatibility mode) with values checked against numpy,
downloads PTX that ptxas accepts, shows errors next to the code and recovers, falls back without
WebGPU, survives device loss, works offline, and never asks any host but 127.0.0.1 (local_page
fails a test that does). One booted page is shared per browser to keep the suite quick.
"""
from __future__ import annotations

import io
import json
import re
import zipfile

import numpy as np
import pytest

from browser_util import StaticServer, assembled_site, launch_chromium, local_page
from test_errors import PAGE_PROGRAMS
from tools import REPO_ROOT, ptxas_check

pytestmark = pytest.mark.timeout(900)

ARTIFACTS = REPO_ROOT / "tests" / "artifacts"
BOOT_MS = 120_000
RUN_MS = 240_000

# JS: run the program in the editor through the page's own Run button logic; plain results,
# once the background work of the run (PTX, the comparison with the reference) is done too.
RUN = """async (code) => {
  kgApp.setCode(code);
  const r = await kgApp.run();
  if (!r || r.error) return r || {error: {type: 'busy'}};
  await r.checked;
  return {shape: r.shape, dtype: r.dtype, device: r.device, data: Array.from(r.data, Number),
          reference: r.reference || null, recreated: r.recreated, timings: r.timings};
}"""


def examples_of(page) -> dict:
  return page.evaluate("async () => (await import('/web/examples.js')).EXAMPLES")


def _conv2d_nchw(x, w, b, padding):
  n, c, h, wd = x.shape
  o, _, kh, kw = w.shape
  xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  out = np.zeros((n, o, h + 2 * padding - kh + 1, wd + 2 * padding - kw + 1), np.float32)
  for i in range(kh):
    for j in range(kw):
      window = xp[:, :, i:i + out.shape[2], j:j + out.shape[3]]
      out += np.einsum("nchw,oc->nohw", window, w[:, :, i, j])
  return out + b.reshape(1, -1, 1, 1)


def _softmax(x):
  e = np.exp(x - x.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


# example -> numpy formula over the example's own input tensors (made by kernelgen on PYTHON)
NUMPY = {
  "elementwise": lambda v: np.maximum(np.exp(v["x"] * 2 - v["y"]) * 0.5
                                      + np.sqrt(np.abs(v["y"])), 0),
  "softmax": lambda v: _softmax(v["x"]),
  "matmul": lambda v: np.maximum(v["a"] @ v["b"], 0),
  "conv2d": lambda v: _conv2d_nchw(v["x"], v["w"], v["b"], padding=1),
  "int8": lambda v: v["a"] * v["b"] + (v["a"] >> 2),
  "float16": lambda v: np.sqrt(v["x"] * v["x"] + np.float16(1)),
}
# dtype -> (rtol, atol): float32 kernels vs numpy; float16 allows two ulps
TOLERANCE = {"float32": (1e-4, 1e-5), "float16": (2e-3, 2e-3)}


def numpy_expected(name: str, code: str) -> np.ndarray:
  """The example's inputs computed by kernelgen in CPython, then its formula in numpy."""
  import kernelgen
  from kernelgen.tensor import tensor
  names = {"kg": kernelgen, "Tensor": kernelgen.Tensor, "dtypes": kernelgen.dtypes,
           "where": getattr(tensor, "where", None)}
  inputs_only = "\n".join(line for line in code.splitlines() if not line.startswith("out ="))
  from kernelgen.device import Device
  previous, Device.DEFAULT = Device.DEFAULT, "PYTHON"
  try:
    exec(inputs_only, names)
  finally:
    Device.DEFAULT = previous
  arrays = {k: v.numpy() for k, v in names.items() if isinstance(v, kernelgen.Tensor)}
  return NUMPY[name](arrays)


def assert_matches_numpy(name: str, code: str, result: dict) -> None:
  expected = numpy_expected(name, code)
  got = np.array(result["data"], dtype=np.float64).reshape(result["shape"])
  assert result["dtype"] == expected.dtype.name and list(expected.shape) == result["shape"]
  rtol, atol = TOLERANCE.get(result["dtype"], (0, 0))
  np.testing.assert_allclose(got, expected.astype(np.float64), rtol=rtol, atol=atol)


# ---- fixtures ----

@pytest.fixture(scope="module")
def site():
  """site/ (assembled once per session: browser_util.assembled_site), served on a free port of
  127.0.0.1."""
  with StaticServer(assembled_site()) as server:
    yield server


def boot(page, url: str) -> None:
  page.goto(url)
  page.wait_for_selector("body[data-ready]", timeout=BOOT_MS)
  assert page.get_attribute("body", "data-ready") == "true", page.inner_text("#status")
  page.set_default_timeout(RUN_MS)


@pytest.fixture(scope="module")
def app(site, chromium):
  """The page on SwiftShader WebGPU, booted once (service worker blocked: tests see the net)."""
  with local_page(chromium, viewport={"width": 1440, "height": 900}, accept_downloads=True,
                  service_workers="block") as page:
    boot(page, site.url("index.html"))
    yield page


@pytest.fixture(scope="module")
def lavapipe(playwright):
  browser = launch_chromium(playwright, lavapipe=True)
  yield browser
  browser.close()


# ---- the page on SwiftShader ----

def test_page_boots_on_webgpu_with_load_timings(app):
  assert app.inner_text("#device") == "WEBGPU"
  assert "swiftshader" in app.inner_text("#adapter")
  status = app.inner_text("#status")
  for step in ("download", "boot", "install"):
    assert re.search(rf"{step}: \d+\.\d\d s", status), status
  assert "kernelgen loaded from /lib/python3.14/site-packages/kernelgen/__init__.py" in status


@pytest.mark.parametrize("name", list(NUMPY))
def test_example_runs_on_webgpu_and_matches_numpy(app, name):
  code = examples_of(app)[name]
  result = app.evaluate(RUN, code)
  assert "error" not in result, result
  assert result["device"] == "WEBGPU"
  assert_matches_numpy(name, code, result)
  assert result["reference"]["ok"] and result["reference"]["match"], result["reference"]
  assert app.is_visible("#preview") and not app.is_visible("#error")


def test_reductions_on_swiftshader_read_a_run_per_lane(app):
  """SwiftShader is a CPU adapter: the page's WEBGPU device reads grouped reductions a run per
  lane (group_chunk); ragged and vector rows match the PYTHON reference (strided order)."""
  code = ("import kernelgen as kg\n"
          "assert kg.Device['WEBGPU'].render_options()['adapter'] == 'swiftshader'\n"
          "x = Tensor.rand(8, 1000)\ny = Tensor.rand(8, 4096)\n"
          "out = x.softmax(axis=1).max(axis=1) + x.sum(axis=1) + y.sum(axis=1) - y.min(axis=1)\n")
  result = app.evaluate(RUN, code)
  assert "error" not in result, result
  assert result["device"] == "WEBGPU" and result["shape"] == [8]
  assert result["reference"]["ok"] and result["reference"]["match"], result["reference"]


def test_matmul_screenshot(app):
  result = app.evaluate(RUN, examples_of(app)["matmul"])
  assert "error" not in result, result
  assert app.inner_text("#kernels").count("grid") >= 1
  assert "matches the PYTHON reference" in app.inner_text("#results")
  assert app.evaluate("kgApp.state.wgsl.getValue()").count("@compute") == 1
  ARTIFACTS.mkdir(parents=True, exist_ok=True)
  app.screenshot(path=str(ARTIFACTS / "matmul.png"))


def test_downloaded_ptx_for_sm80_passes_ptxas(app):
  app.evaluate("async (code) => { kgApp.setCode(code); await kgApp.compile(); }",
               examples_of(app)["softmax"])
  app.select_option("#arch", "sm_80")
  app.wait_for_function("document.body.dataset.busy === '0' && kgApp.state.compiled.arch === 'sm_80'")
  with app.expect_download() as info:
    app.click("#download-ptx")
  ptx = info.value.path().read_text()
  assert ".target sm_80" in ptx
  ptxas_check(ptx, "sm_80")


def test_zip_download_holds_every_kernel_and_the_manifest(app):
  app.evaluate("async (code) => { kgApp.setCode(code); await kgApp.compile(); }",
               examples_of(app)["softmax"])
  with app.expect_download() as info:
    app.click("#download-zip")
  archive = zipfile.ZipFile(io.BytesIO(info.value.path().read_bytes()))
  assert archive.testzip() is None
  manifest = json.loads(archive.read("manifest.json"))
  files = sorted(entry["file"] for entry in manifest["kernels"])
  assert files == sorted(n for n in archive.namelist() if n != "manifest.json")
  assert {entry["target"] for entry in manifest["kernels"]} == {"wgsl", "ptx"}


def test_python_error_is_shown_at_its_line_and_the_next_run_works(app):
  result = app.evaluate(RUN, "x = Tensor([1.0, 2.0])\n\nout = x + not_defined\n")
  assert result["error"]["type"] == "NameError" and result["error"]["line"] == 3
  error = app.inner_text("#error")
  assert "NameError" in error and "line 3" in error and "not_defined" in error
  assert app.evaluate("kgApp.state.editor.session.getAnnotations()[0].row") == 2
  test_example_runs_on_webgpu_and_matches_numpy(app, "elementwise")


@pytest.mark.parametrize("code, error, line, phrases",
                         [pytest.param(c, e, ln, ph, id=name)
                          for name, c, e, ln, ph in PAGE_PROGRAMS])
def test_invalid_program_in_the_page(app, code, error, line, phrases):
  """The bad-input catalogue's invalid programs (tests/unit/test_errors.py) as the page shows them."""
  result = app.evaluate(RUN, code)
  assert (result["error"]["type"], result["error"]["line"]) == (error, line), result
  shown = app.inner_text("#error")
  assert shown.startswith(error) and (f"{error} at line {line}:" in shown) is bool(line), shown
  for phrase in phrases:
    assert phrase in shown, shown
  assert app.evaluate("kgApp.getCode()") == code                       # the editor keeps it
  rows = app.evaluate("kgApp.state.editor.session.getAnnotations().map((a) => a.row)")
  assert rows == ([line - 1] if line else [])
  assert not app.is_disabled("#run") and app.is_disabled("#stop")


# ---- Stop (the catalogue's interrupted runs in the page: test_errors.PAGE_STOPS) ----

LOOP = "x = Tensor([1.0])\nwhile True:\n    pass\nout = x\n"


def start(app, code: str, action: str = "run") -> None:
  """Start an action with `code` in the editor, not waiting for it (window.pending: its result)."""
  app.evaluate("([code, action]) => { kgApp.setCode(code); window.pending = kgApp[action](); }",
               [code, action])
  app.wait_for_function("!document.querySelector('#stop').disabled")


def wait_restarted(app) -> None:
  app.wait_for_function("document.body.dataset.last === 'stopped'")
  app.wait_for_function("document.body.dataset.ready === 'true'", timeout=BOOT_MS)
  assert not app.is_disabled("#run") and app.is_disabled("#stop")


def assert_stopped(app, action: str, pending: bool = True) -> None:
  """What the page shows after Stop; `pending`: the stopped action's own result (window.pending)."""
  assert not pending or app.evaluate("window.pending") == {"stopped": True, "error": {
    "type": "Stopped", "line": None, "message": "stopped by you: Python was restarted, so the "
    "variables and results of earlier runs are gone; your program is unchanged, run it again"}}
  results = app.inner_text("#results")
  assert results.startswith(f"Stopped by you ({action}, after "), results
  assert "Python is restarted (a fresh interpreter: variables and results of earlier runs are " \
         "gone). Your program is unchanged. Python is ready again (restarted in " in results
  status = app.inner_text("#status")
  assert re.search(rf"\n{action} stopped by you after \d+\.\d s: restarting Python", status)
  assert re.search(rf"\n{action} stopped by you; Python restarted in \d+\.\d\d s "
                   r"\(a fresh interpreter\): ready$", status), status
  assert not app.is_visible("#error")
  assert (app.inner_text("#result-meta") == "") is pending  # a background check: its run stays
  assert not [e for e in app.console_errors if "Uncaught" in e], app.console_errors


def test_stop_ends_an_endless_loop_and_the_next_run_works(app):
  marked = app.evaluate(RUN, "import sys\nsys.kg_marker = 7\nout = Tensor([sys.kg_marker])\n")
  assert marked["data"] == [7]
  start(app, LOOP)
  assert app.is_disabled("#run") and app.is_disabled("#compile") and app.is_disabled("#verify")
  app.focus("#editor textarea")
  app.keyboard.press("Escape")
  app.wait_for_function("document.body.dataset.last === 'stopped'")
  assert app.is_disabled("#run") and app.is_disabled("#stop")         # while Python restarts
  wait_restarted(app)
  assert_stopped(app, "run")
  assert app.evaluate("kgApp.getCode()") == LOOP
  fresh = app.evaluate(RUN, "import sys\nout = Tensor([getattr(sys, 'kg_marker', -1)])\n")
  assert fresh["data"] == [-1]                                        # a fresh interpreter
  test_example_runs_on_webgpu_and_matches_numpy(app, "elementwise")


def test_stop_during_a_webgpu_dispatch_leaves_no_stale_result(app):
  # three 1024^3 matmuls: seconds of SwiftShader work, stopped half a second into them
  app.evaluate("kgApp.state.compiled = null")
  start(app, "a = Tensor.rand(1024, 1024)\nout = (a @ a @ a @ a).sum(axis=1)\n")
  # WGSL and then PTX compiled: the worker is on the run command
  app.wait_for_function("kgApp.state.compiled && kgApp.state.compiled.wgsl.ok && "
                        "kgApp.state.compiled.ptx.ok")
  app.wait_for_timeout(500)
  app.click("#stop")
  app.wait_for_function("document.body.dataset.last === 'stopped'")
  assert "GPU work the run already sent finishes first" in app.inner_text("#results")
  wait_restarted(app)
  assert_stopped(app, "run")
  app.wait_for_timeout(1000)  # a stale answer would have arrived by now
  assert app.get_attribute("body", "data-last") == "stopped" and not app.is_visible("#preview")
  test_example_runs_on_webgpu_and_matches_numpy(app, "matmul")
  assert "Stopped" not in app.inner_text("#results")


def test_a_late_reply_of_a_stopped_run_is_ignored(app):
  # the run's answer is held back until after Stop, as a killed worker's late message would be
  app.evaluate("""() => { const kg = kgApp.state.kg;
    kg.run = () => new Promise((resolve) => { window.lateReply = resolve; }); }""")
  start(app, "out = Tensor([1.0, 2.0]) * 2\n")
  app.wait_for_function("window.lateReply !== undefined")
  app.keyboard.press("Control+.")
  wait_restarted(app)
  app.evaluate("""() => window.lateReply({ shape: [2], dtype: 'float32', device: 'WEBGPU',
    data: new Float32Array([41, 7777.25]), seconds: 0.001, timings: [] })""")
  assert_stopped(app, "run")
  # shown as 7777.2500 if it were taken; no timing or message of the page contains it
  assert "7777.25" not in app.inner_text("#results")
  assert app.get_attribute("body", "data-last") == "stopped"
  result = app.evaluate(RUN, "out = Tensor([1.0, 2.0]) * 2\n")
  assert result["data"] == [2.0, 4.0] and result["reference"]["match"], result


def test_stop_ends_a_background_reference_check(app):
  # the run's result is shown; its comparison with the PYTHON reference never ends (the worker
  # runs an endless loop in its place)
  app.evaluate("""(loop) => { const kg = kgApp.state.kg;
    kg.reference = () => kg.call('run', { code: loop, device: 'PYTHON', reference: false }); }""",
               LOOP)
  result = app.evaluate("async (code) => { kgApp.setCode(code); window.last = await kgApp.run(); "
                        "return window.last.shape; }", examples_of(app)["elementwise"])
  assert result == [8, 256]
  assert "checking against the PYTHON reference" in app.inner_text("#results")
  assert not app.is_disabled("#stop") and not app.is_disabled("#run")  # Run may queue behind it
  app.click("#stop")
  wait_restarted(app)
  assert_stopped(app, "background check", pending=False)
  assert app.evaluate("window.last.checked.then((r) => r.ok)") is False  # ended, not shown
  results = app.inner_text("#results")
  assert "checking against" not in results and app.is_visible("#preview")
  assert "not checked against the PYTHON reference: stopped" in results
  test_example_runs_on_webgpu_and_matches_numpy(app, "softmax")


# a program that dispatches a kernel on WebGPU, then never ends (the page's compile step runs it
# on PYTHON, where it ends)
GPU_THEN_LOOP = """a = Tensor.rand(16, 16, seed=3)
b = (a @ a).realize()
while kg.Device.DEFAULT == 'WEBGPU':
    pass
out = b
"""


def test_stop_on_an_isolated_page_interrupts_python_in_place(site, chromium):
  """With cross-origin isolation Stop raises KeyboardInterrupt in the worker's Python: no
  restart, Python keeps its state, and the next run is right (no timings of the stopped one)."""
  headers = {"Cross-Origin-Opener-Policy": "same-origin",
             "Cross-Origin-Embedder-Policy": "require-corp"}
  with StaticServer(site.directory, headers=headers) as isolated, \
       local_page(chromium, service_workers="block") as page:
    boot(page, isolated.url("index.html"))
    assert page.evaluate("crossOriginIsolated && kgApp.state.kg.info.interrupt !== null")
    assert page.evaluate(RUN, "import sys\nsys.kg_marker = 7\nout = Tensor([sys.kg_marker])\n"
                         )["data"] == [7]
    page.evaluate("window.before = kgApp.state.kg; kgApp.state.compiled = null")
    start(page, GPU_THEN_LOOP)
    page.wait_for_function("kgApp.state.compiled && kgApp.state.compiled.ptx.ok")  # now the run
    page.wait_for_timeout(1000)                     # its kernels are dispatched; then it loops
    page.keyboard.press("Escape")
    wait_restarted(page)
    assert page.evaluate("window.pending") == {"stopped": True, "error": {
      "type": "Stopped", "line": None, "message": "stopped by you: KeyboardInterrupt in Python, "
      "which keeps running (nothing was restarted); your program is unchanged, run it again"}}
    assert page.inner_text("#results").startswith("Stopped by you (run, after ")
    assert "KeyboardInterrupt in Python, which keeps running" in page.inner_text("#results")
    assert re.search(r"\nrun stopped by you after \d+\.\d s: KeyboardInterrupt in Python, which "
                     r"keeps running \(no restart\)$", page.inner_text("#status"))
    assert page.evaluate("kgApp.state.kg === window.before")  # the same worker
    assert page.evaluate("kgApp.getCode()") == GPU_THEN_LOOP
    kept = page.evaluate(RUN, "import sys\nout = Tensor([getattr(sys, 'kg_marker', -1)])\n")
    assert kept["data"] == [7]                                 # Python kept its state
    assert kept["timings"] == []             # no kernels: none of the stopped run's either
    code = examples_of(page)["elementwise"]
    result = page.evaluate(RUN, code)
    assert "error" not in result, result
    assert_matches_numpy("elementwise", code, result)
    kernels = page.evaluate("kgApp.state.compiled.wgsl.kernels.map((k) => k.name)")
    assert [t["name"] for t in result["timings"]] == kernels
    assert not [e for e in page.console_errors if "Uncaught" in e or "Traceback" in e], \
        page.console_errors


def test_stop_during_compile_and_compile_again(app):
  start(app, LOOP, "compile")
  app.click("#stop")
  wait_restarted(app)
  assert_stopped(app, "compile")
  assert app.evaluate("kgApp.getCode()") == LOOP
  compiled = app.evaluate("async (code) => { kgApp.setCode(code); return await kgApp.compile(); }",
                          examples_of(app)["softmax"])
  assert compiled["wgsl"]["ok"] and compiled["ptx"]["ok"], compiled
  assert app.evaluate("kgApp.state.wgsl.getValue()").count("@compute") == 1


def test_run_clicked_twice_runs_once(app):
  code = examples_of(app)["elementwise"]
  app.evaluate("""(code) => { kgApp.setCode(code); document.body.dataset.last = '';
    const kg = kgApp.state.kg;
    const run = kg.run.bind(kg); window.runs = 0;
    kg.run = (...args) => { window.runs += 1; return run(...args); }; }""", code)
  app.dblclick("#run")
  app.wait_for_function("document.body.dataset.busy === '0' && "
                        "document.body.dataset.last === 'run'")
  app.evaluate("kgApp.idle()")
  assert app.evaluate("window.runs") == 1                  # the second click found Run disabled
  assert "matches the PYTHON reference" in app.inner_text("#results")
  both = app.evaluate("async () => { const runs = [kgApp.run(), kgApp.run()]; "
                      "return [(await runs[0]).shape, (await runs[1]) ?? null]; }")
  app.evaluate("kgApp.idle()")
  assert app.evaluate("window.runs") == 2 and both == [[8, 256], None], both
  app.evaluate("delete kgApp.state.kg.run")


SEARCH_RUN = """async (code) => {
  kgApp.setCode(code);
  document.getElementById('search').checked = true;
  try {
    const r = await kgApp.run();
    if (!r || r.error) return r || {error: {type: 'busy'}};
    await r.checked;
    return {shape: r.shape, dtype: r.dtype, device: r.device, data: Array.from(r.data, Number),
            reference: r.reference || null, search: r.search || null};
  } finally {
    document.getElementById('search').checked = false;
  }
}"""


def test_search_from_the_page_times_candidates_and_keeps_the_fastest(app):
  """The search checkbox: each kernel's options are chosen by timing candidates on the page's
  GPU; the result lists the choices, is right, and a second run finds them cached."""
  code = ("a = Tensor.rand(48, 40, seed=11) - 0.5\nb = Tensor.rand(40, 36, seed=12) - 0.5\n"
          "out = (a @ b).relu()\n")
  result = app.evaluate(SEARCH_RUN, code)
  assert "error" not in result, result
  assert result["reference"]["match"], result["reference"]
  (entry,) = [s for s in result["search"] if s["kernel"].startswith("r_48_36")]
  assert entry["cached"] is False and entry["candidates"] > 3, entry
  assert 0 < entry["best_ms"] <= entry["heuristic_ms"], entry
  table = app.inner_text("#search-table")
  assert "search chose" in table and entry["chosen"] in table, table
  again = app.evaluate(SEARCH_RUN, code)
  assert [s["cached"] for s in again["search"] if s["kernel"] == entry["kernel"]] == [True]
  assert again["data"] == result["data"]
  plain = app.evaluate(RUN, code)         # the checkbox off: no search
  assert "search" not in plain or not plain.get("search")
  assert not app.is_visible("#search-table")


def test_float64_on_webgpu_says_what_to_do_and_the_next_run_works(app):
  result = app.evaluate(RUN, "x = Tensor([1.0, 2.0], dtype=dtypes.float64)\nout = x * 2\n")
  assert "error" in result, result
  error = app.inner_text("#error")
  assert "float64" in error and "wgsl" in error.lower(), error
  test_example_runs_on_webgpu_and_matches_numpy(app, "softmax")


def test_device_limit_error_is_clear_and_the_next_run_works(app):
  # 400 M float32 = 1.6 GB, more than SwiftShader's 1 GiB per storage buffer
  result = app.evaluate(RUN, "out = Tensor.ones(400_000_000) + 1\n")
  assert result["error"]["type"] == "LimitError", result
  error = app.inner_text("#error")
  assert "LimitError" in error and re.search(r"allow|limit", error), error
  test_example_runs_on_webgpu_and_matches_numpy(app, "matmul")


def test_after_device_destroy_the_next_run_recovers(app):
  app.evaluate("kgApp.state.kg.loseDevice()")
  code = examples_of(app)["elementwise"]
  result = app.evaluate(RUN, code)
  assert "error" not in result, result
  assert result["recreated"] is True
  assert "device was lost" in app.inner_text("#notice")
  assert_matches_numpy("elementwise", code, result)


def test_verify_ptx_runs_the_simulator_and_agrees(app):
  app.evaluate("async (code) => kgApp.setCode(code)", examples_of(app)["elementwise"])
  result = app.evaluate("kgApp.verify()")
  assert "error" not in result, result
  assert result["comparison"]["match"], result["comparison"]
  assert "PTX on the simulator matches WEBGPU" in app.inner_text("#results")


@pytest.mark.parametrize("example", ["matmul", "softmax"])
def test_verify_ptx_runs_the_pure_python_fast_engine(app, example):
  """Pyodide has no numpy: every simulated launch of Verify PTX runs on the pure-Python fast
  engine (ptxsim/fused.py), none on the reference engine, and it still agrees with WebGPU."""
  app.evaluate("async (code) => kgApp.setCode(code)", examples_of(app)[example])
  result = app.evaluate("kgApp.verify()")
  assert "error" not in result, result
  assert result["comparison"]["match"], result["comparison"]
  engines = result["ptxsim"]["engines"]
  assert set(engines) == {"fused"} and engines["fused"] >= 1, engines


def test_user_code_survives_a_reload(app):
  app.evaluate("kgApp.setCode('# mine\\nout = Tensor([7])\\n')")
  app.reload()
  app.wait_for_selector("body[data-ready]", timeout=BOOT_MS)
  assert app.evaluate("kgApp.getCode()") == "# mine\nout = Tensor([7])\n"


def test_core_unit_tests_in_pyodide(app):
  paths = ["page/test_pyodide_core.py", "devices/test_device.py", "unit/test_schedule.py",
           "page/test_onnx_pyodide.py"]
  files = {p.split("/")[1]: (REPO_ROOT / "tests" / p).read_text() for p in paths}
  report = app.evaluate("(files) => kgApp.state.kg.selfTest(files)", files)
  assert report["failed"] == [], "\n".join(report["failed"])
  assert report["passed"] >= 20, report


# ---- the embedding module ----

def test_kernelgen_js_embeds_in_another_page(site, chromium):
  with local_page(chromium, service_workers="block") as page:
    page.goto(site.url("web/README.md"))  # any page of the origin: a bare host page
    result = page.evaluate("""async (base) => {
      const { createKernelgen } = await import('/web/kernelgen.js');
      const kg = await createKernelgen({ base });
      const kernels = await kg.compile('out = Tensor([1.0, 2.0, 3.0]).exp()',
                                       { target: 'ptx', arch: 'sm_80' });
      const out = await kg.run('out = Tensor([[1, 2], [3, 4]]) * 2', { device: 'WEBGPU' });
      let error;
      try { await kg.run('x = 1\\nout = (x +', {}); } catch (e) {
        error = { type: e.type, message: e.message, line: e.line };
      }
      return { names: kernels.map((k) => k.name), source: kernels[0].source,
               sizes: [kernels[0].global_size, kernels[0].local_size], buffers: kernels[0].buffers,
               shape: out.shape, dtype: out.dtype, isInt32: out.data instanceof Int32Array,
               data: Array.from(out.data), error };
    }""", site.url(""))
  assert ".target sm_80" in result["source"] and len(result["sizes"]) == 2
  assert result["buffers"][0]["dtype"] == "float32"
  assert (result["shape"], result["dtype"], result["isInt32"]) == ([2, 2], "int32", True)
  assert result["data"] == [2, 4, 6, 8]
  assert result["error"]["type"] == "SyntaxError" and result["error"]["line"] == 2


# ---- other adapters and no adapter ----

def test_examples_on_lavapipe_compatibility_mode(site, lavapipe):
  with local_page(lavapipe, service_workers="block") as page:
    boot(page, site.url("index.html?compat"))
    assert "compatibility" in page.inner_text("#adapter")
    examples = examples_of(page)
    for name in NUMPY:
      result = page.evaluate(RUN, examples[name])
      assert "error" not in result, (name, result)
      assert result["device"] == "WEBGPU"
      assert_matches_numpy(name, examples[name], result)


def test_without_webgpu_the_page_falls_back_to_python_and_says_so(site, chromium_no_webgpu):
  with local_page(chromium_no_webgpu, service_workers="block") as page:
    boot(page, site.url("index.html"))
    assert "No WebGPU here" in page.inner_text("#notice")
    assert page.inner_text("#device") == "PYTHON (no WebGPU)"
    assert "no WebGPU adapter" in page.inner_text("#status")
    code = examples_of(page)["int8"]
    result = page.evaluate(RUN, code)
    assert "error" not in result, result
    assert result["device"] == "PYTHON"
    assert_matches_numpy("int8", code, result)


def go_offline_after_caching(page, site) -> None:
  """Visit twice (the second visit fills the service worker's cache with everything the page
  loads), then cut the network."""
  boot(page, site.url("index.html"))
  page.wait_for_function("navigator.serviceWorker.controller !== null", timeout=BOOT_MS)
  page.reload()
  page.wait_for_selector("body[data-ready='true']", timeout=BOOT_MS)
  page.context.set_offline(True)


def test_works_offline_after_the_first_visit(site, chromium):
  with local_page(chromium) as page:
    go_offline_after_caching(page, site)
    page.reload()
    page.wait_for_selector("body[data-ready]", timeout=BOOT_MS)
    assert page.get_attribute("body", "data-ready") == "true", page.inner_text("#status")


def test_stop_restarts_python_offline(site, chromium):
  """After Stop the fresh worker boots from the service worker's cache: no network needed."""
  with local_page(chromium) as page:
    go_offline_after_caching(page, site)
    start(page, LOOP)
    page.click("#stop")
    wait_restarted(page)
    assert_stopped(page, "run")
    code = examples_of(page)["int8"]
    result = page.evaluate(RUN, code)
    assert "error" not in result, result
    assert_matches_numpy("int8", code, result)



def test_division_by_x_minus_x_in_the_page_matches_numpy(app):
  """x / (x - x), inf * 0, inf - inf, 0 / 0 (x - x and x * 0 folded to 0 by a shader compiler
  that assumes no inf/NaN would give 0): the IEEE values on SwiftShader, as numpy."""
  code = ("inf, nan = float('inf'), float('nan')\n"
          "x = Tensor([[1.0, -2.0, inf, -inf], [nan, 0.0, 3.0, -0.5], [2.0, 4.0, 0.5, 7.0]])\n"
          "d = x / (x - x)\n"
          "out = stack([d, d * 0, d - d, (x - x) / (x - x), 1 / (x * 0),\n"
          "             d.max(axis=1).reshape(3, 1).expand(3, 4)])\n")
  with np.errstate(all="ignore"):
    x = np.array([[1.0, -2.0, np.inf, -np.inf], [np.nan, 0.0, 3.0, -0.5], [2.0, 4.0, 0.5, 7.0]],
                 np.float32)
    d = x / (x - x)
    want = np.stack([d, d * 0, d - d, (x - x) / (x - x), 1 / (x * 0),
                     np.broadcast_to(d.max(axis=1).reshape(3, 1), (3, 4))])
  result = app.evaluate(RUN, code)
  assert "error" not in result, result
  assert result["device"] == "WEBGPU" and result["shape"] == list(want.shape)
  got = np.array(result["data"], np.float32).reshape(want.shape)
  names = ["x/(x-x)", "d*0", "d-d", "(x-x)/(x-x)", "1/(x*0)", "max"]
  wrong = [n for n, g, w in zip(names, got, want) if not np.array_equal(g, w, equal_nan=True)]
  assert not wrong, f"{wrong} differ from numpy:\n{got}\n{want}"


def test_the_page_time_limit_ends_a_long_run_with_a_limit_error(app):
  """The page's own time limit (limits.page_seconds, besides Stop): a run past it ends as a
  LimitError at the program's line that says how to raise it; the editor keeps the program."""
  code = "kg.limits.set(page_seconds=2)\nx = 0\nwhile True:\n    x += 1\nout = Tensor([1.0])\n"
  try:
    result = app.evaluate(RUN, code)
    shown, kept = app.inner_text("#error"), app.evaluate("kgApp.getCode()")
  finally:
    reset = app.evaluate(RUN, "kg.limits.set(page_seconds=300)\nout = Tensor([1.0])\n")
  assert (result["error"]["type"], result["error"]["line"]) == ("LimitError", 4), result
  assert "page_seconds" in shown and "kg.limits.set(page_seconds=" in shown, shown
  assert kept == code                                                 # the editor keeps it
  assert reset["data"] == [1.0], reset
  test_example_runs_on_webgpu_and_matches_numpy(app, "elementwise")
