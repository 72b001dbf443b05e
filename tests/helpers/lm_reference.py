"""numpy's forward pass of examples/tiny_gpt.py's TinyGPT, the oracle for the Generate demo."""
import json

import numpy as np

import kernelgen as kg


def numpy_weights(folder) -> tuple[dict, dict]:
  """({name: float32 array}, config) of a weights.safetensors written by examples/train_lm.py."""
  weights, meta = kg.load(str(folder / "weights.safetensors"), with_metadata=True)
  return ({k: v.numpy().astype(np.float32) for k, v in weights.items()},
          json.loads(meta["config"]))


def layernorm(x, w, b):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-5) * w + b


def gelu(x):
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def next_logits(w: dict, config: dict, ids: list) -> np.ndarray:
  """numpy's TinyGPT (examples/tiny_gpt.py): the logits after the last of ids (the window)."""
  ids = ids[-config["context"]:]
  t, d, h = len(ids), config["dim"], config["heads"]
  x = w["tokens.weight"][ids] + w["positions.weight"][:t]
  causal = np.where(np.tril(np.ones((t, t))) > 0, 0.0, -1e9)
  for i in range(config["layers"]):
    p = {k[len(f"blocks.{i}."):]: v for k, v in w.items() if k.startswith(f"blocks.{i}.")}
    y = layernorm(x, p["ln1.weight"], p["ln1.bias"]) @ p["qkv.weight"].T + p["qkv.bias"]
    q, k, v = (y[:, j * d:(j + 1) * d].reshape(t, h, d // h).transpose(1, 0, 2) for j in range(3))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(d // h) + causal
    a = np.exp(s - s.max(-1, keepdims=True))
    a = (a / a.sum(-1, keepdims=True)) @ v
    x = x + a.transpose(1, 0, 2).reshape(t, d) @ p["proj.weight"].T + p["proj.bias"]
    y = gelu(layernorm(x, p["ln2.weight"], p["ln2.bias"]) @ p["up.weight"].T + p["up.bias"])
    x = x + y @ p["down.weight"].T + p["down.bias"]
  return layernorm(x, w["ln.weight"], w["ln.bias"])[-1] @ w["tokens.weight"].T
