"""examples/train_lm.py's pieces that decide what a run trains: `grown_weights` (a deeper
TinyGPT started from a shallower one computes exactly what the shallower one did: numpy's
forward pass of both, lm_reference.py, and kernelgen's of the grown one), the learning rate's
warmup and cosine, and the --minutes schedule (on a fake clock)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import kernelgen as kg
from lm_reference import next_logits
from tools import REPO_ROOT
from train_util import python_default  # noqa: F401 (autouse: PYTHON is the default device)

sys.path.insert(0, str(REPO_ROOT / "examples"))
import train_lm  # noqa: E402
from tiny_gpt import TinyGPT  # noqa: E402

CONFIG = {"vocab": 24, "dim": 8, "heads": 2, "context": 6}


def small_weights(layers: int, seed: int = 0) -> dict:
  """A TinyGPT state_dict of random numpy weights (biases and layer norms too, none trivial)."""
  rng = np.random.default_rng(seed)
  model = TinyGPT(CONFIG["vocab"], CONFIG["dim"], layers, CONFIG["heads"], CONFIG["context"])
  return {k: rng.normal(0, 0.5, v.shape).astype(np.float32)
          for k, v in model.state_dict().items()}


@pytest.mark.parametrize("layers, grown", [(2, 5), (2, 2), (1, 3)])
def test_grown_model_computes_what_the_small_one_did(layers, grown):
  small = small_weights(layers)
  big = train_lm.grown_weights(small, grown)
  names = TinyGPT(CONFIG["vocab"], CONFIG["dim"], grown, CONFIG["heads"],
                  CONFIG["context"]).state_dict()
  assert sorted(big) == sorted(names)
  assert all(big[k].shape == tuple(v.shape) for k, v in names.items())
  for ids in ([3], [1, 7, 7, 20], [5, 0, 23, 9, 9, 2]):
    want = next_logits(small, {**CONFIG, "layers": layers}, ids)
    np.testing.assert_array_equal(next_logits(big, {**CONFIG, "layers": grown}, ids), want)


def test_grown_copies_start_as_their_block_with_silent_outputs():
  small = small_weights(2)
  big = train_lm.grown_weights(small, 5)    # blocks 0 0' 0' 1 1': the first gets one more
  origin = [0, 0, 0, 1, 1]
  for j, i in enumerate(origin):
    copy = j not in (0, 3)
    for name in ("ln1.weight", "qkv.weight", "qkv.bias", "ln2.bias", "up.weight",
                 "proj.weight", "proj.bias", "down.weight", "down.bias"):
      got, block = big[f"blocks.{j}.{name}"], small[f"blocks.{i}.{name}"]
      if copy and name.split(".")[0] in train_lm.SILENT:
        assert not got.any()
      else:
        np.testing.assert_array_equal(got, block)


def test_kernelgen_runs_the_grown_weights_as_numpy_does():
  big = train_lm.grown_weights(small_weights(1, seed=1), 3)
  model = TinyGPT(CONFIG["vocab"], CONFIG["dim"], 3, CONFIG["heads"], CONFIG["context"])
  model.load_state_dict(big)
  ids = [4, 11, 2, 19]
  with kg.no_grad():
    got = model(kg.Tensor([ids], dtype=kg.dtypes.int32)).numpy()[0, -1]
  want = next_logits(big, {**CONFIG, "layers": 3}, ids)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_growing_into_fewer_layers_is_a_shape_error():
  with pytest.raises(kg.errors.ShapeError, match="--layers >= 2"):
    train_lm.grown_weights(small_weights(2), 1)


def test_learning_rate_warms_up_then_follows_the_cosine():
  peak = 1e-3
  assert train_lm.learning_rate(0, 0.0, peak, warmup=4) == pytest.approx(peak / 4)
  assert train_lm.learning_rate(3, 0.0, peak, warmup=4) == pytest.approx(peak)
  assert train_lm.learning_rate(9, 0.5, peak, warmup=4) == pytest.approx(
    (peak + train_lm.FINAL_LR) / 2)
  assert train_lm.learning_rate(50, 1.0, peak, warmup=4) == pytest.approx(train_lm.FINAL_LR)
  assert train_lm.learning_rate(50, 3.0, peak, warmup=4) == pytest.approx(train_lm.FINAL_LR)


class Clock:
  """A fake time.time: `now` seconds."""
  now = 1000.0

  def __call__(self) -> float:
    return self.now


def test_schedule_follows_the_steps_or_the_clock_whichever_is_further(monkeypatch):
  clock = Clock()
  monkeypatch.setattr(train_lm.time, "time", clock)
  by_steps = train_lm.Schedule(steps=14, warmup=4)
  assert by_steps.progress(2) == 0.0 and by_steps.progress(9) == pytest.approx(0.5)
  assert not by_steps.over(12) and by_steps.over(13)
  timed = train_lm.Schedule(steps=1000, warmup=4, deadline=clock.now + 60)
  clock.now += 20                                  # the warmup ends 20 s in: 40 s left
  assert timed.progress(4) == pytest.approx(0.0)
  clock.now += 10
  assert timed.progress(5) == pytest.approx(0.25)
  assert not timed.over(5)
  clock.now += 30
  assert timed.progress(6) == pytest.approx(1.0) and timed.over(6)


def test_a_deadline_reached_in_the_warmup_ends_the_run(monkeypatch):
  clock = Clock()
  monkeypatch.setattr(train_lm.time, "time", clock)
  schedule = train_lm.Schedule(steps=1000, warmup=20, deadline=clock.now + 60)
  assert not schedule.over(0)
  clock.now += 61
  assert schedule.over(1)
