"""Causal language models as bundles: a step program with a KV cache kept as bundle state
(export/state.py), sampling on the device, and `generate` over such a bundle (model.js has the
same `generate` for the browser).

A causal LM bundle has state (the caches), an input `ids` or `input_ids` (1, s) int32 whose
size s (a number or a kg.Dim) is the new tokens of a step, and an output `logits` (1, vocab) (the last new
token's); optionally `positions` / `position_ids` (1, s) int32 (each new token's position),
`attention_mask` (1, past + s) int32 (all ones) and, for sampling on the device, an output
`token` (1,) int32 with inputs `temperature` (1,) float32 and `seed` (1,) int32
(kg.nn.sample_token). The prompt (prefill) runs in steps of up to s's top tokens (reading nothing
back but the last), then each step runs the last token; the context is the state dim's top + 1
tokens: a prompt longer is an error, and a generation that fills it starts again from its last
half (reset, prefill those).
"""
from __future__ import annotations

from ..dtype import dtypes
from ..errors import ModelError, ShapeError
from ..tensor.tensor import Tensor

IDS, POSITIONS = ("ids", "input_ids"), ("positions", "position_ids")


def names(manifest: dict) -> dict:
  """{ids, positions, mask, logits, token, context}: the causal LM's names in `manifest` (None
  where absent) and its context; ModelError for a bundle that is not a causal LM."""
  inputs = {s["name"]: s for s in manifest["inputs"]}
  outputs = {s["name"] for s in manifest["outputs"]}
  ids = next((n for n in IDS if n in inputs), None)
  state = manifest.get("state") or []
  if not state or ids is None or "logits" not in outputs:
    raise ModelError("this bundle is not a causal LM: generate needs state (the KV cache, "
                     "kg.export(..., state=)), an input 'ids' or 'input_ids' and an output "
                     f"'logits'; it has inputs {sorted(inputs)} and outputs {sorted(outputs)}")
  dims = {d["name"]: d for d in manifest.get("dims", [])}
  sampled = "token" in outputs and "temperature" in inputs and "seed" in inputs
  return {"ids": ids, "positions": next((n for n in POSITIONS if n in inputs), None),
          "mask": "attention_mask" if "attention_mask" in inputs else None,
          "token": "token" if sampled else None, "context": dims[state[0]["dim"]]["hi"] + 1,
          "step": _dim_hi(inputs[ids], dims)}


def _dim_hi(spec: dict, dims: dict) -> int:
  sym = spec.get("symbolic_shape") or spec["shape"]
  size = sym[-1]
  return dims[size["terms"][0][0]]["hi"] if isinstance(size, dict) else size


def generate(bundle, prompt, max_new_tokens: int = 32, temperature: float = 0.0,
             top_k: int = 0, top_p: float = 1.0, seed: int = 0, stop=None, on_token=None,
             device: str | None = None) -> list:
  """The tokens a causal LM bundle generates after `prompt` (a list of ints), as kg.generate
  (the same arguments): the bundle's state is reset first and kept between its steps.

  Raises ModelError for a bundle that is not a causal LM, ShapeError for an empty prompt or one
  longer than the bundle's context."""
  from ..onnx.generate import sample, step_seed, token_loop
  lm = names(bundle.manifest)
  prompt = [int(t) for t in prompt]
  if not prompt or len(prompt) > lm["context"]:
    raise ShapeError(f"the prompt has {len(prompt)} tokens: this bundle takes 1..{lm['context']} "
                     f"(its context); shorten it")
  bundle.reset()
  steps = _BundleSteps(bundle, lm, prompt, device)
  on_device = lm["token"] is not None and top_k == 0 and top_p >= 1

  def step(i: int, new: list) -> Tensor:
    if i:
      steps.tokens += new
    new, noise = steps.prefill(new), step_seed(seed, i)
    if on_device:
      return steps.run(new, lm["token"], temperature, noise)
    logits = steps.run(new, "logits", temperature, noise)
    return sample(logits.reshape(-1), temperature, top_k, top_p, noise)
  return token_loop(step, prompt, max_new_tokens, stop, on_token)


class _BundleSteps:
  """A causal LM bundle's steps: the tokens so far and how many of them its cache holds."""

  def __init__(self, bundle, lm: dict, prompt: list, device: str | None):
    self.bundle, self.lm, self.device = bundle, lm, device
    self.tokens, self.done = list(prompt), 0

  def prefill(self, new: list) -> list:
    """Runs all but the last step of `new` (a long prompt), after starting again from the last
    half of the tokens when they would overflow the context; the tokens left to run."""
    lm = self.lm
    if self.done + len(new) > lm["context"]:           # full: again from the last half
      self.bundle.reset()
      new, self.done = self.tokens[-(lm["context"] // 2):], 0
    while len(new) > lm["step"]:
      self.bundle.run(_feeds(lm, new[:lm["step"]], self.done, 0.0, 0), device=self.device,
                      outputs=[])
      new, self.done = new[lm["step"]:], self.done + lm["step"]
    return new

  def run(self, new: list, output: str, temperature: float, seed: int) -> Tensor:
    """Output `output` of the step that runs the tokens `new` (the cache keeps them)."""
    feeds = _feeds(self.lm, new, self.done, temperature, seed)
    got = self.bundle.run(feeds, device=self.device, outputs=[output])
    self.done += len(new)
    return got[output]


def _feeds(lm: dict, new: list, done: int, temperature: float, seed: int) -> dict:
  def ints(values):
    return Tensor([values], dtype=dtypes.int32, device="PYTHON")
  feeds = {lm["ids"]: ints(new)}
  if lm["positions"]:
    feeds[lm["positions"]] = ints(list(range(done, done + len(new))))
  if lm["mask"]:
    feeds[lm["mask"]] = ints([1] * (done + len(new)))
  if lm["token"]:
    feeds["temperature"] = Tensor([float(temperature)], device="PYTHON")
    feeds["seed"] = Tensor([seed % (1 << 31)], dtype=dtypes.int32, device="PYTHON")
  return feeds
