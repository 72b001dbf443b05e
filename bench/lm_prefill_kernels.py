"""Per-kernel GPU times of one prefill step of a causal LM (bench/lm_models.py, random weights)
on device WEBGPU natively (wgpu-py; Mesa lavapipe here): the step kg.generate runs for the
prompt (symbolic past and mask widths, as the page's prefill bundle has them), scheduled, each
kernel compiled (option `runs` as given: 1 is what a one-off run and the page's bundle get) and
timed by GPU timestamps (the best of --repeat runs). Prints each kernel's time, launch sizes and
its GFLOP/s where it is a matmul-like kernel (a reduce whose output has the prompt's rows),
then a plain kg matmul of each such kernel's M, N, K in the same run for comparison, and the
whole step's sum. Not a test: nothing is asserted; the load is printed.

    python bench/lm_prefill_kernels.py [--config smollm2-135m] [--dtype q4] [--layers 2]
                                       [--prompt 128] [--runs 1] [--repeat 3] [--top 25]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "core"))

import lm_models  # noqa: E402


def schedule_step(kg, cfg, dtype: str, prompt: int, last_logits: bool):
  """(the prefill step's pending nodes, their var values): the graph kg.generate realizes."""
  from kernelgen.onnx.generate import OnnxCausalLM, context_size
  from kernelgen.realize import var_values
  model = kg.onnx.load(lm_models.build(cfg, dtype, last_logits=last_logits).SerializeToString())
  lm = OnnxCausalLM(model, "WEBGPU", context_size(prompt + 1))
  ids = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab, prompt)]
  feeds = {"input_ids": kg.Tensor([ids], dtype=kg.dtypes.int32, device="WEBGPU"),
           "attention_mask": kg.Tensor([[1] * prompt], dtype=kg.dtypes.int32, device="WEBGPU"),
           "position_ids": kg.Tensor([list(range(prompt))], dtype=kg.dtypes.int32,
                                     device="WEBGPU")}
  for name in lm.past:
    feeds[name] = lm._empty_past(name)
  out = lm.model.run(feeds, device="WEBGPU", replay=False)
  nodes = [t.node for t in out.values() if isinstance(t, kg.Tensor)]
  from kernelgen.realize import realize
  realize([n for n in feeds_nodes(feeds)])
  return nodes, var_values(nodes)


def feeds_nodes(feeds: dict) -> list:
  return [t.node for t in feeds.values()]


def matmul_shape(item, prompt: int):
  """(M, N, K) of a matmul-like kernel (its largest reduce: prompt x N outputs of K terms,
  M = 1 where the outputs are not a multiple of the prompt); else None."""
  from kernelgen.graph.lazy import L
  reduces = [n for n in walk(item.out) if n.op is L.REDUCE and n.src and n.size]
  if not reduces:
    return None
  r = max(reduces, key=lambda n: n.src[0].size)
  k = r.src[0].size // r.size
  if k < 64 or r.size < 64:
    return None
  m = prompt if prompt and r.size % prompt == 0 else 1
  return m, r.size // m, k


def walk(node):
  """The nodes of one kernel's graph (down to realized buffers)."""
  seen, stack = set(), [node]
  while stack:
    n = stack.pop()
    if id(n) in seen:
      continue
    seen.add(id(n))
    yield n
    if not n.realized:
      stack.extend(n.src)


def time_items(items, values: dict, runs: int, repeat: int, prompt: int = 0) -> list:
  """Each item compiled (option runs) and run `repeat` times: rows of name, best seconds, sizes."""
  from kernelgen.compiler import compile_item
  from kernelgen.device import Device
  from kernelgen.graph.lazy import Buffer
  runtime = Device["WEBGPU"]
  options = {**runtime.render_options(), "runs": runs}
  rows = []
  for item in items:
    out = item.out
    buffer = Buffer(out.device, out.dtype, out.size)
    if not out.size:
      out.buffer, out.src = buffer, ()
      continue
    handles = [buffer.handle] + [src.buffer.handle for src in item.inputs]
    mnk = matmul_shape(item, prompt)
    compiled = compile_item(item, "wgsl", options)
    runtime.pipeline(compiled.launch)
    bound = [handles[b.slot] for b in compiled.buffers]
    times = [runtime.time_run(compiled, bound, values) for _ in range(repeat)]
    rows.append({"name": compiled.name, "s": min(times), "cpu": cpu_seconds(runtime, compiled,
                 bound, values, repeat),
                 "global": compiled.global_size, "local": compiled.local_size,
                 "size": out.size, "source": compiled.source, "mnk": mnk})
    out.buffer, out.src = buffer, ()
  return rows


def cpu_seconds(runtime, compiled, bound: list, values: dict, repeat: int) -> float:
  """The process's CPU seconds per run of `compiled` (lavapipe's threads are this process's),
  median of `repeat` runs: less swayed by other processes' load than the GPU timestamps."""
  import statistics
  import time
  spent = []
  for _ in range(repeat):
    t0 = time.process_time()
    runtime.run(compiled, bound, values)
    runtime.synchronize()
    spent.append(time.process_time() - t0)
  return statistics.median(spent)


def plain_matmul(kg, m: int, n: int, k: int, runs: int, repeat: int) -> float:
  """Best GPU seconds of a plain kg fp32 matmul (m, k) @ (k, n) realized on WEBGPU."""
  from kernelgen.graph.schedule import schedule
  rng = np.random.default_rng(0)
  a = kg.Tensor(rng.standard_normal((m, k), np.float32), device="WEBGPU").realize()
  b = kg.Tensor(rng.standard_normal((k, n), np.float32), device="WEBGPU").realize()
  c = a @ b
  rows = time_items(schedule([c.node]), {}, runs, repeat)
  return sum(r["s"] for r in rows), sum(r["cpu"] for r in rows)


def main() -> None:
  """Run the command line."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", choices=sorted(lm_models.CONFIGS), default="smollm2-135m")
  parser.add_argument("--dtype", choices=("fp32", "fp16", "q4"), default="q4")
  parser.add_argument("--layers", type=int, default=2)
  parser.add_argument("--prompt", type=int, default=128)
  parser.add_argument("--runs", type=int, default=1, help="compile option runs")
  parser.add_argument("--repeat", type=int, default=3)
  parser.add_argument("--top", type=int, default=25)
  parser.add_argument("--all-logits", action="store_true", help="LM head on every position")
  parser.add_argument("--dump", type=Path, help="write each kernel's WGSL here")
  args = parser.parse_args()
  import kernelgen as kg
  from kernelgen.graph.schedule import schedule
  cfg = dataclasses.replace(lm_models.CONFIGS[args.config], layers=args.layers)
  nodes, values = schedule_step(kg, cfg, args.dtype, args.prompt, not args.all_logits)
  items = schedule(nodes)
  load0 = os.getloadavg()[0]
  rows = time_items(items, values, args.runs, args.repeat, args.prompt)
  total = sum(r["s"] for r in rows)
  cpu = sum(r["cpu"] for r in rows)
  print(f"{args.config} {args.layers} layers {args.dtype} prompt {args.prompt}: {len(rows)} "
        f"kernels, GPU {total * 1e3:.1f} ms -> {args.prompt / total:.1f} tok/s; CPU {cpu:.2f} s (runs "
        f"{args.runs}; load {load0:.2f} -> {os.getloadavg()[0]:.2f})")
  for r in sorted(rows, key=lambda r: -r["s"])[:args.top]:
    mnk = r["mnk"]
    rate = f" {2 * np.prod(mnk) / r['s'] / 1e9:6.2f} GFLOP/s {2 * np.prod(mnk) / r['cpu'] / 1e9:6.2f}" \
      f" GFLOP/cpu-s mnk {mnk}" if mnk else ""
    print(f"  {r['s'] * 1e3:8.2f} ms cpu {r['cpu'] * 1e3:8.2f} ms {r['name'][:48]:48s} global {r['global']} local "
          f"{r['local']}{rate}")
  if args.dump:
    args.dump.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(rows):
      (args.dump / f"{i:03d}_{r['name'][:60]}.wgsl").write_text(r["source"])
  shapes = sorted({r["mnk"] for r in rows} - {None})
  for m, n, k in shapes:
    s, c = plain_matmul(kg, m, n, k, args.runs, args.repeat)
    print(f"  plain matmul {m}x{n}x{k}: {s * 1e3:8.2f} ms {2 * m * n * k / s / 1e9:6.2f} GFLOP/s, "
          f"cpu {c * 1e3:8.2f} ms {2 * m * n * k / c / 1e9:6.2f} GFLOP/cpu-s")
  print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
