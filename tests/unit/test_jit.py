"""kg.jit (tensor/jit.py): N calls of a jitted training step give the values of N eager steps
(losses, parameters, optimizer state) on PYTHON, WEBGPU and PTXSIM; the later calls replay the
recorded kernels (no realize); a new shape records again; replacing parameters outside the step
records again; what cannot be replayed is a typed error. numpy is the oracle for values only
through the eager path it is compared with (test_optim checks the eager steps against jax)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
import kernelgen.realize as realize_mod
from tools import DEVICES, device_runtime
from train_util import python_default  # noqa: F401  (autouse: PYTHON is the default device)

STEPS = 6


def _weights(seed=0):
  rng = np.random.default_rng(seed)
  return {"w1": rng.standard_normal((8, 6)).astype(np.float32) * 0.5,
          "b1": np.zeros(6, np.float32),
          "w2": rng.standard_normal((6, 3)).astype(np.float32) * 0.5}


def _batch(n, seed):
  rng = np.random.default_rng(seed)
  return rng.random((n, 8), dtype=np.float32), np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)]


def _setup(device, optimizer):
  params = {k: kg.Tensor(v, device=device, requires_grad=True) for k, v in _weights().items()}
  make = {"sgd": lambda ps: kg.optim.SGD(ps, lr=0.1, momentum=0.9),
          "adam": lambda ps: kg.optim.Adam(ps, lr=0.01),
          "adamw": lambda ps: kg.optim.AdamW(ps, lr=0.01)}[optimizer]
  return params, make(list(params.values()))


def _step(params, opt, x, y):
  opt.zero_grad()
  hidden = (x @ params["w1"] + params["b1"]).relu()
  loss = -((hidden @ params["w2"]).log_softmax(-1) * y).sum(-1).mean()
  loss.backward()
  opt.step(loss)
  return loss


def _train(device, optimizer, jitted, batches):
  """(losses, final parameters, final optimizer state, the jit) over `batches`."""
  params, opt = _setup(device, optimizer)
  fn = kg.jit(lambda x, y: _step(params, opt, x, y)) if jitted else \
    (lambda x, y: _step(params, opt, x, y))
  losses = [fn(kg.Tensor(x, device=device), kg.Tensor(y, device=device)).item()
            for x, y in batches]
  state = {k: v.numpy() for g in opt.groups for k, v in g.state.items()}
  return losses, {k: p.numpy() for k, p in params.items()}, state, (fn if jitted else None), opt


@pytest.fixture
def count_realizes(monkeypatch):
  """How many realize calls ran kernels (a replay runs none)."""
  calls = []
  real = realize_mod.realize

  def counting(nodes):
    if any(not n.realized for n in nodes):
      calls.append(1)
    return real(nodes)
  monkeypatch.setattr(realize_mod, "realize", counting)
  return calls


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_replayed_steps_equal_eager_steps(device, optimizer):
  device_runtime(device)
  batches = [_batch(4, seed) for seed in range(STEPS)]
  losses, params, state, _, _ = _train(device, optimizer, False, batches)
  got, got_params, got_state, fn, opt = _train(device, optimizer, True, batches)
  assert fn.replaying                    # the last calls were replays
  assert opt.steps == STEPS              # the jit advances the step count it skips
  np.testing.assert_array_equal(got, losses)
  for k in params:
    np.testing.assert_array_equal(got_params[k], params[k])
  assert state.keys() == got_state.keys() and state
  for k in state:                        # momentum, Adam's moments and bias corrections
    np.testing.assert_array_equal(got_state[k], state[k])


def test_replay_runs_no_realize_and_no_python_of_the_step(count_realizes):
  params, opt = _setup("PYTHON", "sgd")
  runs = []

  @kg.jit
  def step(x, y):
    runs.append(1)
    return _step(params, opt, x, y)
  x, y = kg.Tensor(_batch(4, 0)[0]).realize(), kg.Tensor(_batch(4, 0)[1]).realize()
  for _ in range(3):          # momentum's first step differs: calls 2 and 3 are alike
    step(x, y)
  assert step.replaying and len(runs) == 3
  before = len(count_realizes)
  loss = step(x, y)
  assert len(runs) == 3 and len(count_realizes) == before   # replayed: fn did not run
  assert loss.shape == () and not loss.requires_grad


def test_a_new_shape_records_again():
  """Each batch size is recorded and replayed; going back to the first size after steps of the
  other records again (those steps replaced the state the first program carried)."""
  sizes = [4, 4, 4, 4, 2, 2, 2, 2, 4, 2, 4, 4, 4]
  batches = [_batch(n, seed) for seed, n in enumerate(sizes)]
  losses, params, _, _, _ = _train("PYTHON", "adam", False, batches)
  got, got_params, _, fn, _ = _train("PYTHON", "adam", True, batches)
  assert len(fn.signatures) == 2 and fn.replaying
  np.testing.assert_array_equal(got, losses)
  for k in params:
    np.testing.assert_array_equal(got_params[k], params[k])


def test_state_after_replay_continues_eagerly():
  """Eager steps after replayed ones see the parameters and moments the replays left."""
  batches = [_batch(4, seed) for seed in range(8)]
  want, want_params, _, _, _ = _train("PYTHON", "adam", False, batches)
  params, opt = _setup("PYTHON", "adam")
  fn = kg.jit(lambda x, y: _step(params, opt, x, y))
  got = [fn(kg.Tensor(x), kg.Tensor(y)).item() for x, y in batches[:5]]
  assert fn.replaying
  got += [_step(params, opt, kg.Tensor(x), kg.Tensor(y)).item() for x, y in batches[5:]]
  np.testing.assert_array_equal(got, want)
  for k, p in params.items():
    np.testing.assert_array_equal(p.numpy(), want_params[k])


def test_parameters_replaced_outside_record_again():
  """load_state_dict between calls: the next call uses the loaded weights (not stale ones)."""
  def run(jitted):
    model = kg.nn.Sequential(kg.nn.Linear(8, 6), kg.nn.ReLU(), kg.nn.Linear(6, 3))
    model.load_state_dict({k: kg.Tensor(v) for k, v in _state(0).items()})
    opt = kg.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
      opt.zero_grad()
      loss = -(model(x).log_softmax(-1) * y).sum(-1).mean()
      loss.backward()
      opt.step(loss)
      return loss
    fn = kg.jit(step) if jitted else step
    out = []
    for i in range(8):
      if i == 5:
        model.load_state_dict({k: kg.Tensor(v) for k, v in _state(1).items()})
      x, y = _batch(4, i)
      out.append(fn(kg.Tensor(x), kg.Tensor(y)).item())
    return out, fn
  want, _ = run(False)
  got, fn = run(True)
  np.testing.assert_array_equal(got, want)
  assert fn.replaying


def test_a_module_buffer_replaced_outside_records_again():
  """State carried through a tensor's node (as kg.nn buffers are): a new value assigned to it
  between calls is what the next call reads."""
  def run(jitted):
    total = kg.Tensor([0.0, 0.0]).realize()
    holder = {"t": total}

    def accumulate(x):
      holder["t"].node = (holder["t"] + x).realize().node
      return holder["t"] * 1
    fn = kg.jit(accumulate) if jitted else accumulate
    out = []
    for i in range(8):
      if i == 5:
        holder["t"].node = kg.Tensor([100.0, 200.0]).realize().node
      out.append(fn(kg.Tensor([1.0, float(i)])).tolist())
    return out, fn
  want, _ = run(False)
  got, fn = run(True)
  assert got == want
  assert fn.replaying


def _state(seed):
  rng = np.random.default_rng(seed + 10)
  return {"0.weight": rng.standard_normal((6, 8)).astype(np.float32),
          "0.bias": rng.standard_normal(6).astype(np.float32),
          "2.weight": rng.standard_normal((3, 6)).astype(np.float32),
          "2.bias": rng.standard_normal(3).astype(np.float32)}


def test_a_read_back_inside_is_a_typed_error():
  params, opt = _setup("PYTHON", "sgd")
  fn = kg.jit(lambda x, y: _step(params, opt, x, y).item())
  x, y = _batch(4, 0)
  with pytest.raises(kg.UnsupportedError, match="reads a tensor's values back"):
    fn(kg.Tensor(x), kg.Tensor(y))


def test_a_tensor_made_from_changing_python_values_is_a_typed_error():
  counter = [0]

  def fn(x):
    counter[0] += 1
    return x * kg.Tensor([float(counter[0])])
  jitted = kg.jit(fn)
  x = kg.Tensor([1.0, 2.0])
  for _ in range(4):          # recorded, never alike: each call's result is right
    assert jitted(x).tolist() == [counter[0], 2.0 * counter[0]]
  with pytest.raises(kg.UnsupportedError, match="made anew in each call"):
    jitted(x)


def test_a_tensor_made_from_the_same_values_is_a_constant():
  jitted = kg.jit(lambda x: x * kg.Tensor([3.0]) + 1)
  outs = [jitted(kg.Tensor([float(i), 1.0])).tolist() for i in range(4)]
  assert jitted.replaying
  assert outs == [[3 * i + 1.0, 4.0] for i in range(4)]


def test_assigning_to_an_argument_is_a_typed_error():
  def fn(x):
    x[0] = 5.0
    return x + 1
  with pytest.raises(kg.UnsupportedError, match="assigned to a tensor argument"):
    kg.jit(fn)(kg.Tensor([1.0, 2.0]))


def test_returning_a_non_tensor_is_a_typed_error():
  with pytest.raises(kg.UnsupportedError, match="returns None, a Tensor"):
    kg.jit(lambda x: {"y": x + 1})(kg.Tensor([1.0]))


def test_returning_carried_state_is_a_typed_error():
  total = kg.Tensor([0.0]).realize()
  holder = {"t": total}

  def accumulate(x):
    holder["t"].node = (holder["t"] + x).realize().node
    return holder["t"]          # the state itself: the next call reads it
  jitted = kg.jit(accumulate)
  jitted(kg.Tensor([1.0]))
  with pytest.raises(kg.UnsupportedError, match="returns a tensor it also reads in its next"):
    jitted(kg.Tensor([1.0]))


def test_returned_tensors_are_new_each_call():
  jitted = kg.jit(lambda x: (x * 2, x.sum()))
  outs = [jitted(kg.Tensor([float(i), 2.0])) for i in range(4)]
  assert jitted.replaying
  assert [(a.tolist(), b.item()) for a, b in outs] == \
    [([2.0 * i, 4.0], i + 2.0) for i in range(4)]


def test_reset_records_again_with_new_python_values():
  scale = [2.0]
  jitted = kg.jit(lambda x: x * scale[0])
  for _ in range(3):
    assert jitted(kg.Tensor([1.0])).tolist() == [2.0]
  scale[0] = 5.0
  assert jitted(kg.Tensor([1.0])).tolist() == [2.0]   # frozen, as documented
  jitted.reset()
  assert jitted(kg.Tensor([1.0])).tolist() == [5.0]
