"""A jitted program's kernels timed with `repeat` (bench/symbolic_static.py: kernels of a few
microseconds are below the timestamps' noise): each kernel is dispatched `repeat` times per timed
span (WEBGPU: back to back in one pass between one pair of timestamps) and the mean returned, on
a symbolic kernel's variant for the bound value, and the outputs are still right."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from tools import device_runtime

REPEAT = 5


def _counter(runtime) -> int:
  return runtime.dispatches if hasattr(runtime, "dispatches") else runtime.workgroups


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_time_kernels_repeats_each_kernel(device):
  runtime = device_runtime(device)
  n = kg.Dim("n", 1, 64)
  data = np.arange(12, dtype=np.float32).reshape(3, 4)
  x = kg.Tensor(data, device=device).symbolic(n.bind(3), 4).realize()
  step = kg.jit(lambda x, n: (x * 2 + 1).sum(-1))
  for _ in range(3):
    out = step(x, n.bind(3)).realize()
  program = step.signatures[step.previous_key].program
  before = _counter(runtime)
  once = program.time_kernels([x.node.buffer], {"n": 3})
  per_run = _counter(runtime) - before
  before = _counter(runtime)
  times = program.time_kernels([x.node.buffer], {"n": 3}, repeat=REPEAT)
  assert _counter(runtime) - before == REPEAT * per_run > 0
  assert [name for name, _ in times] == [name for name, _ in once]
  assert all(seconds > 0 for _, seconds in times)
  np.testing.assert_allclose(out.numpy(), (data * 2 + 1).sum(-1))
