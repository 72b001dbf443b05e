"""Train the Generate demo's language model: a small GPT on the Python standard library's own
source, with kernelgen (autograd, kg.optim.AdamW, kg.jit), and a BPE tokenizer trained by
kg.text.train_bpe.

    python examples/train_lm.py                 # writes web/demos/lm/{tokenizer.json, ...}
    python examples/train_lm.py --steps 200 --device PYTHON

The corpus is every top-level module of this Python's standard library (sysconfig's "stdlib"
folder, *.py, sorted by name); every 10th file is held out. Files are joined with the
<|endoftext|> token. Training draws random windows of CONTEXT + 1 tokens (a fixed seed). The
held-out perplexity is measured on consecutive windows of the held-out files, against a bigram
model (add-k smoothing, k chosen on the training tokens) scored on the same targets. Writes the
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
VOCAB, DIM, LAYERS, HEADS, CONTEXT = 1024, 128, 3, 4, 64
BATCH = 12
LR_PHASES = ((0.75, 2e-3), (0.25, 7e-4))   # (fraction of steps, learning rate)
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


def bigram_perplexity(train: np.ndarray, held: np.ndarray, vocab: int) -> tuple[float, float]:
  """(perplexity, k) of the add-k bigram on held's targets; k picked from a small grid on a
  tenth of the training tokens held back from the counts."""
  def fit(tokens):
    counts = np.zeros((vocab, vocab), dtype=np.float64)
    np.add.at(counts, (tokens[:-1], tokens[1:]), 1)
    return counts

  def nll(counts, tokens, k):
    rows = counts[tokens[:-1]]
    p = (rows[np.arange(len(rows)), tokens[1:]] + k) / (rows.sum(1) + k * vocab)
    return float(-np.log(p).mean())
  cut = len(train) * 9 // 10
  part = fit(train[:cut])
  k = min((0.003, 0.01, 0.03, 0.1, 0.3, 1.0), key=lambda k: nll(part, train[cut:], k))
  return math.exp(nll(fit(train), held, k)), k


def make_step(model, opt):
  """One jitted training step: (x, y) int32 (BATCH, CONTEXT) -> the mean cross-entropy."""
  @kg.jit
  def step(x, y):
    opt.zero_grad()
    logits = model(x).reshape(BATCH * CONTEXT, VOCAB)
    loss = logits.cross_entropy(y.reshape(BATCH * CONTEXT))
    loss.backward()
    opt.step(loss)
    return loss
  return step


def held_out_loss(model, held: np.ndarray, device: str, windows: int = 64) -> float:
  """Mean cross-entropy over `windows` consecutive CONTEXT-token windows of the held-out
  stream (evenly spaced), every position scored."""
  starts = np.linspace(0, len(held) - CONTEXT - 2, windows).astype(np.int64)
  total = 0.0
  with kg.no_grad():
    for i in range(0, windows, BATCH):
      x = np.stack([held[s:s + CONTEXT] for s in starts[i:i + BATCH]])
      y = np.stack([held[s + 1:s + CONTEXT + 1] for s in starts[i:i + BATCH]])
      logits = model(kg.Tensor(x, device=device)).reshape(len(x) * CONTEXT, VOCAB)
      loss = logits.cross_entropy(kg.Tensor(y.reshape(-1), device=device))
      total += loss.item() * len(x)
  return total / windows


def save(model, tok, log: dict, out: Path) -> None:
  """The tokenizer, float16 weights and the log, into out/."""
  out.mkdir(parents=True, exist_ok=True)
  (out / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
  weights = {name: kg.Tensor(p.numpy().astype(np.float16)) for name, p in
             model.state_dict().items()}
  kg.save(weights, str(out / "weights.safetensors"),
          metadata={"config": json.dumps(log["config"])})
  (out / "train_log.json").write_text(json.dumps(log, indent=1), encoding="utf-8")


def resume(model, log: dict, args, device: str) -> int:
  """Load the weights and curve a previous run saved in args.out (its optimizer state is not
  kept: AdamW starts afresh); returns the step it had reached."""
  previous = json.loads((args.out / "train_log.json").read_text())
  weights = kg.load(str(args.out / "weights.safetensors"))
  model.load_state_dict({k: v.cast(kg.dtypes.float32).to(device) for k, v in weights.items()})
  offset = previous["held_out"]["step"]
  log["curve"] = [e for e in previous["curve"] if e["step"] <= offset]
  log["segments"] = previous.get("segments", [{"steps": offset, **{
    k: previous["config"][k] for k in ("batch", "lr_phases")}}])
  log["segments"].append({"from_step": offset, "batch": BATCH, "lr_phases": LR_PHASES,
                          "steps": args.steps, "note": "AdamW state reset on resume"})
  print(f"resumed at step {offset}", flush=True)
  return offset


def train(args, device: str) -> None:
  train_texts, held_texts = corpus()
  t0 = time.time()
  tok = kg.text.train_bpe(train_texts, vocab_size=VOCAB)
  train_ids, held_ids = token_stream(tok, train_texts), token_stream(tok, held_texts)
  print(f"tokenizer: {time.time() - t0:.1f} s; {len(train_ids)} training tokens, "
        f"{len(held_ids)} held-out", flush=True)
  ppl, k = bigram_perplexity(train_ids, held_ids, VOCAB)
  config = {"vocab": VOCAB, "dim": DIM, "layers": LAYERS, "heads": HEADS, "context": CONTEXT,
            "batch": BATCH, "steps": args.steps, "lr_phases": LR_PHASES, "seed": SEED,
            "device": device}
  log = {"config": config, "bigram": {"perplexity": ppl, "k": k},
         "tokens": {"train": len(train_ids), "held_out": len(held_ids)}, "curve": []}
  print(f"bigram held-out perplexity {ppl:.2f} (k={k})", flush=True)
  kg.nn.manual_seed(SEED)
  model = TinyGPT(VOCAB, DIM, LAYERS, HEADS, CONTEXT)
  config["parameters"] = sum(int(np.prod(p.shape)) for p in model.parameters())
  print(f"model: {config['parameters']} parameters on {device}", flush=True)
  offset = resume(model, log, args, device) if args.resume else 0
  rng = np.random.default_rng(SEED + offset)
  opt = kg.optim.AdamW(list(model.parameters()), lr=LR_PHASES[0][1], weight_decay=0.01)
  phase_ends = np.cumsum([f for f, _ in LR_PHASES]) * args.steps
  step, phase, started, recent = make_step(model, opt), 0, time.time(), []
  for i in range(args.steps):
    if i >= phase_ends[phase]:
      phase += 1
      opt.lr = LR_PHASES[phase][1]   # frozen into the jitted step's kernels: record anew
      step = make_step(model, opt)
    starts = rng.integers(0, len(train_ids) - CONTEXT - 1, BATCH)
    x = np.stack([train_ids[s:s + CONTEXT] for s in starts])
    y = np.stack([train_ids[s + 1:s + CONTEXT + 1] for s in starts])
    recent.append(step(kg.Tensor(x, device=device), kg.Tensor(y, device=device)).item())
    if (i + 1) % args.log_every == 0:
      entry = {"step": offset + i + 1, "loss": float(np.mean(recent)), "lr": opt.lr,
               "seconds": round(time.time() - started, 1)}
      log["curve"].append(entry)
      print(json.dumps(entry), flush=True)
      recent = []
    if (i + 1) % args.save_every == 0 or i + 1 == args.steps:
      held = held_out_loss(model, held_ids, device)
      if not math.isfinite(held):   # diverged: keep the last good checkpoint, stop
        print(f"held-out loss {held} at step {offset + i + 1}: not saved, stopping", flush=True)
        return
      log["held_out"] = {"step": offset + i + 1, "loss": held, "perplexity": math.exp(held)}
      print(json.dumps(log["held_out"]), flush=True)
      save(model, tok, log, args.out)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=800, help="steps (after --resume's)")
  parser.add_argument("--log-every", type=int, default=25)
  parser.add_argument("--save-every", type=int, default=100)
  parser.add_argument("--out", type=Path, default=OUT)
  parser.add_argument("--resume", action="store_true",
                      help="continue from the weights and log in --out (a new optimizer)")
  parser.add_argument("--device", default=None,
                      help="kernelgen device (default WEBGPU when available, else PYTHON)")
  args = parser.parse_args()
  device = args.device or ("WEBGPU" if kg.Device.available("WEBGPU") else "PYTHON")
  kg.Device.DEFAULT = device
  train(args, device)


if __name__ == "__main__":
  main()
