"""Greedy decoding with a KV cache (issue 34): a decoder-only transformer (pre-norm, GELU MLP,
learned positions) written with kg.nn, one token per step, natively on WEBGPU (lavapipe) or any
device, three ways side by side in one run, each in a fresh process, with the same weights:

  symbolic  the cache preallocated and written in place at a symbolic position (kg.Dim), the
            step under kg.jit: recorded once, replayed for every position;
  static    the same model without symbolic sizes: the cache grown with kg.cat, attention over
            it, so every step has new shapes (new kernels, new pipelines): fewer steps;
  tinygrad  tinygrad 0.10.1 (.venv-bench) on its WEBGPU (wgpu, the same adapter): the cache
            assigned in place at a bound `Variable`, the step under TinyJit (tinygrad's own
            decoding recipe; position 0 runs without the jit, as its llama example does).

Per way: kernels compiled and pipelines created after the second step (tinygrad: programs
compiled), dispatches and submits per token (WEBGPU's counters; tinygrad: kernels launched),
wall time per token (submit, run, read back the sampled token; medians of WINDOW steps around
position 128 and at the last position), and for `symbolic` the GPU time per token at those
positions (each kernel of the replayed step timed with GPU timestamps) with the attention
kernel's share; whether the first tokens agree across the ways. Timings on a loaded machine mean
little: the load average is printed with them. Not a test; nothing is asserted.

Dispatches per layer (symbolic way): the QKV projection computed by the kernel that writes it
into the cache (graph/schedule.py's write fusion; the cache holds the query too), the output
projection computing attention first (lowering/staged.py: its one workgroup's threads a query
row each; bias and residual its epilogue, graph/epilogue.py), the MLP's up and down projections:
4. Each LayerNorm is its projection's prologue, staged (lowering/staged.py: each workgroup
computes the normalized row once). The attention share below is that of the kernels named
attn*: with attention staged, the output projections that compute it.

    python bench/decode.py [--quick] [--layers 4] [--d 256] [--heads 8] [--steps 1024]
                           [--static-steps 48] [--device WEBGPU] [--ways symbolic,static,tinygrad]
    python bench/decode.py --worker WAY ...        (one way in this process; JSON on stdout)

The issue's table is the default run (`python bench/decode.py`: 4 layers, d = 256, 8 heads,
positions 1..1024, 48 static steps). Its time is mostly the static way's compiles (every step
new kernels) and the first step of each way; on this 2-core machine at load ~15, `--quick` took
about 66 s for the symbolic way's first step and 11 s per static step.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TINYGRAD_PYTHON = ROOT / ".venv-bench" / "bin" / "python"
VOCAB, WINDOW, AGREE = 256, 8, 16      # vocabulary; steps per wall-time median; tokens compared
WORKER_S = 3600


def weights(layers: int, d: int, max_len: int, draw=None) -> dict:
  """The model's float32 parameters by kg.nn name, drawn from a fixed seed (every way's):
  draw(shape, scale, shift) makes each (numpy's generator by default; the page test's is
  decode_page.python_draw, the standard library's)."""
  if draw is None:
    rng = np.random.default_rng(34)
    def draw(shape, scale, shift):
      return shift + (rng.standard_normal(shape) * scale).astype(np.float32)
  def w(*shape, scale=None, shift=0):
    return draw(shape, scale or shape[-1] ** -0.5, shift)
  out = {"tok.weight": w(VOCAB, d, scale=1.0), "pos.weight": w(max_len, d, scale=0.5),
         "norm.weight": w(d, scale=0.1, shift=1), "norm.bias": w(d, scale=0.1),
         "head.weight": w(VOCAB, d), "head.bias": w(VOCAB, scale=0.1)}
  for i in range(layers):
    p = f"blocks.{i}."
    for name, (o, n) in {"qkv": (3 * d, d), "out": (d, d), "ff1": (4 * d, d),
                         "ff2": (d, 4 * d)}.items():
      out[p + name + ".weight"], out[p + name + ".bias"] = w(o, n), w(o, scale=0.1)
    for name in ("ln1", "ln2"):
      out[p + name + ".weight"] = w(d, scale=0.1, shift=1)
      out[p + name + ".bias"] = w(d, scale=0.1)
  return out


# ---- kernelgen ------------------------------------------------------------------------------

def kernelgen_model(layers: int, d: int, heads: int, max_len: int, state: dict | None = None):
  """The kg.nn decoder (classes defined here: kernelgen is imported in its workers only) with
  the parameters `state` (weights(...) when None; the page passes them as shaped memoryviews)."""
  import kernelgen as kg
  from kernelgen import nn

  class Block(nn.Module):
    def __init__(self):
      super().__init__()
      self.heads, self.hd = heads, d // heads
      self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
      self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
      self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
      # queries, keys and values in one buffer, the QKV projection written into it in place at
      # the step's position: one kernel per step computes and writes it (graph/schedule.py's
      # write fusion), attention reads this step's query from it (the query slot costs
      # max_len x d floats more than tinygrad's keys-and-values cache)
      self.qkv_cache = kg.Tensor.zeros(3, 1, heads, max_len, self.hd).realize()
      self.k_grown = self.v_grown = None

    def _qkv(self, x):
      return self.qkv(self.ln1(x)).reshape(3, 1, self.heads, 1, self.hd)

    def _rest(self, x, att):
      x = x + self.out(att.reshape(1, d))
      return x + self.ff2(self.ff1(self.ln2(x)).gelu())

    def forward(self, x, pos):
      """The symbolic step: write this position's query, key and value in place, attend to
      0..pos."""
      cache = self.qkv_cache
      cache[:, :, :, pos:pos + 1] = self._qkv(x)
      return self._rest(x, kg.scaled_dot_product_attention(
        cache[0, :, :, pos:pos + 1], cache[1, :, :, :pos + 1], cache[2, :, :, :pos + 1]))

    def grown(self, x):
      """The static step: the cache grown by one with kg.cat (a new shape every step)."""
      qkv = self._qkv(x)
      q, k, v = qkv[0], qkv[1], qkv[2]
      self.k_grown = k if self.k_grown is None else kg.cat([self.k_grown, k], 2).realize()
      self.v_grown = v if self.v_grown is None else kg.cat([self.v_grown, v], 2).realize()
      return self._rest(x, kg.scaled_dot_product_attention(q, self.k_grown, self.v_grown))

  class Decoder(nn.Module):
    def __init__(self):
      super().__init__()
      self.tok, self.pos = nn.Embedding(VOCAB, d), nn.Embedding(max_len, d)
      self.blocks = nn.ModuleList([Block() for _ in range(layers)])
      self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, VOCAB)

    def forward(self, token, pos):
      x = self.tok(token) + self.pos.weight[pos:pos + 1]
      for block in self.blocks:
        x = block(x, pos)
      return self.head(self.norm(x)).argmax(-1)

    def static_step(self, token, t: int):
      x = self.tok(token) + self.pos.weight[t:t + 1]
      for block in self.blocks:
        x = block.grown(x)
      return self.head(self.norm(x)).argmax(-1)

  model = Decoder()
  model.load_state_dict(weights(layers, d, max_len) if state is None else state, strict=False)
  return model


def _counters(kg, runtime) -> tuple:
  return (kg.cache_info()["misses"], len(getattr(runtime, "pipelines", ())),
          getattr(runtime, "dispatches", 0), getattr(runtime, "submits", 0))


def count_reads(runtime) -> list:
  """[reads, bytes] read back from `runtime` from now on (its copyout and copyout_many wrapped,
  this instance's only): that only the sampled token comes back. A read is one copyout or one
  copyout_many (several buffers read together, through copyout or not: the page's runtime)."""
  counted, copyout, copyout_many, inside = [0, 0], runtime.copyout, runtime.copyout_many, []

  def counting(handle):
    data = copyout(handle)
    if not inside:
      counted[0], counted[1] = counted[0] + 1, counted[1] + len(data)
    return data

  def counting_many(handles):
    inside.append(True)
    try:
      data = copyout_many(handles)
    finally:
      inside.pop()
    counted[0], counted[1] = counted[0] + 1, counted[1] + sum(len(d) for d in data)
    return data
  runtime.copyout, runtime.copyout_many = counting, counting_many
  return counted


def _gpu(program, token, t: int) -> dict:
  """GPU ms of the replayed step at position t, and the attention kernels' share of it (those
  named attn*: the output projections that compute it, where it is staged)."""
  times = program.time_kernels([token.node.buffer], {"pos": t})
  total = sum(s for _, s in times)
  attn = sum(s for name, s in times if name.startswith("attn"))
  return {"ms": 1000 * total, "attn_share": attn / total if total else None}


def kernelgen_worker(way: str, args) -> dict:
  """Decode `args.steps` (symbolic) or `args.static_steps` (static) tokens; the figures."""
  import kernelgen as kg
  kg.Device.DEFAULT = args.device
  runtime = kg.Device[args.device]
  model = kernelgen_model(args.layers, args.d, args.heads, args.steps)
  steps = args.steps if way == "symbolic" else args.static_steps
  reads = count_reads(runtime)
  at = positions(args.decoded or steps, args.steps, args.jump) if way == "symbolic" else \
    positions(steps, steps, 0)
  rec = decode(kg, model, way, at, lambda: _counters(kg, runtime) + tuple(reads))
  result = rec.result(way, f"kernelgen {args.device}")
  result["after"] = after_layers(args.d)
  return result


def positions(steps: int, max_len: int, jump: int) -> list:
  """The positions decoded: 0..steps-1, then (jump) the last `jump` of 0..max_len-1."""
  return list(range(steps)) + list(range(max(steps, max_len - jump), max_len) if jump else ())


def after_layers(d: int) -> int:
  """The kernels after the layers: the final norm is the head's prologue where that is cheap."""
  from kernelgen.graph.prologue import worth_it
  return 2 if worth_it(VOCAB, d, 1) else 3


def decode(kg, model, way: str, at: list, counters) -> "_Record":
  """Greedy decoding from token 1 at the positions `at` (symbolic: the step under kg.jit, pos a
  kg.Dim over 0..the model's length - 1; static: the cache grown by kg.cat); counters() is the
  tuple whose per-step differences are recorded (compiles, pipelines, dispatches, submits,
  reads, bytes read)."""
  max_len = model.pos.weight.shape[0]
  pos, jitted = kg.Dim("pos", 0, max_len - 1), kg.jit(model)
  marks, token, rec = _marks(at), kg.Tensor([1], dtype="int32"), _Record(at)
  kg.clear_cache()
  with kg.no_grad():      # inference: sdpa is the fused kernel
    for i, t in enumerate(at):
      before, start = counters(), time.perf_counter()
      out = jitted(token, pos.bind(t)) if way == "symbolic" else model.static_step(token, t)
      rec.step(i, out.item(), time.perf_counter() - start, before, counters())
      if way == "symbolic" and t in marks and jitted.replaying:
        program = next(s.program for s in jitted.signatures.values() if s.program is not None)
        rec.gpu[t + 1] = _gpu(program, token, t)
      token = out
  return rec


def _marks(at: list) -> set:
  """The positions (0-based) whose GPU time is measured: 128 (or the last before a jump), the
  last."""
  return {at[min(127, len(at) - 1)], at[-1]}


class _Record:
  """Per-step figures of one way: tokens, wall seconds, counter deltas; `at` the positions
  decoded (0-based), when not 0..steps-1."""

  def __init__(self, steps: int | list):
    self.at = list(range(steps)) if isinstance(steps, int) else steps
    self.steps, self.tokens, self.wall, self.deltas, self.gpu = len(self.at), [], [], [], {}
    self.after2 = None

  def step(self, t: int, token: int, seconds: float, before: tuple, after: tuple) -> None:
    self.tokens.append(token)
    self.wall.append(seconds)
    self.deltas.append([b - a for a, b in zip(before, after)])
    if t == 1:
      self.after2 = after

  def result(self, way: str, system: str, end: tuple | None = None) -> dict:
    late = self.deltas[2:] or self.deltas
    mid = min(128, self.steps) - 1
    around = self.wall[max(2, mid - WINDOW // 2):mid + WINDOW // 2] or self.wall
    return {"way": way, "system": system, "steps": self.steps, "tokens": self.tokens[:AGREE],
            "compiled_after_2": sum(d[0] for d in late),
            "pipelines_after_2": sum(d[1] for d in late),
            "dispatches": statistics.median(d[2] for d in late),
            "submits": statistics.median(d[3] for d in late),
            "wall_ms": {self.at[mid] + 1: 1000 * statistics.median(around),
                        self.at[-1] + 1: 1000 * statistics.median(self.wall[-WINDOW:])},
            "first_ms": 1000 * self.wall[0], "gpu": self.gpu,
            **({"reads": statistics.median(d[4] for d in late),
                "read_bytes": statistics.median(d[5] for d in late)} if len(late[0]) > 5 else {})}


# ---- tinygrad ---------------------------------------------------------------------------------

def tinygrad_worker(args) -> dict:
  """The same model in tinygrad 0.10.1: cache assigned at a bound Variable, step under TinyJit."""
  os.environ.setdefault("WEBGPU", "1")
  from tinygrad import Device, Tensor, TinyJit, Variable, dtypes
  from tinygrad.engine import realize as tiny_realize
  from tinygrad.helpers import GlobalCounters
  Device.DEFAULT = "WEBGPU"
  w = {k: Tensor(v).realize() for k, v in weights(args.layers, args.d, args.steps).items()}
  hd = args.d // args.heads
  caches = [Tensor.zeros(2, 1, args.heads, args.steps, hd).contiguous().realize()
            for _ in range(args.layers)]

  def step(token, pos):
    x = w["tok.weight"][token] + w["pos.weight"].shrink(((pos, pos + 1), None))
    for i, cache in enumerate(caches):
      x = _tiny_block(w, f"blocks.{i}.", cache, x, pos, args.heads, hd)
    x = x.layernorm(eps=1e-5) * w["norm.weight"] + w["norm.bias"]
    return x.linear(w["head.weight"].T, w["head.bias"]).argmax(-1).realize()

  jitted, rec, got = TinyJit(step), _Record(args.steps), 1
  for t in range(args.steps):    # the sampled token goes back in as a new tensor (its recipe)
    before = (len(tiny_realize.method_cache), 0, GlobalCounters.kernel_count, 0)
    start = time.perf_counter()
    token = Tensor([got], dtype=dtypes.int32).realize()
    pos = Variable("pos", 1, args.steps - 1).bind(t) if t else 0
    got = int((jitted(token, pos) if t else step(token, 0)).item())
    after = (len(tiny_realize.method_cache), 0, GlobalCounters.kernel_count, 0)
    rec.step(t, got, time.perf_counter() - start, before, after)
  result = rec.result("tinygrad", "tinygrad 0.10.1 WEBGPU")
  result["submits"] = result["pipelines_after_2"] = None
  return result


def _tiny_block(w, p, cache, x, pos, heads, hd):
  d = heads * hd
  h = x.layernorm(eps=1e-5) * w[p + "ln1.weight"] + w[p + "ln1.bias"]
  qkv = h.linear(w[p + "qkv.weight"].T, w[p + "qkv.bias"]).reshape(3, heads, 1, hd)
  q, kv = qkv[0:1], qkv[1:3].reshape(2, 1, heads, 1, hd)
  cache.shrink((None, None, None, (pos, pos + 1), None)).assign(kv).realize()
  keys = cache.shrink(((0, 1), None, None, (0, pos + 1), None)).squeeze(0)
  values = cache.shrink(((1, 2), None, None, (0, pos + 1), None)).squeeze(0)
  att = q.scaled_dot_product_attention(keys, values).reshape(1, d)
  x = x + att.linear(w[p + "out.weight"].T, w[p + "out.bias"])
  h = x.layernorm(eps=1e-5) * w[p + "ln2.weight"] + w[p + "ln2.bias"]
  h = h.linear(w[p + "ff1.weight"].T, w[p + "ff1.bias"]).gelu()
  return x + h.linear(w[p + "ff2.weight"].T, w[p + "ff2.bias"])


# ---- the run --------------------------------------------------------------------------------

def run_worker(way: str, args) -> dict:
  """One way in a fresh process (tinygrad's in .venv-bench); its JSON, or {"error": ...}."""
  python = str(TINYGRAD_PYTHON) if way == "tinygrad" else sys.executable
  if way == "tinygrad" and not TINYGRAD_PYTHON.exists():
    return {"way": way, "error": "no .venv-bench (./build.sh bench sets it up)"}
  cmd = [python, str(Path(__file__).resolve()), "--worker", way] + _passed(args)
  env = dict(os.environ, PYTHONPATH=str(ROOT / "core"))
  try:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=WORKER_S, env=env)
  except subprocess.TimeoutExpired:
    return {"way": way, "error": f"timed out after {WORKER_S} s"}
  if proc.returncode:
    return {"way": way, "error": proc.stderr.strip().splitlines()[-1][:200]}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _passed(args) -> list[str]:
  return [f"--layers={args.layers}", f"--d={args.d}", f"--heads={args.heads}",
          f"--steps={args.steps}", f"--static-steps={args.static_steps}",
          f"--device={args.device}", f"--jump={args.jump}", f"--decoded={args.decoded or 0}"]


def measure(args) -> list[dict]:
  """Each way of args.ways, one after another (each in its own process)."""
  rows = []
  for way in args.ways.split(","):
    rows.append(run_worker(way, args))
    print(f"  {way}: {json.dumps(rows[-1])[:400]}", file=sys.stderr)
  return rows


def _cell(value, spec: str = "") -> str:
  if value is None:
    return "-"
  return format(value, spec) if isinstance(value, (int, float)) else str(value)


def print_table(rows: list[dict], args, where: str = "") -> None:
  """The table of `rows` (one per way), headed by the model, the positions and the load."""
  decoded = getattr(args, "decoded", None) or args.steps
  span = f"positions 1..{decoded}" + (f" and {args.steps - args.jump + 1}..{args.steps}"
                                      if getattr(args, "jump", 0) else "")
  print(f"decode: {args.layers} layers, d={args.d}, {args.heads} heads, vocabulary {VOCAB}, "
        f"{span}, on {where or args.device}; load average "
        f"{os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
  head = ("way", "steps", "compiled>2", "pipelines>2", "dispatch/tok (per layer)", "submit/tok",
          "read/tok", "wall ms/tok (pos)", "GPU ms/tok (pos, attn share)", "first ms")
  print(" | ".join(head))
  for r in rows:
    if "error" in r:
      print(f"{r['way']} | failed: {r['error']}")
      continue
    wall = ", ".join(f"{v:.1f} ({k})" for k, v in r["wall_ms"].items())
    gpu = ", ".join(f"{g['ms']:.2f} ({k}, {100 * (g['attn_share'] or 0):.0f}%)"
                    for k, g in sorted(r["gpu"].items(), key=lambda kv: int(kv[0]))) or "-"
    print(" | ".join([r["way"], str(r["steps"]), _cell(r["compiled_after_2"]),
                      _cell(r["pipelines_after_2"]), _dispatches(r["dispatches"], args.layers,
                                                                   r.get("after", 3)),
                      _submits(r), _reads(r), wall, gpu,
                      f"{r['first_ms']:.0f}"]))
  _print_agreement(rows)


def _submits(row: dict) -> str:
  """Kernel submits per token; in the page also every queue submit (a read back's copy too)."""
  if "submits_all" not in row:
    return _cell(row["submits"], "g")
  return f"{row['submits']:g} (all {row['submits_all']:g})"


def _reads(row: dict) -> str:
  if "reads" not in row:
    return "-"
  return f"{row['reads']:g} ({row['read_bytes']:g} B)"


def _dispatches(value, layers: int, after: int = 3) -> str:
  """Dispatches per token, and per layer once the `after` kernels after the layers are taken off
  (the final norm, the head, the argmax; 2 where the norm is the head's prologue)."""
  if value is None:
    return "-"
  return f"{value:g} ({(value - after) / layers:.2g})"


def _print_agreement(rows: list[dict]) -> None:
  good = [r for r in rows if "error" not in r]
  if len(good) > 1:
    n = min(len(r["tokens"]) for r in good)
    same = all(r["tokens"][:n] == good[0]["tokens"][:n] for r in good)
    print(f"first {n} tokens {'agree' if same else 'DIFFER'} across the ways: " +
          "; ".join(f"{r['way']} {r['tokens'][:n]}" for r in good))


def parse(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--layers", type=int, default=4)
  ap.add_argument("--d", type=int, default=256)
  ap.add_argument("--heads", type=int, default=8)
  ap.add_argument("--steps", type=int, default=1024)
  ap.add_argument("--static-steps", type=int, default=48)
  ap.add_argument("--device", default="WEBGPU")
  ap.add_argument("--ways", default="symbolic,static,tinygrad")
  ap.add_argument("--quick", action="store_true", help="160 positions, 6 static steps")
  ap.add_argument("--page", action="store_true",
                  help="the symbolic way in the page (bench/decode_page.py), not natively")
  ap.add_argument("--jump", type=int, default=0,
                  help="(symbolic) decode --decoded positions, then the last JUMP of --steps")
  ap.add_argument("--decoded", type=int, default=0, help="(with --jump) see --jump")
  ap.add_argument("--native", action="store_true",
                  help="(--page) also the ways of --ways natively, in the same table")
  ap.add_argument("--worker", default=None)
  args = ap.parse_args(argv)
  if args.quick:
    args.steps, args.static_steps = min(args.steps, 160), min(args.static_steps, 6)
  return args


def main(argv=None) -> int:
  args = parse(argv)
  if args.page:
    import decode_page
    rows = [decode_page.measure(args)] + (measure(args) if args.native else [])
    print_table(rows, args, "WEBGPU in the page (Pyodide, headless Chromium, SwiftShader)" +
                (f" and natively on {args.device}" if args.native else ""))
  elif args.worker == "tinygrad":
    print(json.dumps(tinygrad_worker(args)))
  elif args.worker:
    print(json.dumps(kernelgen_worker(args.worker, args)))
  else:
    rows = measure(args)
    print_table(rows, args)
  return 0


if __name__ == "__main__":
  sys.exit(main())
