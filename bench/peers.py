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
GPU time of one run: submit -> onSubmittedWorkDone, inputs on the GPU, outputs left there; the
systems run interleaved, round after round (every other round the previous one reversed, then
turned by one; a short pause before each run), and each keeps its best (the machine is shared).
Ratio: best correct peer's time / ours (> 1: we are faster; target >= 1.5). For a row below it,
`bound` gives our bytes moved per ms against a copy kernel of the same bytes on the adapter,
and `floor` the submit floor: a program of as many trivial dispatches as our kernels, timed the
same way (best and median; bench/submit_floor.py explores it).

    python bench/peers.py [--reps N] [--adapters swiftshader,lavapipe] [--rows matmul,...] [--tiny]
    python bench/peers.py --tinygrad DIR     (worker, run with .venv-bench's Python)
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
BENCH_PYTHON = ROOT / ".venv-bench" / "bin" / "python"
SYSTEMS = ("kernelgen", "tinygrad", "tfjs", "ort")
PEERS = SYSTEMS[1:]
ADAPTERS = ("swiftshader", "lavapipe")
GAUSS = [1, 4, 6, 4, 1]
SEPIA = [[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]]
LUMA = [0.299, 0.587, 0.114]
COLOUR = (0.05, 1.1, 1.2)   # the filter chain's brightness, contrast, saturation
SETTLE_MS = 300             # a pause before each timed run (see round_order)


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
    f"matmul {n}³": dict(inputs=[a, b], ref=a.astype(np.float64) @ b,
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
  for index, name in enumerate(spec["rows"]):
    row = table[name]
    try:
      inputs = [Tensor(a).realize() for a in row["inputs"]]
      out = row["lib"](TinygradLib(Tensor), *inputs).contiguous()
      ids = {id(t.lazydata.buffer): i for i, t in enumerate(inputs)}
      buffers, kernels = {}, []
      for si in out.schedule():
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
      program = {"buffers": list(buffers.values()), "kernels": kernels,
                 "output": list(buffers).index(id(out.lazydata.buffer))}
    except Exception as error:  # a row tinygrad cannot do is reported, not fatal
      program = {"error": f"{type(error).__name__}: {error}"[:300]}
    (folder / f"tinygrad-{index}.json").write_text(json.dumps(program))


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
        program = kernelgen_program(row, {"adapter": adapter}, files, folder, f"{tag}-{adapter}")
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

def run_adapter(playwright, server, adapter: str, specs: dict, reps: int, copy: bool) -> dict:
  """Every row's systems on one adapter: prepared (checked) once, then `reps` interleaved
  rounds of one run each, each round starting one system later; best time per system."""
  sys.path.insert(0, str(ROOT / "tests" / "helpers"))
  from browser_util import launch_chromium
  lavapipe = adapter == "lavapipe"
  browser = launch_chromium(playwright, webgpu=True, lavapipe=lavapipe)
  page = browser.new_context().new_page()
  page.set_default_timeout(600_000)
  page.goto(server.url("bench/web/peers.html" + ("?compat" if lavapipe else "")))
  page.wait_for_selector("body[data-ready]", state="attached", timeout=120_000)
  result = {"adapter_info": page.evaluate("window.peers.info()"), "rows": {}}
  for name, spec in specs.items():
    row = {}
    for system in SYSTEMS:
      key = f"kernelgen@{adapter}" if system == "kernelgen" else system
      s = {**spec.get(key, {"error": "no spec"})}
      if "error" in s:
        row[system] = {"error": s["error"]}
        continue
      for field in ("program", "model", "ref"):
        if field in s:
          s[field] = server.url(f"data/{s[field]}")
      if "inputs" in s:       # copies: the spec's own entries serve the next adapter too
        s["inputs"] = [{**entry, "file": server.url(f"data/{entry['file']}")}
                       for entry in s["inputs"]]
      checked = page.evaluate("([k, s]) => window.peers.prepare(k, s)", [system, s])
      if system == "ort":
        checked["kernels"] = spec[key]["nodes"]
      row[system] = {**checked, "samples_ms": []}
      print(f"  {adapter} {name} {system}: {checked}", file=sys.stderr, flush=True)
    ready = [sy for sy in SYSTEMS if "error" not in row[sy]]
    for r in range(reps):
      for system in round_order(ready, r):
        page.wait_for_timeout(SETTLE_MS)     # the previous system's leftover work settles first
        row[system]["samples_ms"] += page.evaluate("(k) => window.peers.time(k, 1)", system)
    for system in ready:
      row[system]["ms"] = min(row[system]["samples_ms"])
      page.evaluate("(k) => window.peers.release(k)", system)
    if copy:
      row["copy"] = copy_bound(page, name, specs, reps)
    if "kernelgen" in ready:
      row["floor"] = submit_floor(page, row["kernelgen"]["kernels"], reps)
    result["rows"][name] = row
    print(f"  {adapter} {name}: best ms " + ", ".join(
      f"{sy} {row[sy]['ms']:.3g}{'' if row[sy].get('ok') else ' (WRONG)'}" for sy in ready) +
      (f"; copy {row['copy']['ms']:.3g}" if copy else "") + "; samples in round order: " +
      ", ".join(f"{sy} {'/'.join(f'{t:.3g}' for t in row[sy]['samples_ms'])}" for sy in ready),
      file=sys.stderr, flush=True)
  browser.close()
  return result


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


def summarize(adapter: str, result: dict) -> list[dict]:
  out = []
  for name, row in result["rows"].items():
    ours = row.get("kernelgen", {})
    good = {s: row[s]["ms"] for s in PEERS if row.get(s, {}).get("ok") and "ms" in row[s]}
    best = min(good, key=good.get) if good else None
    entry = {"adapter": adapter, "row": name, "ours_ms": ours.get("ms") if ours.get("ok") else None,
             "best_peer": best, "peer_ms": good.get(best),
             "kernels": {s: row.get(s, {}).get("kernels") for s in SYSTEMS},
             "status": {s: status(row.get(s, {})) for s in SYSTEMS},
             "ms": {s: row.get(s, {}).get("ms") for s in SYSTEMS}}
    if entry["ours_ms"] and entry["peer_ms"]:
      entry["ratio"] = entry["peer_ms"] / entry["ours_ms"]
    if "floor" in row and entry["ours_ms"]:
      entry["floor"] = {k: row["floor"][k] for k in ("dispatches", "best_ms", "median_ms")}
      entry["ours_median_ms"] = statistics.median(ours["samples_ms"])
    if "copy" in row and entry["ours_ms"]:
      c = row["copy"]
      entry["bound"] = {"ours_bytes_per_ms": c["bytes"] / entry["ours_ms"],
                        "copy_bytes_per_ms": c["bytes"] / c["ms"], "copy_ms": c["ms"]}
    out.append(entry)
  return out


def status(r: dict) -> str:
  if "error" in r:
    return "failed: " + r["error"][:80]
  if not r.get("ok"):
    return f"WRONG (max err {r.get('max_error', float('nan')):.2g}, {r.get('bad')} bad)"
  return "ok"


def print_table(summary: list[dict]) -> None:
  head = ["adapter", "workload", "kernelgen", "tinygrad", "tfjs", "ort", "best/ours",
          "kernels kg/tg/tf/ort"]
  lines = [head]
  for e in summary:
    cells = [e["adapter"], e["row"]]
    for s in SYSTEMS:
      ms, st = e["ms"].get(s), e["status"][s]
      cells.append(f"{ms:.3g} ms" if st == "ok" and ms is not None else
                   ("WRONG" if st.startswith("WRONG") else "failed"))
    ratio = e.get("ratio")
    cells.append(f"{ratio:.2f} ({e['best_peer']})" if ratio else "-")
    cells.append("/".join("-" if e["kernels"][s] is None else str(e["kernels"][s])
                          for s in SYSTEMS))
    lines.append(cells)
  widths = [max(len(str(c[i])) for c in lines) for i in range(len(head))]
  for i, line in enumerate(lines):
    print(" | ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())
    if i == 0:
      print("-|-".join("-" * w for w in widths))
  for e in summary:
    if e.get("ratio") is not None and e["ratio"] < 1.5 and "bound" in e:
      b = e["bound"]
      print(f"  below 1.5x: {e['adapter']} {e['row']}: ours moves {b['ours_bytes_per_ms']/1e6:.3g}"
            f" GB/s (inputs + output once), a copy kernel of the same bytes "
            f"{b['copy_bytes_per_ms']/1e6:.3g} GB/s ({b['copy_ms']:.3g} ms)")
      if "floor" in e:
        f = e["floor"]
        print(f"    its submit floor: {f['dispatches']} trivial dispatches (one thread storing "
              f"one value each) best / median {f['best_ms']:.3g} / {f['median_ms']:.3g} ms; "
              f"ours {e['ours_ms']:.3g} / {e['ours_median_ms']:.3g} ms")
  for e in summary:
    if "(demo)" in e["row"] and e["ours_ms"]:
      target = " (target < 16 ms)" if e["adapter"] == "lavapipe" else ""
      print(f"  demo frame, GPU time: {e['row']} on {e['adapter']}: kernelgen "
            f"{e['ours_ms']:.3g} ms{target}")
  for e in summary:
    for s in SYSTEMS:
      if e["status"][s] != "ok":
        print(f"  {e['adapter']} {e['row']} {s}: {e['status'][s]}")


def measure(names=None, adapters=ADAPTERS, reps: int = 5, tiny: bool = False,
            copy: bool = True, playwright=None) -> dict:
  """The rows whose names contain a word of `names` on each adapter. `playwright`: a started
  sync Playwright to use (the tests' session one: a second sync_playwright cannot start while
  one runs); by default one of its own."""
  import contextlib

  import numpy as np
  from playwright.sync_api import sync_playwright
  sys.path.insert(0, str(ROOT / "tests" / "helpers"))
  from browser_util import StaticServer
  table = rows(np, tiny)
  names = [n for n in table if not names or any(w in n for w in names)]
  started = time.time()
  with tempfile.TemporaryDirectory(prefix="kg-peers-") as tmp:
    folder = Path(tmp)
    specs = prepare(folder, names, tiny, adapters)
    for name in names:
      row = table[name]
      specs[name]["_bytes"] = sum(a.nbytes for a in row["inputs"]) + \
        np.asarray(row["ref"], np.float32).nbytes
    mounts = {"/bench/": ROOT / "bench", "/data/": folder,
              "/tfjs/": ROOT / ".venv-bench" / "npm" / "node_modules"}
    out = {"adapters": {}, "load_at_start": os.getloadavg()}
    own = sync_playwright() if playwright is None else contextlib.nullcontext(playwright)
    with StaticServer(ROOT / "bench", mounts=mounts) as server, own as pw:
      for adapter in adapters:
        out["adapters"][adapter] = run_adapter(pw, server, adapter, specs, reps, copy)
  out["summary"] = [e for a in adapters for e in summarize(a, out["adapters"][a])]
  out["seconds"] = round(time.time() - started)
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description="kernelgen vs every peer, per adapter")
  parser.add_argument("--tinygrad", help=argparse.SUPPRESS)
  parser.add_argument("--reps", type=int, default=5)
  parser.add_argument("--adapters", default=",".join(ADAPTERS))
  parser.add_argument("--rows", default="", help="comma-separated words of row names")
  parser.add_argument("--tiny", action="store_true", help="tiny sizes (a check, not a bench)")
  args = parser.parse_args(argv)
  if args.tinygrad:
    tinygrad_worker(Path(args.tinygrad))
    return 0
  result = measure([w for w in args.rows.split(",") if w], args.adapters.split(","), args.reps,
                   args.tiny)
  print_table(result["summary"])
  print(f"\n{result['seconds']} s; best of {args.reps} interleaved rounds; the machine is shared "
        f"(load {result['load_at_start'][0]:.1f} at start, {os.cpu_count()} CPUs)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
