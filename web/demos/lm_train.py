"""The Generate demo's "Continue training in the page": a kernelgen program the page runs in its
worker (Pyodide + WEBGPU), once per chunk of training steps.

The page prepends STEPS (AdamW steps in this run), EXPORT (True: also return the weights),
RESET (True on a fresh start) and, on a fresh start only, TINY_GPT (examples/tiny_gpt.py's
source), TOKENIZER (lm/tokenizer.json's text), WEIGHTS (lm/weights.safetensors, base64) and
NAMES (the bundle's weight names, in its order). The corpus is the one examples/train_lm.py
trains on, the standard library's top-level modules, here Pyodide's own: the training files
(every 10th held out, as there), in a seeded order, up to CORPUS_TOKENS tokens (tokenizing in
Pyodide is slow). The model, its AdamW state and the token stream stay in a module kept in
sys.modules between runs; each step is BATCH random windows of the model's context, under
kg.jit. `out` is [mean loss of this run's steps, steps so far], then, with EXPORT, every weight
as float32 in NAMES order (the bundle's names: state_dict keys with dots as underscores).
"""
import base64
import glob
import json
import os
import random
import sys
import sysconfig
import types
import zipfile

import kernelgen as kg

STATE = "kernelgen_lm_training"
BATCH = 4
LEARNING_RATE = 3e-4
CORPUS_TOKENS = 60_000
SEED = 0


def tiny_gpt(source: str):
  """examples/tiny_gpt.py as the module `tiny_gpt`, from its source."""
  module = types.ModuleType("tiny_gpt")
  exec(compile(source, "tiny_gpt.py", "exec"), module.__dict__)
  sys.modules["tiny_gpt"] = module
  return module


def stdlib_modules() -> list:
  """(name, read) of the standard library's top-level modules, sorted by name: from its folder,
  or from the zip on sys.path that Pyodide keeps it in; read() gives a module's text."""
  files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
  if files:
    return [(os.path.basename(f), lambda f=f: open(f, encoding="utf-8", errors="replace").read())
            for f in files]
  for entry in sys.path:
    if entry.endswith(".zip") and os.path.isfile(entry):
      archive = zipfile.ZipFile(entry)
      names = sorted(n for n in archive.namelist() if n.endswith(".py") and "/" not in n)
      return [(n, lambda n=n: archive.read(n).decode("utf-8", "replace")) for n in names]
  raise FileNotFoundError("no standard library sources here (a folder or zip of *.py)")


def corpus_ids(tok, limit: int) -> list:
  """Token ids of the training modules (every 10th held out), in a seeded order, each followed
  by <|endoftext|>, until there are `limit`."""
  train = [m for i, m in enumerate(stdlib_modules()) if i % 10]
  random.Random(SEED).shuffle(train)
  end, ids = tok.token_to_id("<|endoftext|>"), []
  for _, read in train:
    ids += tok.encode(read()) + [end]
    if len(ids) >= limit:
      break
  return ids


def start(source: str, tokenizer: str, weights: str, names: list):
  """A fresh training state: the committed model, a new AdamW, the token stream."""
  state = types.ModuleType(STATE)
  state.names = names
  state.tok = kg.text.Tokenizer.from_str(tokenizer)
  state.ids = corpus_ids(state.tok, CORPUS_TOKENS)
  tensors, meta = kg.load(base64.b64decode(weights), with_metadata=True)
  config = json.loads(meta["config"])
  state.model = tiny_gpt(source).TinyGPT(config["vocab"], config["dim"], config["layers"],
                                         config["heads"], config["context"])
  state.model.load_state_dict({k: v.cast(kg.dtypes.float32).to(kg.Device.DEFAULT)
                               for k, v in tensors.items()})
  state.vocab, state.context = config["vocab"], config["context"]
  state.opt = kg.optim.AdamW(list(state.model.parameters()), lr=LEARNING_RATE)
  state.step = kg.jit(lambda x, y: train_step(state, x, y))   # later steps replay its kernels
  state.rng, state.steps = random.Random(SEED), 0
  sys.modules[STATE] = state
  return state


def train_step(state, x, y):
  """One AdamW step on the mean next-token cross-entropy of the windows x -> y."""
  state.opt.zero_grad()
  n = BATCH * state.context
  loss = state.model(x).reshape(n, state.vocab).cross_entropy(y.reshape(n))
  loss.backward()
  state.opt.step(loss)
  return loss


def batch(state):
  """(x, y): BATCH random windows of the stream and the same shifted by one, int32 tensors."""
  t = state.context
  starts = [state.rng.randrange(len(state.ids) - t - 1) for _ in range(BATCH)]
  x = [i for s in starts for i in state.ids[s:s + t]]
  y = [i for s in starts for i in state.ids[s + 1:s + t + 1]]
  return (kg.Tensor(x, dtype=kg.dtypes.int32).reshape(BATCH, t),
          kg.Tensor(y, dtype=kg.dtypes.int32).reshape(BATCH, t))


def run(steps: int, export: bool):
  """`steps` steps; out: [mean loss, steps so far] (+ the weights in NAMES order)."""
  state = sys.modules[STATE]
  losses = []
  for _ in range(steps):
    losses.append(state.step(*batch(state)).item())
    state.steps += 1
  mean = sum(losses) / len(losses) if losses else float("nan")
  head = kg.Tensor([mean, float(state.steps)])
  if not export:
    return head
  params = {k.replace(".", "_"): v for k, v in state.model.state_dict().items()}
  with kg.no_grad():
    return kg.cat([head] + [params[name].detach().reshape(-1) for name in state.names]).contiguous()


if RESET or STATE not in sys.modules:  # noqa: F821 (the page defines the upper-case names)
  start(TINY_GPT, TOKENIZER, WEIGHTS, NAMES)  # noqa: F821
out = run(STEPS, EXPORT)  # noqa: F821
