"""Train the digits demo's network: a 64-32-10 MLP on scikit-learn's 8x8 digits, with kernelgen.

    python examples/train_digits.py            # writes web/demos/digits_weights.json
    python examples/train_digits.py --device PYTHON --epochs 5

The forward pass, the gradients (kernelgen's autograd) and the Adam update (kg.optim) run on a
kernelgen device: WEBGPU where an adapter is available, else PYTHON (the pure-Python
interpreter: correct but slow). numpy only prepares the data (shuffling, random shifts).

The data set ships inside scikit-learn (no download). Pixels are 0..16 (each is the count of
ink in a 4x4 block of a 32x32 bitmap); the network sees pixels / 16. A fixed seed and a fixed
stratified split make the run repeatable; the held-out accuracy is printed and written into the
weight file next to the weights (float32, little-endian, base64) and ten held-out samples (one
per class) that the demo page offers as inputs and the browser tests classify.
"""
from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

import numpy as np

import kernelgen as kg

SEED = 0
HIDDEN = 32
EPOCHS = 300
BATCH = 64
LEARNING_RATE = 3e-3
WEIGHT_DECAY = 1e-4
TEST_FRACTION = 0.2
OUT = Path(__file__).resolve().parent.parent / "web" / "demos" / "digits_weights.json"


def load_split():
  """(x_train, y_train, x_test, y_test): pixels 0..16 as float32, a stratified 80/20 split."""
  from sklearn.datasets import load_digits
  from sklearn.model_selection import train_test_split
  digits = load_digits()
  x, y = digits.data.astype(np.float32), digits.target.astype(np.int64)
  x_train, x_test, y_train, y_test = train_test_split(
    x, y, test_size=TEST_FRACTION, random_state=SEED, stratify=y)
  return x_train, y_train, x_test, y_test


def init_params(rng) -> dict:
  """He-initialised weights, zero biases (float64 draws, stored as float32)."""
  return {"w1": rng.standard_normal((64, HIDDEN)) * np.sqrt(2 / 64),
          "b1": np.zeros(HIDDEN),
          "w2": rng.standard_normal((HIDDEN, 10)) * np.sqrt(2 / HIDDEN),
          "b2": np.zeros(10)}


def forward(params: dict, pixels) -> kg.Tensor:
  """The logits of pixels 0..16 (a Tensor of shape (n, 64)) — the page's forward pass."""
  hidden = ((pixels / 16) @ params["w1"] + params["b1"]).relu()
  return hidden @ params["w2"] + params["b2"]


def loss_of(params: dict, pixels, onehot) -> kg.Tensor:
  """Mean cross-entropy plus the L2 penalty WEIGHT_DECAY/2 * |w|^2 on the weights."""
  ce = -(forward(params, pixels).log_softmax(-1) * onehot).sum(-1).mean()
  l2 = (params["w1"] * params["w1"]).sum() + (params["w2"] * params["w2"]).sum()
  return ce + (WEIGHT_DECAY / 2) * l2


def shifted(pixels: np.ndarray, rng) -> np.ndarray:
  """Half the 8x8 images moved by -1, 0 or 1 pixels in x and y (zeros fill in): hand-drawn
  digits are rarely placed exactly where the data set's are."""
  images = np.pad(pixels.reshape(-1, 8, 8), ((0, 0), (1, 1), (1, 1)))
  moved = rng.random(len(pixels)) < 0.5
  dy, dx = np.where(moved, rng.integers(0, 3, (2, len(pixels))), 1)
  rows = np.arange(8)[None, :, None] + dy[:, None, None]
  cols = np.arange(8)[None, None, :] + dx[:, None, None]
  return images[np.arange(len(pixels))[:, None, None], rows, cols].reshape(-1, 64)


def train(x: np.ndarray, y: np.ndarray, rng, device: str, epochs: int = EPOCHS,
          log_every: int = 0) -> dict:
  """Adam (kg.optim) on shuffled, randomly shifted mini-batches; returns float32 arrays."""
  params = {k: kg.Tensor(v.astype(np.float32), device=device, requires_grad=True)
            for k, v in init_params(rng).items()}
  opt = kg.optim.Adam(list(params.values()), lr=LEARNING_RATE)
  eye = np.eye(10, dtype=np.float32)
  step = 0
  for epoch in range(epochs):
    order = rng.permutation(len(x))
    for start in range(0, len(x), BATCH):
      batch = order[start:start + BATCH]
      pixels = kg.Tensor(shifted(x[batch], rng), device=device)
      onehot = kg.Tensor(eye[y[batch]], device=device)
      opt.zero_grad()
      loss = loss_of(params, pixels, onehot)
      loss.backward()
      opt.step(loss)     # the loss is realized in the same call, for logging
      step += 1
    if log_every and (epoch + 1) % log_every == 0:
      print(f"epoch {epoch + 1}: step {step}, last batch loss {loss.item():.4f}", flush=True)
  return {k: v.numpy() for k, v in params.items()}


def accuracy(params: dict, x: np.ndarray, y: np.ndarray, device: str) -> float:
  with kg.no_grad():
    tensors = {k: kg.Tensor(v, device=device) for k, v in params.items()}
    predicted = forward(tensors, kg.Tensor(x, device=device)).argmax(-1).numpy()
  return float((predicted == y).mean())


def encode(array: np.ndarray) -> dict:
  data = np.ascontiguousarray(array, dtype="<f4").tobytes()
  return {"shape": list(array.shape), "data": base64.b64encode(data).decode("ascii")}


def samples(x: np.ndarray, y: np.ndarray) -> list[dict]:
  """The first held-out digit of each class."""
  first = [int(np.flatnonzero(y == label)[0]) for label in range(10)]
  return [{"label": int(y[i]), "pixels": [int(p) for p in x[i]]} for i in first]


def weight_file(params: dict, split, train_acc: float, test_acc: float) -> dict:
  x_train, y_train, x_test, y_test = split
  return {
    "format": "kernelgen-digits-mlp/1",
    "about": "64-32-10 MLP: softmax(relu(pixels/16 @ w1 + b1) @ w2 + b2); pixels 0..16, "
             "row-major 8x8; arrays are float32 little-endian, base64",
    "trained_by": "examples/train_digits.py (kernelgen autograd + kg.optim.Adam)",
    "seed": SEED,
    "accuracy": {"train": round(train_acc, 4), "test": round(test_acc, 4),
                 "n_train": len(y_train), "n_test": len(y_test)},
    **{name: encode(params[name]) for name in ("w1", "b1", "w2", "b2")},
    "samples": samples(x_test, y_test),
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", type=Path, default=OUT, help=f"weight file (default {OUT})")
  parser.add_argument("--device", default=None,
                      help="kernelgen device (default WEBGPU when available, else PYTHON)")
  parser.add_argument("--epochs", type=int, default=EPOCHS, help=f"epochs (default {EPOCHS})")
  args = parser.parse_args()
  device = args.device or ("WEBGPU" if kg.Device.available("WEBGPU") else "PYTHON")
  print(f"training on {device}", flush=True)
  split = load_split()
  x_train, y_train, x_test, y_test = split
  params = train(x_train, y_train, np.random.default_rng(SEED), device, args.epochs,
                 log_every=10)
  train_acc = accuracy(params, x_train, y_train, device)
  test_acc = accuracy(params, x_test, y_test, device)
  print(f"train accuracy {train_acc:.4f} ({len(y_train)} digits), "
        f"held-out test accuracy {test_acc:.4f} ({len(y_test)} digits)")
  args.out.write_text(json.dumps(weight_file(params, split, train_acc, test_acc)) + "\n")
  print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
  main()
