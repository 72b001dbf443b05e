"""The page's Models view: load an ONNX model the user drops on the page, run it on random or given
inputs (an image, labels), compare it with the PYTHON interpreter, and generate from a causal LM.
Every entry point returns plain data and never raises (program.guarded)."""
from __future__ import annotations

import math

from .program import (FORMATS, compare, compile_counts, compile_target, guarded, release,
                      tensor_data, values)


# ---- ONNX models (the page's Models view) ----

# the model the page loaded last: {"model": kg.onnx Model, "run": the last run's outputs}
_MODEL: dict = {}


def _model_bytes(data) -> bytes:
  return data.to_bytes() if hasattr(data, "to_bytes") else bytes(data)  # a JS Uint8Array too


def _value_info(name: str, shape, dtype) -> dict:
  dims = [d if isinstance(d, int) else (d or "?") for d in (shape or ())]
  return {"name": name, "shape": dims, "dtype": dtype.name if dtype is not None else None}


def _declared(model) -> dict:
  """{input name: (shape (a symbolic dimension is 1), dtype name (float32 when not declared))}."""
  out = {}
  for name in model.input_names:
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in (model.input_shapes[name] or ())]
    dtype = model.input_dtypes[name]
    out[name] = (shape, dtype.name if dtype is not None else "float32")
  return out


def random_inputs(model, seed: int = 0) -> dict:
  """Reproducible random inputs of the model's declared shapes (a symbolic dimension is 1):
  {name: {"shape", "dtype", "values"}}; floats uniform in [-1, 1) rounded to float32, integers
  in [0, 10), bools half true. The same `seed` gives the same values everywhere (random.Random)."""
  import random
  import struct
  rng = random.Random(seed)
  feeds = {}
  for name, (shape, kind) in _declared(model).items():
    count = math.prod(shape)
    if kind.startswith("float") or kind == "bfloat16":
      raw = [rng.uniform(-1.0, 1.0) for _ in range(count)]
      values = list(struct.unpack(f"<{count}f", struct.pack(f"<{count}f", *raw)))
    elif kind == "bool":
      values = [rng.random() < 0.5 for _ in range(count)]
    else:
      values = [rng.randrange(10) for _ in range(count)]
    feeds[name] = {"shape": shape, "dtype": kind, "values": values}
  return feeds


def _feed_tensors(feeds: dict, device: str) -> dict:
  import kernelgen
  from ..device import Device
  from ..dtype import dtypes
  from ..graph import lazy
  tensors = {}
  for name, feed in feeds.items():
    dtype = getattr(dtypes, feed["dtype"])
    if "raw" in feed:     # the given bytes as the buffer (no Python list; the same 1-D buffer)
      count = len(feed["values"])
      buffer = lazy.Buffer(Device.canonical(device), dtype, count, feed["raw"])
      tensor = kernelgen.Tensor(lazy.LazyOp.from_buffer(buffer, (count,)))
    else:   # 64-bit integers (token ids, Silero's sample rate) made on PYTHON: the model's
      # run narrows them for a device without them (WebGPU), as it does a numpy feed
      wide = dtype.itemsize == 8 and not dtype.is_float()
      tensor = kernelgen.Tensor(feed["values"], dtype=dtype, device="PYTHON" if wide else device)
    tensors[name] = tensor.reshape(*feed["shape"]) if feed["shape"] else tensor.reshape()
  return tensors


def given_inputs(model, inputs) -> dict:
  """Feeds (as random_inputs makes them) from {name: raw little-endian bytes of the input's
  declared shape (a symbolic dimension is 1) and dtype}, a JS object of Uint8Arrays in the
  page; a missing input, a dtype without a struct format or a wrong size is a ModelError."""
  import struct
  from ..errors import ModelError
  raw = inputs.to_py() if hasattr(inputs, "to_py") else dict(inputs)
  feeds = {}
  for name, (shape, kind) in _declared(model).items():
    feed = {"shape": shape, "dtype": kind}
    if name not in raw:
      raise ModelError(f"no data for the model's input {name!r}: give every input "
                       f"({', '.join(model.input_names)})")
    data, fmt = _model_bytes(raw[name]), FORMATS.get(feed["dtype"])
    count = math.prod(feed["shape"])
    if fmt is None or len(data) != count * struct.calcsize(fmt):
      raise ModelError(f"input {name!r}: {len(data)} bytes, but {feed['dtype']} of shape "
                       f"{tuple(feed['shape'])} needs {count * struct.calcsize(fmt or 'B')}")
    feeds[name] = {**feed, "values": list(struct.unpack(f"<{count}{fmt}", data))}
    if feed["dtype"] == "float32":   # the bytes are the buffer as they are (_feed_tensors)
      feeds[name]["raw"] = data
  return feeds


def _model_outputs(model, seed: int, device: str, feeds: dict | None = None) -> list:
  """[(name, lazy Tensor)] of the model on `feeds`, or on its random inputs for `seed`."""
  feeds = feeds if feeds is not None else random_inputs(model, seed)
  outs = model.run(_feed_tensors(feeds, device), device=device)
  return [(name, outs[name]) for name in model.output_names]


# metadata_props keys read for class labels, first found wins: a JSON list of labels, a JSON
# object {"0": label, ...}, or one label per line
LABEL_KEYS = ("labels", "class_labels", "classes", "synset", "imagenet_labels")
MAX_LABELS = 1 << 20     # more classes than this reads as no label set


def image_input(model) -> dict | None:
  """{"name", "layout": "NCHW" or "NHWC", "height", "width"} when the model takes one float input
  of shape [N, 3, H, W] or [N, H, W, 3] (N 1 or symbolic, H and W fixed), else None."""
  if len(model.input_names) != 1:
    return None
  name = model.input_names[0]
  shape, dtype = model.input_shapes[name], model.input_dtypes[name]
  if dtype is None or not dtype.name.startswith("float") or not shape or len(shape) != 4:
    return None
  batch, rest = shape[0], shape[1:]
  if isinstance(batch, int) and batch not in (0, 1):   # 0 marks an unknown size too
    return None
  fixed = lambda *dims: all(isinstance(d, int) and d > 0 for d in dims)  # noqa: E731
  if rest[0] == 3 and fixed(rest[1], rest[2]):
    return {"name": name, "layout": "NCHW", "height": rest[1], "width": rest[2]}
  if rest[2] == 3 and fixed(rest[0], rest[1]):
    return {"name": name, "layout": "NHWC", "height": rest[0], "width": rest[1]}
  return None


def _parse_labels(text: str) -> list | None:
  """A label set from metadata text, or None; an index past MAX_LABELS, a key that is not ASCII
  digits ("²".isdigit() is true) or JSON nested past the json_depth limit reads as no labels."""
  import json
  from .. import limits
  from ..errors import LimitError
  try:
    limits.json_depth(text, "the model's labels")
    value = json.loads(text)
  except LimitError:
    return None
  except ValueError:
    lines = [line.strip() for line in text.splitlines()]
    return lines if 1 < len(lines) <= MAX_LABELS else None
  if isinstance(value, list):
    return [str(v) for v in value] if len(value) <= MAX_LABELS else None
  if isinstance(value, dict) and all(k.isascii() and k.isdigit() for k in value):
    last = max((int(k) for k in value), default=-1)
    if last >= MAX_LABELS:
      return None
    labels = [""] * (last + 1)
    for k, v in value.items():
      labels[int(k)] = str(v)
    return labels
  return None


def model_labels(model) -> dict | None:
  """{"key", "labels"} from the first metadata_props key of LABEL_KEYS that holds a label set
  (see there), else None."""
  props = {p.key: p.value for p in (model.proto.metadata_props or ())}
  for key in LABEL_KEYS:
    labels = _parse_labels(props[key]) if key in props else None
    if labels:
      return {"key": key, "labels": labels}
  return None


def top_k(scores, k: int = 5) -> dict:
  """The k largest classes of a class-score vector: {"probabilities": was it one already (all in
  [0, 1], summing to 1 within 1e-3), "top": [{"index", "probability"}]}; scores that are not
  probabilities go through a softmax first. Ties keep the lower index first."""
  scores = [float(v) for v in scores]
  if not scores:
    return {"probabilities": False, "top": []}
  already = all(0.0 <= v <= 1.0 for v in scores) and abs(sum(scores) - 1.0) <= 1e-3
  if not already:
    high = max(scores)
    exps = [math.exp(v - high) for v in scores]
    total = sum(exps)
    scores = [e / total for e in exps]
  order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
  return {"probabilities": already, "top": [{"index": i, "probability": scores[i]}
                                            for i in order]}


def _class_top(outputs: list, k: int = 5) -> dict | None:
  """top_k of the first output that is one class vector ([C] or [1, C], C > 1), with its name."""
  for out in outputs:
    dims = [d for d in out["shape"] if d != 1]
    if len(dims) == 1 and dims[0] > 1 and out["dtype"].startswith("float"):
      scores = values(out)
      if scores:
        return {"output": out["name"], **top_k(scores, k)}
  return None


def load_model(data, arch: str | None = "sm_80", seed: int = 0) -> dict:
  """Load an ONNX model (its file's bytes) for the page: its inputs and outputs, operator
  histogram and the kernels it compiles to ({"wgsl": {ok, kernels | error}, "ptx": ...}, PTX
  for `arch`), with the inputs a run with `seed` uses as the compiled buffers. What a load of
  the same bytes, arch and seed gave on an earlier page load (kept in the browser's store,
  stored.py) comes back without compiling, with "stored": True."""
  def work():
    import hashlib

    import kernelgen
    from .. import stored
    _MODEL.clear()
    raw = _model_bytes(data)
    model = kernelgen.onnx.load(raw)
    _MODEL["model"] = model
    key = ("load_model", hashlib.sha256(raw).hexdigest(), arch, seed)
    kept = stored.find_data(key)
    if kept is not None:
      return {**kept, "stored": True}
    outs = [t for _, t in _model_outputs(model, seed, "PYTHON")]
    compiled = {target: compile_target(outs, target, arch) for target in ("wgsl", "ptx")}
    result = {"inputs": [_value_info(n, model.input_shapes[n], model.input_dtypes[n])
                         for n in model.input_names],
              "outputs": [_value_info(n, model.output_shapes[n], model.output_dtypes[n])
                          for n in model.output_names],
              "histogram": model.op_histogram(), "nodes": len(model.nodes),
              "opset": model.opset, "arch": arch, "image": image_input(model),
              "labels": model_labels(model), **compiled}
    if all(part["ok"] for part in compiled.values()):
      stored.keep_data(key, result)
    return result
  return guarded(work)


def unload_model() -> dict:
  """Forget the loaded model and its last run, and free the page GPU's buffers nothing refers to
  any more: {"ok", "freed", "buffers"} (the device's buffers left). The worker's unloadModel
  drops the GPU's pipelines after this."""
  def work():
    _MODEL.clear()
    freed = release()["freed"]
    from ..device import Device
    runtime = getattr(Device, "_open", {}).get("WEBGPU")
    if hasattr(runtime, "launches"):
      runtime.launches.clear()     # the launches (sources) converted for its kernels
    for kept in ("asked", "queued"):   # its kernels' variants asked for, not built yet
      getattr(runtime, kept, {}).clear()
    return {"freed": freed, "buffers": len(getattr(runtime, "handles", ()))}
  return guarded(work)


def _loaded_model():
  from ..errors import ModelError
  if "model" not in _MODEL:
    raise ModelError("no model is loaded: open an .onnx file first")
  return _MODEL["model"]


def _feed_data(feeds: dict) -> list:
  import struct
  def packed(feed):   # no struct format (bfloat16): the page gets no bytes for it
    fmt = FORMATS.get(feed["dtype"])
    if "raw" in feed:
      return feed["raw"]
    return struct.pack(f"<{len(feed['values'])}{fmt}", *feed["values"]) if fmt else b""
  return [{"name": name, "shape": f["shape"], "dtype": f["dtype"], "data": packed(f)}
          for name, f in feeds.items()]


def run_model(seed: int = 0, device: str = "WEBGPU", inputs=None) -> dict:
  """Run the loaded model on `device` with random_inputs(model, seed), or with `inputs` (see
  given_inputs) when given: {"outputs": [{name, shape, dtype, data}], "inputs": [the same for
  the inputs used], "seconds", "device", "compiled", "compile_s", "stored" (compile_counts)};
  the outputs are kept for compare_model."""
  def work():
    import time
    model = _loaded_model()
    start = time.perf_counter()
    before = compile_counts()
    given = inputs is not None and type(inputs).__name__ != "JsNull"   # a JS null: none given
    feeds = given_inputs(model, inputs) if given else random_inputs(model, seed)
    outputs = []
    for name, tensor in _model_outputs(model, seed, device, feeds):
      outputs.append({"name": name, **tensor_data(tensor.realize())})
    _MODEL["run"] = {"seed": seed, "outputs": outputs, "feeds": feeds}
    return {"outputs": outputs, "inputs": _feed_data(feeds), "top": _class_top(outputs),
            "seconds": time.perf_counter() - start, "device": device,
            **compile_counts(before)}
  return guarded(work)


def generate_model(data, options: str, on_token=None) -> dict:
  """kg.generate for the page: the causal LM in `data` (an ONNX file's bytes; None: the one
  given last) from the prompt in `options` (JSON: {prompt, max_new_tokens, temperature, top_k,
  top_p, seed, stop, device}); `on_token(token)` (a JS function) gets each token as it comes:
  {"ok", "tokens", "seconds", "device"}."""
  def work():
    import json
    import time
    import kernelgen
    opts = json.loads(options)
    if data is not None and type(data).__name__ != "JsNull":
      _MODEL["lm"] = kernelgen.onnx.load(_model_bytes(data))
    if "lm" not in _MODEL:
      from ..errors import ModelError
      raise ModelError("no language model is loaded: give its .onnx file's bytes")
    start = time.perf_counter()
    device = opts.get("device", "WEBGPU")
    tokens = kernelgen.generate(
      _MODEL["lm"], opts["prompt"], max_new_tokens=opts.get("max_new_tokens", 32),
      temperature=opts.get("temperature", 0.0), top_k=opts.get("top_k", 0),
      top_p=opts.get("top_p", 1.0), seed=opts.get("seed", 0), stop=opts.get("stop"),
      on_token=on_token, device=device)
    return {"tokens": tokens, "seconds": time.perf_counter() - start, "device": device}
  return guarded(work, timed=False)   # (a generation streams tokens for as long as asked)


def compare_model() -> dict:
  """The last run_model compared with the PYTHON interpreter on the same inputs:
  {"comparisons": [{name, match, max_abs_error, mismatches, ...}], "seconds"}."""
  def work():
    import time
    from ..errors import ModelError
    model, last = _loaded_model(), _MODEL.get("run")
    if last is None:
      raise ModelError("the model has not run yet: run it on a device first")
    start = time.perf_counter()
    comparisons = []
    for result, (name, tensor) in zip(last["outputs"], _model_outputs(
        model, last["seed"], "PYTHON", last.get("feeds"))):
      comparisons.append({"name": name, **compare(result, tensor_data(tensor.realize()))})
    return {"comparisons": comparisons, "seconds": time.perf_counter() - start}
  return guarded(work)
