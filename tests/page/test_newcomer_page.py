"""What a new user of the page tripped over (issue 39), in headless Chromium on SwiftShader:
errors without a line show no "null"; a failed program leaves no result or kernels of the one
before; Verify PTX and the Models view's compare with PYTHON show a progress bar (kernels done,
time, an estimate) with Stop; Stop in the Models view clears what it showed of the forgotten
model; the view's info box keeps its histogram after a run and its WGSL/PTX panes are coloured;
`import numpy` says why it is not there; no request fails (favicon.ico); the app embeds in a
page of another origin when served with `web/serve.py --cors` (./build.sh serve --cors); the
filters demo's footer says when Python ran the chain; the training plot's legend sits above
its curves. Screenshots: tests/artifacts/newcomer_page.png (Verify PTX's progress bar) and
newcomer_models.png (the Models view after a run)."""
from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from browser_util import StaticServer, local_page
from test_browser import BOOT_MS, RUN, app, boot, site  # noqa: F401 (fixtures)
from tools import REPO_ROOT

pytestmark = pytest.mark.timeout(900)

MODELS = "kgApp.models.state"
MODELS_IDLE = (f"window.kgApp?.models && !{MODELS}.busy && "
               "!document.querySelector('#model-file').disabled")


# ---- errors ----

def test_an_error_without_a_line_shows_no_null(app):  # noqa: F811
  result = app.evaluate(RUN, "x = Tensor([1.0])\ny = x * 2\n")   # no `out`: ProgramError
  assert result["error"]["type"] == "ProgramError" and result["error"]["line"] is None
  shown = app.inner_text("#error")
  assert shown.startswith("ProgramError: the program must assign"), shown
  assert "null" not in shown


def test_a_failed_program_leaves_no_result_or_kernels_of_the_one_before(app):  # noqa: F811
  good = app.evaluate(RUN, "a = Tensor([[1.0, 2.0], [3.0, 4.0]])\nout = (a @ a).relu()\n")
  assert good["shape"] == [2, 2]
  assert app.locator("#kernels li.muted").count() == 0 and "(2, 2)" in app.inner_text("#results")
  bad = app.evaluate(RUN, "a = Tensor([1.0, 2.0])\nout = a.reshape(3)\n")   # fails to build
  assert bad["error"]["type"] == "ShapeError" and bad["error"]["line"] == 2
  results = app.inner_text("#results")
  assert "(2, 2)" not in results and "No result: the program stopped with ShapeError at line 2" \
    in results, results
  assert "No kernels: the program did not compile (ShapeError at line 2)" in \
    app.inner_text("#kernels")
  assert app.evaluate("kgApp.state.compiled") is None
  assert app.evaluate("kgApp.state.wgsl.getValue() + kgApp.state.ptx.getValue()") == ""
  for kind in ("wgsl", "ptx", "zip", "bundles"):
    assert app.is_disabled(f"#download-{kind}")


def test_import_numpy_in_the_page_says_why_not(app):  # noqa: F811
  result = app.evaluate(RUN, "import numpy as np\nout = Tensor(np.ones(3))\n")
  assert (result["error"]["type"], result["error"]["line"]) == ("ModuleNotFoundError", 1)
  shown = app.inner_text("#error")
  assert "numpy is not available in this page" in shown and "not part of this site" in shown
  assert "Tensor.arange" in shown, shown


# ---- progress ----

PTX_PROGRAM = ("x = Tensor.rand(32, 128, seed=1)\nw = Tensor.rand(128, 64, seed=2)\n"
               "h = (x @ w).relu()\nout = (h - h.max(axis=1, keepdim=True)).exp().sum(axis=1)\n")


def test_verify_ptx_shows_kernels_done_and_time_with_stop(app):  # noqa: F811
  app.evaluate("([code]) => { kgApp.setCode(code); window.verifying = kgApp.verify(); }",
               [PTX_PROGRAM])
  app.wait_for_function("/ \\d+ of \\d+ kernels done on PTXSIM · running /"
                        ".test(document.body.dataset.work || '')", timeout=240_000)
  assert app.is_visible("#work") and app.is_visible("#work-stop")
  text = app.inner_text("#work-text")
  assert re.match(r"Verify PTX \(the PTX on the PTXSIM simulator, then on the page's device\): "
                  r"\d+\.\d s · \d+ of \d+ kernels done on PTXSIM · running r_", text), text
  result = app.evaluate("window.verifying")
  assert result["comparison"]["match"], result
  assert not app.is_visible("#work")          # gone once the action is done
  # the bar followed the kernels to the last one of the last realize (on the page's device)
  assert app.evaluate("document.querySelector('#work-fill').style.width") == "100%"


def tiny_model_file(tmp_path):
  from test_models_page import tiny_model
  path = tmp_path / "tiny.onnx"
  path.write_bytes(tiny_model())
  return path


def open_model(page, path) -> None:
  page.wait_for_function(MODELS_IDLE)
  page.set_input_files("#model-file", str(path))
  page.wait_for_function(f"{MODELS}.busy === false && ['load', 'error'].includes("
                         "document.querySelector('#models-view').dataset.last)", timeout=300_000)
  assert page.get_attribute("#models-view", "data-last") == "load", \
    page.inner_text("#model-error")


def model_action(page, button: str, last: str) -> None:
  page.click(button)
  page.wait_for_function(f"{MODELS}.busy === false && document.querySelector('#models-view')"
                         f".dataset.last !== '{last}'", timeout=300_000)


def test_models_view_info_keeps_its_histogram_and_panes_are_highlighted(app, tmp_path):  # noqa: F811
  if not app.is_visible("#models-view"):
    app.click("#models-tab")
  open_model(app, tiny_model_file(tmp_path))
  for pane in ("#model-wgsl", "#model-ptx"):
    assert app.locator(f"{pane} span.ace_keyword").count() > 0, pane
    colour = app.evaluate(f"getComputedStyle(document.querySelector('{pane} .ace_keyword'))"
                          ".color")
    plain = app.evaluate(f"getComputedStyle(document.querySelector('{pane}')).color")
    assert colour != plain
  assert ".target" in app.inner_text("#model-ptx")
  model_action(app, "#model-run", "load")
  assert app.get_attribute("#models-view", "data-last") == "run", app.inner_text("#model-error")
  info = app.evaluate("""() => { const box = document.querySelector('#model-info');
    const table = document.querySelector('#model-histogram').getBoundingClientRect();
    return { scroll: box.scrollHeight, client: box.clientHeight, height: table.height,
             rows: document.querySelectorAll('#model-histogram tr').length }; }""")
  assert info["scroll"] <= info["client"] + 1, info     # not a clipped scroll box
  assert info["rows"] == 7 and info["height"] > 7 * 10, info
  (REPO_ROOT / "tests" / "artifacts").mkdir(exist_ok=True)
  app.screenshot(path=str(REPO_ROOT / "tests" / "artifacts" / "newcomer_models.png"))


def test_stop_of_compare_with_python_clears_the_forgotten_model(app):  # noqa: F811
  import onnx_corpus
  path = onnx_corpus.data_dir() / "light" / "light_squeezenet.onnx"
  if not app.is_visible("#models-view"):
    app.click("#models-tab")
  open_model(app, path)
  model_action(app, "#model-run", "load")
  assert app.get_attribute("#models-view", "data-last") == "run", app.inner_text("#model-error")
  app.click("#model-compare")
  app.wait_for_function("document.body.dataset.work && document.body.dataset.work"
                        ".startsWith('model: comparing with PYTHON: ')")
  assert app.is_visible("#work-stop")
  app.click("#work-stop")
  app.wait_for_function(f"{MODELS}.busy === false && document.body.dataset.ready === 'true' && "
                        "document.body.dataset.busy === '0'", timeout=BOOT_MS)
  error = app.inner_text("#model-error")
  assert error.startswith("Stopped: Stopped by you (comparing with PYTHON, after "), error
  assert "light_squeezenet.onnx is no longer loaded" in error and "your program" not in error
  box = app.evaluate("(() => { const e = document.querySelector('#model-error'); "
                     "return [e.scrollHeight, e.clientHeight]; })()")
  assert box[0] <= box[1] + 1, box                                 # not clipped
  for view in ("#model-info", "#model-results", "#model-kernels", "#model-wgsl", "#model-ptx"):
    assert app.inner_text(view).strip() == "", view
  assert app.is_disabled("#model-run") and app.is_disabled("#model-compare")
  app.wait_for_function(MODELS_IDLE)
  assert not app.is_disabled("#model-file")
  app.click("#models-tab")   # back to the editor


# ---- requests, the screenshot ----

def test_no_request_fails_and_a_screenshot(site, chromium):  # noqa: F811
  with local_page(chromium, viewport={"width": 1440, "height": 900},
                  service_workers="block") as page:
    failed = []
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    boot(page, site.url("index.html"))
    page.evaluate(RUN, "a = Tensor.rand(32, 16, seed=0)\nout = (a @ a.T).relu()\n")
    page.evaluate("([code]) => { kgApp.setCode(code); window.verifying = kgApp.verify(); }",
                  [PTX_PROGRAM])
    page.wait_for_function("/ kernels done on PTXSIM · running /.test(document.body.dataset"
                           ".work || '')", timeout=240_000)
    (REPO_ROOT / "tests" / "artifacts").mkdir(exist_ok=True)
    page.screenshot(path=str(REPO_ROOT / "tests" / "artifacts" / "newcomer_page.png"))
    page.evaluate("window.verifying")
    assert not failed, failed
    assert page.evaluate("document.querySelector('link[rel=icon]').href").endswith("favicon.svg")


# ---- embedding from another origin ----

def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def serve_site(*flags):
  """web/serve.py (what ./build.sh serve runs) on site/ with `flags`; (process, origin)."""
  port = free_port()
  process = subprocess.Popen([sys.executable, str(REPO_ROOT / "web" / "serve.py"), "--port",
                              str(port), "--directory", str(REPO_ROOT / "site"), *flags],
                             stdout=subprocess.PIPE, text=True)
  line = process.stdout.readline()
  assert f"http://127.0.0.1:{port}/" in line, line
  return process, f"http://127.0.0.1:{port}"


EMBED = """<!doctype html><meta charset="utf-8"><title>embeds kernelgen</title>
<script type="module">
try {
  const { createKernelgen } = await import('KG/web/kernelgen.js');
  const kg = await createKernelgen({ base: 'KG/' });
  const out = await kg.run('out = Tensor([[1, 2], [3, 4]]) * 2', { device: kg.info.device });
  let error;
  try { await kg.run('out = (', {}); } catch (e) {
    error = { type: e.type, message: e.message, line: e.line };
  }
  window.done = { data: Array.from(out.data), device: kg.info.device, error };
} catch (e) {
  window.done = { failed: String(e && e.message || e) };
}
</script>"""


def embed(chromium, kernelgen_origin: str, tmp_path) -> dict:
  (tmp_path / "embed.html").write_text(EMBED.replace("KG", kernelgen_origin))
  with StaticServer(tmp_path) as other, local_page(chromium, service_workers="block") as page:
    assert other.origin != kernelgen_origin
    page.goto(other.url("embed.html"))
    page.wait_for_function("window.done !== undefined", timeout=BOOT_MS)
    return page.evaluate("window.done")


def test_the_app_embeds_in_a_page_of_another_origin_with_cors(site, chromium, tmp_path):  # noqa: F811
  process, origin = serve_site("--cors")
  try:
    done = embed(chromium, origin, tmp_path)
  finally:
    process.terminate()
    process.wait(timeout=10)
  assert done.get("data") == [2, 4, 6, 8], done
  readme = (REPO_ROOT / "README.md").read_text()
  said = re.search(r"error\.type, error\.message, error\.line;\s*// (.*)", readme).group(1)
  assert said == f"'{done['error']['type']}', \"{done['error']['message']}\", " \
                 f"{done['error']['line']}", (said, done["error"])


def test_without_cors_another_origin_cannot_embed_it(site, chromium, tmp_path):  # noqa: F811
  process, origin = serve_site()
  try:
    done = embed(chromium, origin, tmp_path / "")
  finally:
    process.terminate()
    process.wait(timeout=10)
  assert "failed" in done, done


# ---- the demos ----

def test_filters_footer_says_python_ran_an_image_of_another_size(site, chromium):  # noqa: F811
  with local_page(chromium, service_workers="block") as page:
    page.goto(site.url("web/demos/filters.html"))
    page.wait_for_selector("body[data-ready]", timeout=BOOT_MS)
    assert "exported bundles" in page.inner_text("#adapter")
    page.evaluate("""async () => { const c = document.createElement('canvas');
      c.width = 40; c.height = 24; const g = c.getContext('2d'); g.fillStyle = '#c84';
      g.fillRect(0, 0, 40, 24); const blob = await new Promise((r) => c.toBlob(r));
      const dt = new DataTransfer(); dt.items.add(new File([blob], 'mine.png',
        { type: 'image/png' }));
      const input = document.querySelector('#file'); input.files = dt.files;
      input.dispatchEvent(new Event('change')); }""")
    page.wait_for_function("document.body.dataset.path === 'python'", timeout=BOOT_MS * 2)
    footer = page.inner_text("#adapter")
    assert footer.startswith("WebGPU through kernelgen in Pyodide") and "bundles" in footer


def test_training_plot_legend_sits_above_the_curves(site, chromium):  # noqa: F811
  with local_page(chromium, service_workers="block") as page:
    page.goto(site.url("web/demos/digits.html"))
    page.wait_for_selector("body[data-ready]", timeout=BOOT_MS)
    # a training whose loss starts in the plot's top-left corner, where the legend is written
    crossed = page.evaluate("""async () => {
      const m = await import('./digits_train.js');
      m.training.history = [{step: 0, loss: 2.3, accuracy: 0.1, seconds: 0},
        {step: 3, loss: 1.6, accuracy: 0.5, seconds: 1}, {step: 10, loss: 0.2, accuracy: 0.97,
        seconds: 2}];
      m.drawPlot();
      const c = document.querySelector('#train-plot');
      const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      const at = (x, y) => px.slice((y * c.width + x) * 4, (y * c.width + x) * 4 + 3);
      const text = ([r, g, b]) => r > 90 && b > 110 && Math.abs(r - 125) < 40 && g > 100;
      const curve = ([r, g, b]) => (r > 160 && g > 110 && b < 90) ||   // loss: #d29922
        (g > 150 && r < 110 && b < 120);                               // accuracy: #3fb950
      let crossed = 0, letters = 0, curves = 0;
      for (let y = 1; y < c.height / 2; y++) {
        for (let x = 1; x < 300; x++) {
          if (curve(at(x, y))) curves++;
          if (!text(at(x, y))) continue;
          letters++;
          for (const [dx, dy] of [[1, 0], [-1, 0], [0, 1], [0, -1]]) {
            if (curve(at(x + dx, y + dy))) { crossed++; break; }
          }
        }
      }
      return { crossed, letters, curves }; }""")
  assert crossed["letters"] > 50 and crossed["curves"] > 20, crossed
  assert crossed["crossed"] == 0, crossed
