"""The in-browser ML demos (web/demos/) in headless Chromium: the digits page classifies held-out
test digits and a drawn stroke exactly as numpy's forward pass of the committed weights does; the
filters page's every filter (and a chain) matches numpy on the sample image; both work without
WebGPU (PYTHON fallback, with a notice); screenshots go to tests/artifacts/. One booted page per
demo and browser keeps the suite quick; local_page fails a test that asks any host but 127.0.0.1.
"""
from __future__ import annotations

import base64
import json
import struct
import zlib

import numpy as np
import pytest

from browser_util import StaticServer, assembled_site, local_page
from tools import REPO_ROOT

pytestmark = pytest.mark.timeout(600)

DEMOS = REPO_ROOT / "web" / "demos"
ARTIFACTS = REPO_ROOT / "tests" / "artifacts"
BOOT_MS = 180_000
RUN_MS = 120_000
WEIGHTS = json.loads((DEMOS / "digits_weights.json").read_text())


# ---- numpy references ----

def weight(name: str) -> np.ndarray:
  entry = WEIGHTS[name]
  return np.frombuffer(base64.b64decode(entry["data"]), "<f4").reshape(entry["shape"])


def digits_forward(pixels) -> np.ndarray:
  """The page's forward pass in numpy (float32): softmax(relu(p/16 @ w1 + b1) @ w2 + b2)."""
  x = np.asarray(pixels, np.float32).reshape(1, 64) / np.float32(16)
  hidden = np.maximum(x @ weight("w1") + weight("b1"), 0)
  logits = hidden @ weight("w2") + weight("b2")
  e = np.exp(logits - logits.max())
  return (e / e.sum()).ravel()


def read_png(path) -> np.ndarray:
  """H x W x 3 uint8 of an 8-bit RGB PNG with unfiltered rows (what make_sample_image writes)."""
  data = path.read_bytes()
  chunks, at = {}, 8
  while at < len(data):
    length, kind = struct.unpack(">I4s", data[at:at + 8])
    chunks[kind] = chunks.get(kind, b"") + data[at + 8:at + 8 + length]
    at += 12 + length
  width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
  assert (depth, colour) == (8, 2), "sample.png must be 8-bit RGB"
  rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(height, -1)
  assert not rows[:, 0].any(), "sample.png rows must be unfiltered"
  return rows[:, 1:].reshape(height, width, 3)


F32 = np.float32


def conv_np(img, k):
  k = np.asarray(k, np.float32)
  n, (h, w) = len(k), img.shape[:2]
  padded = np.pad(img, ((n // 2, n // 2), (n // 2, n // 2), (0, 0)), mode="edge")
  out = np.zeros_like(img)
  for i in range(n):
    for j in range(n):
      out += k[i, j] * padded[i:i + h, j:j + w]
  return out


def luma_np(img):
  return (img * np.array([0.299, 0.587, 0.114], np.float32)).sum(-1, keepdims=True)


def colour_np(img, brightness, contrast, saturation):
  img = (img - F32(0.5)) * F32(contrast) + F32(0.5) + F32(brightness)
  gray = luma_np(img)
  return gray + (img - gray) * F32(saturation)


SEPIA = np.array([[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]], np.float32)
GAUSS = [1, 4, 6, 4, 1]
FILTERS = {
  "colour": lambda img, s: colour_np(img, s["brightness"], s["contrast"], s["saturation"]),
  "sepia": lambda img, s: img @ SEPIA.T,
  "blur": lambda img, s: conv_np(img, [[a * b / 256 for b in GAUSS] for a in GAUSS]),
  "conv": lambda img, s: conv_np(img, s["weights"]),
  "sobel": lambda img, s: np.broadcast_to(np.sqrt(
    conv_np(luma_np(img), [[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]]) ** 2
    + conv_np(luma_np(img), [[-1, -2, -1], [0, 0, 0], [1, 2, 1]]) ** 2) / 4, img.shape),
  "invert": lambda img, s: 1 - img,
}


def filters_np(rgb: np.ndarray, specs: list) -> np.ndarray:
  img = rgb.astype(np.float32) / F32(255)
  for spec in specs:
    img = FILTERS[spec["name"]](img, spec).astype(np.float32)
  return np.clip(img, 0, 1)


# ---- fixtures ----

@pytest.fixture(scope="module")
def site():
  """site/ (web/demos/ comes along with web/; assembled once per session:
  browser_util.assembled_site), on a free port."""
  with StaticServer(assembled_site()) as server:
    yield server


def open_demo(browser, site, name: str):
  """A context manager yielding the booted demo page `name` (digits or filters)."""
  manager = local_page(browser, viewport={"width": 1280, "height": 900}, accept_downloads=True,
                       service_workers="block")
  page = manager.__enter__()
  try:
    page.goto(site.url(f"web/demos/{name}.html"))
    page.wait_for_selector("body[data-ready]", timeout=BOOT_MS)
    assert page.get_attribute("body", "data-ready") == "true", (
      page.inner_text("#notice"), page.console_errors)
  except BaseException:
    manager.__exit__(None, None, None)
    raise
  page.set_default_timeout(RUN_MS)
  return manager, page


def run_in_demo(browser, site, name: str, code: str) -> list:
  """The flat values of program `code` run on WEBGPU through the page API (kernelgen.js) in the
  booted demo page `name`."""
  manager, page = open_demo(browser, site, name)
  try:
    return page.evaluate("async (code) => { const { createKernelgen } = "
                         "await import('/web/kernelgen.js'); "
                         "const kg = await createKernelgen({ base: '/', webgpu: true }); "
                         "const r = await kg.run(code, {device: 'WEBGPU'}); "
                         "return Array.from(r.data, Number); }", code)
  finally:
    manager.__exit__(None, None, None)


@pytest.fixture(scope="module")
def digits(site, chromium):
  manager, page = open_demo(chromium, site, "digits")
  yield page
  manager.__exit__(None, None, None)


@pytest.fixture(scope="module")
def filters(site, chromium):
  manager, page = open_demo(chromium, site, "filters")
  yield page
  manager.__exit__(None, None, None)


def wait_runs(page, before: int) -> dict:
  page.wait_for_function(f"Number(document.body.dataset.runs || 0) > {before} && "
                         "!window.digitsDemo.state.busy")
  return page.evaluate("({input: digitsDemo.state.input, probs: digitsDemo.state.probs, "
                       "error: digitsDemo.state.error})")


def runs(page) -> int:
  return int(page.evaluate("Number(document.body.dataset.runs || 0)"))


# ---- digits ----

def test_digits_page_boots_on_webgpu(digits):
  assert digits.inner_text("#device") == "WEBGPU"
  assert digits.is_hidden("#notice")
  assert f"{WEIGHTS['accuracy']['test'] * 100:.1f}%" in digits.inner_text("#accuracy")


@pytest.mark.parametrize("label", [0, 3, 5, 8, 9])
def test_digits_held_out_sample_matches_numpy_forward_pass(digits, label):
  sample = WEIGHTS["samples"][label]
  before = runs(digits)
  digits.click(f"button[data-sample='{label}']")
  result = wait_runs(digits, before)
  assert result["error"] is None, result["error"]
  assert result["input"] == sample["pixels"]
  expected = digits_forward(sample["pixels"])
  np.testing.assert_allclose(result["probs"], expected, rtol=1e-4, atol=1e-6)
  assert int(np.argmax(result["probs"])) == int(np.argmax(expected))
  assert digits.inner_text("#digit") == str(int(np.argmax(expected)))


def test_digits_numpy_forward_pass_gets_the_held_out_samples_right():
  predicted = [int(np.argmax(digits_forward(s["pixels"]))) for s in WEIGHTS["samples"]]
  assert predicted == [s["label"] for s in WEIGHTS["samples"]]


def draw(page, points) -> None:
  box = page.locator("#pad").bounding_box()
  page.mouse.move(box["x"] + points[0][0], box["y"] + points[0][1])
  page.mouse.down()
  for x, y in points[1:]:
    page.mouse.move(box["x"] + x, box["y"] + y, steps=4)
  page.mouse.up()


def test_digits_drawn_stroke_is_classified_like_numpy(digits):
  digits.click("#clear")
  before = runs(digits)
  draw(digits, [(110, 70), (150, 45), (150, 235)])   # a "1": a flag, then straight down
  result = wait_runs(digits, before)
  assert result["error"] is None, result["error"]
  pixels = np.array(result["input"]).reshape(8, 8)
  assert pixels.max() >= 10 and pixels[:, :2].sum() == 0, pixels   # a tall, centred stroke
  assert result["input"] == digits.evaluate("digitsDemo.padPixels()")
  expected = digits_forward(result["input"])
  np.testing.assert_allclose(result["probs"], expected, rtol=1e-4, atol=1e-6)
  assert int(np.argmax(result["probs"])) == 1


def test_digits_show_kernels_has_wgsl_and_ptx_to_download(digits):
  if digits.is_hidden("#kernels-view"):
    digits.click("#show-kernels")
  digits.wait_for_selector("#kernels-view[data-state=ready]")
  assert digits.locator("#kernels-view .kernel-list li").count() >= 2
  assert "@compute" in digits.inner_text("#kernels-view .source")
  digits.click("#kernels-view [data-target=ptx]")
  assert ".target sm_80" in digits.inner_text("#kernels-view .source")
  with digits.expect_download() as info:
    digits.click("#kernels-view .download")
  assert info.value.suggested_filename.endswith("_sm_80.ptx")
  assert ".entry" in info.value.path().read_text()
  digits.click("button[data-sample='4']")
  digits.wait_for_function("!digitsDemo.state.busy")
  ARTIFACTS.mkdir(parents=True, exist_ok=True)
  digits.screenshot(path=str(ARTIFACTS / "demo_digits.png"), full_page=True)


# ---- filters ----

def page_images(page) -> tuple[np.ndarray, np.ndarray]:
  """(the page's input RGB bytes, its result floats), both H x W x 3."""
  got = page.evaluate("""() => { const s = filtersDemo.state;
    return {w: s.image.width, h: s.image.height, rgb: Array.from(s.image.rgb),
            out: Array.from(s.output), error: s.error}; }""")
  assert got["error"] is None, got["error"]
  shape = (got["h"], got["w"], 3)
  return np.array(got["rgb"], np.uint8).reshape(shape), np.array(got["out"], np.float32).reshape(shape)


def run_chain(page, specs: list) -> None:
  result = page.evaluate("async (specs) => await filtersDemo.setChain(specs)", specs)
  page.wait_for_function("!filtersDemo.state.busy")
  assert result["error"] is None, result["error"]


CHAINS = {
  "colour": [{"name": "colour", "brightness": 0.1, "contrast": 1.3, "saturation": 0.6}],
  "sepia": [{"name": "sepia"}],
  "blur": [{"name": "blur"}],
  "conv-emboss": [{"name": "conv", "weights": [[-2, -1, 0], [-1, 1, 1], [0, 1, 2]]}],
  "sobel": [{"name": "sobel"}],
  "invert": [{"name": "invert"}],
  "chain": [{"name": "colour", "brightness": 0.0, "contrast": 1.1, "saturation": 1.3},
            {"name": "blur"}, {"name": "conv", "weights": [[0, -1, 0], [-1, 5, -1], [0, -1, 0]]},
            {"name": "sobel"}, {"name": "invert"}],
}


def test_filters_page_shows_the_sample_image_on_webgpu(filters):
  assert filters.inner_text("#device") == "WEBGPU"
  assert filters.is_hidden("#notice")
  rgb, _ = page_images(filters)
  np.testing.assert_array_equal(rgb, read_png(DEMOS / "sample.png"))


@pytest.mark.parametrize("name", list(CHAINS))
def test_filter_on_the_sample_image_matches_numpy(filters, name):
  run_chain(filters, CHAINS[name])
  rgb, out = page_images(filters)
  specs = filters.evaluate("filtersDemo.chain()")
  assert [s["name"] for s in specs] == [s["name"] for s in CHAINS[name]]
  np.testing.assert_allclose(out, filters_np(rgb, specs), rtol=1e-4, atol=2e-5)
  timings = filters.inner_text("#timings")
  assert "kernel" in timings and "ms" in timings, timings


def test_filters_edited_conv_weights_are_used(filters):
  run_chain(filters, [{"name": "conv", "weights": [[0, 0, 0], [0, 1, 0], [0, 0, 0]]}])
  before = filters.evaluate("filtersDemo.state.runs")
  filters.fill("#conv-weights input >> nth=0", "0.5")   # the UI's own input path
  filters.wait_for_function(f"filtersDemo.state.runs > {before} && !filtersDemo.state.busy")
  rgb, out = page_images(filters)
  weights = [[0.5, 0, 0], [0, 1, 0], [0, 0, 0]]
  assert filters.evaluate("filtersDemo.chain()")[0]["weights"] == weights
  np.testing.assert_allclose(out, filters_np(rgb, [{"name": "conv", "weights": weights}]),
                             rtol=1e-4, atol=2e-5)


def test_filters_show_kernels_and_screenshot(filters):
  run_chain(filters, CHAINS["chain"][:2] + [CHAINS["chain"][2]])
  filters.click("#show-kernels")
  filters.wait_for_selector("#kernels-view[data-state=ready]")
  count = filters.locator("#kernels-view .kernel-list li").count()
  assert count >= 2 and "@compute" in filters.inner_text("#kernels-view .source")
  assert filters.inner_text("#timings").count(" ms") >= count
  filters.click("#kernels-view [data-target=ptx]")
  assert ".target sm_80" in filters.inner_text("#kernels-view .source")
  ARTIFACTS.mkdir(parents=True, exist_ok=True)
  filters.screenshot(path=str(ARTIFACTS / "demo_filters.png"), full_page=True)


# ---- without WebGPU ----

def test_demos_fall_back_to_python_without_webgpu_and_say_so(site, chromium_no_webgpu):
  manager, page = open_demo(chromium_no_webgpu, site, "digits")
  try:
    assert page.inner_text("#device") == "PYTHON"
    assert "No WebGPU" in page.inner_text("#notice") and "slower" in page.inner_text("#notice")
    before = runs(page)
    page.click("button[data-sample='7']")
    result = wait_runs(page, before)
    np.testing.assert_allclose(result["probs"], digits_forward(WEIGHTS["samples"][7]["pixels"]),
                               rtol=1e-4, atol=1e-6)
  finally:
    manager.__exit__(None, None, None)
  manager, page = open_demo(chromium_no_webgpu, site, "filters")
  try:
    assert page.inner_text("#device") == "PYTHON"
    assert "reduced to 48 pixels" in page.inner_text("#notice")
    rgb, out = page_images(page)   # the default chain (colour, sharpen) ran at start-up
    assert rgb.shape == (36, 48, 3)
    np.testing.assert_allclose(out, filters_np(rgb, page.evaluate("filtersDemo.chain()")),
                               rtol=1e-4, atol=2e-5)
  finally:
    manager.__exit__(None, None, None)
