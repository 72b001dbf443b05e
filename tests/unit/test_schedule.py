"""How many kernels a program becomes, and which nodes the scheduler realizes."""
from __future__ import annotations

import os
import pytest

import kernelgen as kg
from tools import default_device
from kernelgen import Tensor
from kernelgen.graph.schedule import schedule


@pytest.fixture(autouse=True)
def python_device(monkeypatch):
  with default_device(monkeypatch, os.environ.get("KERNELGEN_TEST_DEVICE", "PYTHON")):
    yield


def kernels(*tensors) -> list[str]:
  return [item.name for item in schedule([t.node for t in tensors])]


def ones(*shape):
  """A realized input buffer (not a lazy constant)."""
  return Tensor([[1.0] * shape[1]] * shape[0])


def test_elementwise_chain_is_one_kernel():
  a, b, c = ones(4, 8), ones(4, 8), ones(4, 8)
  assert kernels((a + b) * c) == ["E_4_8"]


def test_relu_of_matmul_plus_bias_is_one_kernel():
  x, w, b = ones(4, 8), ones(8, 3), Tensor([1.0, 2.0, 3.0])
  assert len(kernels((x @ w + b).relu())) == 1


def test_softmax_is_at_most_three_kernels():
  assert len(kernels(ones(4, 8).softmax(1))) <= 3


def test_elementwise_fuses_into_reduction_input_and_output():
  x = ones(4, 8)
  assert len(kernels(((x * 2).exp().sum(1) + 1).sqrt())) == 1


def test_broadcast_reduction_gets_its_own_kernel():
  """Without row kernels (row_max=0); with them, the row's mean joins its kernel
  (tests/devices/test_row_kernels.py)."""
  x = ones(4, 8)
  assert len(schedule([(x - x.mean(1, keepdim=True)).node], None, 0)) == 2
  assert len(kernels(x - x.mean(1, keepdim=True))) == 1


def test_a_reduction_read_per_row_inside_another_fuses_into_it():
  """A reduction read inside another's source only through a broadcast along the same reduced
  axes (and at the output) is computed in that kernel, once per row: var, argmax, logsumexp."""
  x = ones(4, 8)
  m = x.max(1, keepdim=True)
  assert kernels(x.var(1)) == ["r_4__8"]
  assert kernels(x.argmax(1)) == ["r_4__8"]
  assert kernels(m + (x - m).exp().sum(1, keepdim=True).log()) == ["r_4_1__8"]


def test_a_reduction_also_read_per_element_keeps_its_own_kernel():
  """The max of softmax is read per element by the output too: without row kernels
  (row_max=0) it stays a kernel of its own (with them, softmax is one row kernel); so does a
  reduction over other axes, or one broadcast into a reduction over fewer axes."""
  x = ones(4, 8)
  assert len(schedule([x.softmax(1).node], None, 0)) == 3
  assert len(schedule([x.log_softmax(1).node], None, 0)) == 3
  assert len(kernels(x.softmax(1))) == len(kernels(x.log_softmax(1))) == 1
  assert len(kernels((x - x.max(0, keepdim=True)).sum(1))) == 2
  assert len(kernels((x - x.max(1, keepdim=True)).sum())) == 2
  m = x.max(1, keepdim=True)
  assert len(kernels((x - m).sum(1) + m.sum())) == 3


def test_movement_ops_do_not_make_kernels():
  x = ones(4, 8)
  assert len(kernels(x.T.pad(((1, 1), (0, 0))).flip(0)[::2] * 3)) == 1


def test_layernorm_kernels():
  assert len(kernels(ones(4, 8).layernorm())) <= 3


def test_realized_inputs_are_not_recomputed():
  x = (ones(4, 8) * 2).realize()
  assert kernels(x + 1) == ["E_4_8"]
  assert kernels(x) == []


def test_names_are_unique_and_stable():
  x = ones(4, 8)
  def split(t):        # without row kernels (one row kernel otherwise), so there are several
    return [item.name for item in schedule([t.node], None, 0)]
  names = split(x.sum(1, keepdim=True) + x.max(1, keepdim=True) * x)
  assert len(set(names)) == len(names) == 3
  assert names == split(x.sum(1, keepdim=True) + x.max(1, keepdim=True) * x)
  assert len(kernels(x.sum(1, keepdim=True) + x.max(1, keepdim=True) * x)) == 1


def test_compile_reports_kernel_count():
  a, b, c = ones(4, 8), ones(4, 8), ones(4, 8)
  out = kg.compile((a + b) * c, target="python")
  assert len(out) == 1
  k = out[0]
  assert k.name == "E_4_8" and [b.access for b in k.buffers] == ["write", "read", "read", "read"]
  assert k.buffers[0].size == 32 and k.buffers[0].dtype == kg.dtypes.float32


# ---- kernels that would bind more buffers than the target allows are split ----------------------

def _sum_of(arrays, device="PYTHON"):
  out = None
  for a in arrays:
    t = Tensor(a, device=device)
    out = t if out is None else out + t
  return out


def _inputs(count, shape=(4, 5)):
  import numpy as np
  rng = np.random.default_rng(count)
  return [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]


@pytest.mark.parametrize("count,limit", [(12, 8), (20, 8), (9, 4), (7, 3)])
def test_a_sum_of_many_inputs_is_split_into_kernels_within_the_buffer_limit(count, limit):
  import numpy as np
  arrays = _inputs(count)
  out = _sum_of(arrays)
  compiled = kg.compile(out, target="wgsl", max_storage_buffers=limit, max_uniform_buffers=1)
  assert len(compiled) > 1 and all(len(k.buffers) <= limit for k in compiled)
  np.testing.assert_allclose(out.numpy(), sum(arrays), rtol=1e-5, atol=1e-5)


def test_no_split_below_the_limit():
  arrays = _inputs(7)
  assert len(kg.compile(_sum_of(arrays), target="wgsl")) == 1      # 7 inputs + 1 output = 8
  assert len(kg.compile(_sum_of(arrays + _inputs(2)), target="ptx")) == 1   # PTX: no such limit


def test_a_fused_reduction_over_many_inputs_is_split_and_still_right():
  import numpy as np
  arrays = _inputs(10, (6, 16))
  expr = Tensor(arrays[0])
  for a in arrays[1:]:
    expr = expr * Tensor(a) + 1
  reduced = expr.sum(axis=1)
  compiled = kg.compile(reduced, target="wgsl", max_storage_buffers=4, max_uniform_buffers=1)
  assert all(len(k.buffers) <= 4 for k in compiled)
  want = arrays[0].astype(np.float64)
  for a in arrays[1:]:
    want = want * a + 1
  np.testing.assert_allclose(reduced.numpy(), want.sum(axis=1), rtol=1e-4)


def test_a_shared_input_is_not_a_reason_to_split():
  """Splitting off a subexpression whose inputs the rest of the kernel reads anyway saves
  nothing: with 2 buffers allowed, a + b (3 buffers) cannot be split and is refused."""
  a, b = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
  with pytest.raises(kg.LimitError, match="uses 3 storage buffers.*allows 2"):
    kg.compile((a + b) * a, target="wgsl", max_storage_buffers=2, max_uniform_buffers=1)


def test_the_webgpu_device_splits_by_its_adapter_limit(monkeypatch):
  """On WEBGPU the adapter's maxStorageBuffersPerShaderStage decides (forced to 4 here)."""
  import numpy as np
  from tools import wgpu_adapter
  wgpu_adapter()                       # a missing adapter skips (fails under REQUIRE_ALL)
  runtime = kg.Device["WEBGPU"]
  options = dict(runtime.render_options(), max_storage_buffers=4, max_uniform_buffers=1)
  monkeypatch.setattr(runtime, "render_options", lambda: options)
  arrays = _inputs(11, (3, 7))
  out = _sum_of(arrays, device="WEBGPU")
  np.testing.assert_allclose(out.numpy(), sum(arrays), rtol=1e-5, atol=1e-5)


def test_a_layernorm_of_a_sum_of_inputs_is_one_row_kernel():
  """The median shift of a layernorm is a per-row value, read through a broadcast along the row
  (loop invariant, computed once per row): it fuses into the row kernel even when it reads many
  buffers (a decoder's residual stream: x + out projection + bias + ...)."""
  x, a, b, c = ones(2, 64), ones(2, 64), ones(2, 64), ones(2, 64)
  assert kernels((x + a + b + c).layernorm(-1)) == ["r_2_64__64"]
  got = ((x + a * 2 + b * 3 + c).layernorm(-1)).numpy()
  assert abs(got).max() < 1e-5        # every row constant: zero after the norm


def test_softmax_over_a_symbolic_axis_is_one_row_kernel_as_static():
  n = kg.Dim("n", 1, 64)
  x = Tensor([[float(i % 7) for i in range(13)]] * 2).symbolic(2, n.bind(13))
  static = Tensor([[float(i % 7) for i in range(13)]] * 2)
  assert len(kernels(x.softmax(-1))) == len(kernels(static.softmax(-1))) == 1
  import numpy as np
  np.testing.assert_allclose(x.softmax(-1).numpy(), static.softmax(-1).numpy(), rtol=1e-6)


def test_a_matmul_read_a_slice_per_kernel_is_computed_once():
  """An LSTM's hoisted input projection (x @ w + b for every step, one user: the bias add) read
  one step's slice at a time by each step's kernel is a kernel of its own, reading w once; fused,
  each step's kernel computed its slice and read all of w (ddddocr's OCR LSTM, issue 42)."""
  import numpy as np
  rng = np.random.default_rng(0)
  xs, ws, rs = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 512), (512,)))
  x, w, r = Tensor(xs), Tensor(ws), Tensor(rs)
  gx = x @ w + 1.0                                    # (8, 512): 4096 outputs, a tiled matmul
  h, steps = Tensor.zeros(512), []
  for t in range(8):
    h = (gx[t] + h * r).tanh().contiguous()
    steps.append(h)
  items = schedule([h.node])
  assert [len(item.out.shape) == 2 for item in items if w.node in item.inputs] == [True]
  want, hn = xs.astype(np.float64) @ ws + 1.0, np.zeros(512)
  for t in range(8):
    hn = np.tanh(want[t] + hn * rs)
  np.testing.assert_allclose(h.numpy(), hn, rtol=1e-4, atol=1e-5)
