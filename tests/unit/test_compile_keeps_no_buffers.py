"""A compile holds no reference to the tensors it compiled (lowering/lower.py keeps the optimizer's
probe lowering for compile_item, and drops it once the kernel is compiled)."""
from __future__ import annotations

import gc, weakref
import numpy as np
import kernelgen as kg

def test_a_compile_keeps_no_input_buffer_alive():
  """The optimizer's probe lowering kept for compile_item (lowering/lower.py) is dropped once the
  kernel is compiled: a realized input's buffer dies with its last tensor (the page's unload
  counts the buffers left)."""
  a = kg.Tensor(np.arange(4096, dtype=np.float32).reshape(64, 64), device="PYTHON").realize()
  w = kg.Tensor(np.ones((64, 64), np.float32), device="PYTHON").realize()
  refs = [weakref.ref(t.node.buffer) for t in (a, w)]
  out = (a @ w).relu().numpy()
  assert out[1, 0] == sum(range(64, 128))
  del a, w
  gc.collect()
  assert [r() for r in refs] == [None, None]
