"""Python compile time per kernel of a light ONNX model (issue 37's measure, natively): the model's
kernels scheduled for WGSL as a WEBGPU device with adapter class ADAPTER would, then each compiled
in launch order as realize compiles them (MODE cached: cache.cached_compile from an empty cache,
so a kernel of the same structure as an earlier one is rendered from it) or every pass for each
(MODE item: compiler.compile_item). CPU ms per kernel (time.process_time: the machine is shared),
after one unrelated warm-up kernel; prints one JSON line with the median, p90 and total.

    nice python bench/compile_per_kernel.py [MODEL] [ADAPTER] [MODE] [--profile OUT]
    (defaults: resnet50 swiftshader cached; OUT: a cProfile dump of the timed compiles)
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "core"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))


def items_of(kg, name: str, options: dict) -> list:
  """Light model `name`'s schedule items with an output, as the WGSL target schedules them."""
  import onnx_corpus
  from kernelgen.graph.schedule import row_limit, schedule
  from kernelgen.render.targets import get_target
  model = kg.onnx.load(str(onnx_corpus.data_dir() / "light" / f"light_{name}.onnx"))
  shape = tuple(d if isinstance(d, int) and d > 0 else 1
                for d in model.input_shapes[model.input_names[0]])
  x = kg.Tensor.empty(*shape, device="PYTHON")
  out = model.run({model.input_names[0]: x}, device="PYTHON")[model.output_names[0]]
  items = schedule([out.node], get_target("wgsl").buffer_limit(options), row_limit(options))
  return [i for i in items if i.out.size]


def main(argv: list[str]) -> None:
  profile = argv[argv.index("--profile") + 1] if "--profile" in argv else ""
  args = [a for a in argv if a not in ("--profile", profile)]
  name, adapter, mode = (args + ["resnet50", "swiftshader", "cached"][len(args):])[:3]
  import kernelgen as kg
  from kernelgen.cache import cached_compile, clear_cache
  from kernelgen.compiler import compile_item
  from kernelgen.graph.schedule import schedule
  from kernelgen.render.targets import get_target
  options, target = {"adapter": adapter}, get_target("wgsl")
  items = items_of(kg, name, options)
  warm = (kg.Tensor.empty(33, 65, device="PYTHON") * 3 - 1).relu().max(axis=0)
  compile_item(schedule([warm.node])[0], target, options)
  clear_cache()
  run = cached_compile if mode == "cached" else compile_item
  if profile:
    import cProfile
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
  ms = []
  for item in items:
    start = time.process_time()
    run(item, target, options)
    ms.append((time.process_time() - start) * 1e3)
  if profile:
    profiler.disable()
    profiler.dump_stats(profile)
  ms.sort()
  print(json.dumps({"model": name, "adapter": adapter, "mode": mode, "kernels": len(ms),
                    "median_ms": round(statistics.median(ms), 2),
                    "p90_ms": round(ms[int(0.9 * len(ms))], 2), "total_ms": round(sum(ms))}))


if __name__ == "__main__":
  main(sys.argv[1:])
