"""Train the Generate demo's language model: a small GPT on the Python standard library's own
source, with kernelgen (autograd, kg.optim.AdamW, kg.jit), and a BPE tokenizer trained by
kg.text.train_bpe.

    python examples/train_lm.py --steps 900          # writes web/demos/lm/{tokenizer.json, ...}
    python examples/train_lm.py --steps 2000 --resume --tokenizer web/demos/lm/tokenizer.json
    python examples/train_lm.py --steps 20 --device PYTHON --out /tmp/lm
    python examples/train_lm.py --layers 10 --grow-from web/demos/lm --minutes 35 \\
        --tokenizer web/demos/lm/tokenizer.json --out /tmp/lm10

The corpus is every top-level module of this Python's standard library (sysconfig's "stdlib"
folder, *.py, sorted by name); every 10th file is held out. Files are joined with the
<|endoftext|> token. Training draws random windows of --context + 1 tokens (a fixed seed); the
learning rate warms up linearly, then follows a cosine down to --final-lr (a tensor argument of
the jitted step, so one recording serves every step). The cosine runs over --steps, or up to
--minutes after the run started when that ends first (training then stops there, so a time
budget still ends annealed). The held-out perplexity is measured on consecutive windows of the
held-out files, every position scored; a bigram model (add-k smoothing, k chosen on the
training tokens) is scored on exactly the same targets. Writes the tokenizer, the weights
(float16 safetensors) and a log (loss curve, perplexities, config) every --save-every steps and
at the end.

--grow-from DIR starts a deeper model from a shallower one this script wrote (same vocabulary,
width, heads and context): `grown_weights` keeps every trained block and follows each with
copies of itself whose output projections are zero, so the grown model computes exactly what
the small one did and training goes on from there.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

import kernelgen as kg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_gpt import TinyGPT  # noqa: E402

SEED = 0
VOCAB, DIM, LAYERS, HEADS, CONTEXT = 1024, 128, 2, 4, 128
BATCH = 8
PEAK_LR, WARMUP, FINAL_LR = 3e-3, 40, 3e-4
EVAL_WINDOWS = 128
OUT = Path(__file__).resolve().parent.parent / "web" / "demos" / "lm"
# a block's layers whose outputs join the residual stream: zero in a grown copy
SILENT = ("proj", "down")


def corpus() -> tuple[list, list]:
  """(train texts, held-out texts): the standard library's top-level modules."""
  files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
  texts = [Path(f).read_text(encoding="utf-8", errors="replace") for f in files]
  return ([t for i, t in enumerate(texts) if i % 10],
          [t for i, t in enumerate(texts) if i % 10 == 0])


def token_stream(tok, texts: list) -> np.ndarray:
  """All texts' ids, each followed by <|endoftext|>, as one int32 array."""
  end = tok.token_to_id("<|endoftext|>")
  ids = []
  for text in texts:
    ids += tok.encode(text) + [end]
  return np.array(ids, dtype=np.int32)


def eval_windows(held: np.ndarray, context: int = CONTEXT,
                 windows: int = EVAL_WINDOWS) -> tuple[np.ndarray, np.ndarray]:
  """(inputs, targets), each (windows, context): evenly spaced consecutive windows of the
  held-out stream; the model scores every target, and so does the bigram."""
  starts = np.linspace(1, len(held) - context - 2, windows).astype(np.int64)
  return (np.stack([held[s:s + context] for s in starts]),
          np.stack([held[s + 1:s + context + 1] for s in starts]))


def bigram_perplexity(train: np.ndarray, x: np.ndarray, y: np.ndarray,
                      vocab: int) -> tuple[float, float]:
  """(perplexity, k) of the add-k bigram predicting each target y from the token x before it;
  k picked from a small grid on a tenth of the training tokens held back from the counts."""
  def fit(tokens):
    counts = np.zeros((vocab, vocab), dtype=np.float64)
    np.add.at(counts, (tokens[:-1], tokens[1:]), 1)
    return counts

  def nll(counts, before, after, k):
    rows = counts[before]
    p = (rows[np.arange(len(rows)), after] + k) / (rows.sum(1) + k * vocab)
    return float(-np.log(p).mean())
  cut = len(train) * 9 // 10
  part, tail = fit(train[:cut]), train[cut:]
  k = min((0.003, 0.01, 0.03, 0.1, 0.3, 1.0), key=lambda k: nll(part, tail[:-1], tail[1:], k))
  return math.exp(nll(fit(train), x.reshape(-1), y.reshape(-1), k)), k


def learning_rate(i: int, progress: float, peak: float = PEAK_LR, warmup: int = WARMUP,
                  final: float = FINAL_LR) -> float:
  """Linear warmup over the first `warmup` steps (i counts from 0) to peak, then a cosine down to
  `final` as `progress` (the fraction of the run after the warmup, 0..1) goes from 0 to 1."""
  if i < warmup:
    return peak * (i + 1) / warmup
  return final + (peak - final) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


class Schedule:
  """The run's progress after the warmup, 0..1: the steps done of `steps`, or the wall-clock
  time spent of the time from the warmup's end to `deadline` (a time.time() value; None: no
  deadline), whichever is further."""

  def __init__(self, steps: int, warmup: int, deadline: float | None = None):
    self.steps, self.warmup, self.deadline = steps, warmup, deadline
    self.warm_at = None

  def progress(self, i: int) -> float:
    """The progress before step i (from 0)."""
    if i < self.warmup:
      return 0.0
    now = time.time()
    if self.warm_at is None:
      self.warm_at = now
    done = (i - self.warmup) / max(1, self.steps - self.warmup)
    if self.deadline is not None:
      done = max(done, (now - self.warm_at) / max(1.0, self.deadline - self.warm_at))
    return done

  def over(self, i: int) -> bool:
    """Whether the run ends after step i: its last step, or the deadline reached (in the warmup
    too)."""
    return i + 1 >= self.steps or (self.deadline is not None and time.time() >= self.deadline)


def grown_weights(weights: dict, layers: int) -> dict:
  """A TinyGPT state_dict (numpy arrays) of `layers` blocks computing what `weights` (fewer
  blocks) computes: block i of the n there is followed by copies of itself, (layers - n) // n
  of them (one more for the first (layers - n) % n), each copy's output projections (SILENT:
  weights and biases) zero, so it adds nothing to the residual stream until training moves them;
  its other weights (layer norms, qkv, up) start as the trained block's.

  Raises ShapeError when `layers` is fewer than the blocks in `weights`."""
  old = 1 + max(int(k.split(".")[1]) for k in weights if k.startswith("blocks."))
  if layers < old:
    raise kg.errors.ShapeError(f"cannot grow {old} blocks into {layers}: give --layers >= {old}")
  plan = []
  for i in range(old):
    copies = (layers - old) // old + (1 if i < (layers - old) % old else 0)
    plan += [(i, False)] + [(i, True)] * copies
  out = {k: v for k, v in weights.items() if not k.startswith("blocks.")}
  for j, (i, silent) in enumerate(plan):
    prefix = f"blocks.{i}."
    for key, value in weights.items():
      if key.startswith(prefix):
        name = key[len(prefix):]
        zero = silent and name.split(".")[0] in SILENT
        out[f"blocks.{j}.{name}"] = np.zeros_like(value) if zero else value.copy()
  return out


def make_step(model, opt, batch: int, context: int):
  """One jitted training step: (x, y) int32 (batch, context), lr float32 (1,) -> the mean
  cross-entropy. The learning rate is a tensor argument: AdamW's update reads opt.lr, and a
  Python float there would be frozen into the recorded kernels."""
  vocab = model.tokens.weight.shape[0]

  @kg.jit
  def step(x, y, lr):
    opt.zero_grad()
    opt.lr = lr
    logits = model(x).reshape(batch * context, vocab)
    loss = logits.cross_entropy(y.reshape(batch * context))
    loss.backward()
    opt.step(loss)
    return loss
  return step


def held_out_loss(model, x: np.ndarray, y: np.ndarray, device: str, batch: int = BATCH) -> float:
  """Mean cross-entropy of the model over the held-out windows (x, y), every position."""
  total, vocab = 0.0, model.tokens.weight.shape[0]
  with kg.no_grad():
    for i in range(0, len(x), batch):
      xb, yb = x[i:i + batch], y[i:i + batch]
      logits = model(kg.Tensor(xb, device=device)).reshape(yb.size, vocab)
      loss = logits.cross_entropy(kg.Tensor(yb.reshape(-1), device=device))
      total += loss.item() * len(xb)
  return total / len(x)


def save(model, tok, log: dict, out: Path) -> None:
  """The tokenizer, float16 weights and the log, into out/."""
  out.mkdir(parents=True, exist_ok=True)
  (out / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
  weights = {name: kg.Tensor(p.numpy().astype(np.float16)) for name, p in
             model.state_dict().items()}
  kg.save(weights, str(out / "weights.safetensors"),
          metadata={"config": json.dumps(log["config"])})
  (out / "train_log.json").write_text(json.dumps(log, indent=1), encoding="utf-8")


def tokenizer(args, texts: list):
  """The BPE tokenizer: --tokenizer's file (one this script wrote before: the trainer is
  deterministic, so retraining gives the same file), else trained on the training texts."""
  if args.tokenizer:
    return kg.text.Tokenizer.from_file(str(args.tokenizer))
  return kg.text.train_bpe(texts, vocab_size=VOCAB)


def prepare(args, device: str) -> tuple:
  """(tokenizer, training ids, held-out (x, y), log with the config and the bigram)."""
  train_texts, held_texts = corpus()
  t0 = time.time()
  tok = tokenizer(args, train_texts)
  train_ids, held_ids = token_stream(tok, train_texts), token_stream(tok, held_texts)
  print(f"tokenizer and encoding: {time.time() - t0:.1f} s; {len(train_ids)} training tokens, "
        f"{len(held_ids)} held-out", flush=True)
  held = eval_windows(held_ids, args.context)
  ppl, k = bigram_perplexity(train_ids, *held, VOCAB)
  config = {"vocab": VOCAB, "dim": args.dim, "layers": args.layers, "heads": args.heads,
            "context": args.context, "batch": args.batch, "steps": args.steps,
            "minutes": args.minutes, "peak_lr": args.peak_lr, "warmup": args.warmup,
            "final_lr": args.final_lr, "weight_decay": 0.01, "seed": SEED, "device": device}
  log = {"config": config, "bigram": {"perplexity": ppl, "k": k},
         "tokens": {"train": len(train_ids), "held_out": len(held_ids),
                    "scored": int(held[1].size)}, "curve": [], "held_out_curve": []}
  print(f"bigram perplexity on the {held[1].size} held-out targets: {ppl:.2f} (k={k})",
        flush=True)
  return tok, train_ids, held, log


def evaluate(model, held, log: dict, step: int, device: str, batch: int) -> bool:
  """Score the held-out windows into the log; False when the loss is not finite (diverged)."""
  t0 = time.time()
  loss = held_out_loss(model, *held, device, batch)
  if not math.isfinite(loss):
    print(f"held-out loss {loss} at step {step}: not saved, stopping", flush=True)
    return False
  log["held_out"] = {"step": step, "loss": loss, "perplexity": math.exp(loss),
                     "seconds": round(time.time() - t0, 1)}
  log["held_out_curve"].append(log["held_out"])
  print(json.dumps(log["held_out"]), flush=True)
  return True


def resume(model, log: dict, args, device: str) -> int:
  """Load the weights and curves a previous run saved in args.out and return the step it had
  reached: this run's steps follow (a new warmup and cosine over them, AdamW's state afresh)."""
  previous = json.loads((args.out / "train_log.json").read_text(encoding="utf-8"))
  weights = kg.load(str(args.out / "weights.safetensors"))
  model.load_state_dict({k: v.cast(kg.dtypes.float32).to(device) for k, v in weights.items()})
  offset = previous["held_out"]["step"]
  if "grown_from" in previous:
    log["grown_from"] = previous["grown_from"]
  log["curve"] = [e for e in previous["curve"] if e["step"] <= offset]
  log["held_out_curve"] = previous.get("held_out_curve", [])
  log["segments"] = previous.get("segments", [{"from_step": 0, "steps": offset}])
  log["segments"].append({"from_step": offset, "steps": args.steps,
                          "peak_lr": args.peak_lr,
                          "note": "resumed: new warmup + cosine, AdamW state afresh"})
  print(f"resumed at step {offset}", flush=True)
  return offset


def grow(model, log: dict, args, device: str) -> None:
  """Load --grow-from's smaller model into `model`, grown (grown_weights), and note where it came
  from in the log (its config, steps and held-out perplexity)."""
  source = json.loads((args.grow_from / "train_log.json").read_text(encoding="utf-8"))
  small = source["config"]
  for key in ("vocab", "dim", "heads", "context"):
    if small[key] != log["config"][key]:
      raise kg.errors.ShapeError(f"--grow-from's model has {key} {small[key]}, this one "
                                 f"{log['config'][key]}: only the number of layers may differ")
  weights = kg.load(str(args.grow_from / "weights.safetensors"))
  grown = grown_weights({k: v.numpy().astype(np.float32) for k, v in weights.items()},
                        args.layers)
  model.load_state_dict({k: kg.Tensor(v, device=device) for k, v in grown.items()})
  log["grown_from"] = {"folder": str(args.grow_from), "layers": small["layers"],
                       "parameters": small["parameters"], "held_out": source.get("held_out"),
                       "note": "each trained block followed by copies with zero proj and down"}
  print(f"grown from {small['layers']} layers ({small['parameters']} parameters)", flush=True)


def batches(train_ids: np.ndarray, rng, batch: int, context: int):
  """Endless (x, y) int32 (batch, context): random windows of the training stream."""
  while True:
    starts = rng.integers(0, len(train_ids) - context - 1, batch)
    yield (np.stack([train_ids[s:s + context] for s in starts]),
           np.stack([train_ids[s + 1:s + context + 1] for s in starts]))


def build(args, log: dict, device: str) -> tuple:
  """(model, step offset): a fresh TinyGPT, then --resume's or --grow-from's weights in it."""
  kg.nn.manual_seed(SEED)
  model = TinyGPT(VOCAB, args.dim, args.layers, args.heads, args.context)
  log["config"]["parameters"] = sum(int(np.prod(p.shape)) for p in model.parameters())
  print(f"model: {log['config']['parameters']} parameters on {device}", flush=True)
  if args.resume:
    return model, resume(model, log, args, device)
  if args.grow_from:
    grow(model, log, args, device)
  return model, 0


def train(args, device: str) -> None:
  """The run: data, model, the jitted steps under the schedule, a held-out score and a save
  every --save-every steps and at the end."""
  tok, train_ids, held, log = prepare(args, device)
  model, offset = build(args, log, device)
  if args.eval_first:
    if not evaluate(model, held, log, offset, device, args.batch):
      return
    log["config"]["steps"] = 0
    save(model, tok, log, args.out)
  data = batches(train_ids, np.random.default_rng(SEED + offset), args.batch, args.context)
  opt = kg.optim.AdamW(list(model.parameters()), lr=args.peak_lr, weight_decay=0.01)
  deadline = args.started + 60 * args.minutes if args.minutes else None
  step = make_step(model, opt, args.batch, args.context)
  schedule = Schedule(args.steps, args.warmup, deadline)
  recent, started = [], time.time()
  for i in range(args.steps):
    x, y = next(data)
    lr = learning_rate(i, schedule.progress(i), args.peak_lr, args.warmup, args.final_lr)
    recent.append(step(kg.Tensor(x, device=device), kg.Tensor(y, device=device),
                       kg.Tensor([lr], device=device)).item())
    last = schedule.over(i)
    if (i + 1) % args.log_every == 0 or last:
      entry = {"step": offset + i + 1, "loss": float(np.mean(recent)), "lr": lr,
               "seconds": round(time.time() - started, 1)}
      log["curve"].append(entry)
      print(json.dumps(entry), flush=True)
      recent = []
    if (i + 1) % args.save_every == 0 or last:
      log["config"]["steps"] = i + 1
      if not evaluate(model, held, log, offset + i + 1, device, args.batch):
        return
      save(model, tok, log, args.out)
    if last:
      return


def arguments() -> argparse.Namespace:
  """The command line (module docstring)."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=900)
  parser.add_argument("--minutes", type=float, default=None,
                      help="wall-clock budget of the run from its start (tokenizing included): "
                           "the cosine follows the time when that is further along than the "
                           "steps, and training stops when it is spent (then the held-out "
                           "windows are scored and the weights saved)")
  parser.add_argument("--log-every", type=int, default=25)
  parser.add_argument("--save-every", type=int, default=100)
  parser.add_argument("--out", type=Path, default=OUT)
  parser.add_argument("--dim", type=int, default=DIM)
  parser.add_argument("--layers", type=int, default=LAYERS)
  parser.add_argument("--heads", type=int, default=HEADS)
  parser.add_argument("--context", type=int, default=CONTEXT)
  parser.add_argument("--batch", type=int, default=BATCH)
  parser.add_argument("--warmup", type=int, default=WARMUP)
  parser.add_argument("--final-lr", type=float, default=FINAL_LR)
  parser.add_argument("--peak-lr", type=float, default=PEAK_LR,
                      help="the learning rate the warmup reaches (a resumed run may want less)")
  parser.add_argument("--resume", action="store_true",
                      help="continue from the weights and log in --out (e.g. the committed model)")
  parser.add_argument("--grow-from", type=Path, default=None,
                      help="start from this folder's shallower model (grown_weights)")
  parser.add_argument("--eval-first", action="store_true",
                      help="score the held-out windows before the first step too (and save)")
  parser.add_argument("--tokenizer", type=Path, default=None,
                      help="a tokenizer.json this script wrote (skips training the tokenizer)")
  parser.add_argument("--device", default=None,
                      help="kernelgen device (default WEBGPU when available, else PYTHON)")
  return parser.parse_args()


def main() -> None:
  """Train with the command line's settings."""
  started = time.time()
  args = arguments()
  args.started = started
  device = args.device or ("WEBGPU" if kg.Device.available("WEBGPU") else "PYTHON")
  kg.Device.DEFAULT = device
  train(args, device)


if __name__ == "__main__":
  main()
