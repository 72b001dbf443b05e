"""The "light" ONNX models (tests/onnx_import/test_onnx_light.py) in the page: the Pyodide worker loads the
file's bytes and compiles the model, WebGPU in headless Chromium runs it on the onnx backend
runner's input (arange / n), and the output matches the expected output shipped with the model
(rtol 1e-3, atol 1e-7, the tolerances of onnx/backend/test/data/real).

The adapter is Mesa lavapipe through ANGLE (compatibility mode), the faster of the two Chromium
reaches here. One page boots for the module; each model is unloaded before the next (its buffers
freed, every pipeline dropped: kg.unloadModel), one pytest case per model. CI runs LIGHT_CI_PAGE
(all nine; test_onnx_light.py has the times); KERNELGEN_ONNX_LIGHT=all runs the nine, KERNELGEN_ONNX_LIGHT=resnet50,vgg19 the ones named (each prints its load and run times
and the CPU seconds it took, the browser's included).
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from browser_util import launch_chromium, local_page
from test_browser import boot, site  # noqa: F401 (fixture)
from test_onnx_light import ATOL, LIGHT_CI_PAGE, RTOL, _models

pytestmark = pytest.mark.timeout(1800)

# load + first run, in the worker: the model's bytes in, the output's bytes and times out
RUN_MODEL = """async ([bytes, input]) => {
  const kg = kgApp.state.kg;
  const start = performance.now();
  const model = await kg.loadModel(new Uint8Array(bytes), { arch: 'sm_80' });
  const loaded = performance.now();
  const x = new Float32Array(input);
  const name = model.inputs[0].name;
  const run = await kg.runModel({ device: 'WEBGPU', inputs: { [name]: new Uint8Array(x.buffer) } });
  const out = run.outputs[0];
  return { loadMs: loaded - start, runMs: performance.now() - loaded, device: run.device,
    kernels: model.wgsl.kernels.length, shape: out.shape, data: Array.from(out.data) };
}"""


@pytest.fixture(scope="module")
def lavapipe_page(site, playwright):  # noqa: F811
  browser = launch_chromium(playwright, lavapipe=True)
  with local_page(browser, service_workers="block") as page:
    boot(page, site.url("index.html?compat"))
    assert "compatibility" in page.inner_text("#adapter")
    page.set_default_timeout(1_500_000)
    yield page
  browser.close()


# the loaded model, its buffers and every compiled pipeline dropped: {freed, buffers, pipelines}
UNLOAD = "async () => kgApp.state.kg.unloadModel()"


def tree_usage() -> tuple[float, float]:
  """(CPU seconds, resident GiB) of this process and all its descendants (the browser's GPU
  process compiles and runs the kernels), from /proc."""
  parent, stats = {}, {}
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
      continue
    parent[int(entry)] = int(fields[1])
    stats[int(entry)] = (int(fields[11]) + int(fields[12]), int(fields[21]))
  mine, cpu, pages = {os.getpid()}, 0, 0
  changed = True   # (a child's pid may be lower than its parent's: repeat until none is added)
  while changed:
    changed = False
    for pid, ppid in parent.items():
      if ppid in mine and pid not in mine:
        mine.add(pid)
        changed = True
  for pid in mine & stats.keys():
    cpu += stats[pid][0]
    pages += stats[pid][1]
  return cpu / os.sysconf("SC_CLK_TCK"), pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 30


@pytest.fixture(scope="module")
def baseline(lavapipe_page):
  """The page's live GPU buffers before any model ran."""
  return lavapipe_page.evaluate(UNLOAD)["buffers"]


@pytest.mark.parametrize("path", _models(LIGHT_CI_PAGE), ids=lambda p: getattr(p, "stem", str(p)))
def test_light_model_matches_its_expected_output_in_the_page(path, lavapipe_page, baseline):
  """Each model in the one page the module boots, unloaded before the next (one model's
  buffers and pipelines at a time: memory stays bounded over the nine)."""
  cpu = tree_usage()[0]
  try:
    run_in_page(path, lavapipe_page)
  finally:
    freed = lavapipe_page.evaluate(UNLOAD)
  used, resident = tree_usage()
  print(f"  {used - cpu:.1f} CPU s (browser included); unloaded: {freed}; "
        f"{resident:.2f} GiB resident after")
  assert freed["pipelines"] > 0
  assert freed["buffers"] <= baseline, (freed, baseline)


def run_in_page(path, page) -> None:
  """The model loaded and run in the page's worker on the onnx backend runner's input, its
  output compared with the expected one."""
  from kernelgen.onnx.data import read_tensor_file
  import kernelgen as kg
  model = kg.onnx.load(str(path))
  shape = tuple(d if isinstance(d, int) and d > 0 else 1
                for d in model.input_shapes[model.input_names[0]])
  n = int(np.prod(shape))
  x = (np.arange(n).reshape(shape) / n).astype(np.float32)
  start = time.time()
  result = page.evaluate(RUN_MODEL, [list(path.read_bytes()), x.ravel().tolist()])
  assert result["device"] == "WEBGPU"
  _, _, want_shape, raw = read_tensor_file(str(path).replace(".onnx", "_output_0.pb"))
  want = np.frombuffer(raw, np.float32).reshape(want_shape)
  assert result["shape"] == list(want.shape)
  got = np.array(result["data"], np.float32).reshape(want.shape)
  np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
  print(f"{path.stem}: {result['kernels']} kernels, load {result['loadMs'] / 1e3:.1f} s, "
        f"first run {result['runMs'] / 1e3:.1f} s ({time.time() - start:.1f} s in all)")
