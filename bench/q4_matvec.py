"""The q4 decode matrix-vector product (com.microsoft MatMulNBits, 4-bit blocks of 32 with packed
zero points, as the importer computes it: quant_nbits.matmul_words over the weight's 32-bit words)
on wgpu, against kernels that only move the same bytes: a copy of the packed weight
(reads and writes them) and a sum of its 32-bit words (reads them), timed interleaved, each
kernel's fastest time of REPS rounds kept (the machine is shared: compare within one run).

Each line: the shape, the matvec's kernels and fastest ms, the packed bytes it reads (weights,
scales, zero points) per second, and the ratio of the copy's time to its (the issue's goal: at
least 0.7) and the sum's; then the same matvec under other options in the same rounds: `looped`
(reduce_whole=0, reduce_step=0: the reduction looped a block per step, a row per thread) and any
--variant NAME:KEY=INT,... given; and `lanes`: the matvec over its weight held lane-major
(quant_nbits.lane_major, 8 lanes x 8 rows, as the importer holds a large weight on lavapipe:
lane_layout). The matvec reads its scales and zero points as the importer holds them for the
adapter (quant_nbits.group_rows: grouped by a thread's rows, row_grouped and grouped_nibbles);
`ungrouped` is the same matvec over them as given, (N, blocks) and packed bytes (before #35's
grouping). `cpu` ratios: the copy's CPU seconds per run over each matvec's (median of the
rounds, this process's user + system time: the driver's threads run the kernels), which a
loaded machine disturbs far less than wall times. Each matvec's `build` is its first run's wall ms: the
pipeline's creation and first dispatch, which on lavapipe is the driver's LLVM compile (Mesa's
shader cache is off in this process: MESA_SHADER_CACHE_DISABLE).

    python bench/q4_matvec.py [REPS] [WORD] [--adapter lavapipe|swiftshader] [--variant ...]
                              [--f32] [--plain] [--core DIR]
    # WORD: only the shapes whose label has it; --f32: also the float32 matvec; --plain: no
    # variants (the defaults only); --core: another checkout's core (main's kernel, same run)
"""
from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {"smollm2 mlp up (1536x576)": (1536, 576), "smollm2 down (576x1536)": (576, 1536),
          "qwen2.5 mlp up (4864x896)": (4864, 896), "qwen2.5 down (896x4864)": (896, 4864),
          "smollm2 lm_head (49152x576)": (49152, 576)}
ICDS = {"lavapipe": "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
        "swiftshader": "/usr/lib/chromium/vk_swiftshader_icd.json"}


def _plan(rt, out, options):
  from kernelgen.compiler import compile_item
  from kernelgen.graph.lazy import Buffer
  from kernelgen.graph.schedule import row_limit, schedule
  steps = []
  for item in schedule([out.node], None, row_limit(options)):
    compiled = compile_item(item, "wgsl", options)
    item.out.buffer, item.out.src = Buffer("WEBGPU", item.out.dtype, item.out.size), ()
    steps.append((compiled, [item.out.buffer.handle] + [s.buffer.handle for s in item.inputs]))
  return steps


def _best(rt, steps, times: list) -> None:
  times.append(sum(rt.run(c, [h.handle if hasattr(h, "handle") else h for h in hs], {},
                          timed=True) for c, hs in steps))


def _cpu(rt, steps, times: list) -> None:
  """Append the CPU seconds of one run of the plan, waited for (user + system, all threads)."""
  before = resource.getrusage(resource.RUSAGE_SELF)
  _best(rt, steps, [])
  after = resource.getrusage(resource.RUSAGE_SELF)
  times.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)


def _cold_ms(rt, steps) -> float:
  """The wall ms of the plan's first run, waited for: its pipelines' creation (the driver's
  compile) and first dispatch."""
  start = time.perf_counter()
  for c, hs in steps:
    rt.run(c, [h.handle if hasattr(h, "handle") else h for h in hs], {}, timed=True)
  return (time.perf_counter() - start) * 1e3


def _variants(argv: list) -> dict:
  """{name: forced options} of the matvec besides its defaults: `looped`, then each --variant
  NAME:KEY=INT,KEY=INT."""
  if "--plain" in argv:
    return {}
  out = {"looped": {"reduce_whole": 0, "reduce_step": 0}}
  for i, arg in enumerate(argv):
    if arg == "--variant":
      name, _, spec = argv[i + 1].partition(":")
      out[name] = {k: int(v) for k, v in (kv.split("=") for kv in spec.split(",") if kv)}
  return out


def main(reps: int = 20, word: str = "", variants: dict | None = None, f32: bool = False,
         core: str = "") -> None:
  sys.path.insert(0, core or str(ROOT / "core"))
  sys.path.insert(0, str(ROOT / "bench"))
  import numpy as np
  import kernelgen as kg
  from kernelgen.device import Device
  from kernelgen.onnx.operators.quant_nbits import lane_major, matmul_words, nibbles
  try:        # the importer's grouped scales and zero points (absent from an older --core)
    from kernelgen.onnx.operators.quant_nbits import group_rows, grouped_nibbles, row_grouped
    from kernelgen.onnx.operators.weights import row_defaults
  except ImportError:
    group_rows = None
  from lm_models import quantize_q4
  rt = Device["WEBGPU"]
  options = {**rt.render_options(), "runs": 100}     # compiled as a decode step's (replayed)
  print(f"adapter: {rt.adapter.info.get('device')}; load {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs (a shared machine: compare within this run)")
  for label, (n, k) in SHAPES.items():
    if word not in label:
      continue
    w = np.random.default_rng(0).standard_normal((n, k)).astype(np.float32) * 0.05
    packed, scales, zps = quantize_q4(w)
    blocks = scales.size // n
    dev = {name: kg.Tensor(a, device="WEBGPU").realize() for name, a in
           (("p", packed.reshape(n, -1)), ("s", scales.reshape(n, blocks)),
            ("z", zps.reshape(n, -1)),
            ("x", np.random.default_rng(1).standard_normal((1, k)).astype(np.float32)))}
    words = kg.Tensor(np.frombuffer(packed.tobytes(), np.uint32).copy(), device="WEBGPU").realize()
    zp = nibbles(dev["z"])[:, :blocks].cast(kg.dtypes.float32)

    rows = group_rows(row_defaults("WEBGPU"), n) if group_rows else 0
    held = (row_grouped(dev["s"], rows), grouped_nibbles(zp, rows)) if rows else (dev["s"], zp)

    def matvec(params=held):
      return matmul_words(dev["x"], words.reshape(n, -1), *params, 4, 32)
    y = matvec()
    start = time.perf_counter()
    plans = {"matvec": _plan(rt, y, options)}
    built = time.perf_counter() - start
    plans.update({"copy": _plan(rt, words + 1, options), "sum": _plan(rt, words.sum(), options)})
    if f32:
      wf = kg.Tensor(w, device="WEBGPU").realize()
      plans["f32"] = _plan(rt, dev["x"] @ wf.permute(1, 0), options)
    for name, forced in (variants or {}).items():
      plans[name] = _plan(rt, matvec(), {**options, **forced})
    if rows:
      plans["ungrouped"] = _plan(rt, matvec((dev["s"], zp)), options)
    if n % 64 == 0:
      lead = (n // 64, 8, 8)
      lanes = matmul_words(dev["x"], lane_major(words.reshape(n, blocks, 4), 8, 8),
                           lane_major(dev["s"], 8, 8), zp.reshape(*lead, blocks), 4, 32)
      plans["lanes"] = _plan(rt, lanes.reshape(1, n), options)
    cold = {v: _cold_ms(rt, steps) for v, steps in plans.items()}
    times, cpu = {v: [] for v in plans}, {v: [] for v in plans}
    for _ in range(2 + reps):
      for v, steps in plans.items():
        _best(rt, steps, times[v])
        _cpu(rt, steps, cpu[v])
    best = {v: min(t[2:]) for v, t in times.items()}
    cpu = {v: statistics.median(t[2:]) for v, t in cpu.items()}
    nbytes = packed.nbytes + scales.nbytes + zps.nbytes
    codes_np = np.stack([packed & 15, packed >> 4], -1).reshape(n, -1).astype(np.float32)
    z_np = np.stack([zps.reshape(n, -1) & 15, zps.reshape(n, -1) >> 4], -1).reshape(n, -1)
    deq = (codes_np - np.repeat(z_np[:, :blocks], 32, 1)) * np.repeat(scales.reshape(n, -1), 32, 1)
    err = float(np.abs(y.numpy() - dev["x"].numpy() @ deq[:, :k].T).max())
    others = "; ".join(f"{v} {best[v] * 1e3:.3f} ms (ratio {best['copy'] / best[v]:.2f}, cpu "
                       f"{cpu['copy'] / cpu[v]:.2f}, build {cold[v]:.0f} ms, "
                       f"{_lines(plans[v])} lines)" for v in [*(variants or {}), "ungrouped", "lanes"]
                       if v in plans)
    print(f"{label:30s} matvec kernels={len(plans['matvec'])} {best['matvec'] * 1e3:.3f} ms "
          f"{nbytes / best['matvec'] / 1e9:.2f} GB/s packed; copy {best['copy'] * 1e3:.3f} ms "
          f"(ratio {best['copy'] / best['matvec']:.2f}, cpu {cpu['copy'] / cpu['matvec']:.2f}), sum {best['sum'] * 1e3:.3f} ms "
          f"(ratio {best['sum'] / best['matvec']:.2f}); "
          + (f"f32 matvec {best['f32'] * 1e3:.3f} ms; " if f32 else "") +
          f"max abs err {err:.1e}; compiled in {built:.1f} s, build {cold['matvec']:.0f} ms, "
          f"{_lines(plans['matvec'])} lines; {others}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)


def _lines(steps) -> int:
  """WGSL lines of a plan's kernels."""
  return sum(c.source.count("\n") + 1 for c, _ in steps)


if __name__ == "__main__":
  args = sys.argv[1:]
  os.environ["MESA_SHADER_CACHE_DISABLE"] = "true"
  if "--adapter" in args:
    icd = ICDS[args[args.index("--adapter") + 1]]
    os.environ["VK_ICD_FILENAMES"] = os.environ["VK_DRIVER_FILES"] = icd
  plain = [a for i, a in enumerate(args) if not a.startswith("--") and
           (i == 0 or args[i - 1] not in ("--adapter", "--variant", "--core"))]
  main(int(plain[0]) if plain else 20, plain[1] if plain[1:] else "", _variants(args),
       "--f32" in args, args[args.index("--core") + 1] if "--core" in args else "")
