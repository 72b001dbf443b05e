"""Text generation: `kg.generate(model, input_ids, ...)` runs a causal language model token by
token, a prompt (prefill) step and then one decode step per new token, and picks each token on
the device (greedy argmax, or temperature / top-k / top-p sampling by the Gumbel-max trick with
a seeded counter-based noise), so only the token id is read back.

Models: an ONNX causal LM (kg.onnx.load) in the transformers.js / Optimum layout (inputs
`input_ids`, `attention_mask`, optional `position_ids`, `past_key_values.{i}.key|value`;
outputs `logits` and `present.{i}.key|value`): the present caches of one step are fed as the
next step's past, on the device. Or a kg.nn model (any callable) mapping int32 ids (1, T) to
logits (1, T, vocab), run over the whole sequence each step (no cache).

The dims that grow each step (the past length, the attention mask's width) are made symbolic
(kg.Dim, `with_cache_dims`) unless load() fixed them, so the prompt step compiles its programs,
the first decode step its own, and every later step replays those (no compile, no pipeline);
the present caches of a step are fed back as the next step's past without a copy. From the
fourth step on, Model.run replays the decode step's recorded kernels (onnx/replay.py: no node
is visited, one submit), and sampling is one more.
"""
from __future__ import annotations

import math

from ..dtype import dtypes
from ..errors import ModelError, ShapeError
from ..tensor.tensor import Tensor, where


def sample(logits: Tensor, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
           seed: Tensor | int = 0) -> Tensor:
  """The next token of float `logits` (vocab,), as an int32 Tensor of one element, computed on
  the device: argmax when temperature is 0; else a sample of softmax(logits / temperature)
  restricted to the top_k largest (0: all) and to the smallest set whose probability reaches
  top_p, drawn with the noise of `seed` (an int or a one-element int Tensor)."""
  x = logits.cast(dtypes.float32).reshape(-1)
  if temperature <= 0:
    return x.argmax(0, keepdim=True).cast(dtypes.int32)
  x = x / float(temperature)
  n = x.shape[0]
  if 0 < top_k < n:
    kth = x.topk(top_k)[0][top_k - 1]
    x = where(x >= kth, x, -math.inf)
  if top_p < 1.0:
    probs = x.softmax(0)
    ranked = probs.sort(descending=True)
    before = ranked.cumsum(0) - ranked           # probability of the tokens ranked above
    floor = where(before < top_p, ranked, math.inf).min()
    x = where(probs >= floor, x, -math.inf)
  u = Tensor.rand(n, seed=seed, device=x.device).maximum(1e-20).minimum(1.0 - 1e-7)
  return (x - (-u.log()).log()).argmax(0, keepdim=True).cast(dtypes.int32)


def step_seed(seed: int, i: int) -> int:
  """The noise seed of step i of a generation seeded `seed` (each step draws other noise)."""
  return seed * 1000003 + i


def token_loop(step, prompt: list, max_new_tokens: int, stop=None, on_token=None) -> list:
  """The tokens of a generation: `step(i, new)` runs the model on the tokens `new` (the prompt
  at step 0, then the token before) and returns step i's token, a one-element Tensor. Each token
  is read back and given to `on_token`; the loop ends after `max_new_tokens` or after a token in
  `stop` (an int or a collection of ints; that token is included)."""
  stops = {stop} if isinstance(stop, int) else set(stop or ())
  new, out = list(prompt), []
  for i in range(max_new_tokens):
    tok = int(step(i, new).tolist()[0])
    out.append(tok)
    if on_token is not None:
      on_token(tok)
    if tok in stops:
      break
    new = [tok]
  return out


def _prompt(input_ids) -> list:
  """The prompt as a list of ints (a flat or (1, S) list, array or Tensor)."""
  if isinstance(input_ids, Tensor):
    input_ids = input_ids.tolist()
  elif hasattr(input_ids, "tolist"):
    input_ids = input_ids.tolist()
  ids = list(input_ids)
  if ids and isinstance(ids[0], (list, tuple)):
    if len(ids) != 1:
      raise ShapeError(f"kg.generate takes one sequence (batch 1), got a batch of {len(ids)}")
    ids = list(ids[0])
  if not ids:
    raise ShapeError("kg.generate needs a prompt of at least one token")
  return [int(t) for t in ids]


def context_size(tokens: int) -> int:
  """The largest cache length a generation of `tokens` in all is compiled for: a power of two,
  at least 256, so that other prompt and output lengths reuse the same programs."""
  return max(256, 1 << max(tokens - 1, 1).bit_length())


def with_cache_dims(model, context: int, batch: int = 1):
  """`model` with the dims that grow each step symbolic (kg.Dim): the past length (axis 2 of
  the past_key_values inputs) in 0..context - 1 and the attention mask's width in 1..context,
  and a batch dim fixed to `batch` (kg.generate: 1; a batch's rows may each have their own past
  length, GroupQueryAttention's seqlens_k); dims given to load() are kept. Every decode step
  then runs the programs of the first (one compile for all positions). The copy shares the
  weights, and writes its past caches in place (kv_in_place: operators/kv_write.py)."""
  import copy
  dims = dict(model.dims)
  for name, shape in model.input_shapes.items():
    if not shape:
      continue
    grow = 2 if name.startswith("past_key_values.") else 1 if name == "attention_mask" else None
    for a, d in enumerate(shape):
      if not isinstance(d, str) or d == "?" or d in dims:
        continue
      if a == grow:
        dims[d] = (0, context - 1) if grow == 2 else (1, context)   # a step adds a token
      elif a == 0:
        dims[d] = batch
  if context <= 1:
    return model
  copies = model.__dict__.setdefault("_with_dims", {})    # one per dims: its replays are kept
  key = tuple(sorted(dims.items()))
  if key not in copies:
    out = copies[key] = copy.copy(model)
    out.dims, out.replayer = dims, None
    out.kv_in_place = True     # its past caches written in place (operators/kv_write.py)
  return copies[key]


class OnnxCausalLM:
  """One ONNX causal LM's steps: feeds built from the tokens and the device-side caches."""

  def __init__(self, model, device: str, context: int = 0):
    names = set(model.input_names)
    if "input_ids" not in names or "logits" not in model.output_names:
      raise ModelError(f"kg.generate needs a causal LM with an input 'input_ids' and an output "
                       f"'logits' (the transformers.js / Optimum layout); this model has "
                       f"inputs {model.input_names} and outputs {model.output_names}")
    self.model, self.device = with_cache_dims(model, context), device
    self.past = sorted(n for n in names if n.startswith("past_key_values."))
    self.cache = {}

  def _empty_past(self, name: str) -> Tensor:
    shape = self.model.input_shapes.get(name) or ()
    if len(shape) != 4 or not all(isinstance(d, int) for d in (shape[1], shape[3])):
      raise ModelError(f"input {name!r} is declared {shape}: kg.generate needs (batch, "
                       f"kv_heads, past, head_dim) with kv_heads and head_dim as numbers")
    dtype = self.model.input_dtypes.get(name) or dtypes.float32
    bounds = self.model.dims.get(shape[2]) if isinstance(shape[2], str) else None
    if not isinstance(bounds, tuple) or bounds[0] != 0:
      return Tensor.zeros(1, shape[1], 0, shape[3], dtype=dtype, device=self.device)
    # the cache preallocated at the context's size (0 rows bound): the caches' writes go into
    # this buffer in place, each step's present is it, fed back as the next past (contrib.py)
    from ..graph.dims import Dim
    from ..tensor.symbolic import with_sym
    buf = Tensor.zeros(1, shape[1], bounds[1] + 1, shape[3], dtype=dtype, device=self.device)
    buf = buf.contiguous().realize()
    return with_sym(buf, (1, shape[1], Dim(shape[2], *bounds).bind(0), shape[3]))

  def step(self, new: list, total: int) -> Tensor:
    """The logits (vocab,) after `new` tokens at positions total - len(new) .. total - 1."""
    s = len(new)
    feeds = {"input_ids": Tensor([new], dtype=dtypes.int32, device=self.device)}
    names = set(self.model.input_names)
    if "attention_mask" in names:
      feeds["attention_mask"] = Tensor([[1] * total], dtype=dtypes.int32, device=self.device)
    if "position_ids" in names:
      feeds["position_ids"] = Tensor([list(range(total - s, total))], dtype=dtypes.int32,
                                     device=self.device)
    if "use_cache_branch" in names:           # Optimum's merged decoder: its If picks the branch
      feeds["use_cache_branch"] = Tensor([bool(self.cache)], device=self.device)
    for keep in ("num_logits_to_keep", "logits_to_keep"):
      if keep in names:
        feeds[keep] = Tensor(1, dtype=dtypes.int32, device=self.device)
    for name in self.past:
      feeds[name] = self.cache[name] if name in self.cache else self._empty_past(name)
    # the prompt step is built lazily each time (as with no cache to feed): recorded, its capped
    # one-off kernels would compile again for many runs (realize._record_grown)
    out = self.model.run(feeds, device=self.device, replay=bool(self.cache))
    from ..realize import realize        # the step's outputs as a replay gives them (realized),
    realize([t.node for t in out.values() if isinstance(t, Tensor)])   # so sampling is one kernel
    self.cache = {name: out[name.replace("past_key_values.", "present.")] for name in self.past}
    logits = out["logits"]
    return logits.reshape(-1, logits.shape[-1])[math.prod(logits.shape[:-1]) - 1]

  def state(self) -> list:
    return list(self.cache.values())


class ModuleLM:
  """A kg.nn model (or any callable) from int32 ids (1, T) to logits (1, T, vocab)."""

  def __init__(self, model, device: str):
    self.model, self.device, self.tokens = model, device, []

  def step(self, new: list, total: int) -> Tensor:
    self.tokens += new
    logits = self.model(Tensor([self.tokens], dtype=dtypes.int32, device=self.device))
    return logits.reshape(-1, logits.shape[-1])[len(self.tokens) - 1]

  def state(self) -> list:
    return []


def generate(model, input_ids, max_new_tokens: int = 32, temperature: float = 0.0,
             top_k: int = 0, top_p: float = 1.0, seed: int = 0, stop=None, on_token=None,
             device: str | None = None) -> list:
  """The tokens a causal LM generates after the prompt `input_ids` (a list of ints, or (1, S)):
  a list of up to `max_new_tokens` ints, ending early after a token in `stop` (an int or a
  collection of ints; that token is included). Greedy when temperature is 0 (the default),
  else sampled (top_k, top_p, seed as `sample`); `on_token(token)` is called with each token
  as it is read back. `model`: a kg.onnx Model in the Optimum layout or a kg.nn model (see the
  module docstring); device: kg.Device.DEFAULT unless given."""
  from ..device import Device
  from ..realize import realize
  from .model import Model
  device = Device.canonical(device) if device is not None else Device.DEFAULT
  if max_new_tokens < 0 or top_k < 0 or not 0 < top_p <= 1:
    raise ShapeError(f"kg.generate: max_new_tokens {max_new_tokens} and top_k {top_k} must be "
                     f">= 0, top_p {top_p} in (0, 1]")
  prompt = _prompt(input_ids)
  lm = OnnxCausalLM(model, device, context_size(len(prompt) + max_new_tokens)) \
    if isinstance(model, Model) else ModuleLM(model, device)
  total = 0

  def step(i: int, new: list) -> Tensor:
    nonlocal total
    total += len(new)
    logits = lm.step(new, total)
    seed_t = Tensor([step_seed(seed, i)], dtype=dtypes.int32, device=device)
    token = sample(logits, temperature, top_k, top_p, seed_t)
    realize([token.node] + [t.node for t in lm.state()])
    return token
  return token_loop(step, prompt, max_new_tokens, stop, on_token)
