"""BT: one training step (forward + backward + SGD update) of two small models, kernelgen vs
tinygrad 0.10.1 on the same wgpu adapter (lavapipe here) and vs TF.js in the same Chromium page
(WebGPU on SwiftShader).

Models (the same float32 initial weights, drawn here by numpy, and the same batch for every
system): the digits MLP 64-32-10 (batch 64) and a small CNN, conv 1->8 3x3 pad 1, ReLU, conv
8->16 3x3 stride 2 pad 1, ReLU, linear 3136->10 (1x28x28 inputs, batch 32). Loss: mean
cross-entropy of log_softmax against one-hot labels; plain SGD (lr 0.05). The batch stays on the
device; each step ends with the loss read back to the host (what a training loop logs), so every
figure is a completed step. `first_ms` is the first step of a fresh process or page (compiles
included); `step_ms` the median of the steps after WARMUP more. The losses after STEPS steps must
agree across systems (relative 1e-3): a peer that disagrees is marked wrong.

tinygrad runs its idiomatic fast loop: the step under TinyJit (kernels replayed after the jit
has captured them); kernelgen likewise, under kg.jit (tensor/jit.py: the step's kernels
recorded once and replayed, no graph building, autograd or plan key per step; BT_EAGER=1 runs
its plain loop instead, which reuses compiled kernels through the compile and plan caches,
kernelgen/cache.py); TF.js runs its plain loop. Each CPython figure is the median over ROUNDS
fresh processes per tool, interleaved (ours, tinygrad, ours, ...): the machine is shared.

    python bench/training.py [--rounds N] [--no-browser | --page-only]  (the rows, then JSON)
    BT_MODELS=mlp python bench/training.py ...               (only some models: mlp, cnn)
    python bench/training.py --split                         (kernelgen's step, time by phase)
    python bench/training.py --profile-page [mlp|cnn]         (kernelgen's steady step in the
        page under cProfile, with gpu.js's counts of kernels, batches, submits, awaited scopes)
    python bench/training.py --worker kernelgen|tinygrad     (one fresh process; JSON on stdout)
"""
from __future__ import annotations

import base64
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINYGRAD_PYTHON = ROOT / ".venv-bench" / "bin" / "python"
LR, STEPS, WARMUP, ROUNDS = 0.05, 12, 2, 3
LOSS_RTOL = 1e-3
WORKER_S = 900   # one tool's process, one model
JIT = os.environ.get("BT_EAGER") != "1"   # kernelgen's step under kg.jit (as TinyJit)
MODELS = ("digits MLP 64-32-10, batch 64", "CNN 2 conv + linear 1×28×28, batch 32")

# The training loop, as Python source that kernelgen (CPython and the page's worker) and
# tinygrad both run: their Tensor APIs agree on everything it uses. `T` is the Tensor class.
LOOP = '''
import time

def forward(kind, p, x):
  if kind == "mlp":
    return (x @ p["w1"] + p["b1"]).relu() @ p["w2"] + p["b2"]
  h = x.conv2d(p["k1"], p["c1"], padding=1).relu()
  h = h.conv2d(p["k2"], p["c2"], stride=2, padding=1).relu()
  return h.reshape(h.shape[0], -1) @ p["w3"] + p["b3"]

def train(T, make_step, kind, params, x, onehot, steps):
  """(per-step milliseconds, per-step losses); make_step(params, x, onehot) -> step()."""
  step = make_step(params, x, onehot)
  times, losses = [], []
  for _ in range(steps):
    start = time.perf_counter()
    loss = step()
    losses.append(loss)
    times.append((time.perf_counter() - start) * 1e3)
  return times, losses
'''

KERNELGEN_STEP = '''
def kernelgen_step(kind, lr, jit=True):
  import kernelgen as kg
  def make(params, x, onehot):
    opt = kg.optim.SGD(list(params.values()), lr=lr)
    def step():
      opt.zero_grad()
      loss = -(forward(kind, params, x).log_softmax(-1) * onehot).sum(-1).mean()
      loss.backward()
      opt.step(loss)
      return loss
    run = kg.jit(step) if jit else step
    return lambda: run().item()
  return make
'''


def model_data(np) -> dict:
  """kind -> (initial parameters {name: float32 array}, x, onehot): fixed seeds."""
  rng = np.random.default_rng(0)

  def init(*shape, fan_in):
    return (rng.standard_normal(shape) * np.sqrt(2 / fan_in)).astype(np.float32)

  def batch(shape, n):
    return rng.random(shape, dtype=np.float32), np.eye(10, dtype=np.float32)[rng.integers(0, 10, n)]

  mlp = {"w1": init(64, 32, fan_in=64), "b1": np.zeros(32, np.float32),
         "w2": init(32, 10, fan_in=32), "b2": np.zeros(10, np.float32)}
  cnn = {"k1": init(8, 1, 3, 3, fan_in=9), "c1": np.zeros(8, np.float32),
         "k2": init(16, 8, 3, 3, fan_in=72), "c2": np.zeros(16, np.float32),
         "w3": init(3136, 10, fan_in=3136), "b3": np.zeros(10, np.float32)}
  return {"mlp": (mlp, *batch((64, 64), 64)), "cnn": (cnn, *batch((32, 1, 28, 28), 32))}


def encode(array) -> dict:
  return {"shape": list(array.shape), "b64": base64.b64encode(array.tobytes()).decode()}


def encoded_models(np) -> dict:
  return {kind: {"params": {k: encode(v) for k, v in params.items()}, "x": encode(x),
                 "onehot": encode(onehot)} for kind, (params, x, onehot) in model_data(np).items()}


# the page: decode the arrays into kernelgen tensors, train, out = [first, steps..., losses...]
PAGE_PROGRAM = '''
import base64
def _tensor(e, grad=False):
  view = memoryview(base64.b64decode(e["b64"])).cast("f", e["shape"] or [1])
  return Tensor(view, requires_grad=grad, device="WEBGPU")
_m = __MODEL__
_params = {k: _tensor(v, True) for k, v in _m["params"].items()}
_times, _losses = train(Tensor, kernelgen_step(__KIND__, __LR__, __JIT__), __KIND__, _params,
                        _tensor(_m["x"]), _tensor(_m["onehot"]), __STEPS__)
out = Tensor(_times + _losses)
'''


def page_code(kind: str, model: dict) -> str:
  program = PAGE_PROGRAM.replace("__KIND__", repr(kind)).replace("__STEPS__", str(STEPS))
  program = program.replace("__LR__", repr(LR)).replace("__JIT__", repr(JIT))
  return LOOP + KERNELGEN_STEP + program.replace("__MODEL__", json.dumps(model))   # data last


# ---- workers (one fresh process each) ---------------------------------------------------------

def worker(tool: str) -> dict:
  import numpy as np
  namespace: dict = {}
  exec(LOOP + KERNELGEN_STEP, namespace)
  out = {}
  kinds = os.environ.get("BT_MODELS", "mlp,cnn").split(",")
  for kind, (params, x, onehot) in model_data(np).items():
    if kind not in kinds:
      continue
    if tool == "kernelgen":
      sys.path.insert(0, str(ROOT / "core"))
      import kernelgen as kg
      T = kg.Tensor
      tensors = {k: T(v, device="WEBGPU", requires_grad=True).realize()   # on the device, as
                 for k, v in params.items()}                                # tinygrad's below
      make = namespace["kernelgen_step"](kind, LR, JIT)
      xs, ys = T(x, device="WEBGPU").realize(), T(onehot, device="WEBGPU").realize()
      adapter = kg.Device["WEBGPU"].adapter.info["device"]
    else:
      from tinygrad import Device, Tensor as T, TinyJit
      from tinygrad.nn.optim import SGD
      Device.DEFAULT = "WEBGPU"
      T.training = True
      tensors = {k: T(v, requires_grad=True).realize() for k, v in params.items()}
      xs, ys = T(x).realize(), T(onehot).realize()
      adapter = "tinygrad WEBGPU (wgpu)"

      def make(params, x, onehot, kind=kind):
        opt = SGD(list(params.values()), lr=LR)

        @TinyJit
        def jitted():
          opt.zero_grad()
          loss = -(namespace["forward"](kind, params, x).log_softmax(-1) * onehot).sum(-1).mean()
          loss.backward()
          opt.step()
          return loss.realize()
        return lambda: jitted().item()
    times, losses = namespace["train"](T, make, kind, tensors, xs, ys, STEPS)
    out[kind] = {"first_ms": times[0], "step_ms": statistics.median(times[1 + WARMUP:]),
                 "losses": losses, "adapter": adapter}
  return out


def run_worker(tool: str, kind: str) -> dict:
  """One fresh process of `tool` training model `kind` ("mlp" or "cnn")."""
  python = sys.executable if tool == "kernelgen" else str(TINYGRAD_PYTHON)
  env = {**os.environ, "PYTHONPATH": str(ROOT / "core")} if tool == "kernelgen" else \
    {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["BT_MODELS"] = kind
  try:
    proc = subprocess.run([python, str(Path(__file__).resolve()), "--worker", tool],
                          capture_output=True, text=True, timeout=WORKER_S, env=env)
  except subprocess.TimeoutExpired:
    return {"error": f"timed out after {WORKER_S} s ({STEPS} steps)"}
  if proc.returncode:
    return {"error": proc.stderr.strip().splitlines()[-1][:300] if proc.stderr else "failed"}
  return json.loads(proc.stdout.strip().splitlines()[-1])[kind]


def measure_cpython(rounds: int = ROUNDS) -> dict:
  """tool -> kind -> the medians over `rounds` fresh processes, interleaved with the peer's."""
  kinds = os.environ.get("BT_MODELS", "mlp,cnn").split(",")
  runs: dict = {tool: {kind: [] for kind in kinds} for tool in ("kernelgen", "tinygrad")}
  for kind in kinds:
    for _ in range(rounds):
      for tool in runs:
        runs[tool][kind].append(run_worker(tool, kind))
        print(f"  BT {tool} {kind}: {json.dumps(runs[tool][kind][-1])[:300]}", file=sys.stderr)
  return {tool: {kind: summarize(results) for kind, results in by_kind.items()}
          for tool, by_kind in runs.items()}


def summarize(results: list[dict]) -> dict:
  """The median first and steady step over the rounds (and the last round's losses)."""
  good = [r for r in results if "error" not in r]
  if not good:
    return {"error": results[0]["error"]}
  return {"first_ms": statistics.median(r["first_ms"] for r in good),
          "step_ms": statistics.median(r["step_ms"] for r in good),
          "losses": good[-1]["losses"], "adapter": good[-1]["adapter"]}


# ---- the page -------------------------------------------------------------------------------

def measure_browser(rounds: int = ROUNDS) -> dict:
  """kernelgen (its worker, WEBGPU) and TF.js (WebGPU backend) in one page, SwiftShader, in
  `rounds` interleaved rounds (kernelgen, TF.js, kernelgen, ...): the median steady step over the
  rounds, each round's in `rounds`, the first step of the first round (a fresh worker)."""
  import numpy as np
  from playwright.sync_api import sync_playwright
  sys.path.insert(0, str(ROOT / "tests" / "helpers"))
  sys.path.insert(0, str(ROOT / "bench"))
  from browser_util import StaticServer
  from browser import Browser
  models = encoded_models(np)
  mounts = {"/bench/": ROOT / "bench", "/tfjs/": ROOT / ".venv-bench" / "npm" / "node_modules"}
  runs: dict = {"kernelgen": {}, "tfjs": {}}
  with StaticServer(ROOT / "site", mounts=mounts) as server, sync_playwright() as playwright:
    browser = Browser(playwright, server)
    page = browser.page("bench/web/training.html")
    page.set_default_timeout(900_000)
    for kind in os.environ.get("BT_MODELS", "mlp,cnn").split(","):
      for round_ in range(rounds):
        for tool in ("kernelgen", "tfjs"):
          got = page_round(page, tool, kind, models[kind])
          runs[tool].setdefault(kind, []).append(got)
          print(f"  BT page {kind} {tool} round {round_ + 1}: {json.dumps(got)[:300]}",
                file=sys.stderr)
    browser.close()
  return {tool: {kind: page_summary(results) for kind, results in by_kind.items()}
          for tool, by_kind in runs.items()}


def page_round(page, tool: str, kind: str, model: dict) -> dict:
  """One round of `tool` training `kind` in the page: {first_ms, step_ms, losses, adapter}."""
  try:
    if tool == "kernelgen":
      got = page.evaluate("(code) => window.training.ours(code)", page_code(kind, model))
    else:
      got = page.evaluate("(a) => window.training.tfjs(a[0], a[1], a[2], a[3])",
                          [kind, model, LR, STEPS])
  except Exception as e:  # a tool failing on one model is reported, not fatal
    return {"error": f"{type(e).__name__}: {e}"[:300]}
  times, losses = got["values"][:STEPS], got["values"][STEPS:]
  return {"first_ms": times[0], "step_ms": statistics.median(times[1 + WARMUP:]),
          "losses": losses, "adapter": got.get("adapter")}


def page_summary(results: list[dict]) -> dict:
  good = [r for r in results if "error" not in r]
  if not good:
    return {"error": results[0]["error"]}
  return {"first_ms": results[0].get("first_ms"),
          "step_ms": statistics.median(r["step_ms"] for r in good),
          "rounds_step_ms": [r.get("step_ms") for r in results],
          "losses": good[-1]["losses"], "adapter": good[-1]["adapter"]}


def print_page_rounds(page: dict) -> None:
  """Each round's steady step, kernelgen vs TF.js, and their ratio."""
  for kind in page["kernelgen"]:
    ours = page["kernelgen"][kind].get("rounds_step_ms", [])
    peer = page["tfjs"].get(kind, {}).get("rounds_step_ms", [])
    for i, (a, b) in enumerate(zip(ours, peer)):
      ratio = f"{b / a:.2f}x" if a and b else "-"
      print(f"page {kind} round {i + 1}: kernelgen {a or 0:8.1f} ms  tfjs {b or 0:8.1f} ms  "
            f"{ratio}")


# ---- rows -------------------------------------------------------------------------------------

def agree(ours: dict, peer: dict) -> bool:
  a, b = ours.get("losses"), peer.get("losses")
  return bool(a and b) and abs(a[-1] - b[-1]) <= LOSS_RTOL * max(abs(b[-1]), 1e-6)


def rows(cpython: dict, page: dict | None) -> list[dict]:
  """(what, ours ms, peer ms, peer name, note) per model, figure and peer."""
  out = []
  for kind, label in zip(("mlp", "cnn"), MODELS):
    for peer_name, results in (("tinygrad", cpython), ("tfjs", page)):
      if results is None:
        continue
      ours = results["kernelgen"].get(kind, {"error": "not run"})
      peer = results[peer_name].get(kind, {"error": "not run"})
      where = "wgpu/lavapipe" if peer_name == "tinygrad" else "page, SwiftShader"
      note = f"loss after {STEPS} steps {ours.get('losses', [None])[-1]!s:.8} vs " \
             f"{peer.get('losses', [None])[-1]!s:.8}"
      if "error" in ours or "error" in peer:
        note = (ours.get("error") or peer.get("error"))[:60]
      elif not agree(ours, peer):
        note = "wrong: losses disagree; " + note
      for figure in ("step_ms", "first_ms"):
        what = f"train step {'(steady)' if figure == 'step_ms' else '(first)'} {label} [{where}]"
        out.append({"what": what, "ours": ours.get(figure), "peer": peer.get(figure),
                    "peer_name": peer_name, "figure": figure, "note": note})
  return out


def print_rows(table: list[dict]) -> None:
  for r in table:
    ratio = r["peer"] / r["ours"] if isinstance(r["ours"], (int, float)) and r["ours"] and \
      isinstance(r["peer"], (int, float)) else None   # (a page's whole milliseconds are ints)
    print(f"{r['what']:<75} ours {r['ours'] or 0:9.1f} ms  {r['peer_name']:>8} "
          f"{r['peer'] or 0:9.1f} ms  {'' if ratio is None else f'{ratio:.2f}x'}  {r['note']}")


# ---- kernelgen's step by phase ----------------------------------------------------------------

def split() -> dict:
  """kernelgen's digits-MLP step on WEBGPU (CPython), its milliseconds by phase, with the
  compile cache off and on: schedule, compile (optimize, lower, kernel passes, render), run
  (bind and submit; the last step's wait is in the loss read), and the rest (building the
  graph, autograd, the loss read-back)."""
  import numpy as np
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  from kernelgen import cache, realize
  spent = {"schedule": 0.0, "compile": 0.0, "run": 0.0}

  def timed(phase, fn):
    def wrapper(*args, **kwargs):
      start = time.perf_counter()
      try:
        return fn(*args, **kwargs)
      finally:
        spent[phase] += time.perf_counter() - start
    return wrapper
  realize.schedule = timed("schedule", realize.schedule)
  cache.compile_item = timed("compile", cache.compile_item)
  runtime = kg.Device["WEBGPU"]
  runtime.run = timed("run", runtime.run)
  namespace: dict = {}
  exec(LOOP + KERNELGEN_STEP, namespace)
  params, x, onehot = model_data(np)["mlp"]
  out = {}
  for size, label in ((0, "cache off"), (1024, "cache on")):
    kg.clear_cache()
    kg.set_cache_size(size)
    tensors = {k: kg.Tensor(v, device="WEBGPU", requires_grad=True) for k, v in params.items()}
    step = namespace["kernelgen_step"]("mlp", LR, False)(tensors, kg.Tensor(x, device="WEBGPU"),
                                                    kg.Tensor(onehot, device="WEBGPU"))
    for _ in range(1 + WARMUP):
      step()
    n, phases = 20, []
    for _ in range(n):
      for k in spent:
        spent[k] = 0.0
      start = time.perf_counter()
      step()
      total = time.perf_counter() - start
      phases.append({**{k: v * 1e3 for k, v in spent.items()},
                     "other": (total - sum(spent.values())) * 1e3, "total": total * 1e3})
    best = min(phases, key=lambda p: p["total"])
    out[label] = {"median_total_ms": statistics.median(p["total"] for p in phases),
                  "fastest_step_ms_by_phase": best}
  return out


# the page: after WARMUP steps, STEPS more under cProfile; out = the report's UTF-8 bytes
PROFILE_PROGRAM = '''
import cProfile, io, pstats
import kernelgen as _kg
_step = kernelgen_step(__KIND__, __LR__, __JIT__)(_params, _tensor(_m["x"]),
                                                   _tensor(_m["onehot"]))
for _ in range(__WARMUP__):
  _step()
_gpu = _kg.Device["WEBGPU"].gpu
_before = _gpu.stats.to_py()
_profile = cProfile.Profile()
_profile.enable()
for _ in range(__STEPS__):
  _step()
_profile.disable()
_after = _gpu.stats.to_py()
_text = io.StringIO()
_text.write(f"gpu.js per step: { {k: (_after[k] - _before[k]) / __STEPS__ for k in _after} }\\n")
pstats.Stats(_profile, stream=_text).sort_stats("cumulative").print_stats(30)
out = Tensor(list(_text.getvalue().encode()), dtype=dtypes.uint8)
'''


def profile_page(kind: str = "mlp") -> str:
  """kernelgen's steady training step in the page (SwiftShader) under cProfile: the report."""
  import numpy as np
  from playwright.sync_api import sync_playwright
  sys.path.insert(0, str(ROOT / "tests" / "helpers"))
  sys.path.insert(0, str(ROOT / "bench"))
  from browser_util import StaticServer
  from browser import Browser
  model = encoded_models(np)[kind]
  program = PROFILE_PROGRAM.replace("__WARMUP__", str(1 + WARMUP)).replace("__STEPS__", "5")
  code = page_code(kind, model).replace("out = Tensor(_times + _losses)", "")
  code = code.replace("_times, _losses = train(", "_unused = (") + program
  code = code.replace("__KIND__", repr(kind)).replace("__LR__", repr(LR))
  code = code.replace("__JIT__", repr(JIT))
  mounts = {"/bench/": ROOT / "bench", "/tfjs/": ROOT / ".venv-bench" / "npm" / "node_modules"}
  with StaticServer(ROOT / "site", mounts=mounts) as server, sync_playwright() as playwright:
    browser = Browser(playwright, server)
    page = browser.page("bench/web/training.html")
    page.set_default_timeout(900_000)
    got = page.evaluate("(code) => window.training.ours(code)", code)
    browser.close()
  return bytes(int(v) for v in got["values"]).decode()


def measure(rounds: int = ROUNDS, browser: bool = True, native: bool = True) -> dict:
  """Both sides on this machine now: {cpython, page, rows} (the machine is shared: rounds are
  interleaved)."""
  cpython = measure_cpython(rounds) if native else None
  page = measure_browser(rounds) if browser else None
  return {"cpython": cpython, "page": page, "rows": rows(cpython, page)}


def main(argv: list[str]) -> int:
  if argv[:1] == ["--worker"]:
    print(json.dumps(worker(argv[1])))
    return 0
  if argv[:1] == ["--profile-page"]:
    print(profile_page(argv[1] if len(argv) > 1 else "mlp"))
    return 0
  if argv[:1] == ["--split"]:
    print(json.dumps(split(), indent=1))
    return 0
  rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else ROUNDS
  result = measure(rounds, "--no-browser" not in argv, "--page-only" not in argv)
  print_rows(result["rows"])
  if result["page"]:
    print_page_rounds(result["page"])
  print(json.dumps(result, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
