"""model.js's first run of a one-off q4 GEMM over a symbolic row count, exported for SwiftShader,
waits only for the kernel that is cheapest to build (issues 35 and 37: the page's q4 LM's first
token waited for the prompt GEMMs' capped tiles: SwiftShader's load() 7-13 s). The kernel is the
4x4 tile, rolled (lowering/cheap_first.py, SwiftShader's option cheap_first), and the capped
tile its variant up to the top: load() builds the kernel only, the first run at the top count
runs it, and the capped tile is built in the background right after that run (not once its runs
have lost its cost: builds are priced out of reach here) and taken by the next; one row
(decoding) still runs the kernel while its own variant is not built (the capped tile pads more
rows). Every run equals numpy, in headless Chromium."""
from __future__ import annotations

import json

import numpy as np
import pytest

import kernelgen as kg
from browser_util import COUNTED_DEVICE, local_page

pytestmark = pytest.mark.timeout(600)

K, N, HI = 576, 1536, 128     # SmolLM2-135M's MLP up projection, blocks of 32, zero point 8

# JS: load the bundle under /NAME/ on a device that counts the pipelines made, builds priced out
# of reach; run `feeds` (lists of x), waiting after the first for a background build; each run's
# y, workgroups, and pipelines made
FIRST = """async ([name, feeds]) => {
  const { load } = await import(`/${name}/model.js`);
""" + COUNTED_DEVICE + """  const model = await load({ device });
  const atLoad = made;
  model.msPerByte = () => 1e12;
  model.buildRate = () => 1e12;
  const runs = [];
  for (const [i, rows] of feeds.entries()) {
    const out = await model.run({ x: new Float32Array(rows) });
    runs.push({ y: Array.from(out.y), workgroups: model.workgroups, made });
    for (let t = 0; i === 0 && t < 1200 && !model.background && made === atLoad; t++) {
      await new Promise((done) => setTimeout(done, 50));
    }
    await model.background;
  }
  model.destroy();
  return { atLoad, runs, made };
}"""


def _gemm():
  """(y over x (seq, K), seq in 1..HI: the q4 GEMM with random words and scales, numpy's
  dequantized weight (N, K))."""
  from kernelgen.onnx.operators.quant_tiled import matmul_dequant
  rng = np.random.default_rng(7)
  words = rng.integers(0, 2**32, (N, K // 8), dtype=np.uint64).astype(np.uint32)
  scale = (rng.standard_normal((N, K // 32)) * 0.05).astype(np.float32)
  x = kg.Tensor.empty(kg.Dim("seq", 1, HI), K, name="x")
  y = matmul_dequant(x, kg.Tensor(words).realize(), kg.Tensor(scale).realize(), 8.0, 4, 32)
  codes = (words[:, :, None] >> (4 * np.arange(8, dtype=np.uint32))) & 15
  w = (codes.reshape(N, K).astype(np.float32) - 8) * np.repeat(scale, 32, axis=1)
  return y, w


def test_the_first_run_takes_the_cheap_kernel_and_the_capped_tile_is_built_after_it(
    chromium, serve, tmp_path):
  from kernelgen.uop.program import launch_dispatch, variant_for
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  y, w = _gemm()
  kg.export({"y": y}, str(tmp_path / "q4"), format="webgpu", adapter="swiftshader")
  (kernel,) = kg.compile(y, target="wgsl", adapter="swiftshader")
  (k,) = json.loads((tmp_path / "q4" / "manifest.json").read_text())["kernels"]
  top = variant_for(kernel, {"seq": HI})
  assert k["variants"][-1]["most"] == HI and top is not kernel, k["variants"]
  cheap, capped = (launch_dispatch(c.launch, {"seq": HI})[0] for c in (kernel, top))
  assert cheap != capped
  one, top_one = (launch_dispatch(c.launch, {"seq": 1})[0] for c in (kernel, top))
  assert one != top_one and variant_for(kernel, {"seq": 1}) is not top
  x = [np.random.default_rng(s).standard_normal((rows, K)).astype(np.float32)
       for s, rows in ((1, HI), (2, HI), (3, 1))]
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    info = page.evaluate(FIRST, ["q4", [a.ravel().tolist() for a in x]])
    assert page.console_errors == [], page.console_errors
  for a, run in zip(x, info["runs"]):
    np.testing.assert_allclose(np.array(run["y"], np.float32).reshape(-1, N), a @ w.T,
                               rtol=1e-3, atol=1e-3)
  # load() made the kernel only; the first run took it, the capped tile was built after it
  # (not bought: priced out of reach) and the second run took that; one row took the kernel
  assert info["atLoad"] == 1, info["atLoad"]
  assert [r["workgroups"] for r in info["runs"]] == [cheap, capped, one], info["runs"]
  assert info["made"] == 2, info["made"]
