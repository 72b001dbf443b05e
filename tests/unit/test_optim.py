"""kg.optim: SGD (momentum, nesterov, weight decay), Adam and AdamW. Steps are checked against
torch's update formulas written in numpy, fed with jax's gradients (an independent autodiff), to
1e-5 relative in float32; the step is one realize call of a few kernels."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
import kernelgen.realize as realize_mod

from train_util import jax, jnp, need_jax, python_default, rel_err  # noqa: F401  (the fixture)

nn, optim = kg.nn, kg.optim


def _data(seed=0):
  rng = np.random.default_rng(seed)
  return rng.standard_normal((6, 5)).astype(np.float32), \
    np.eye(3, dtype=np.float32)[rng.integers(0, 3, 6)]


def _model():
  return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


def _loss(model, x, y):
  return -(model(kg.Tensor(x)).log_softmax(-1) * kg.Tensor(y)).sum(-1).mean()


def _jax_grads(params, x, y):
  need_jax()

  def loss(p):
    h = jnp.tanh(jnp.matmul(x, p["0.weight"].T, precision="highest") + p["0.bias"])
    out = jnp.matmul(h, p["2.weight"].T, precision="highest") + p["2.bias"]
    return -(jax.nn.log_softmax(out, -1) * y).sum(-1).mean()
  grads = jax.grad(loss)({k: jnp.asarray(v) for k, v in params.items()})
  return {k: np.asarray(v) for k, v in grads.items()}


def _sgd_ref(p, g, state, lr, momentum=0.0, dampening=0.0, wd=0.0, nesterov=False):
  g = g + wd * p
  if momentum:
    buf = g if state.get("buf") is None else momentum * state["buf"] + (1 - dampening) * g
    state["buf"] = buf
    g = g + momentum * buf if nesterov else buf
  return p - lr * g


def _adam_ref(p, g, state, lr, betas=(0.9, 0.999), eps=1e-8, wd=0.0, decoupled=False):
  b1, b2 = betas
  t = state["t"] = state.get("t", 0) + 1
  if decoupled:
    p = p * (1 - lr * wd)
  else:
    g = g + wd * p
  m = state["m"] = b1 * state.get("m", 0) + (1 - b1) * g
  v = state["v"] = b2 * state.get("v", 0) + (1 - b2) * g * g
  denom = np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps
  return p - lr / (1 - b1 ** t) * m / denom


CONFIGS = {
  "sgd": (lambda ps: optim.SGD(ps, lr=0.1), lambda p, g, s: _sgd_ref(p, g, s, 0.1)),
  "sgd momentum wd": (lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1,
                                           weight_decay=0.01),
                      lambda p, g, s: _sgd_ref(p, g, s, 0.05, 0.9, 0.1, 0.01)),
  "sgd nesterov": (lambda ps: optim.SGD(ps, lr=0.05, momentum=0.8, nesterov=True),
                   lambda p, g, s: _sgd_ref(p, g, s, 0.05, 0.8, nesterov=True)),
  "adam": (lambda ps: optim.Adam(ps, lr=0.01), lambda p, g, s: _adam_ref(p, g, s, 0.01)),
  "adam l2": (lambda ps: optim.Adam(ps, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1),
              lambda p, g, s: _adam_ref(p, g, s, 0.01, (0.8, 0.99), wd=0.1)),
  "adamw": (lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1),
            lambda p, g, s: _adam_ref(p, g, s, 0.01, wd=0.1, decoupled=True)),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_steps_match_reference(name):
  make, ref = CONFIGS[name]
  model = _model()
  opt = make(model.parameters())
  params = {k: v.numpy() for k, v in model.named_parameters()}
  states = {k: {} for k in params}
  for step in range(3):     # several steps: momentum and moments carry over
    x, y = _data(step)
    grads = _jax_grads(params, x, y)
    opt.zero_grad()
    _loss(model, x, y).backward()
    for k, p in model.named_parameters():
      assert rel_err(p.grad.numpy(), grads[k]) < 1e-5, k
    opt.step()
    params = {k: ref(params[k], grads[k], states[k]) for k in params}
    for k, p in model.named_parameters():
      err = rel_err(p.numpy(), params[k])
      assert err < 1e-5, f"{name} step {step}: {k} relative error {err:.3g}"


def _count_kernels(monkeypatch):
  counts = []
  original = realize_mod.schedule

  def counting(nodes, *limits):
    items = list(original(nodes, *limits))
    counts.append(len(items))
    return items
  monkeypatch.setattr(realize_mod, "schedule", counting)
  return counts


@pytest.mark.parametrize("name", ["sgd", "sgd momentum wd", "adam"])
def test_step_is_one_realize_of_few_kernels(name, monkeypatch):
  """All parameters' update (gradients included) is one realize call, a few kernels: the
  gradients' reductions, the gathered gradient, then one kernel per flat state vector."""
  model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 7), nn.Tanh(),
                        nn.Linear(7, 3))
  opt = CONFIGS[name][0](model.parameters())
  x, y = _data()
  steps = []
  for _ in range(2):
    opt.zero_grad()
    _loss(model, x, y).backward()
    steps.append(_count_kernels(monkeypatch))
    opt.step()
    monkeypatch.undo()
  # each step one realize: scheduled once, or (the second) served by the first step's kept plan
  # where both steps are one graph (Adam, plain SGD: optim.py initial_state)
  assert len(steps[0]) == 1 and len(steps[1]) <= 1, steps
  counts = steps[0]
  opt.zero_grad()
  _loss(model, x, y).backward()
  with kg.no_grad():
    grads_only = len(kg.compile([p.grad for p in model.parameters()], target="python"))
  states = {"sgd": 0, "sgd momentum wd": 1, "adam": 2}[name]
  # beyond the gradients' own kernels: at most the gathered gradient and one kernel per flat
  # vector (parameters, each state); per-tensor updates would add 6 * (1 + states)
  assert counts[0] <= grads_only + 2 + states, (counts, grads_only)
  assert counts[0] < grads_only + 6 * (1 + states)


def test_parameters_are_views_of_one_flat_buffer_and_reload():
  model = _model()
  opt = optim.SGD(model.parameters(), lr=0.1)
  x, y = _data()
  _loss(model, x, y).backward()
  opt.step()
  nodes = {p.node.src[0] for p in model.parameters()}
  assert len(nodes) == 1
  # replacing a parameter (load_state_dict) is seen by the next step
  model.load_state_dict({"2.bias": np.zeros(3, np.float32)}, strict=False)
  opt.zero_grad()
  _loss(model, x, y).backward()
  g = model[2].bias.grad.numpy()
  opt.step()
  np.testing.assert_allclose(model[2].bias.numpy(), -0.1 * g, rtol=1e-6, atol=1e-7)


def test_params_without_grad_are_left_alone():
  a = kg.Tensor([1.0, 2.0], requires_grad=True)
  b = kg.Tensor([3.0], requires_grad=True)
  opt = optim.Adam([a, b], lr=0.1, weight_decay=0.5)
  (a * a).sum().backward()
  opt.step()
  assert b.tolist() == [3.0]
  assert a.tolist() != [1.0, 2.0]


def test_training_reduces_loss():
  model = _model()
  opt = optim.Adam(model.parameters(), lr=0.05)
  x, y = _data(5)
  losses = []
  for _ in range(15):
    opt.zero_grad()
    loss = _loss(model, x, y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
  assert losses[-1] < 0.5 * losses[0], losses


def test_optimizer_errors():
  with pytest.raises(kg.DTypeError):
    optim.SGD([kg.Tensor([1.0])], lr=0.1)
  with pytest.raises(kg.KernelgenError):
    optim.SGD([], lr=0.1)
  with pytest.raises(kg.KernelgenError):
    optim.SGD([kg.Tensor([1.0], requires_grad=True)], lr=0.1, nesterov=True)


def test_train_digits_example_learns(monkeypatch):
  """examples/train_digits.py's kernelgen training loop on WEBGPU (lavapipe), a few epochs."""
  import importlib.util
  import sys
  from pathlib import Path

  from tools import wgpu_adapter
  wgpu_adapter()
  try:
    import sklearn  # noqa: F401
  except ImportError:
    pytest.fail("scikit-learn is needed for the digits data: .venv/bin/pip install scikit-learn")
  path = Path(__file__).resolve().parents[2] / "examples" / "train_digits.py"
  spec = importlib.util.spec_from_file_location("train_digits", path)
  td = importlib.util.module_from_spec(spec)
  monkeypatch.setitem(sys.modules, "train_digits", td)
  spec.loader.exec_module(td)
  x_train, y_train, x_test, y_test = td.load_split()
  params = td.train(x_train, y_train, np.random.default_rng(0), "WEBGPU", epochs=4)
  assert {k: v.shape for k, v in params.items()} == {"w1": (64, 32), "b1": (32,),
                                                      "w2": (32, 10), "b2": (10,)}
  acc = td.accuracy(params, x_test, y_test, "WEBGPU")
  assert acc > 0.85, acc


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_a_jitted_steps_second_step_compiles_nothing(name):
  """The first step reads the parameters and the optimizer state as every later step does
  (optim.py initial_state: views of one flat buffer, realized zero moments): kg.jit's first
  (eager) call compiles every kernel, its second (recording) call none. Before, the first step
  read the separate parameters and no state, so the second compiled the forward, backward and
  update again. Values: the same steps without kg.jit."""
  x, y = _data()

  def run(jit: bool):
    kg.nn.manual_seed(3)
    model = nn.Sequential(nn.Linear(5, 9), nn.Tanh(), nn.Linear(9, 3))
    opt = {"adam": optim.Adam, "adamw": optim.AdamW}[name](model.parameters(), lr=0.05)

    def step(xt, yt):
      opt.zero_grad()
      loss = -(model(xt).log_softmax(-1) * yt).sum(-1).mean()
      loss.backward()
      opt.step(loss)
      return loss
    step = kg.jit(step) if jit else step
    misses, losses = [], []
    for i in range(3):
      before = kg.cache_info()["misses"]
      losses.append(step(kg.Tensor(x + i), kg.Tensor(y)).item())
      misses.append(kg.cache_info()["misses"] - before)
    return misses, losses, model[0].weight.numpy()
  kg.clear_cache()
  misses, losses, weight = run(True)
  assert misses[0] > 0 and misses[1:] == [0, 0], misses
  _, plain_losses, plain_weight = run(False)
  np.testing.assert_allclose(losses, plain_losses, rtol=1e-6)
  np.testing.assert_allclose(weight, plain_weight, rtol=1e-6, atol=1e-7)
