"""The digits demo's "Train in the page": a kernelgen program the page runs in its worker
(Pyodide + WEBGPU), once per chunk of training steps.

The page prepends three names: STEPS (Adam steps to take in this run), RESET (True on a fresh
start) and, on a fresh start only, DATA (digits_data.json: the train/held-out split that build.sh
wrote from scikit-learn's digits, pixels 0..16 as base64 uint8). The model, its Adam state and
the data live on the device between runs, in a module kept in sys.modules; each run takes STEPS
full-batch steps of the 64-32-10 MLP of examples/train_digits.py (no shifted copies: no numpy
here; under kg.jit: a step's kernels are recorded once, then replayed) and leaves in `out` [loss
of the last step, held-out accuracy, steps so far, then the float32 weights w1, b1, w2, b2
flattened] so the page can plot and classify with them.
"""
import base64
import random
import sys
import types

import kernelgen as kg

STATE = "kernelgen_digits_training"
HIDDEN = 32
LEARNING_RATE = 0.02
SEED = 0


def pixels_of(text):
  """base64 uint8 pixels 0..16 as a float32 (n, 64) Tensor of pixels / 16."""
  raw = base64.b64decode(text)
  return kg.Tensor([p / 16 for p in raw]).reshape(len(raw) // 64, 64)


def onehot_of(labels):
  return kg.Tensor([float(label == k) for label in labels for k in range(10)]).reshape(-1, 10)


def init_params(rng):
  """He-initialised weights (Python's random, seeded), zero biases; trainable tensors."""
  def normal(rows, cols):
    scale = (2 / rows) ** 0.5
    return kg.Tensor([rng.gauss(0, scale) for _ in range(rows * cols)]).reshape(rows, cols)
  params = {"w1": normal(64, HIDDEN), "b1": kg.Tensor.zeros(HIDDEN),
            "w2": normal(HIDDEN, 10), "b2": kg.Tensor.zeros(10)}
  for p in params.values():
    p.realize()
    p.requires_grad_()
  return params


def forward(params, x):
  hidden = (x @ params["w1"] + params["b1"]).relu()
  return hidden @ params["w2"] + params["b2"]


def start(data):
  """A fresh training state: random weights, Adam, the data on the device."""
  train = types.ModuleType(STATE)
  train.x = pixels_of(data["x_train"]).realize()
  train.onehot = onehot_of(base64.b64decode(data["y_train"])).realize()
  train.x_test = pixels_of(data["x_test"]).realize()
  train.y_test = kg.Tensor([float(v) for v in base64.b64decode(data["y_test"])]).realize()
  train.params = init_params(random.Random(SEED))
  train.opt = kg.optim.Adam(list(train.params.values()), lr=LEARNING_RATE)
  train.adam_step = kg.jit(lambda: adam_step(train))   # later steps replay its kernels
  train.steps = 0
  sys.modules[STATE] = train
  return train


def adam_step(train):
  """One full-batch Adam step on the mean cross-entropy; returns the loss tensor."""
  train.opt.zero_grad()
  loss = -(forward(train.params, train.x).log_softmax(-1) * train.onehot).sum(-1).mean()
  loss.backward()
  train.opt.step(loss)
  return loss


def step(train):
  """adam_step under kg.jit: from the third step on, its recorded kernels replayed."""
  loss = train.adam_step()
  train.steps += 1
  return loss


def report(train, loss):
  """[loss, held-out accuracy, steps, w1..., b1..., w2..., b2...] as one float32 tensor."""
  with kg.no_grad():
    predicted = forward(train.params, train.x_test).argmax(-1).cast("float32")
    accuracy = (predicted == train.y_test).cast("float32").mean()
    head = kg.stack([loss.detach().reshape(()), accuracy, kg.Tensor(float(train.steps))])
    flat = [train.params[k].detach().reshape(-1) for k in ("w1", "b1", "w2", "b2")]
    return kg.cat([head, *flat]).contiguous()


def train_chunk(steps, reset, data=None):
  train = sys.modules.get(STATE)
  if reset or train is None:
    train = start(data)
  loss = None
  for _ in range(steps):
    loss = step(train)
  if loss is None:   # STEPS = 0: just report (the loss of the current weights)
    with kg.no_grad():
      loss = -(forward(train.params, train.x).log_softmax(-1) * train.onehot).sum(-1).mean()
  return report(train, loss)


out = train_chunk(STEPS, RESET, globals().get("DATA"))  # noqa: F821 (the page defines them)
