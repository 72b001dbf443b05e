"""Real models from PyPI packages, natively, against onnxruntime (CPU): Silero VAD
(`silero-vad`, its six exports), PP-OCRv4 detection, recognition and the direction classifier
(`rapidocr-onnxruntime`) and ddddocr's OCR and detection models (`ddddocr`).

The wheels are fetched at pinned versions with pip (no dependencies, nothing installed) into
.tools/pypi-models/ once, and the .onnx files read from inside them. Each model runs on fixed
random inputs of a realistic size (a 32 ms audio chunk, a 48-pixel text line, ...): kernelgen
on the device asked for (default WEBGPU: lavapipe on a machine with no GPU), onnxruntime on the
CPU. A row per model:

  ok        every output within rtol 1e-3 / atol 1e-4 of onnxruntime's (max abs error shown)
  first     the first call, load to outputs on the host (compiles included), ms
  steady    median of the warm calls (a replay of the recorded kernels, outputs read back), ms
  ort       onnxruntime's median, ms
  kernels   device kernels per warm call / submits per warm call / host-side kernels per call
  ort noise onnxruntime's own output change (max abs) when its float inputs are moved by one
            rounding step (a relative 1e-7, three draws): how far a model amplifies float
            rounding. ddddocr's `common_old` (DynamicQuantizeLSTM: activations quantized to uint8
            per step, a rounding flip moves a value by a whole quantization step) changes by
            ~0.2 there: a `max err` within it is onnxruntime's own noise, not a wrong operator
            (`ok` stays the strict check)

Not a test (no timing is asserted anywhere); say the machine's load when quoting it. The same
models in the page, against onnxruntime-web (WebGPU and wasm): bench/pypi_page.py.

    python bench/pypi_models.py [--device WEBGPU] [--rounds 20] [--models silero,rapidocr,...]
"""
from __future__ import annotations

import argparse
import collections
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".tools" / "pypi-models"
PACKAGES = {"silero": ("silero-vad", "6.2.3"), "rapidocr": ("rapidocr-onnxruntime", "1.4.4"),
            "ddddocr": ("ddddocr", "1.6.1")}
# input shapes by model file (dims the model leaves symbolic); other inputs: as declared, 1
SHAPES = {"ch_PP-OCRv4_det_infer.onnx": {"x": (1, 3, 320, 320)},
          "ch_PP-OCRv4_rec_infer.onnx": {"x": (1, 3, 48, 320)},
          "ch_ppocr_mobile_v2.0_cls_infer.onnx": {"x": (1, 3, 48, 192)},
          "common.onnx": {"input1": (1, 1, 64, 160)},
          "common_old.onnx": {"input1": (1, 1, 64, 160)},
          "common_det.onnx": {"images": (1, 3, 416, 416)}}
RTOL, ATOL = 1e-3, 1e-4


def wheel(package: str, version: str, cache: Path = CACHE) -> Path:
  """The package's wheel in the cache, fetched with pip the first time."""
  cache.mkdir(parents=True, exist_ok=True)
  stem = package.replace("-", "_")
  found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
  if not found:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary=:all:", "--disable-pip-version-check", "-d", str(cache),
                    f"{package}=={version}"], check=True)
    found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
  return found[0]


def models(which: list, cache: Path = CACHE) -> list:
  """[(label, onnx bytes)] of the chosen packages' models."""
  out = []
  for key in which:
    package, version = PACKAGES[key]
    with zipfile.ZipFile(wheel(package, version, cache)) as z:
      for name in sorted(n for n in z.namelist() if n.endswith(".onnx")):
        out.append((f"{key}/{Path(name).name}", z.read(name)))
  return out


def feeds_for(label: str, session) -> dict:
  """Fixed random inputs for the model's declared inputs (see SHAPES)."""
  rng = np.random.default_rng(0)
  shapes = SHAPES.get(label.split("/")[-1], {})
  feeds = {}
  for i in session.get_inputs():
    shape = shapes.get(i.name) or tuple(d if isinstance(d, int) else 1 for d in i.shape)
    if i.name == "sr":
      feeds[i.name] = np.array(16000, np.int64)
    elif i.name == "input" and len(shape) == 2:   # Silero: a 32 ms chunk at 16 kHz (+ context)
      width = i.shape[1] if isinstance(i.shape[1], int) else 512
      feeds[i.name] = (rng.standard_normal((1, width)) * 0.1).astype(np.float32)
    elif "float16" in i.type:
      feeds[i.name] = rng.standard_normal(shape).astype(np.float16) * 0.1
    elif "int" in i.type:
      feeds[i.name] = np.zeros(shape, np.int64)
    else:
      feeds[i.name] = (rng.random(shape) if len(shape) == 4 else
                       rng.standard_normal(shape) * 0.1).astype(np.float32)
  return feeds


def counted_call(kg, model, feeds: dict, device: str, replay: bool = True) -> tuple:
  """(outputs, {device kernels, submits, host kernels}) of one call."""
  counts, inside = collections.Counter(), [False]
  patched = []
  for name in {device, "PYTHON"}:
    rt = kg.Device[name]
    run, many = rt.run, rt.run_many

    def counted(*a, _run=run, _name=name, **k):
      if not inside[0]:
        counts["host kernels" if _name == "PYTHON" and device != "PYTHON" else "kernels"] += 1
        counts["submits"] += _name == device
      return _run(*a, **k)

    def counted_many(launches, *a, _many=many):
      counts["kernels"] += len(launches)
      counts["submits"] += 1
      inside[0] = True
      try:
        return _many(launches, *a)
      finally:
        inside[0] = False
    rt.run, rt.run_many = counted, counted_many
    patched.append(rt)
  try:
    outs = read(model.run(feeds, device=device, replay=replay), model)
  finally:
    for rt in patched:
      del rt.run, rt.run_many
  return outs, counts


def matches(got, want) -> bool:
  """Whether an output matches onnxruntime's: same shape, within RTOL / ATOL."""
  got, want = np.asarray(got), np.asarray(want, np.float64)
  return got.shape == want.shape and bool(np.allclose(got, want, rtol=RTOL, atol=ATOL))


def ort_noise(session, feeds: dict, want: list, draws: int = 3) -> float:
  """onnxruntime's largest output change over `draws` runs with every float input moved by a
  relative 1e-7 (one float32 rounding step), against its outputs `want` (see the docstring)."""
  rng, worst = np.random.default_rng(1), 0.0
  for _ in range(draws):
    moved = {k: (v * (1 + 1e-7 * rng.standard_normal(v.shape))).astype(v.dtype)
             if v.dtype.kind == "f" else v for k, v in feeds.items()}
    worst = max([worst] + [float(np.abs(np.asarray(g, np.float64) - w).max()) if w.size else 0.0
                           for g, w in zip(session.run(None, moved), want)])
  return worst


def read(outs: dict, model) -> list:
  return [np.asarray(outs[n].numpy(), np.float64) if outs[n] is not None else None
          for n in model.output_names]


def row(kg, ort, label: str, raw: bytes, device: str, rounds: int, replay: bool = True) -> dict:
  """One model's figures (see the module docstring)."""
  session = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
  feeds = feeds_for(label, session)
  want = [np.asarray(w, np.float64) for w in session.run(None, feeds)]
  start = time.perf_counter()
  model = kg.onnx.load(raw, float64="float32")
  got = read(model.run(feeds, device=device, replay=replay), model)
  first = (time.perf_counter() - start) * 1e3
  for _ in range(3):                          # lazy, recorded, then replayed
    got = read(model.run(feeds, device=device, replay=replay), model)
  err = max(float(np.abs(g - w).max()) if g.size else 0.0 for g, w in zip(got, want))
  ok = all(matches(g, w) for g, w in zip(got, want))
  _, counts = counted_call(kg, model, feeds, device, replay)
  ours, theirs = [], []
  for _ in range(rounds):                     # interleaved
    t = time.perf_counter()
    read(model.run(feeds, device=device, replay=replay), model)
    ours.append((time.perf_counter() - t) * 1e3)
    t = time.perf_counter()
    session.run(None, feeds)
    theirs.append((time.perf_counter() - t) * 1e3)
  return {"model": label, "ok": ok, "max_err": err, "noise": ort_noise(session, feeds, want),
          "first_ms": first,
          "steady_ms": statistics.median(ours), "ort_ms": statistics.median(theirs),
          "kernels": counts["kernels"], "submits": counts["submits"],
          "host_kernels": counts["host kernels"],
          "replayed": bool(model.replayer and model.replayer.replays)}


def grouped_convs(raw: bytes) -> collections.Counter:
  """The model's Conv nodes with group > 1, counted by (kernel, input channels per group, output
  channels per group): depthwise convs are (k, 1, 1) (the onnx package reads the file)."""
  import onnx
  from onnx import numpy_helper
  graph = onnx.load_from_string(raw).graph
  shapes = {t.name: tuple(t.dims) for t in graph.initializer}
  shapes.update({n.output[0]: tuple(numpy_helper.to_array(a.t).shape) for n in graph.node
                 if n.op_type == "Constant" for a in n.attribute if a.name == "value"})
  found = collections.Counter()
  for node in graph.node:
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    if node.op_type == "Conv" and group > 1 and node.input[1] in shapes:
      o, cg, *kernel = shapes[node.input[1]]
      found["x".join(map(str, kernel)), cg, o // group] += 1
  return found


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--device", default="WEBGPU")
  parser.add_argument("--rounds", type=int, default=20)
  parser.add_argument("--cache", type=Path, default=CACHE, help="where the wheels are kept")
  parser.add_argument("--models", default=",".join(PACKAGES),
                      help="packages (silero, rapidocr, ddddocr) or model file names, "
                           "comma-separated")
  parser.add_argument("--no-replay", action="store_true",
                      help="build the lazy graph every call (Model.run(replay=False)): before")
  parser.add_argument("--convs", action="store_true",
                      help="list each model's grouped convs (group > 1) and run nothing")
  args = parser.parse_args()
  sys.path.insert(0, str(ROOT / "core"))
  import kernelgen as kg
  import onnxruntime as ort
  wanted = args.models.split(",")
  packages = [p for p in PACKAGES if p in wanted or any(w.endswith(".onnx") for w in wanted)]
  print(f"{'model':44} {'ok':>3} {'max err':>9} {'ort noise':>9} {'first ms':>9} {'steady ms':>9} "
        f"{'ort ms':>7} {'kernels/submits/host':>21}")
  for label, raw in models(packages, args.cache):
    if label.split("/")[0] not in wanted and label.split("/")[-1] not in wanted:
      continue
    if args.convs:
      print(f"{label:44} grouped convs (kernel, in/out channels per group: count): " + (", ".join(
        f"{k} {cg}/{og}: {n}" for (k, cg, og), n in sorted(grouped_convs(raw).items())) or "none"))
      continue
    try:
      r = row(kg, ort, label, raw, args.device, args.rounds, not args.no_replay)
    except Exception as e:     # noqa: BLE001 (a row per model, whatever fails)
      print(f"{label:44} {type(e).__name__}: {str(e)[:120]}", flush=True)
      continue
    print(f"{label:44} {'yes' if r['ok'] else 'NO':>3} {r['max_err']:9.2e} {r['noise']:9.2e} "
          f"{r['first_ms']:9.0f} "
          f"{r['steady_ms']:9.2f} {r['ort_ms']:7.2f} "
          f"{r['kernels']:>9}/{r['submits']}/{r['host_kernels']}"
          f"{'' if r['replayed'] else '  (not replayed)'}", flush=True)


if __name__ == "__main__":
  main()
