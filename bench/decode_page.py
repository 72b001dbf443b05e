"""bench/decode.py's symbolic way in the page (`python bench/decode.py --page`): the same kg.nn
decoder, weights and decode loop (decode.py's functions, their source sent as the program) run
in Pyodide, in a fresh kernelgen worker (web/kernelgen.js) of headless Chromium on SwiftShader
(its WebGPU adapter), on the site `./build.sh site` assembled, served from 127.0.0.1.

The weights (decode.weights, numpy here: the page has none) go to the page as one file of
float32 bytes beside the site, fetched by the program (JSPI). The counters are the page's:
kernels compiled (kg.cache_info), pipelines made or being made and the kernels, batches and
submits of web/gpu.js's GpuExecutor (`stats`), and the bytes read back (the runtime's copyout,
counted). `submit/tok` is the kernel batches submitted per token, `all` every queue submit
(web/gpu.js puts a read back's copy into the open batch: one submit per token). GPU times per kernel are gpu.js's runTimed (SwiftShader has
timestamp queries). With --jump J, after --decoded positions from the start the last J of the
range are decoded directly (the cache in between left as zeros): the kernels, their sizes and
the time per token there are those of a decode that got that far.

    ./build.sh site && python bench/decode.py --page [--steps 1024] [--decoded 160] [--jump 8]
"""
from __future__ import annotations

import inspect
import json
import sys
import tempfile
from pathlib import Path

import decode

ROOT = Path(__file__).resolve().parent.parent
PAGE_MS = 3_600_000     # the whole decode in the page, boot and first compiles included (ms)

# A fresh kernelgen worker on the page's WebGPU runs the program; its `out` (the figures as JSON,
# one float per byte) comes back.
PAGE_RUN = """async (code) => {
  const { createKernelgen } = await import('/web/kernelgen.js');
  const kg = await createKernelgen({ base: '/', webgpu: true });
  try {
    const result = await kg.run(code, { device: 'WEBGPU', reference: false, timings: false });
    return { values: Array.from(result.data), adapter: kg.info.gpu?.adapter || null };
  } catch (error) {
    return { error: `${error.type}: ${error.message}`.slice(0, 1500) };
  } finally {
    kg.terminate();
  }
}"""


def page_counters(kg, runtime) -> tuple:
  """Compiles, pipelines made or being made, kernels dispatched, kernel batches submitted (the
  page's counters: web/gpu.js), then every queue submit (read backs' copies included)."""
  gpu = runtime.gpu
  stats = gpu.stats
  return (kg.cache_info()["misses"], gpu.pipelines.size + gpu.making.size, stats.kernels,
          stats.batches, stats.submits)


def page_main(kg, url: str | None, index: dict, args: dict) -> dict:
  """In the page: fetch the weights (url None: draw them with python_draw), build the model,
  decode; the figures (decode.py's)."""
  if url is None:
    state = weights(args["layers"], args["d"], args["steps"], python_draw())
  else:
    import js
    from pyodide.ffi import run_sync
    data = run_sync(run_sync(js.fetch(url)).arrayBuffer()).to_bytes()
    state = {name: memoryview(data)[start:start + 4 * _count(shape)].cast("f", shape)
             for name, (start, shape) in index.items()}
  model = kernelgen_model(args["layers"], args["d"], args["heads"], args["steps"], state)
  runtime = kg.Device["WEBGPU"]
  reads = count_reads(runtime)
  def counters():
    now = page_counters(kg, runtime)
    return now[:4] + tuple(reads) + now[4:]
  rec = decode(kg, model, "symbolic", positions(args["decoded"], args["steps"], args["jump"]),
               counters)
  result = rec.result("symbolic (page)", "kernelgen WEBGPU (page)")
  late = rec.deltas[2:] or rec.deltas
  result["submits_all"] = sorted(d[6] for d in late)[len(late) // 2]
  result["after"] = after_layers(args["d"])
  return result


def python_draw():
  """decode.weights' draw with the standard library only (random.Random(34)): other values than
  numpy's, for the page test, which needs no file beside the site."""
  import random
  from array import array
  rng = random.Random(34)
  def draw(shape, scale, shift):
    values = array("f", [shift + rng.gauss(0, 1) * scale for _ in range(_count(shape))])
    return memoryview(values).cast("B").cast("f", list(shape))
  return draw


def _count(shape) -> int:
  n = 1
  for s in shape:
    n *= s
  return n


def program(url: str | None, index: dict, args: dict) -> str:
  """The page's program: decode.py's model and loop, this module's page side, out = JSON (as
  one float per byte: decode it with figures())."""
  parts = ["import json, statistics, time", "kg.limits.set(page_seconds=36000)",
           f"VOCAB, WINDOW, AGREE = {decode.VOCAB}, {decode.WINDOW}, {decode.AGREE}"]
  parts += [inspect.getsource(f) for f in (
    decode.kernelgen_model, decode.count_reads, decode.positions, decode.after_layers,
    decode.decode, decode._marks, decode._Record, decode._gpu, decode.weights, page_counters,
    python_draw, _count, page_main)]
  parts.append(f"_got = page_main(kg, {url!r}, {index!r}, {args!r})")
  parts.append("out = Tensor([float(b) for b in json.dumps(_got).encode()])")
  return "\n".join(parts)


def figures(values: list) -> dict:
  """The program's out (the figures as JSON, a float per byte) as a dict."""
  return json.loads(bytes(int(v) for v in values).decode())


def weights_file(folder: Path, args) -> dict:
  """decode.weights written to folder/weights.bin (float32, one after another); {name: (byte
  offset, shape)}."""
  index, offset = {}, 0
  with open(folder / "weights.bin", "wb") as f:
    for name, value in decode.weights(args.layers, args.d, args.steps).items():
      f.write(value.tobytes())
      index[name] = (offset, list(value.shape))
      offset += value.nbytes
  return index


def measure(args) -> dict:
  """The symbolic way's figures from the page (decode.py's row), or {"error": ...}."""
  sys.path.insert(0, str(ROOT / "tests" / "helpers"))
  from playwright.sync_api import sync_playwright

  from browser_util import StaticServer, launch_chromium, local_page
  if not (ROOT / "site" / "web" / "kernelgen.js").exists():
    raise SystemExit("no site/: run ./build.sh site first (it builds the wheel the page loads)")
  sizes = {"layers": args.layers, "d": args.d, "heads": args.heads, "steps": args.steps,
           "decoded": args.decoded or args.steps, "jump": args.jump}
  with tempfile.TemporaryDirectory() as folder:
    index = weights_file(Path(folder), args)
    with StaticServer(ROOT / "site", mounts={"/decode/": folder}) as server, \
         sync_playwright() as playwright:
      browser = launch_chromium(playwright, webgpu=True)
      try:
        with local_page(browser, service_workers="block") as page:
          page.goto(server.url("web/README.md"))     # any page of the origin hosts the worker
          page.set_default_timeout(PAGE_MS)
          got = page.evaluate(PAGE_RUN, program(server.url("decode/weights.bin"), index, sizes))
      finally:
        browser.close()
  if "error" in got:
    return {"way": "symbolic (page)", "error": got["error"]}
  row = figures(got["values"])
  row["adapter"] = got.get("adapter")
  print(f"  page: {json.dumps(row)[:600]}", file=sys.stderr)
  return row
