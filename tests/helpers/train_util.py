"""Shared by the training tests (test_nn.py, test_optim.py): jax as the autodiff oracle (on the
CPU; missing, `need_jax` fails the test, never skips), an autouse fixture `python_default` that
runs each test on PYTHON with kg.nn's initialisation seeded, and `rel_err`."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

try:
  import jax
  import jax.numpy as jnp
  jax.config.update("jax_platforms", "cpu")
except ImportError:    # the oracle missing fails, never skips
  jax = jnp = None


@pytest.fixture(autouse=True)
def python_default():
  """PYTHON is the default device and kg.nn's initialisation starts from seed 0."""
  old = kg.Device.DEFAULT
  kg.Device.DEFAULT = "PYTHON"
  kg.nn.manual_seed(0)
  yield
  kg.Device.DEFAULT = old


def need_jax():
  if jax is None:
    pytest.fail("jax is needed as the autodiff oracle: .venv/bin/pip install 'jax[cpu]'")


def rel_err(ours, ref) -> float:
  """max |ours - ref| / max |ref| (per tensor: near-zero entries carry no relative bound)."""
  ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
  return float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-30))
