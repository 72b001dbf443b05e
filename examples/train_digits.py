"""Train the digits demo's network: a 64-32-10 MLP on scikit-learn's 8x8 digits, numpy only.

    python examples/train_digits.py            # writes web/demos/digits_weights.json

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
  """He-initialised weights, zero biases."""
  return {"w1": rng.standard_normal((64, HIDDEN)) * np.sqrt(2 / 64),
          "b1": np.zeros(HIDDEN),
          "w2": rng.standard_normal((HIDDEN, 10)) * np.sqrt(2 / HIDDEN),
          "b2": np.zeros(10)}


def forward(params: dict, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(hidden activations, class probabilities) of pixels 0..16 — the page's forward pass."""
  hidden = np.maximum(pixels / 16 @ params["w1"] + params["b1"], 0)
  logits = hidden @ params["w2"] + params["b2"]
  exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
  return hidden, exp / exp.sum(axis=-1, keepdims=True)


def gradients(params: dict, pixels: np.ndarray, labels: np.ndarray) -> dict:
  """Gradients of the mean cross-entropy plus L2 weight decay."""
  hidden, probs = forward(params, pixels)
  dlogits = probs.copy()
  dlogits[np.arange(len(labels)), labels] -= 1
  dlogits /= len(labels)
  dhidden = (dlogits @ params["w2"].T) * (hidden > 0)
  grads = {"w2": hidden.T @ dlogits, "b2": dlogits.sum(0),
           "w1": (pixels / 16).T @ dhidden, "b1": dhidden.sum(0)}
  for name in ("w1", "w2"):
    grads[name] += WEIGHT_DECAY * params[name]
  return grads


def shifted(pixels: np.ndarray, rng) -> np.ndarray:
  """Half the 8x8 images moved by -1, 0 or 1 pixels in x and y (zeros fill in): hand-drawn
  digits are rarely placed exactly where the data set's are."""
  images = np.pad(pixels.reshape(-1, 8, 8), ((0, 0), (1, 1), (1, 1)))
  moved = rng.random(len(pixels)) < 0.5
  dy, dx = np.where(moved, rng.integers(0, 3, (2, len(pixels))), 1)
  rows = np.arange(8)[None, :, None] + dy[:, None, None]
  cols = np.arange(8)[None, None, :] + dx[:, None, None]
  return images[np.arange(len(pixels))[:, None, None], rows, cols].reshape(-1, 64)


def train(x: np.ndarray, y: np.ndarray, rng) -> dict:
  """Adam on shuffled, randomly shifted mini-batches for EPOCHS epochs."""
  params = init_params(rng)
  moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in params.items()}
  beta1, beta2, step = 0.9, 0.999, 0
  for _ in range(EPOCHS):
    order = rng.permutation(len(x))
    for start in range(0, len(x), BATCH):
      batch = order[start:start + BATCH]
      step += 1
      for name, grad in gradients(params, shifted(x[batch], rng), y[batch]).items():
        m, v = moments[name]
        m[:] = beta1 * m + (1 - beta1) * grad
        v[:] = beta2 * v + (1 - beta2) * grad * grad
        m_hat, v_hat = m / (1 - beta1 ** step), v / (1 - beta2 ** step)
        params[name] -= LEARNING_RATE * m_hat / (np.sqrt(v_hat) + 1e-8)
  return {k: v.astype(np.float32) for k, v in params.items()}


def accuracy(params: dict, x: np.ndarray, y: np.ndarray) -> float:
  return float((forward(params, x)[1].argmax(-1) == y).mean())


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
    "trained_by": "examples/train_digits.py",
    "seed": SEED,
    "accuracy": {"train": round(train_acc, 4), "test": round(test_acc, 4),
                 "n_train": len(y_train), "n_test": len(y_test)},
    **{name: encode(params[name]) for name in ("w1", "b1", "w2", "b2")},
    "samples": samples(x_test, y_test),
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", type=Path, default=OUT, help=f"weight file (default {OUT})")
  args = parser.parse_args()
  split = load_split()
  x_train, y_train, x_test, y_test = split
  params = train(x_train, y_train, np.random.default_rng(SEED))
  train_acc, test_acc = accuracy(params, x_train, y_train), accuracy(params, x_test, y_test)
  print(f"train accuracy {train_acc:.4f} ({len(y_train)} digits), "
        f"held-out test accuracy {test_acc:.4f} ({len(y_test)} digits)")
  args.out.write_text(json.dumps(weight_file(params, split, train_acc, test_acc)) + "\n")
  print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
  main()
