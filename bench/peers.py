"""B3/B4 (issue 22): every peer at once, side by side, in headless Chromium, once per adapter
(SwiftShader; Mesa lavapipe through ANGLE, compatibility mode).

Systems, each on the same inputs (numpy, seeded), each output checked against numpy (a wrong
output is marked and its time not counted):
  kernelgen  our WGSL, compiled in CPython for the adapter's class (option adapter=, the table of
             core/kernelgen/render/wgsl/adapters.py), run by bench/web/peers.js's runner
  tinygrad   tinygrad 0.10.1's WGSL, from its own scheduler and renderer (.venv-bench; lowered on
             its WEBGPU device, never run there), run by the same runner
  tfjs       TF.js 4.22, WebGPU backend (.venv-bench/npm), the same formulas as its own ops
  ort        onnxruntime-web 1.31, WebGPU execution provider, on ONNX graphs built here with the
             `onnx` package's helper
On the lavapipe page (compatibility mode) every adapter request asks for compatibility mode
(peers.js): TF.js and ORT-web asked for a core adapter, which that browser answers with
SwiftShader, so until issue 43 B3's TF.js and ORT-web columns were SwiftShader's times; the
table's footer names each system's adapter.
GPU time of one run, two ways: wall, submit -> onSubmittedWorkDone, inputs on the GPU, outputs
left there; and where the adapter has 'timestamp-query' (SwiftShader; not lavapipe through
ANGLE), GPU timestamps around each kernel's pass, summed (kernelgen, tinygrad: our runner;
onnxruntime-web: its own profiler; TF.js: none). The systems run interleaved, round after round
(every other round the previous one reversed, then turned by one; a short pause before each
run), and each keeps its best per run. The whole table runs `--runs` times (default 3), each in a
fresh browser once the load average has fallen to SETTLE_LOAD (settle), with the load average recorded before, during and after, and the cores other
processes took during it (bench/foreign_cpu.py; SwiftShader alone lifts the load average above
1.5 on 2 cores): per row the median and the worst of the runs' ratios (best correct peer's time /
ours, > 1: we are faster; target >= 1.5); a row holds only when its worst run does, and a run that
started above MAX_LOAD or shared the CPU with more than MAX_FOREIGN cores of other work is not
counted unless --allow-load. Our kernels are compiled for PLAN_RUNS runs (option `runs`): the
steady state this table times is a plan run many times, whose capped one-off kernels (issue 37)
have been swapped for these. For a row below target, `bound` gives our
bytes moved per ms against a copy kernel of the same bytes on the adapter (and for matmul and
conv2d our FLOP/s against the adapter's multiply-add peak, peers.js flopsPeak), and `floor` the
submit floor: a program of as many trivial dispatches as our kernels, timed the same way (best
and median; bench/submit_floor.py explores it).

    python bench/peers.py [--runs 3] [--reps N] [--allow-load] [--adapters swiftshader,lavapipe]
        [--rows matmul,...] [--tiny]
    python bench/peers.py --tinygrad DIR     (worker, run with .venv-bench's Python)
    python bench/peers.py --cold ...         (cold first results: bench/peers_cold.py)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import foreign_cpu  # noqa: E402  (bench/foreign_cpu.py: other processes' CPU during a run)
import peers_report  # noqa: E402  (bench/peers_report.py: per run and across runs)
SYSTEMS, PEERS = peers_report.SYSTEMS, peers_report.PEERS
BENCH_PYTHON = ROOT / ".venv-bench" / "bin" / "python"
ADAPTERS = ("swiftshader", "lavapipe")
GAUSS = [1, 4, 6, 4, 1]
SEPIA = [[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]]
LUMA = [0.299, 0.587, 0.114]
COLOUR = (0.05, 1.1, 1.2)   # the filter chain's brightness, contrast, saturation
SETTLE_MS = 300             # a pause before each timed run (see round_order)
MAX_LOAD = 1.5              # a run that starts at a load average (1 min) above it is not counted
MAX_FOREIGN = 0.25          # nor one during which other processes used more cores than this
# before each run the bench waits (at most SETTLE_MAX_S) for the load average to fall to
# SETTLE_LOAD: the previous run's own threads stay in the 1-minute average for a minute after it
# (SwiftShader lifts it to 1.6-1.8 on 2 cores), and would otherwise keep the next run from counting
SETTLE_LOAD, SETTLE_MAX_S = 1.0, 150
# our kernels are compiled for the steady state the table times: a plan run this many times
# (what kg.jit and a plan realized again swap in; issue 37's cold rows time the one-off kernels)
PLAN_RUNS = 100
PEAK_GROUPS, PEAK_STEPS = 64, 4096   # the multiply-add peak kernel (peers.js flopsPeak)


def sizes(tiny: bool) -> dict:
  if tiny:
    return {"n": 16, "rows": (8, 64), "conv": (1, 4, 6, 6), "sum": 1000, "img": (3, 8, 10),
            "att": (1, 2, 8, 4), "photo": (6, 8)}
  return {"n": 1024, "rows": (4096, 1024), "conv": (1, 64, 56, 56), "sum": 1 << 24,
          "img": (3, 480, 640), "att": (1, 8, 512, 64), "photo": (480, 640)}


# ---- the rows, as numpy inputs and one formula per tensor library -------------------------------

def gauss(np):
  g = np.array(GAUSS, np.float32)
  return (np.outer(g, g) / 256).astype(np.float32)


def chain(T, img, edge_pad):
  """The image-filter demo's chain (web/demos/filters_model.py's formulas) on img (H, W, 3):
  colour (brightness, contrast, saturation), sepia, 5x5 Gaussian blur (edges repeated), invert.
  T: the library's constructors (const, cat)."""
  b, c, s = COLOUR
  img = (img - 0.5) * c + 0.5 + b
  gray = (img * T.const(LUMA)).sum(axis=-1, keepdim=True)
  img = gray + (img - gray) * s
  img = img @ T.const(SEPIA).T
  x = edge_pad(img.permute(2, 0, 1).unsqueeze(1), 2)
  k = [[a * q / 256 for q in GAUSS] for a in GAUSS]
  img = x.conv2d(T.const(k).reshape(1, 1, 5, 5)).squeeze(1).permute(1, 2, 0)
  return 1 - img


def edge_padder(T):
  """The library's edge padding of (C, 1, H, W): its own (kernelgen: pad(mode="edge"), as the
  demo) where it has one, else a cat of repeated edge slices."""
  if hasattr(T, "edge_pad"):
    return T.edge_pad

  def pad(x, n):
    x = T.cat([x[:, :, :1]] * n + [x] + [x[:, :, -1:]] * n, 2)
    return T.cat([x[:, :, :, :1]] * n + [x] + [x[:, :, :, -1:]] * n, 3)
  return pad


def chain_ref(np, img):
  b, c, s = COLOUR
  img = (img.astype(np.float64) - 0.5) * c + 0.5 + b
  gray = (img * np.array(LUMA)).sum(-1, keepdims=True)
  img = (gray + (img - gray) * s) @ np.array(SEPIA).T
  x = np.pad(img, ((2, 2), (2, 2), (0, 0)), mode="edge")
  win = np.lib.stride_tricks.sliding_window_view(x, (5, 5), axis=(0, 1))
  return 1 - np.einsum("hwcij,ij->hwc", win, gauss(np).astype(np.float64))


def rows(np, tiny: bool = False) -> dict:
  """name -> {inputs, ref, lib(T, *inputs), tf: (op, NHWC-ish inputs, ref), onnx: builder}."""
  s = sizes(tiny)
  rng = np.random.default_rng(0)

  def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)

  def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)

  def conv(x, w, pad, groups=1):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))
    if groups == 1:
      return np.einsum("nchwij,ocij->nohw", win, w, optimize=True)
    return np.einsum("nchwij,cij->nchw", win, w[:, 0], optimize=True)

  n, (r, c), att, (h, w) = s["n"], s["rows"], s["att"], s["photo"]
  a, b = randn(n, n), randn(n, n)
  x = randn(r, c)
  cx, cw = randn(*s["conv"]), randn(s["conv"][1], s["conv"][1], 3, 3) * np.float32(0.1)
  v = rng.random(s["sum"], dtype=np.float32)
  img = rng.random(s["img"], dtype=np.float32)
  bw = np.repeat(gauss(np)[None, None], 3, axis=0)
  q, k, vv = randn(*att), randn(*att), randn(*att)
  scale = 1 / math.sqrt(att[-1])
  causal = np.triu(np.full((att[2], att[2]), -1e9, np.float32), 1)
  scores = (q.astype(np.float64) @ k.swapaxes(-1, -2)) * scale + causal
  photo = rng.random((h, w, 3), dtype=np.float32)
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  nhwc = lambda t: t.transpose(0, 2, 3, 1)   # noqa: E731
  out = {
    f"matmul {n}³": dict(inputs=[a, b], ref=a.astype(np.float64) @ b, flops=2 * n ** 3,
                         lib=lambda T, a, b: a @ b, tf=("matmul", [a, b], None),
                         onnx=[("MatMul", ["in0", "in1"], {})]),
    f"softmax rows {r}×{c}": dict(inputs=[x], ref=softmax(x.astype(np.float64)),
                                  lib=lambda T, x: x.softmax(-1), tf=("softmax", [x], None),
                                  onnx=[("Softmax", ["in0"], {"axis": -1})]),
    f"layernorm rows {r}×{c}": dict(inputs=[x], ref=(x - mean) / np.sqrt(var + 1e-5),
                                    lib=lambda T, x: x.layernorm(-1, eps=1e-5),
                                    tf=("layernorm", [x], None),
                                    onnx=[("LayerNormalization", ["in0", "ones", "zeros"],
                                           {"axis": -1, "epsilon": 1e-5})],
                                    consts={"ones": np.ones(c, np.float32),
                                            "zeros": np.zeros(c, np.float32)}),
    "conv2d {}, {}×{}×3×3, pad 1".format("×".join(map(str, s["conv"])), *cw.shape[:2]):
      dict(inputs=[cx, cw], ref=conv(cx.astype(np.float64), cw, 1),
           flops=2 * math.prod(s["conv"]) * cw.shape[0] * 9,
           lib=lambda T, x, w: x.conv2d(w, padding=1),
           tf=("conv2d", [nhwc(cx), cw.transpose(2, 3, 1, 0)], nhwc),
           onnx=[("Conv", ["in0", "in1"], {"pads": [1, 1, 1, 1]})]),
    f"sum {s['sum'] >> 20}M" if not tiny else f"sum {s['sum']}":
      dict(inputs=[v], ref=np.array(v.sum(dtype=np.float64)), lib=lambda T, x: x.sum(),
           tf=("sum", [v], None), onnx=[("ReduceSum", ["in0"], {"keepdims": 0})], rtol=1e-4),
    "blur 5×5 on {} zero pad 2".format("×".join(map(str, s["img"]))):
      dict(inputs=[img[None], bw], ref=conv(img[None].astype(np.float64), bw, 2, 3),
           lib=lambda T, x, w: x.conv2d(w, padding=2, groups=3),
           tf=("blur", [nhwc(img[None]), bw.transpose(2, 3, 0, 1)], nhwc),
           onnx=[("Conv", ["in0", "in1"], {"pads": [2, 2, 2, 2], "group": 3})]),
    "attention B={} H={} L={} d={} causal".format(*att):
      dict(inputs=[q, k, vv], ref=softmax(scores) @ vv,
           lib=lambda T, q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
           tf=("attention", [q, k, vv, causal], None), scale=scale, mask=causal,
           onnx=[("Transpose", ["in1"], {"perm": [0, 1, 3, 2]}, "kt"),
                 ("MatMul", ["in0", "kt"], {}, "qk"), ("Mul", ["qk", "scale"], {}, "qs"),
                 ("Add", ["qs", "mask"], {}, "qm"), ("Softmax", ["qm"], {"axis": -1}, "p"),
                 ("MatMul", ["p", "in2"], {})],
           consts={"scale": np.array(scale, np.float32), "mask": causal}),
    f"filter chain {w}×{h} (demo)": dict(
      inputs=[photo], ref=chain_ref(np, photo),
      lib=lambda T, img: chain(T, img, edge_padder(T)), tf=("filters", [photo], None),
      onnx=filter_chain_onnx(), consts=filter_consts(np)),
    "digits classification (demo)": digits_row(np, rng),
  }
  return out


def digits_weights(np) -> list:
  """w1, b1, w2, b2 of the digits demo (web/demos/digits_weights.json: little-endian base64)."""
  import base64
  weights = json.loads((ROOT / "web" / "demos" / "digits_weights.json").read_text())
  return [np.frombuffer(base64.b64decode(weights[k]["data"]), np.float32)
          .reshape(weights[k]["shape"]).copy() for k in ("w1", "b1", "w2", "b2")]


def digits_row(np, rng) -> dict:
  """The digits demo's forward pass (web/demos/digits_model.py): one 8x8 image (0..16) to class
  probabilities, softmax(relu(pixels/16 @ w1 + b1) @ w2 + b2); the weights are inputs."""
  pixels = np.floor(rng.random((1, 64)) * 17).astype(np.float32)
  w1, b1, w2, b2 = digits_weights(np)
  hidden = np.maximum((pixels.astype(np.float64) / 16) @ w1 + b1, 0)
  logits = hidden @ w2 + b2
  e = np.exp(logits - logits.max(-1, keepdims=True))
  return dict(inputs=[pixels, w1, b1, w2, b2], ref=e / e.sum(-1, keepdims=True),
              lib=lambda T, p, w1, b1, w2, b2: ((((p / 16) @ w1 + b1).relu() @ w2) + b2)
              .softmax(-1),
              tf=("digits", [pixels, w1, b1, w2, b2], None),
              onnx=[("Div", ["in0", "sixteen"], {}, "t0"), ("MatMul", ["t0", "in1"], {}, "t1"),
                    ("Add", ["t1", "in2"], {}, "t2"), ("Relu", ["t2"], {}, "t3"),
                    ("MatMul", ["t3", "in3"], {}, "t4"), ("Add", ["t4", "in4"], {}, "t5"),
                    ("Softmax", ["t5"], {"axis": -1})],
              consts={"sixteen": np.array(16, np.float32)})


def filter_consts(np) -> dict:
  b, c, _ = COLOUR
  return {"half": np.array(0.5, np.float32), "contrast": np.array(c, np.float32),
          "shift": np.array(0.5 + b, np.float32), "sat": np.array(COLOUR[2], np.float32),
          "luma": np.array(LUMA, np.float32).reshape(3, 1),
          "sepia_t": np.array(SEPIA, np.float32).T.copy(), "one": np.array(1, np.float32),
          "kernel": gauss(np).reshape(1, 1, 5, 5), "pads": np.array([0, 0, 2, 2, 0, 0, 2, 2])}


def filter_chain_onnx() -> list:
  """The filter chain as ONNX nodes (edge padding: Pad mode=edge)."""
  return [("Sub", ["in0", "half"], {}, "t0"), ("Mul", ["t0", "contrast"], {}, "t1"),
          ("Add", ["t1", "shift"], {}, "t2"), ("MatMul", ["t2", "luma"], {}, "gray"),
          ("Sub", ["t2", "gray"], {}, "t3"), ("Mul", ["t3", "sat"], {}, "t4"),
          ("Add", ["gray", "t4"], {}, "t5"), ("MatMul", ["t5", "sepia_t"], {}, "t6"),
          ("Transpose", ["t6"], {"perm": [2, 0, 1]}, "t7"),
          ("Unsqueeze", ["t7", "axis1"], {}, "t8"),
          ("Pad", ["t8", "pads"], {"mode": "edge"}, "t9"), ("Conv", ["t9", "kernel"], {}, "t10"),
          ("Squeeze", ["t10", "axis1"], {}, "t11"),
          ("Transpose", ["t11"], {"perm": [1, 2, 0]}, "t12"), ("Sub", ["one", "t12"], {})]


# ---- tinygrad: its WGSL and launch sizes, from its own scheduler and renderer --------------------

class TinygradLib:
  def __init__(self, Tensor):
    self.Tensor = Tensor

  def const(self, values):
    return self.Tensor(values, dtype="float32").realize()

  def cat(self, xs, axis):
    return xs[0].cat(*xs[1:], dim=axis)


def tinygrad_worker(folder: Path) -> None:
  """Writes folder/tinygrad-<i>.json for every row of folder/rows.json (.venv-bench's Python)."""
  import numpy as np
  from tinygrad import Device, Tensor
  from tinygrad.engine.realize import CompiledRunner, lower_schedule_item
  Device.DEFAULT = "WEBGPU"
  spec = json.loads((folder / "rows.json").read_text())
  table = rows(np, spec["tiny"])
  tinygrad_codegen_s(lambda: (Tensor.empty(33, 65) * 3 - 1).relu().max(axis=0))   # warm-up
  for index, name in enumerate(spec["rows"]):
    row = table[name]
    try:
      inputs = [Tensor(a).realize() for a in row["inputs"]]
      out, schedule, python_s = tinygrad_codegen_s(
        lambda: row["lib"](TinygradLib(Tensor), *inputs).contiguous())
      ids = {id(t.lazydata.buffer): i for i, t in enumerate(inputs)}
      buffers, kernels = {}, []
      for si in schedule:
        ei = lower_schedule_item(si)
        if not isinstance(ei.prg, CompiledRunner):
          raise RuntimeError(f"a {type(ei.prg).__name__} step, not a kernel")
        p = ei.prg.p
        if p.vars:
          raise RuntimeError("a kernel with symbolic arguments")
        slots = []
        for position, buf in enumerate(si.bufs):
          if id(buf) not in buffers:
            entry = buffers[id(buf)] = {"bytes": buf.nbytes, "input": ids.get(id(buf))}
            if position and entry["input"] is None:    # read before written: a constant
              entry["const"] = f"tg{index}-const{len(buffers)}.bin"
              (folder / entry["const"]).write_bytes(bytes(buf.as_buffer()))
          slots.append(list(buffers).index(id(buf)))
        kernels.append({"source": p.src, "entry": p.function_name,
                        "bindings": [[i + 1, b, False] for i, b in enumerate(slots)],
                        "uniform": {"binding": 0, "f32": ["Infinity"]},
                        "dispatch": list(p.global_size)})
      program = {"buffers": list(buffers.values()), "kernels": kernels, "python_s": python_s,
                 "output": list(buffers).index(id(out.lazydata.buffer))}
    except Exception as error:  # a row tinygrad cannot do is reported, not fatal
      program = {"error": f"{type(error).__name__}: {error}"[:300]}
    (folder / f"tinygrad-{index}.json").write_text(json.dumps(program))


def tinygrad_codegen_s(build) -> tuple:
  """(build(), its schedule, the seconds tinygrad's Python took to build that graph, schedule it
  and generate each kernel's WGSL: get_kernel(...).to_program(), without the native pipeline a
  CompiledRunner makes): its share of a cold first result (bench/peers_cold.py)."""
  from tinygrad import Device
  from tinygrad.engine.realize import get_kernel
  began = time.perf_counter()
  out = build()
  schedule = out.schedule()
  for si in schedule:
    if si.ast.op.name == "SINK":
      get_kernel(Device[Device.DEFAULT].renderer, si.ast).to_program()
  return out, schedule, time.perf_counter() - began


# ---- kernelgen: the same program format ----------------------------------------------------------

class KernelgenLib:
  def const(self, values):
    import kernelgen as kg
    return kg.Tensor(values, dtype="float32", device="PYTHON")

  def cat(self, xs, axis):
    import kernelgen as kg
    return kg.cat(xs, axis=axis)

  def edge_pad(self, x, n):
    return x.pad(((0, 0), (0, 0), (n, n), (n, n)), mode="edge")


def kernelgen_program(row: dict, options: dict, files: list[str], folder: Path, tag: str) -> dict:
  """Our kernels for the row (compile_plan, as `kg.compile`) wired to its buffers: program
  inputs are the row's input files; other realized buffers (constants) get files of their own."""
  import kernelgen as kg
  from kernelgen.compiler import compile_plan
  from kernelgen.realize import read_bytes
  tensors = [kg.Tensor(a, device="PYTHON") for a in row["inputs"]]
  out = row["lib"](KernelgenLib(), *tensors)
  plan = compile_plan([out.node], "wgsl", options)
  by_input = {id(t.node): i for i, t in enumerate(tensors)}
  buffers, made = {}, {id(item.out): item for item, _ in plan}

  def slot(node) -> int:
    if id(node) not in buffers:
      entry = {"bytes": node.size * node.dtype.itemsize, "file": None}
      if id(node) in by_input:
        entry["file"] = files[by_input[id(node)]]
      elif id(node) not in made:
        name = f"{tag}-const{len(buffers)}.bin"
        (folder / name).write_bytes(read_bytes(node))
        entry["file"] = name
      buffers[id(node)] = entry
    return list(buffers).index(id(node))

  kernels = []
  for item, compiled in plan:
    nodes = [item.out, *item.inputs]
    launch = compiled.launch
    if launch.uniforms:
      raise RuntimeError("kernel with scalar arguments")
    kernels.append({"source": launch.source, "entry": launch.entry_point,
                    "bindings": [[b.slot, slot(nodes[b.slot]), b.access == "read"]
                                 for b in launch.bindings],
                    "uniform": None, "dispatch": list(launch.dispatch)})
  return {"buffers": list(buffers.values()), "kernels": kernels, "output": slot(plan[-1][0].out)}


# ---- ONNX graphs ---------------------------------------------------------------------------------

def onnx_model(row: dict, shapes: list, out_shape: tuple) -> bytes:
  from onnx import TensorProto, helper, numpy_helper
  import numpy as np
  consts = dict(row.get("consts", {}))
  consts.setdefault("axis1", np.array([1], np.int64))
  nodes, names = [], set()
  for i, entry in enumerate(row["onnx"]):
    op, ins, attrs = entry[:3]
    out = entry[3] if len(entry) > 3 else "out"
    nodes.append(helper.make_node(op, ins, [out], name=f"n{i}", **attrs))
    names.update(ins)
  inits = [numpy_helper.from_array(v.astype(np.int64) if k in ("pads", "axis1") else v, k)
           for k, v in consts.items() if k in names]
  graph = helper.make_graph(
    nodes, "row", [helper.make_tensor_value_info(f"in{i}", TensorProto.FLOAT, list(s))
                   for i, s in enumerate(shapes)],
    [helper.make_tensor_value_info("out", TensorProto.FLOAT, list(out_shape))], inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
  model.ir_version = 8
  return model.SerializeToString()


# ---- writing every system's inputs, programs and references -------------------------------------

def prepare(folder: Path, names: list[str], tiny: bool, adapters) -> dict:
  """Files for the page under folder; returns {row: {system or system@adapter: spec}}."""
  import numpy as np
  table = rows(np, tiny)
  (folder / "rows.json").write_text(json.dumps({"rows": names, "tiny": tiny}))
  proc = subprocess.run([str(BENCH_PYTHON), __file__, "--tinygrad", str(folder)],
                        capture_output=True, text=True, timeout=1800,
                        env={**os.environ, "XDG_RUNTIME_DIR": tempfile.gettempdir()})
  specs = {}
  for index, name in enumerate(names):
    row, tag = table[name], f"r{index}"
    files = []
    for i, a in enumerate(row["inputs"]):
      files.append(f"{tag}-in{i}.bin")
      (folder / files[-1]).write_bytes(np.ascontiguousarray(a, np.float32).tobytes())
    ref = np.asarray(row["ref"], np.float32)
    (folder / f"{tag}-ref.bin").write_bytes(ref.tobytes())
    tol = {"rtol": row.get("rtol", 1e-3), "atol": 1e-3}
    spec = {}
    for adapter in adapters:
      try:
        program = kernelgen_program(row, {"adapter": adapter, "runs": PLAN_RUNS}, files, folder,
                                    f"{tag}-{adapter}")
        (folder / f"{tag}-kg-{adapter}.json").write_text(json.dumps(program))
        spec[f"kernelgen@{adapter}"] = {"kind": "program", "program": f"{tag}-kg-{adapter}.json",
                                        "ref": f"{tag}-ref.bin", **tol}
      except Exception as error:
        spec[f"kernelgen@{adapter}"] = {"error": f"{type(error).__name__}: {error}"[:300]}
    tg = folder / f"tinygrad-{index}.json"
    tg_program = json.loads(tg.read_text()) if tg.exists() else \
      {"error": f"tinygrad worker failed: {proc.stderr[-300:]}"}
    if "error" in tg_program:
      spec["tinygrad"] = tg_program
    else:
      for b in tg_program["buffers"]:
        i = b.pop("input")
        b["file"] = b.pop("const", None) if i is None else files[i]
      tg.write_text(json.dumps(tg_program))
      spec["tinygrad"] = {"kind": "program", "program": tg.name, "ref": f"{tag}-ref.bin", **tol}
    spec["tfjs"] = tf_spec(np, row, folder, tag, tol)
    try:
      (folder / f"{tag}.onnx").write_bytes(onnx_model(row, [a.shape for a in row["inputs"]],
                                                      ref.shape))
      spec["ort"] = {"kind": "ort", "model": f"{tag}.onnx", "ref": f"{tag}-ref.bin",
                     "inputs": [{"name": f"in{i}", "file": f, "shape": list(a.shape)}
                                for i, (f, a) in enumerate(zip(files, row["inputs"]))],
                     "nodes": len(row["onnx"]), **tol}
    except Exception as error:
      spec["ort"] = {"error": f"{type(error).__name__}: {error}"[:300]}
    specs[name] = spec
  return specs


def tf_spec(np, row: dict, folder: Path, tag: str, tol: dict) -> dict:
  op, inputs, layout = row["tf"]
  files = []
  for i, a in enumerate(inputs):
    files.append({"file": f"{tag}-tf{i}.bin", "shape": list(a.shape)})
    (folder / files[-1]["file"]).write_bytes(np.ascontiguousarray(a, np.float32).tobytes())
  ref = np.asarray(row["ref"], np.float32)
  if layout is not None:
    ref = layout(ref)
  (folder / f"{tag}-tfref.bin").write_bytes(np.ascontiguousarray(ref).tobytes())
  return {"kind": "tfjs", "op": op, "inputs": files, "ref": f"{tag}-tfref.bin",
          "scale": row.get("scale"), **tol}


# ---- the page ------------------------------------------------------------------------------------

def launch(playwright, adapter: str, env: dict | None = None):
  """Headless Chromium for `adapter` (a fresh temporary profile, as every Playwright launch),
  with WebGPU's developer features on: its timestamp queries are otherwise rounded to 100 us
  (SwiftShader has 'timestamp-query' either way; lavapipe through ANGLE, compatibility mode, has
  none). `env`: more environment variables for it."""
  sys.path.insert(0, str(ROOT / "tests" / "helpers"))
  from browser_util import chromium_args, chromium_env, chromium_path
  lavapipe = adapter == "lavapipe"
  return playwright.chromium.launch(
    executable_path=chromium_path(), headless=True,
    env={**chromium_env(lavapipe=lavapipe), **(env or {})},
    args=chromium_args(webgpu=True, lavapipe=lavapipe) + ["--enable-webgpu-developer-features"])


def run_adapter(playwright, server, adapter: str, specs: dict, reps: int, copy: bool,
                loads: list | None = None) -> dict:
  """Every row's systems on one adapter in a fresh browser: prepared (checked) once, then `reps`
  interleaved rounds, each system once by wall time and once by GPU timestamps per round (each
  round starting one system later); best time per system, both ways. `loads` gets the load
  average after every row."""
  browser = launch(playwright, adapter)
  page = browser.new_context().new_page()
  page.set_default_timeout(600_000)
  page.goto(server.url("bench/web/peers.html" + ("?compat" if adapter == "lavapipe" else "")))
  page.wait_for_selector("body[data-ready]", state="attached", timeout=120_000)
  result = {"adapter_info": page.evaluate("window.peers.info()"), "rows": {}}
  if copy:
    result["peak"] = page.evaluate("([g, s, r]) => window.peers.flopsPeak(g, s, r)",
                                   [PEAK_GROUPS, PEAK_STEPS, reps])
  for name, spec in specs.items():
    row = {}
    for system in SYSTEMS:
      row[system] = prepare_system(page, server, adapter, system, spec)
      print(f"  {adapter} {name} {system}: {row[system]}", file=sys.stderr, flush=True)
    ready = [sy for sy in SYSTEMS if "error" not in row[sy]]
    for r in range(reps):
      for system in round_order(ready, r):
        for gpu in (False, True):
          page.wait_for_timeout(SETTLE_MS)     # the previous system's leftover work settles first
          got = page.evaluate("([k, g]) => window.peers.time(k, 1, g)", [system, gpu])[0]
          if gpu and got is not None:
            row[system]["gpu_samples_ms"].append(got["ms"])
            row[system]["gpu_kernels_ms"] = got["kernels_ms"]
          elif not gpu:
            row[system]["samples_ms"].append(got)
    for system in ready:
      row[system]["ms"] = min(row[system]["samples_ms"])
      if row[system]["gpu_samples_ms"]:
        row[system]["gpu_ms"] = min(row[system]["gpu_samples_ms"])
      page.evaluate("(k) => window.peers.release(k)", system)
    if copy:
      row["copy"] = copy_bound(page, name, specs, reps)
    if "kernelgen" in ready:
      row["floor"] = submit_floor(page, row["kernelgen"]["kernels"], reps)
    result["rows"][name] = row
    if loads is not None:
      loads.append(os.getloadavg()[0])
    print(f"  {adapter} {name}: best ms " + ", ".join(
      f"{sy} {row[sy]['ms']:.3g}{'' if row[sy].get('ok') else ' (WRONG)'}"
      f"{' gpu %.3g' % row[sy]['gpu_ms'] if 'gpu_ms' in row[sy] else ''}" for sy in ready) +
      (f"; copy {row['copy']['ms']:.3g}" if copy else "") + "; samples in round order: " +
      ", ".join(f"{sy} {'/'.join(f'{t:.3g}' for t in row[sy]['samples_ms'])}" for sy in ready),
      file=sys.stderr, flush=True)
  result["adapter_info"] = page.evaluate("window.peers.info()")   # with the peers' adapters
  # the CPU accounting ends before the browser closes: its GPU process (SwiftShader's and
  # lavapipe's threads) can outlive it, orphaned, and take its CPU time out of our tree
  result["cpu_end"] = foreign_cpu.snapshot()
  browser.close()
  return result


def prepare_system(page, server, adapter: str, system: str, spec: dict) -> dict:
  """One system's run of a row, built and checked in the page: its check, kernels, samples."""
  key = f"kernelgen@{adapter}" if system == "kernelgen" else system
  s = {**spec.get(key, {"error": "no spec"})}
  if "error" in s:
    return {"error": s["error"]}
  for field in ("program", "model", "ref"):
    if field in s:
      s[field] = server.url(f"data/{s[field]}")
  if "inputs" in s:       # copies: the spec's own entries serve the next adapter too
    s["inputs"] = [{**entry, "file": server.url(f"data/{entry['file']}")}
                   for entry in s["inputs"]]
  checked = page.evaluate("([k, s]) => window.peers.prepare(k, s)", [system, s])
  if system == "ort" and checked.get("kernels") is None:
    checked["kernels"] = spec[key]["nodes"]
  return {**checked, "samples_ms": [], "gpu_samples_ms": []}


def round_order(systems: list, r: int) -> list:
  """Round r's order: every other round the previous one reversed, then turned by one, so that
  no system always runs right after the same one (a plain rotation keeps each system's
  predecessor: kernelgen always ran right after ORT-web, whose runs take seconds here). What is
  prepared does not slow a system (bench/peers_probe.py, lavapipe's blur, interleaved, load 7-10:
  kernelgen best 74 / 59 / 69 ms with kernelgen and tinygrad / + TF.js / + ORT-web prepared,
  tinygrad 191 / 128 / 128); one ORT-web blur run (45-58 s of lavapipe work) slows the next
  rounds of both (kernelgen 122, tinygrad 226), and kernelgen follows ORT-web directly in
  rounds 2 and 4 of this order, tinygrad in none: best of several rounds absorbs it."""
  k = (r // 2) % len(systems)
  turned = systems[k:] + systems[:k]
  return turned[::-1] if r % 2 else turned


def copy_bound(page, name: str, specs: dict, reps: int) -> dict:
  """A copy kernel of the bytes our kernels read and write at least once (inputs + output)."""
  nbytes = specs[name].get("_bytes", 0)
  ms = page.evaluate("([b, r]) => window.peers.copyMs(b, r)", [nbytes, reps])
  return {"bytes": nbytes, "ms": ms}


FLOOR_REPS = 3     # times the rounds' samples for the submit floor (its median is what counts)


def submit_floor(page, dispatches: int, reps: int) -> dict:
  """The submit floor (bench/submit_floor.py): a program of as many trivial dispatches as our
  kernels, timed as the systems are; best and median of FLOOR_REPS * reps samples."""
  samples = page.evaluate("([d, r, s]) => window.peers.floorMs(d, r, s)",
                          [dispatches, FLOOR_REPS * reps, SETTLE_MS])
  return {"dispatches": dispatches, "best_ms": min(samples),
          "median_ms": statistics.median(samples), "samples_ms": samples}


def measure(names=None, adapters=ADAPTERS, reps: int = 5, tiny: bool = False,
            copy: bool = True, playwright=None, runs: int = 1, allow_load: bool = False,
            settle_s: float = SETTLE_MAX_S) -> dict:
  """The rows whose names contain a word of `names` on each adapter, `runs` times (a fresh
  browser each time, its load recorded; peers_report.aggregate). `playwright`: a started sync
  Playwright to use (the tests' session one: a second sync_playwright cannot start while one
  runs); by default one of its own. `settle_s`: the longest wait for the load to fall before a
  run (settle; 0 where nothing is timed for a report, as in the tests)."""
  import contextlib

  import numpy as np
  from playwright.sync_api import sync_playwright
  sys.path.insert(0, str(ROOT / "tests" / "helpers"))
  from browser_util import StaticServer
  table = rows(np, tiny)
  names = [n for n in table if not names or any(w in n for w in names)]
  started = time.time()
  out = {"runs": [], "load_at_start": os.getloadavg(), "max_load": MAX_LOAD,
         "max_foreign": MAX_FOREIGN, "plan_runs": PLAN_RUNS, "allow_load": allow_load}
  with tempfile.TemporaryDirectory(prefix="kg-peers-") as tmp:
    folder = Path(tmp)
    specs = prepare(folder, names, tiny, adapters)
    for name in names:
      row = table[name]
      specs[name]["_bytes"] = sum(a.nbytes for a in row["inputs"]) + \
        np.asarray(row["ref"], np.float32).nbytes
    mounts = {"/bench/": ROOT / "bench", "/data/": folder,
              "/tfjs/": ROOT / ".venv-bench" / "npm" / "node_modules"}
    own = sync_playwright() if playwright is None else contextlib.nullcontext(playwright)
    with StaticServer(ROOT / "bench", mounts=mounts) as server, own as pw:
      for i in range(runs):
        out["runs"].append({a: timed_run(pw, server, a, specs, reps, copy, settle_s)
                           for a in adapters})
        foreign = ", ".join(f"{a} {r['foreign']:.2f}" for a, r in out["runs"][-1].items()
                            if r["foreign"] is not None)
        print(f"run {i + 1} of {runs} done (load {os.getloadavg()[0]:.1f}; other processes' "
              f"cores: {foreign or 'unknown'})", file=sys.stderr, flush=True)
  out["adapters"] = out["runs"][0]
  out["summary"] = []
  for a in adapters:
    entries = peers_report.aggregate(a, [r[a] for r in out["runs"]], allow_load, MAX_LOAD,
                                     MAX_FOREIGN)
    for e in entries:
      e["flops"], e["peak"] = table[e["row"]].get("flops"), out["runs"][0][a]["result"].get("peak")
    out["summary"] += entries
  out["seconds"] = round(time.time() - started)
  return out


def settle(limit: float = SETTLE_LOAD, longest: float = SETTLE_MAX_S, loadavg=os.getloadavg,
           sleep=time.sleep) -> float:
  """Wait until the 1-minute load average is at most `limit`, or `longest` seconds have passed;
  the seconds waited. (The load of other work does not fall by waiting: a busy machine waits the
  whole `longest` and its run is then judged by MAX_LOAD and MAX_FOREIGN as before.)"""
  waited = 0.0
  while loadavg()[0] > limit and waited < longest:
    sleep(5.0)
    waited += 5.0
  return waited


def timed_run(pw, server, adapter: str, specs: dict, reps: int, copy: bool,
              settle_s: float = SETTLE_MAX_S) -> dict:
  """One run on one adapter (run_adapter), after the load settles (settle), the load average
  before, at most during (sampled after every row) and after it, and the cores other processes
  used during it (foreign_cpu)."""
  waited = settle(longest=settle_s)
  before, start = os.getloadavg()[0], foreign_cpu.snapshot()
  loads = [before]
  result = run_adapter(pw, server, adapter, specs, reps, copy, loads)
  return {"result": result, "load": [before, max(loads), os.getloadavg()[0]], "waited_s": waited,
          "foreign": foreign_cpu.foreign_cores(start, result.pop("cpu_end"))}


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if "--cold" in argv:      # issue 37's cold first results, the same rows: bench/peers_cold.py
    import peers_cold
    return peers_cold.main([a for a in argv if a != "--cold"])
  parser = argparse.ArgumentParser(description="kernelgen vs every peer, per adapter")
  parser.add_argument("--tinygrad", help=argparse.SUPPRESS)
  parser.add_argument("--reps", type=int, default=5, help="interleaved rounds per run")
  parser.add_argument("--runs", type=int, default=3, help="runs, a fresh browser each")
  parser.add_argument("--allow-load", action="store_true",
                      help=f"count runs whose load average went above {MAX_LOAD}")
  parser.add_argument("--adapters", default=",".join(ADAPTERS))
  parser.add_argument("--rows", default="", help="comma-separated words of row names")
  parser.add_argument("--tiny", action="store_true", help="tiny sizes (a check, not a bench)")
  args = parser.parse_args(argv)
  if args.tinygrad:
    tinygrad_worker(Path(args.tinygrad))
    return 0
  result = measure([w for w in args.rows.split(",") if w], args.adapters.split(","), args.reps,
                   args.tiny, runs=args.runs, allow_load=args.allow_load)
  peers_report.print_table(result["summary"])
  for adapter, run in result["adapters"].items():
    info = run["result"]["adapter_info"]
    print(f"  {adapter}: ours on {info.get('description')}; peers on " + ", ".join(
      f"{k} {v}" for k, v in info.get("peers", {}).items()))
  print(f"\n{result['seconds']} s; {args.runs} runs of best of {args.reps} interleaved rounds; "
        f"ratios median / worst over the runs counted (load <= {MAX_LOAD} before the run and "
        f"other processes' cores <= {MAX_FOREIGN} during it"
        f"{', or any load: --allow-load' if args.allow_load else ''}); "
        f"load {result['load_at_start'][0]:.1f} at start, {os.cpu_count()} CPUs")
  return 0


if __name__ == "__main__":
  sys.exit(main())
