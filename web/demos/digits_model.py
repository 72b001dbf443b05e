"""The digits demo's forward pass as a kernelgen program with a named input, exported at build
time (build.sh: python -m kernelgen export web/demos/digits_model.py --out .../digits_bundle)
so the demo classifies without Python in the page:
probs = softmax(relu(pixels/16 @ w1 + b1) @ w2 + b2).
"""
import base64
import json
import os

import kernelgen as kg

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits_weights.json")) as f:
  WEIGHTS = json.load(f)


def param(name):
  """A float32 weight from digits_weights.json (little-endian base64), as a realized Tensor."""
  entry = WEIGHTS[name]
  values = memoryview(base64.b64decode(entry["data"])).cast("f")
  return kg.Tensor(values, device="PYTHON").reshape(*entry["shape"])


pixels = kg.Tensor.empty(1, 64, name="pixels", device="PYTHON")  # the 8x8 input, 0..16
w1, b1, w2, b2 = param("w1"), param("b1"), param("w2"), param("b2")
hidden = ((pixels / 16) @ w1 + b1).relu()
logits = hidden @ w2 + b2
out = {"probs": logits.contiguous().softmax(axis=-1)}  # class probabilities, shape (1, 10)
