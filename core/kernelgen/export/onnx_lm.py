"""An ONNX causal LM (the transformers.js / Optimum layout: `input_ids`, `attention_mask`,
`position_ids`, `past_key_values.{i}.key|value` -> `logits`, `present.{i}.key|value`) as a causal
LM bundle (export/causal.py): one step of the model traced on symbolic inputs, its caches kept
as bundle state, the next token drawn on the device.

`causal_program(model, step, context)` gives (outputs, state) for
`kg.export(outputs, DIR, state=state)`: inputs `input_ids` and `position_ids` (1, seq) int32,
seq the new tokens of a run (a kg.Dim 1..step; the int 1 where step is 1), `attention_mask`
(1, total) int32 (total a kg.Dim 1..context), `temperature` (1,) and `seed` (1,); the state
`past_key_values.{i}.key|value` (1, kv_heads, past, head_dim), past a kg.Dim 0..context - 1;
outputs `logits` (1, vocab) of the last new token, `token` (1,) int32 (kg.nn.sample_token) and
`present.{i}.key|value`. One bundle prefills and decodes: model.js `generate` runs the prompt in
one run (in runs of up to `step` tokens when longer), then one run per token; the weights are
stored once. Symbolic kernels dispatch for the bound row count (exact tile grids, few-row
variants), so a one-token run does not pay for `step` rows.
"""
from __future__ import annotations

from ..dtype import dtypes
from ..errors import ModelError
from ..graph.dims import Dim
from ..tensor.tensor import Tensor
from ..nn.decode import sample_token
from .inputs import buffer_name
from .plan import ModelOutputs

PAST = "past_key_values."


def _empty(name: str, shape: tuple, dtype, taken: set) -> Tensor:
  """Tensor.empty input `name` (its buffer an identifier; the manifest keeps `name`)."""
  ident = buffer_name(name, taken)
  taken.add(ident)
  t = Tensor.empty(*shape, dtype=dtype, device="PYTHON", name=ident)
  _input_buffer(t).public_name = name
  return t


def _cache(name: str, shape: tuple, past: Dim, context: int, dtype, taken: set) -> Tensor:
  """The state input `name`: a buffer of `context` rows (a present's most: GroupQueryAttention's
  total length, past + 1 of a one-token step, or past + seq of a Concat: context - 1 + step),
  read as its first `past` rows; a step writes its new rows into it in place
  (operators/kv_write.py), so its present is this buffer and no kernel or copy moves the
  cache's other rows."""
  from ..tensor.symbolic import with_sym
  buf = _empty(name, (1, shape[1], context, shape[3]), dtype, taken)
  view = with_sym(buf, (1, shape[1], past, shape[3]))
  _input_buffer(buf).public_view = view.node    # the manifest's input: (1, kv, past, head_dim)
  return view


def _input_buffer(t: Tensor):
  node = t.node
  while getattr(node, "buffer", None) is None and node.src:
    node = node.src[0]
  return node.buffer


def _in_place(model, adapter: str | None = None):
  """A copy of `model` whose runs write their past caches in place (kv_write.enabled), sharing
  its weights, traced for `adapter` (row_adapter: a CPU adapter's MatMul weights held transposed
  and its normed rows realized, onnx/operators/weights.py matmul_rows, as a native run on that
  adapter holds them); the model itself stays one whose inputs are never written."""
  import copy
  out = copy.copy(model)
  out.replayer, out.kv_in_place, out.row_adapter = None, True, adapter
  return out


def _trace(model, feeds: dict, past_names: list, past: Dim, rows: int, taken: set,
           adapter: str | None = None) -> dict:
  """The outputs of one run of `model` on `feeds` with a cache of `rows` rows per past name
  (replacing the caches of an earlier trace, whose buffer names it frees), traced for
  `adapter` (_in_place)."""
  for name in past_names:
    if name in feeds:
      taken.discard(_input_buffer(feeds[name]).name)
    feeds[name] = _cache(name, model.input_shapes[name], past, rows,
                         model.input_dtypes.get(name) or dtypes.float32, taken)
  return _in_place(model, adapter).run(feeds, device="PYTHON", replay=False)


def _written(out: dict, feeds: dict, name: str) -> bool:
  """Whether past `name`'s present output is that past's buffer written in place."""
  from ..graph.lazy import L
  node = out[name.replace(PAST, "present.")].node
  return node.op is L.WRITE and node.src[0].realized and \
    node.src[0].buffer is _input_buffer(feeds[name])


def _check(model) -> list:
  """The past inputs of `model` (sorted); ModelError unless it is a causal LM this reads."""
  names = set(model.input_names)
  past = sorted(n for n in names if n.startswith(PAST))
  other = names - set(past) - {"input_ids", "attention_mask", "position_ids"}
  if "input_ids" not in names or "logits" not in model.output_names or not past or other:
    raise ModelError(f"a causal LM bundle needs an ONNX model with inputs input_ids, "
                     f"past_key_values.*, optionally attention_mask and position_ids, and an "
                     f"output logits (the transformers.js / Optimum layout); this one has inputs "
                     f"{model.input_names} and outputs {model.output_names}")
  for name in past:
    shape = model.input_shapes.get(name) or ()
    if len(shape) != 4 or not all(isinstance(d, int) and d > 0 for d in (shape[1], shape[3])):
      raise ModelError(f"input {name!r} is declared {shape}: a causal LM bundle needs (batch, "
                       f"kv_heads, past, head_dim) with kv_heads and head_dim as numbers")
  return past


def causal_program(model, step: int = 128, context: int = 256,
                   adapter: str | None = None) -> tuple:
  """(outputs, state) of one run of 1..`step` new tokens of ONNX causal LM `model`
  (kg.onnx.load) with a cache of up to `context` tokens, to export with kg.export(outputs, DIR,
  state=state) (see the module docstring). `adapter`: the one the bundle is exported for (give
  kg.export the same): traced with its row defaults, so on a CPU adapter (lavapipe, SwiftShader)
  a MatMul's weight is stored transposed and its 1-row products take the rows layout
  (lowering/threads.py reduce_inner), as natively. Lavapipe natively (bench/lm_bundle_native.py,
  SmolLM2 widths, 2 layers, fp32, prompt 16, CPU ms per decode token, median, two interleaved
  A/B pairs, load 4-6 on 2 CPUs): step 16 (the head on the last row) 110-116 -> 72-73, step 1
  241-279 -> 53-71. Raises ModelError for a model not in that layout."""
  past_names = _check(model)
  if step < 1 or context <= step:
    raise ModelError(f"step {step} and context {context}: give 1 <= step < context")
  names = set(model.input_names)
  past = Dim("past", 0, context - 1).bind(0)
  seq = Dim("seq", 1, step).bind(1) if step > 1 else 1
  total = Dim("total", 1, context).bind(1)
  taken: set = set()
  i32 = dtypes.int32
  feeds = {"input_ids": _empty("input_ids", (1, seq), i32, taken)}
  if "position_ids" in names:
    feeds["position_ids"] = _empty("position_ids", (1, seq), i32, taken)
  if "attention_mask" in names:
    feeds["attention_mask"] = _empty("attention_mask", (1, total), i32, taken)
  out = _trace(model, feeds, past_names, past, context, taken, adapter)
  if step > 1 and not all(_written(out, feeds, name) for name in past_names):
    # Concat(past, new) presents of past + seq rows (context - 1 + step at most): trace again
    # with caches of that many rows, so they are written in place too
    out = _trace(model, feeds, past_names, past, context - 1 + step, taken, adapter)
  logits = out["logits"]
  # (seq, vocab), or (1, vocab) (last only); a kernel of its own, so the LM head stays a tiled
  # matmul over the run's rows (the row read at a run-time index fused into it made it a plain
  # loop per vocab entry: 4x the step-1 program's head on SwiftShader)
  rows = logits.reshape(-1, logits.shape[-1]).contiguous()
  n = rows.symbolic_shape[0]
  last = rows[n - 1:n]                               # the last new token's: a run-time row
  temperature = _empty("temperature", (1,), dtypes.float32, taken)
  seed = _empty("seed", (1,), i32, taken)
  outputs = ModelOutputs(logits=last, token=sample_token(last, temperature, seed))
  state = {}
  for name in past_names:
    present = name.replace(PAST, "present.")
    if present not in out:
      raise ModelError(f"input {name!r} has no output {present!r} to keep as its cache")
    outputs[present] = out[present]
    state[name] = present
  return outputs, state
