"""Issue 37: the driver's share of a cold first result, per row, kernelgen's kernels against
tinygrad's, as raw WGSL in a fresh headless Chromium (an empty shader cache; Mesa's off).

bench/peers_cold.py times whole first results; its kernelgen split (kg py, kg pipe) misses what
lavapipe (through ANGLE, Chromium's compatibility mode) builds at a kernel's first dispatch. This
script times only the GPU side of a row's kernels, with nothing of either system's runtime:

  pipelines  every kernel's shader module and createComputePipelineAsync, all at once
  first      one submit of every kernel's dispatch (in order) until onSubmittedWorkDone: the
             deferred driver compile plus the run
  again      the same submit once more: the run alone (first - again ~ the deferred compile)
  map        a 64-byte readback after it

Each (system, round) gets its own browser (a fresh profile), after one unrelated kernel (the
device's own first-use costs); rounds alternate the systems' order. Every dispatch is checked
by a validation error scope (a rejected dispatch runs nothing and would time as free). Inputs
are zero buffers: this times builds and runs, not values (bench/peers_cold.py checks those).

    python bench/cold_kernels.py [--rows blur,digits] [--adapters lavapipe,swiftshader]
        [--reps 2] [--tiny] [--variant NAME=JSON ...] [--against NAME=DIR ...] [--no-tinygrad]

--variant adds kernelgen's kernels under more options (NAME={"slide": false}: a choice a one-off
run could make), --against the kernels of another checkout's core/ (NAME=/work/main: its
kernelgen compiles them in a subprocess, so a branch and main run alternated in one process).
Rounds turn the systems' order (peers.round_order); after the rounds, each system's median and
best of pipelines + first + map (the time to a first result the GPU side costs) per row.

kernelgen's kernels are compiled as the page compiles them on that adapter (option adapter=,
a one-off run); tinygrad's come from bench/peers.py's tinygrad worker (.venv-bench). The load
average is printed with every line: on the shared machine these are directions, not idle times.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
import peers  # noqa: E402  (the rows and tinygrad's worker)

WARM = {"name": "warm", "entry": "warm", "kinds": ["storage"], "dispatch": [1, 1, 1],
        "source": "@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n"
                  "@compute @workgroup_size(1) fn warm() { o[0] = 1.0; }\n"}

# one system's kernels in the page: pipelines at once, a timed first and second submit
PAGE = """async ([kernels, warm, compat]) => {
  const adapter = await navigator.gpu.requestAdapter(compat ? {featureLevel: 'compatibility'} : {});
  const requiredLimits = {};   // all the adapter has, as the page's device (web/gpu.js)
  for (const key in adapter.limits) {
    if (typeof adapter.limits[key] === 'number') requiredLimits[key] = adapter.limits[key];
  }
  const device = await adapter.requestDevice({ requiredLimits });
  const most = Math.max(...kernels.map((k) => k.kinds.length));
  const bytes = Math.min(64 << 20, adapter.limits.maxStorageBufferBindingSize);
  const buffers = Array.from({ length: most }, () => device.createBuffer({ size: bytes,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC }));
  const uniform = device.createBuffer({ size: 256, usage: GPUBufferUsage.UNIFORM });
  const type = (kind) => (kind === 'uniform' ? 'uniform'
    : kind === 'read' ? 'read-only-storage' : 'storage');
  async function submit(made, list) {
    const encoder = device.createCommandEncoder();
    list.forEach((k, j) => {
      const pass = encoder.beginComputePass();
      pass.setPipeline(made[j].pipeline);
      pass.setBindGroup(0, device.createBindGroup({ layout: made[j].layout,
        entries: k.kinds.map((kind, i) => ({ binding: i,
          resource: { buffer: kind === 'uniform' ? uniform : buffers[i] } })) }));
      pass.dispatchWorkgroups(...k.dispatch);
      pass.end();
    });
    device.queue.submit([encoder.finish()]);
    await device.queue.onSubmittedWorkDone();
  }
  async function times(list) {
    device.pushErrorScope('validation');
    const t0 = performance.now();
    const made = await Promise.all(list.map(async (k) => {
      const module = device.createShaderModule({ code: k.source });
      const layout = device.createBindGroupLayout({ entries: k.kinds.map((kind, i) => ({
        binding: i, visibility: GPUShaderStage.COMPUTE, buffer: { type: type(kind) } })) });
      const pipeline = await device.createComputePipelineAsync({ compute: { module,
        entryPoint: k.entry }, layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }) });
      return { pipeline, layout };
    }));
    const t1 = performance.now();
    await submit(made, list);
    const t2 = performance.now();
    await submit(made, list);
    const t3 = performance.now();
    const staging = device.createBuffer({ size: 64,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(buffers[0], 0, staging, 0, 64);
    device.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const t4 = performance.now();
    const error = await device.popErrorScope();
    if (error) return { error: error.message.slice(0, 300) };
    return { pipelines: t1 - t0, first: t2 - t1, again: t3 - t2, map: t4 - t3 };
  }
  const warmed = await times(warm);
  return warmed.error ? { error: 'warm-up: ' + warmed.error } : await times(kernels);
}"""


def kernel_spec(name: str, source: str, dispatch) -> dict:
  """A kernel for the page: its entry point and each binding's kind (uniform, read, storage, in
  binding order 0..n-1, as both systems number them) read from its WGSL."""
  entry = re.search(r"@compute[^{]*?\bfn\s+(\w+)", source)
  bindings = re.findall(r"@binding\((\d+)\)\s*var<([\w\s,]+)>", source)
  if entry is None or sorted(int(b) for b, _ in bindings) != list(range(len(bindings))):
    raise ValueError(f"kernel {name}: no entry point, or bindings not numbered 0..n-1")
  kinds = {}
  for binding, kind in bindings:
    words = [w.strip() for w in kind.split(",")]
    kinds[int(binding)] = "uniform" if words[0] == "uniform" else \
      "read" if words[1:] in ([], ["read"]) else "storage"
  return {"name": name, "entry": entry.group(1), "source": source,
          "kinds": [kinds[i] for i in range(len(kinds))], "dispatch": [int(d) for d in dispatch]}


def kernelgen_kernels(row: dict, adapter: str, options: dict | None = None) -> list:
  """The row's kernels as kernelgen compiles them for `adapter` (a one-off run), under the
  kernelgen options `options` too."""
  import kernelgen as kg
  tensors = [kg.Tensor(a, device="PYTHON") for a in row["inputs"]]
  out = row["lib"](peers.KernelgenLib(), *tensors)
  return [kernel_spec(k.name, k.source, k.launch.dispatch)
          for k in kg.compile(out, target="wgsl", adapter=adapter, **(options or {}))]


def checkout_kernels(root: str, name: str, adapter: str, tiny: bool) -> list | str:
  """The kernels of row `name` as the kernelgen of checkout `root` (its core/)
  compiles them for `adapter`, in a subprocess (this script's rows and kernel_spec); or the
  subprocess's error text."""
  import subprocess
  env = {**os.environ, "PYTHONPATH": str(Path(root).resolve() / "core")}
  args = [sys.executable, __file__, "--dump-row", name, "--adapters", adapter] + \
    (["--tiny"] if tiny else [])
  done = subprocess.run(args, env=env, capture_output=True, text=True)
  if done.returncode:
    return done.stderr[-400:]
  got = json.loads(done.stdout)
  if not Path(got["core"]).resolve().is_relative_to(Path(root).resolve()):
    return f"kernelgen came from {got['core']}, not {root}"
  return got["kernels"]


def named(pairs: list, what: str) -> dict:
  """{NAME: VALUE} of NAME=VALUE arguments (`what`: the option's name, for the error)."""
  out = {}
  for pair in pairs:
    name, eq, value = pair.partition("=")
    if not eq or not name:
      raise SystemExit(f"{what} {pair!r}: give NAME=VALUE")
    out[name] = value
  return out


def medians(results: list) -> list:
  """Lines of each (adapter, row, system)'s median and best of pipelines + first + map, ms,
  from [(adapter, row, system, timings)]."""
  import statistics
  groups: dict = {}
  for adapter, name, system, got in results:
    groups.setdefault((adapter, name, system), []).append(
      got["pipelines"] + got["first"] + got["map"])
  return [f"{a:11s} {n[:30]:30s} {s:9s} to result median {statistics.median(v):7.1f}  best "
          f"{min(v):7.1f} ms of {len(v)}" for (a, n, s), v in groups.items()]


def tinygrad_kernels(folder: Path, names: list, tiny: bool) -> dict:
  """{row: tinygrad's kernels} from bench/peers.py's tinygrad worker (or {row: error text})."""
  peers.prepare(folder, names, tiny, adapters=[])
  out = {}
  for index, name in enumerate(names):
    program = json.loads((folder / f"tinygrad-{index}.json").read_text())
    out[name] = program["error"] if "error" in program else \
      [kernel_spec(k["entry"], k["source"], k["dispatch"]) for k in program["kernels"]]
  return out


def main(argv=None) -> int:
  import numpy as np
  from playwright.sync_api import sync_playwright

  from browser_util import StaticServer
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rows", default="blur,digits", help="words of bench/peers.py's row names")
  parser.add_argument("--adapters", default="lavapipe,swiftshader")
  parser.add_argument("--reps", type=int, default=2)
  parser.add_argument("--tiny", action="store_true", help="tiny rows (a check, not a bench)")
  parser.add_argument("--variant", action="append", default=[],
                      help='NAME=JSON: kernelgen under these options too, e.g. '
                           'noslide=\'{"slide": false}\'')
  parser.add_argument("--against", action="append", default=[],
                      help="NAME=DIR: the kernels of checkout DIR's kernelgen too (e.g. main)")
  parser.add_argument("--no-tinygrad", action="store_true", help="kernelgen's kernels only")
  parser.add_argument("--dump-row", help=argparse.SUPPRESS)   # (checkout_kernels' subprocess)
  args = parser.parse_args(argv)
  table = peers.rows(np, args.tiny)
  if args.dump_row:
    import kernelgen
    print(json.dumps({"core": kernelgen.__file__,
                      "kernels": kernelgen_kernels(table[args.dump_row], args.adapters)}))
    return 0
  variants = {k: json.loads(v) for k, v in named(args.variant, "--variant").items()}
  against = named(args.against, "--against")
  names = [n for n in table if any(w in n for w in args.rows.split(","))]
  results = []
  with tempfile.TemporaryDirectory(prefix="kg-coldk-") as tmp, \
       StaticServer(ROOT / "bench") as server, sync_playwright() as pw:
    theirs = {} if args.no_tinygrad else tinygrad_kernels(Path(tmp), names, args.tiny)
    for adapter in args.adapters.split(","):
      for name in names:
        systems = {"kernelgen": kernelgen_kernels(table[name], adapter),
                   **{k: kernelgen_kernels(table[name], adapter, v) for k, v in variants.items()},
                   **{k: checkout_kernels(d, name, adapter, args.tiny) for k, d in against.items()},
                   **({} if args.no_tinygrad else {"tinygrad": theirs[name]})}
        for rep in range(args.reps):
          for system in peers.round_order(list(systems), rep):
            kernels = systems[system]
            if isinstance(kernels, str):
              print(f"{adapter} {name} {system}: failed ({kernels[:120]})")
              continue
            browser = peers.launch(pw, adapter, env={"MESA_SHADER_CACHE_DISABLE": "true"})
            try:
              page = browser.new_page()
              page.set_default_timeout(600_000)
              page.goto(server.url("web/peers_cold.html"))
              got = page.evaluate(PAGE, [kernels, [WARM], adapter == "lavapipe"])
            finally:
              browser.close()
            lines = sum(k["source"].count("\n") for k in kernels)
            head = f"{adapter:11s} {name[:30]:30s} {system:9s} {len(kernels)} kernels " \
                   f"{lines:5d} lines"
            if "error" in got:
              print(f"{head}  REJECTED: {got['error']}", flush=True)
              continue
            print(head + "".join(f"  {k} {got[k]:7.1f}" for k in ("pipelines", "first",
                                                                   "again", "map"))
                  + f"  ms (load {os.getloadavg()[0]:.1f})", flush=True)
            results.append((adapter, name, system, got))
  print("\n".join(medians(results)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
