"""Train the Generate demo's language model: a small GPT on the Python standard library's own
source, with kernelgen (autograd, kg.optim.AdamW, kg.jit), and a BPE tokenizer trained by
kg.text.train_bpe.

    python examples/train_lm.py --steps 900          # writes web/demos/lm/{tokenizer.json, ...}
    python examples/train_lm.py --steps 2000 --resume --tokenizer web/demos/lm/tokenizer.json
    python examples/train_lm.py --steps 20 --device PYTHON --out /tmp/lm

The corpus is every top-level module of this Python's standard library (sysconfig's "stdlib"
folder, *.py, sorted by name); every 10th file is held out. Files are joined with the
<|endoftext|> token. Training draws random windows of CONTEXT + 1 tokens (a fixed seed); the
learning rate warms up linearly, then follows a cosine down to a tenth (a tensor argument of the
jitted step, so one recording serves every step). The held-out perplexity is measured on
consecutive windows of the held-out files, every position scored; a bigram model (add-k
smoothing, k chosen on the training tokens) is scored on exactly the same targets. Writes the
tokenizer, the weights (float16 safetensors) and a log (loss curve, perplexities, config).
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


def eval_windows(held: np.ndarray, windows: int = EVAL_WINDOWS) -> tuple[np.ndarray, np.ndarray]:
  """(inputs, targets), each (windows, CONTEXT): evenly spaced consecutive windows of the
  held-out stream; the model scores every target, and so does the bigram."""
  starts = np.linspace(1, len(held) - CONTEXT - 2, windows).astype(np.int64)
  return (np.stack([held[s:s + CONTEXT] for s in starts]),
          np.stack([held[s + 1:s + CONTEXT + 1] for s in starts]))


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


def learning_rate(i: int, steps: int, peak: float = PEAK_LR) -> float:
  """Linear warmup over WARMUP steps to peak, then a cosine down to FINAL_LR at the end."""
  if i < WARMUP:
    return peak * (i + 1) / WARMUP
  t = (i - WARMUP) / max(1, steps - WARMUP)
  return FINAL_LR + (peak - FINAL_LR) * 0.5 * (1 + math.cos(math.pi * t))


def make_step(model, opt):
  """One jitted training step: (x, y) int32 (BATCH, CONTEXT), lr float32 (1,) -> the mean
  cross-entropy. The learning rate is a tensor argument: AdamW's update reads opt.lr, and a
  Python float there would be frozen into the recorded kernels."""
  @kg.jit
  def step(x, y, lr):
    opt.zero_grad()
    opt.lr = lr
    logits = model(x).reshape(BATCH * CONTEXT, VOCAB)
    loss = logits.cross_entropy(y.reshape(BATCH * CONTEXT))
    loss.backward()
    opt.step(loss)
    return loss
  return step


def held_out_loss(model, x: np.ndarray, y: np.ndarray, device: str) -> float:
  """Mean cross-entropy of the model over the held-out windows (x, y), every position."""
  total = 0.0
  with kg.no_grad():
    for i in range(0, len(x), BATCH):
      xb, yb = x[i:i + BATCH], y[i:i + BATCH]
      logits = model(kg.Tensor(xb, device=device)).reshape(len(xb) * CONTEXT, VOCAB)
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
  held = eval_windows(held_ids)
  ppl, k = bigram_perplexity(train_ids, *held, VOCAB)
  config = {"vocab": VOCAB, "dim": DIM, "layers": LAYERS, "heads": HEADS, "context": CONTEXT,
            "batch": BATCH, "steps": args.steps, "peak_lr": args.peak_lr, "warmup": WARMUP,
            "final_lr": FINAL_LR, "weight_decay": 0.01, "seed": SEED, "device": device}
  log = {"config": config, "bigram": {"perplexity": ppl, "k": k},
         "tokens": {"train": len(train_ids), "held_out": len(held_ids),
                    "scored": int(held[1].size)}, "curve": [], "held_out_curve": []}
  print(f"bigram perplexity on the {held[1].size} held-out targets: {ppl:.2f} (k={k})",
        flush=True)
  return tok, train_ids, held, log


def evaluate(model, held, log: dict, step: int, device: str) -> bool:
  """Score the held-out windows into the log; False when the loss is not finite (diverged)."""
  loss = held_out_loss(model, *held, device)
  if not math.isfinite(loss):
    print(f"held-out loss {loss} at step {step}: not saved, stopping", flush=True)
    return False
  log["held_out"] = {"step": step, "loss": loss, "perplexity": math.exp(loss)}
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
  log["curve"] = [e for e in previous["curve"] if e["step"] <= offset]
  log["held_out_curve"] = previous.get("held_out_curve", [])
  log["segments"] = previous.get("segments", [{"from_step": 0, "steps": offset}])
  log["segments"].append({"from_step": offset, "steps": args.steps,
                          "peak_lr": args.peak_lr,
                          "note": "resumed: new warmup + cosine, AdamW state afresh"})
  print(f"resumed at step {offset}", flush=True)
  return offset


def train(args, device: str) -> None:
  tok, train_ids, held, log = prepare(args, device)
  kg.nn.manual_seed(SEED)
  model = TinyGPT(VOCAB, DIM, LAYERS, HEADS, CONTEXT)
  log["config"]["parameters"] = sum(int(np.prod(p.shape)) for p in model.parameters())
  print(f"model: {log['config']['parameters']} parameters on {device}", flush=True)
  offset = resume(model, log, args, device) if args.resume else 0
  rng = np.random.default_rng(SEED + offset)
  opt = kg.optim.AdamW(list(model.parameters()), lr=PEAK_LR, weight_decay=0.01)
  step, started, recent = make_step(model, opt), time.time(), []
  for i in range(args.steps):
    starts = rng.integers(0, len(train_ids) - CONTEXT - 1, BATCH)
    x = np.stack([train_ids[s:s + CONTEXT] for s in starts])
    y = np.stack([train_ids[s + 1:s + CONTEXT + 1] for s in starts])
    lr = learning_rate(i, args.steps, args.peak_lr)
    recent.append(step(kg.Tensor(x, device=device), kg.Tensor(y, device=device),
                       kg.Tensor([lr], device=device)).item())
    if (i + 1) % args.log_every == 0:
      entry = {"step": offset + i + 1, "loss": float(np.mean(recent)), "lr": lr,
               "seconds": round(time.time() - started, 1)}
      log["curve"].append(entry)
      print(json.dumps(entry), flush=True)
      recent = []
    if (i + 1) % args.save_every == 0 or i + 1 == args.steps:
      if not evaluate(model, held, log, offset + i + 1, device):
        return
      save(model, tok, log, args.out)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=900)
  parser.add_argument("--log-every", type=int, default=25)
  parser.add_argument("--save-every", type=int, default=100)
  parser.add_argument("--out", type=Path, default=OUT)
  parser.add_argument("--peak-lr", type=float, default=PEAK_LR,
                      help="the learning rate the warmup reaches (a resumed run may want less)")
  parser.add_argument("--resume", action="store_true",
                      help="continue from the weights and log in --out (e.g. the committed model)")
  parser.add_argument("--tokenizer", type=Path, default=None,
                      help="a tokenizer.json this script wrote (skips training the tokenizer)")
  parser.add_argument("--device", default=None,
                      help="kernelgen device (default WEBGPU when available, else PYTHON)")
  args = parser.parse_args()
  device = args.device or ("WEBGPU" if kg.Device.available("WEBGPU") else "PYTHON")
  kg.Device.DEFAULT = device
  train(args, device)


if __name__ == "__main__":
  main()
