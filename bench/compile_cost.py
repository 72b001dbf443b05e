"""What each kernel costs to build, next to what it costs to run: WGSL size, kernelgen's compile,
the driver's shader compile with an empty shader cache, and GPU time, per adapter (issue 37).

For each workload (a tensor expression, optionally under forced options) the kernels are
scheduled and compiled as realize does (the device's render options, so the adapter's table in
render/wgsl/adapters.py applies), then each kernel, on freshly allocated buffers (its inputs
need no values: only the build and the run are timed), is measured as:

  lines, bytes   its WGSL
  loops          `loop {` / `for (` statements in it (what stays rolled)
  uops           the UOps of its lowered graph (what the optimizer's cost model counts)
  python ms      kernelgen's compile of the item (optimize, lower, rewrite, render), CPU ms
  pipeline ms    wgpu create_shader_module + create_compute_pipeline (naga, the driver's NIR)
  first ms       the first dispatch, waited for (lavapipe compiles with LLVM there)
  gpu ms         the best of REPS later dispatches (GPU timestamps where the adapter has them,
                 else wall clock to a completed read-back)
  driver ms      the process's CPU time over pipeline + first, less a later dispatch's: the
                 driver's compile as an idle machine's wall clock sees it (lavapipe compiles on
                 the calling thread; on a loaded machine the wall clock, driver_wall_ms =
                 pipeline + first - gpu, also counts the time other jobs hold the cores)

Each adapter runs in a fresh process with Mesa's shader cache off (MESA_SHADER_CACHE_DISABLE):
lavapipe through Mesa's ICD, SwiftShader through Chromium's (the one its WebGPU falls back to).
The driver prints one JSON line per kernel and, at the end, a least-squares fit per adapter of
driver ms = a * uops + b * uops^2 / 1000 (through the origin: the compile of an empty kernel is a
few ms), the model lowering/compile_cost.py keeps.

    nice python bench/compile_cost.py [--adapters lavapipe,swiftshader] [--only NAME,...]
                                      [--reps N] [--json OUT]

--only also takes "capped MODEL" (a light model's kernels that a one-off run's budget cuts down,
each one-off and for many runs) and "light MODEL".
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from icd import ICDS  # noqa: E402  (bench/icd.py)

# name -> (expression over E(*shape) (an input of that shape) and kg, forced options or {}).
# The first rows span the kernel families; "opt" rows force the option the adapter table or the
# cost model would change, so one run shows both sides of each choice.
WORKLOADS = {
  "add 1M": ("E(1 << 20) + E(1 << 20)", {}),
  "sum rows 1024x1024": ("E(1024, 1024).sum(axis=1)", {}),
  "sum 16M": ("E(1 << 24).sum()", {}),
  "softmax 4096x1024": ("E(4096, 1024).softmax(axis=-1)", {}),
  "layernorm 4096x1024": ("E(4096, 1024).layernorm()", {}),
  "matmul 512^3": ("E(512, 512) @ E(512, 512)", {}),
  "matmul 512^3 tile 8x8": ("E(512, 512) @ E(512, 512)", {"tile": (8, 8)}),
  "matmul 512^3 tile 4x4": ("E(512, 512) @ E(512, 512)", {"tile": (4, 4)}),
  "matmul 1024^3": ("E(1024, 1024) @ E(1024, 1024)", {}),
  "matmul 1024^3 many runs": ("E(1024, 1024) @ E(1024, 1024)", {"runs": 100}),
  "matmul 1024^3 tile 8x16": ("E(1024, 1024) @ E(1024, 1024)", {"tile": (8, 16)}),
  "matmul 1024^3 tile 8x8": ("E(1024, 1024) @ E(1024, 1024)", {"tile": (8, 8)}),
  "matmul 1024^3 tile 16x8": ("E(1024, 1024) @ E(1024, 1024)", {"tile": (16, 8)}),
  "matmul 1024^3 tile 4x4": ("E(1024, 1024) @ E(1024, 1024)", {"tile": (4, 4)}),
  "matmul 1024^3 rolled 8x16": ("E(1024, 1024) @ E(1024, 1024)", {"tile": (8, 16), "tile_unroll": 0}),
  "matmul 1024^3 rolled 8x8": ("E(1024, 1024) @ E(1024, 1024)", {"tile": (8, 8), "tile_unroll": 0}),
  "digits": ("(((E(1, 64) / 16) @ E(64, 32) + E(32)).relu() @ E(32, 10) + E(10)).softmax(-1)", {}),
  "conv2d 3x3 64ch 56x56": ("E(1, 64, 56, 56).conv2d(E(64, 64, 3, 3), padding=1)", {}),
  "conv2d 3x3 64ch many runs": ("E(1, 64, 56, 56).conv2d(E(64, 64, 3, 3), padding=1)", {"runs": 100}),
  "conv2d 3x3 64ch tile 4x4": ("E(1, 64, 56, 56).conv2d(E(64, 64, 3, 3), padding=1)", {"tile": (4, 4)}),
  "blur 5x5 3x480x640": ("E(3, 1, 484, 644).conv2d(E(1, 1, 5, 5))", {}),
  "blur 5x5 looped": ("E(3, 1, 484, 644).conv2d(E(1, 1, 5, 5))", {"tile_window": False}),
  "blur 5x5 many runs": ("E(3, 1, 484, 644).conv2d(E(1, 1, 5, 5))", {"runs": 100}),
  "dwconv 5x5 96x80x80 hswish": ("DW(96, 80)", {}),
  "dwconv 5x5 looped": ("DW(96, 80)", {"tile_window": False}),
  "dwconv 5x5 many runs": ("DW(96, 80)", {"runs": 100}),
  "dwconv 5x5 tile 4x8": ("DW(96, 80)", {"tile": (4, 8)}),
  # SmolLM2-135M's q4 prompt GEMMs at 128 rows (onnx/operators/quant_tiled.py, block 32): q and
  # o 576 -> 576, k and v 576 -> 192, up and gate 576 -> 1536, down 1536 -> 576
  "q4 576->1536 p128": ("Q4(128, 576, 1536)", {}),
  "q4 576->1536 tile 4x4": ("Q4(128, 576, 1536)", {"tile": (4, 4)}),
  "q4 576->1536 tile 8x8": ("Q4(128, 576, 1536)", {"tile": (8, 8)}),
  "q4 576->1536 rolled 8x16": ("Q4(128, 576, 1536)", {"tile": (8, 16), "tile_unroll": 0}),
  "q4 576->1536 rolled 4x4": ("Q4(128, 576, 1536)", {"tile": (4, 4), "tile_unroll": 0}),
  "q4 1536->576 p128": ("Q4(128, 1536, 576)", {}),
  "q4 1536->576 tile 4x4": ("Q4(128, 1536, 576)", {"tile": (4, 4)}),
  "q4 1536->576 tile 8x8": ("Q4(128, 1536, 576)", {"tile": (8, 8)}),
  "q4 1536->576 rolled 8x16": ("Q4(128, 1536, 576)", {"tile": (8, 16), "tile_unroll": 0}),
  "q4 1536->576 rolled 4x4": ("Q4(128, 1536, 576)", {"tile": (4, 4), "tile_unroll": 0}),
  "q4 576->576 p128": ("Q4(128, 576, 576)", {}),
  "q4 576->576 tile 4x4": ("Q4(128, 576, 576)", {"tile": (4, 4)}),
  "q4 576->576 tile 8x8": ("Q4(128, 576, 576)", {"tile": (8, 8)}),
  "q4 576->192 p128": ("Q4(128, 576, 192)", {}),
  "q4 576->192 tile 4x4": ("Q4(128, 576, 192)", {"tile": (4, 4)}),
  "q4 576->192 tile 8x8": ("Q4(128, 576, 192)", {"tile": (8, 8)}),
  "sdpa L=512 rows 1": ("SDPA(512)", {"upcast": 1}),
  "sdpa L=512 rows 2": ("SDPA(512)", {"upcast": 2}),
  "sdpa L=512 rows 4": ("SDPA(512)", {"upcast": 4}),
  "sdpa L=512 rows 8": ("SDPA(512)", {"upcast": 8}),
  "sdpa L=512 d=64": ("SDPA(512)", {}),
  "sdpa L=512 rows 16": ("SDPA(512)", {"upcast": 16}),
  "sdpa L=512 rows 32": ("SDPA(512)", {"upcast": 32}),
}
# the slowest to build (a minute or more of LLVM each on lavapipe), measured after the others
LAST = ("sdpa L=512 rows 16", "sdpa L=512 rows 32")
# light ONNX models: their kernels by WGSL lines, the largest LIGHT_LARGEST and every LIGHT_EVERY-th
LIGHT = ("shufflenet", "inception_v2", "resnet50")
LIGHT_LARGEST, LIGHT_EVERY = 3, 12


def _inputs(kg):
  E = lambda *shape: kg.Tensor.empty(*shape, device="WEBGPU")   # noqa: E731

  def DW(channels, side):         # a depthwise 5x5 conv with bias and hard-swish (PP-OCR's)
    y = E(1, channels, side, side).conv2d(E(channels, 1, 5, 5), E(channels), padding=2,
                                          groups=channels)
    return y * (y + 3).clip(0, 6) / 6

  def SDPA(length):
    q, k, v = (E(1, 8, length, 64) for _ in range(3))
    return q.scaled_dot_product_attention(k, v)

  def Q4(rows, k, n, block=32):   # a q4 MatMulNBits over a prompt's rows, zero point 8
    from kernelgen.onnx.operators.quant_tiled import matmul_dequant
    words = kg.Tensor.empty(n, k // 8, dtype=kg.dtypes.uint32, device="WEBGPU")
    return matmul_dequant(E(rows, k), words, E(n, k // block), 8.0, 4, block)
  return {"E": E, "DW": DW, "SDPA": SDPA, "Q4": Q4, "kg": kg}


def _light_items(kg, name: str) -> list:
  """(label, item) for some of light model `name`'s kernels (largest first, then a spread)."""
  sys.path.insert(0, str(ROOT / "tests" / "helpers"))
  import onnx_corpus
  from kernelgen.graph.schedule import schedule
  model = kg.onnx.load(str(onnx_corpus.data_dir() / "light" / f"light_{name}.onnx"))
  shape = tuple(d if isinstance(d, int) and d > 0 else 1
                for d in model.input_shapes[model.input_names[0]])
  x = kg.Tensor.empty(*shape, device="WEBGPU")
  out = model.run({model.input_names[0]: x}, device="WEBGPU")[model.output_names[0]]
  items = schedule([out.node])
  return [(f"{name} {item.name}", item) for item in items]


def _prefill_items(kg, dtype: str = "q4", layers: str = "1", prompt: str = "128") -> list:
  """(label, item) for the prompt GEMMs (a reduce over at least 64 terms into the prompt's rows)
  of SmolLM2-135M's prefill step (bench/lm_prefill_kernels.py), `layers` layers."""
  import dataclasses
  sys.path.insert(0, str(ROOT / "bench"))
  import lm_models
  from lm_prefill_kernels import matmul_shape, schedule_step
  from kernelgen.graph.schedule import schedule
  cfg = dataclasses.replace(lm_models.CONFIGS["smollm2-135m"], layers=int(layers))
  nodes, _ = schedule_step(kg, cfg, dtype, int(prompt), True)
  found = []
  for item in schedule(nodes):
    mnk = matmul_shape(item, int(prompt))
    if mnk and mnk[0] == int(prompt) and mnk[1] != int(prompt):
      found.append((f"{dtype} {mnk}", item))
  return found


def _stats(source: str) -> dict:
  return {"lines": source.count("\n") + 1, "bytes": len(source.encode()),
          "loops": len(re.findall(r"\bloop\s*\{|\bfor\s*\(", source))}


def measure(label: str, item, options: dict, reps: int) -> dict:
  """One kernel's row (see the module docstring)."""
  from kernelgen.compiler import compile_item
  from kernelgen.device import Device
  from kernelgen.graph.lazy import Buffer
  from kernelgen.lowering.compile_cost import estimate_ms
  from kernelgen.lowering.lower import lower
  from kernelgen.lowering.optimize import optimize, with_adapter_defaults
  from kernelgen.render.targets import get_target
  from kernelgen.uop.ops import toposort
  runtime = Device["WEBGPU"]
  target = get_target("wgsl")
  cpu = time.process_time()
  compiled = compile_item(item, target, options)
  python_ms = (time.process_time() - cpu) * 1e3
  opts = optimize(item, target, dict(target.check_options(options)))
  uops = len(toposort([lower(item, opts)[0]]))
  estimate = estimate_ms(with_adapter_defaults(item, target, dict(options)), uops)
  out = item.out
  handles = [Buffer(out.device, out.dtype, out.size).handle] + \
    [(src.buffer if src.realized else Buffer(src.device, src.dtype, src.size)).handle
     for src in item.inputs]
  bound = [handles[b.slot] for b in compiled.buffers]
  for handle in bound:             # the buffers' first touch is not the driver's compile
    runtime.copyin(handle, bytes(handle.nbytes))
  runtime.synchronize()
  started, cpu = time.perf_counter(), time.process_time()
  runtime.pipeline(compiled.launch)
  pipeline_ms = (time.perf_counter() - started) * 1e3
  first_ms = runtime.time_run(compiled, bound, {}) * 1e3
  first_cpu = (time.process_time() - cpu) * 1e3
  runs = []
  for _ in range(reps):
    cpu = time.process_time()
    runs.append((runtime.time_run(compiled, bound, {}) * 1e3, (time.process_time() - cpu) * 1e3))
  gpu_ms, run_cpu = min(runs)
  runtime.clear_pipelines()
  return {"kernel": label, "name": item.name, **_stats(compiled.source), "uops": uops,
          "opts": _opts_text(opts), "python_ms": round(python_ms, 1),
          "pipeline_ms": round(pipeline_ms, 1), "first_ms": round(first_ms, 1),
          "gpu_ms": round(gpu_ms, 2),
          "driver_wall_ms": round(max(pipeline_ms + first_ms - gpu_ms, 0.0), 1),
          "driver_ms": round(max(first_cpu - run_cpu, 0.0), 1),
          "estimate_ms": round(estimate, 1) if estimate is not None else None}


def _opts_text(opts) -> str:
  keep = ("local", "upcast", "group", "tile", "tile_inner", "slide")
  return " ".join(f"{k}={getattr(opts, k)}" for k in keep if getattr(opts, k, None))


def child(adapter: str, only: list, reps: int) -> None:
  """Run every workload (or `only` those) here, printing one ROW json line per kernel."""
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  from kernelgen.device import Device
  from kernelgen.graph.schedule import schedule
  runtime = Device["WEBGPU"]
  base = runtime.render_options()
  print(f"ADAPTER {json.dumps({'class': base['adapter'], **dict(runtime.adapter.info)})}",
        flush=True)
  measure("warm-up", schedule([(kg.Tensor.empty(64, device="WEBGPU") * 2).node])[0], base, 1)
  last = [n for n in WORKLOADS if n in LAST]
  names = [n for n in WORKLOADS if n not in LAST] + [f"light {m}" for m in LIGHT] + last
  for name in only or names:
    if name.startswith("capped "):            # a light model's kernels the budget cut down
      from kernelgen.compiler import compile_item
      from kernelgen.lowering.compile_cost import RUNS_MANY
      rows = _light_items(kg, name.split()[1])
      jobs = [(f"{label} {tag}", item, {**base, **extra}) for label, item in rows
              if compile_item(item, "wgsl", base).capped
              for tag, extra in (("one-off", {}), ("many runs", {"runs": RUNS_MANY}))]
    elif name.startswith("prefill "):         # an LM prefill's prompt GEMMs (bench/lm_models.py)
      jobs = [(f"{label} {tag}", item, {**base, **extra})
              for label, item in _prefill_items(kg, *name.split()[1:])
              for tag, extra in (("one-off", {}), ("4x4", {"tile": (4, 4)}))]
    elif name.startswith("light "):
      rows = _light_items(kg, name.split()[1])
      from kernelgen.compiler import compile_item
      size = {label: compile_item(item, "wgsl", base).source.count("\n") for label, item in rows}
      rows.sort(key=lambda r: -size[r[0]])
      picked = rows[:LIGHT_LARGEST] + rows[LIGHT_LARGEST::LIGHT_EVERY]
      jobs = [(label, item, base) for label, item in picked]
    else:
      text, forced = WORKLOADS[name]
      out = eval(text, _inputs(kg))           # noqa: S307 - the table above, not user input
      jobs = [(name, item, {**base, **forced}) for item in schedule([out.node])]
    for label, item, options in jobs:
      if not item.out.size:
        continue
      try:
        row = measure(label, item, options, reps)
      except Exception as error:   # noqa: BLE001 - reported in the table, the run goes on
        row = {"kernel": label, "error": f"{type(error).__name__}: {str(error)[:200]}"}
      print("ROW " + json.dumps({"adapter": base["adapter"], **row}), flush=True)


def fit(rows: list) -> tuple:
  """(a, b) minimising the squared error of driver_ms ~ a * uops + b * uops^2 / 1000."""
  sxx = sxy = syy = sx = sy = 0.0
  for r in rows:
    x, y, d = r["uops"], r["uops"] ** 2 / 1000, r["driver_ms"]
    sxx, sxy, syy, sx, sy = sxx + x * x, sxy + x * y, syy + y * y, sx + x * d, sy + y * d
  det = sxx * syy - sxy * sxy
  if not det:
    return 0.0, 0.0
  return (sx * syy - sy * sxy) / det, (sy * sxx - sx * sxy) / det


def adapter_rows(adapter: str, command: list):
  """The ROW lines `command` prints, as dicts (with `adapter`), run in a fresh process bound to
  `adapter`'s Vulkan ICD with Mesa's shader cache off."""
  env = {**os.environ, "VK_ICD_FILENAMES": ICDS[adapter], "VK_DRIVER_FILES": ICDS[adapter],
         "MESA_SHADER_CACHE_DISABLE": "true"}
  with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as proc:
    for line in proc.stdout:
      if line.startswith("ROW "):
        yield {**json.loads(line[4:]), "adapter": adapter}


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--adapters", default="lavapipe")
  parser.add_argument("--only", default="")
  parser.add_argument("--reps", type=int, default=3)
  parser.add_argument("--json", default="")
  parser.add_argument("--child", default="")
  args = parser.parse_args(argv)
  only = [n for n in args.only.split(",") if n]
  if args.child:
    child(args.child, only, args.reps)
    return
  print(f"# load: {os.getloadavg()[0]:.2f} (1 min), 2 CPUs shared; Mesa shader cache off",
        flush=True)
  print(f"{'adapter':11s} {'kernel':44s} {'lines':>6s} {'bytes':>8s} {'loops':>5s} {'uops':>6s} "
        f"{'python':>7s} {'driver':>9s} {'wall':>9s} {'gpu':>8s} {'est':>7s}  opts", flush=True)
  found = []
  for adapter in args.adapters.split(","):
    command = [sys.executable, __file__, "--child", adapter, "--reps", str(args.reps)] + \
      (["--only", args.only] if only else [])
    for row in adapter_rows(adapter, command):
      found.append(row)
      _print_row(row)
  for adapter in args.adapters.split(","):
    rows = [r for r in found if r["adapter"] == adapter and "driver_ms" in r]
    if rows:
      a, b = fit(rows)
      print(f"# fit {adapter}: driver ms ~ {a:.3f} * uops + {b:.4f} * uops^2 / 1000 "
            f"({len(rows)} kernels)", flush=True)
  if args.json:
    Path(args.json).write_text(json.dumps(found, indent=1) + "\n")


def _print_row(r: dict) -> None:
  if "error" in r:
    print(f"{r['adapter']:11s} {r['kernel'][:44]:44s} {r['error']}", flush=True)
    return
  print(f"{r['adapter']:11s} {r['kernel'][:44]:44s} {r['lines']:6d} {r['bytes']:8d} "
        f"{r['loops']:5d} {r['uops']:6d} {r['python_ms']:7.0f} {r['driver_ms']:9.0f} "
        f"{r['driver_wall_ms']:9.0f} "
        f"{r['gpu_ms']:8.2f} {r.get('estimate_ms') or 0:7.0f}  {r['opts']}", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
