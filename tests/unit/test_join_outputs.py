"""Kernels with several outputs (graph/join.py): elementwise siblings over one shape that read the
same buffers, or one another at their own indices, run as one kernel storing each output (issue
42: an LSTM cell's c' and h'; issue 35: the step kernels of a decode). Values match numpy on every
device (the interpreter, the PTX simulator, wgpu on lavapipe), through realize, a kg.jit replay
and an exported bundle's manifest, and the kernel counts show what joined and what did not."""
from __future__ import annotations

import numpy as np

import kernelgen as kg
from kernelgen.realize import realize

H = 24


def lstm_cell(T, gates, c):
  """One LSTM step's cell from its gate pre-activations (1, 4H) (i, f, g, o) and cell c (1, H):
  c' = sig(i) tanh(g) + sig(f) c, h' = sig(o) tanh(c')."""
  i, f, g, o = (gates[:, k * H:(k + 1) * H] for k in range(4))
  c2 = i.sigmoid() * g.tanh() + f.sigmoid() * c
  return c2, o.sigmoid() * c2.tanh()


def numpy_cell(gates, c):
  sig = lambda v: 1 / (1 + np.exp(-v))
  i, f, g, o = (gates[:, k * H:(k + 1) * H].astype(np.float64) for k in range(4))
  c2 = sig(i) * np.tanh(g) + sig(f) * c
  return c2, sig(o) * np.tanh(c2)


def kernel_names(tensors, target="wgsl") -> list[str]:
  return [k.name for k in kg.compile(tensors, target=target)]


def test_an_lstm_cell_stores_c_and_h_from_one_kernel(device):
  rng = np.random.default_rng(0)
  gates, c = rng.standard_normal((1, 4 * H), np.float32), rng.standard_normal((1, H), np.float32)
  c2, h2 = lstm_cell(kg.Tensor, kg.Tensor(gates), kg.Tensor(c))
  assert len(kernel_names([c2, h2])) == 1           # main: 2 (c', then h' reading c')
  realize([c2.node, h2.node])
  want_c, want_h = numpy_cell(gates, c)
  np.testing.assert_allclose(c2.numpy(), want_c, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(h2.numpy(), want_h, rtol=1e-5, atol=1e-6)


def test_siblings_reading_one_input_join_and_a_transposed_read_does_not(device):
  """k = x w_k and v = x w_v (elementwise here, a decode's k and v of one row) join; b reading
  a transposed stays a kernel of its own (the joined kernel would compute a at other indices)."""
  rng = np.random.default_rng(1)
  x, wk, wv = (rng.standard_normal((16, 16), np.float32) for _ in range(3))
  tx = kg.Tensor(x)
  k, v = tx * kg.Tensor(wk) + 1, (tx * kg.Tensor(wv)).exp()
  assert len(kernel_names([k, v])) == 1             # main: 2
  a = tx * 3 - 1
  b = a.T * 2 + tx
  assert len(kernel_names([a, b])) == 2
  realize([k.node, v.node, a.node, b.node])
  np.testing.assert_allclose(k.numpy(), x * wk + 1, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(v.numpy(), np.exp(x * wv), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(b.numpy(), (x * 3 - 1).T * 2 + x, rtol=1e-5, atol=1e-6)


def test_a_kernel_reading_a_member_between_them_keeps_them_apart():
  """t copies a transposed and is scheduled between a and b, which share x: joined at b's
  place, a would not exist yet when t reads it."""
  rng = np.random.default_rng(2)
  x = rng.standard_normal((8, 8), np.float32)
  tx = kg.Tensor(x, device="PYTHON")
  a = tx + 1
  t = a.T.contiguous()
  b = tx * 2 + t
  assert len(kernel_names([a, b], target="python")) == 3
  realize([a.node, b.node])
  np.testing.assert_allclose(b.numpy(), x * 2 + (x + 1).T, rtol=1e-6)


def test_a_jit_replay_of_a_joined_kernel_writes_both_outputs():
  """kg.jit records the joined kernel's two outputs and replays them with new gates."""
  rng = np.random.default_rng(3)
  c = kg.Tensor(rng.standard_normal((1, H), np.float32), device="PYTHON")

  @kg.jit
  def step(gates):
    c2, h2 = lstm_cell(kg.Tensor, gates, c)
    return c2, h2
  for n in range(4):
    gates = rng.standard_normal((1, 4 * H), np.float32)
    got_c, got_h = step(kg.Tensor(gates, device="PYTHON"))
    want_c, want_h = numpy_cell(gates, c.numpy())
    np.testing.assert_allclose(got_c.numpy(), want_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_h.numpy(), want_h, rtol=1e-5, atol=1e-6)


def test_an_exported_bundle_binds_each_output_of_a_joined_kernel():
  from kernelgen.export.plan import make_plan
  gates = kg.Tensor.empty((1, 4 * H), name="gates")
  c = kg.Tensor.empty((1, H), name="c")
  c2, h2 = lstm_cell(kg.Tensor, gates, c)
  plan = make_plan({"c_next": c2, "h_next": h2}, "wgsl", {}, ".wgsl")
  (kernel,) = plan.manifest["kernels"]
  written = {b["buffer"] for b in kernel["bindings"] if b["access"] == "write"}
  outputs = {o["buffer"] for o in plan.manifest["outputs"]}
  assert len(written) == 2 and written == outputs


def test_an_lstm_step_with_its_gate_matvecs_is_one_kernel(device):
  """The whole step: gates = x W^T + h R^T + b (matvecs), then c' and h'; the h' kernel reads c'
  at its own indices, so they join and the four gates' loops over h share one loop."""
  rng = np.random.default_rng(4)
  batch, width = 2, 8
  x, h = rng.standard_normal((batch, width), np.float32), rng.standard_normal((batch, H), np.float32)
  w = rng.standard_normal((4 * H, width), np.float32) * 0.3
  r = rng.standard_normal((4 * H, H), np.float32) * 0.3
  b, c = rng.standard_normal(4 * H, np.float32), rng.standard_normal((batch, H), np.float32)
  T = kg.Tensor
  gates = T(x) @ T(w).T + T(h) @ T(r).T + T(b)
  c2, h2 = lstm_cell(T, gates, T(c))
  assert len(kernel_names([c2, h2])) == 1           # main: 2
  realize([c2.node, h2.node])
  want_c, want_h = numpy_cell(x.astype(np.float64) @ w.T + h @ r.T + b, c)
  np.testing.assert_allclose(c2.numpy(), want_c, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(h2.numpy(), want_h, rtol=1e-4, atol=1e-5)


def _launches(tensors) -> list[str]:
  """The kernels realize launches for `tensors` (names, in order)."""
  import kernelgen.realize as realizing
  launches = realizing.recording = []
  try:
    realize([t.node for t in tensors])
  finally:
    realizing.recording = None
  return [kernel.name for _, kernel, _, _ in launches]


def test_a_decode_steps_k_and_v_cache_writes_are_one_kernel(device):
  """A token's k and v rows (slices of one qkv row) appended to their caches (kg.nn.kv_append, in
  place): one kernel writes both caches, step after step, values as numpy; a v whose value reads
  the k cache (its rows before the write) keeps its own kernel."""
  from kernelgen import nn
  rng = np.random.default_rng(5)
  rows, width = 4, 8
  past = kg.Dim("past", 0, rows - 1)
  kc, vc = nn.KVCache(rows, width, device=device), nn.KVCache(rows, width, device=device)
  qkv = rng.standard_normal((rows, 3 * width), np.float32)
  for t in range(rows):
    row = kg.Tensor(qkv[t:t + 1], device=device)
    k = nn.kv_append(kc.past(past.bind(t)), row[:, width:2 * width] * 2)
    v = nn.kv_append(vc.past(past.bind(t)), row[:, 2 * width:] + 1)
    assert [n.startswith("write") for n in _launches([k, v])] == [True]   # main: 2 writes
    np.testing.assert_array_equal(k.numpy(), qkv[:t + 1, width:2 * width] * 2)
    np.testing.assert_array_equal(v.numpy(), qkv[:t + 1, 2 * width:] + 1)
  kc2, vc2 = nn.KVCache(rows, width, device=device), nn.KVCache(rows, width, device=device)
  x = kg.Tensor(qkv[:1, :width], device=device)
  one = kg.Dim("one", 1, rows - 1).bind(1)
  k = nn.kv_append(kc2.past(one), x * 2)
  v = nn.kv_append(vc2.past(past.bind(0)), x + kc2.past(one)[:1])   # k's row 0: zeros
  assert len(_launches([k, v])) == 2
  np.testing.assert_array_equal(v.numpy(), qkv[:1, :width])


def test_a_projection_and_the_cache_writes_of_its_slices_are_one_kernel(device):
  """A decode step's qkv projection (a kernel of its own: read by attention in
  tests/devices/test_symbolic_decode.py, here contiguous()) whose k and v slices, runs of its
  elements, two cache writes store: the writes join the projection's kernel (each thread stores
  its element into the cache too; main: 2 kernels, the writes joined), the query's kernel after
  them; values as numpy; a write of a reversed slice (not a run: elements other threads compute)
  joins too, the threads exchanging the slice through workgroup memory (lowering/exchange.py)."""
  from kernelgen import nn
  rng = np.random.default_rng(7)
  rows, width = 3, 16
  past = kg.Dim("past", 0, rows - 1)
  kc, vc = nn.KVCache(rows, width, device=device), nn.KVCache(rows, width, device=device)
  xs = rng.standard_normal((rows, width), np.float32)
  w = kg.Tensor(rng.standard_normal((width, 3 * width), np.float32), device=device)
  b = kg.Tensor(rng.standard_normal(3 * width, np.float32), device=device)
  want = xs.astype(np.float64) @ w.numpy() + b.numpy()
  for t in range(rows):
    qkv = (kg.Tensor(xs[t:t + 1], device=device) @ w + b).contiguous()
    k = nn.kv_append(kc.past(past.bind(t)), qkv[:, width:2 * width])
    v = nn.kv_append(vc.past(past.bind(t)), qkv[:, 2 * width:])
    q = qkv[:, :width].exp()
    assert len(_launches([k, v, q])) == 2
    np.testing.assert_allclose(q.numpy(), np.exp(want[t:t + 1, :width]), rtol=1e-4)
    np.testing.assert_allclose(k.numpy(), want[:t + 1, width:2 * width], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(v.numpy(), want[:t + 1, 2 * width:], rtol=1e-4, atol=1e-5)
  kc2 = nn.KVCache(rows, width, device=device)
  qkv = (kg.Tensor(xs[:1], device=device) @ w + b).contiguous()
  k = nn.kv_append(kc2.past(past.bind(0)), qkv[:, width:2 * width].flip(1))
  assert len(_launches([k, qkv[:, :width].exp()])) == 2     # main: 3 (lowering/exchange.py)
  np.testing.assert_allclose(k.numpy(), want[:1, width:2 * width][:, ::-1], rtol=1e-4, atol=1e-5)


def test_cache_writes_computing_their_own_projections_of_one_row_are_one_kernel(device):
  """k = x @ wk and v = x @ wv (two Linear layers of one row) appended to their caches: each
  write computes its projection (schedule.py's write fusion), and the two writes join (short
  reductions sharing the row: a thread per element computes both dot products; main: 2
  kernels), and so do they with a query kernel of as many elements scheduled before them (q, k
  and v Linear layers: main 3 kernels); values as numpy, step after step."""
  from kernelgen import nn
  rng = np.random.default_rng(9)
  rows, width = 3, 16
  past = kg.Dim("past", 0, rows - 1)
  kc, vc = nn.KVCache(rows, width, device=device), nn.KVCache(rows, width, device=device)
  xs = rng.standard_normal((rows, width), np.float32)
  wq, wk, wv = (rng.standard_normal((width, width), np.float32) for _ in range(3))
  for t in range(rows):
    x = kg.Tensor(xs[t:t + 1], device=device)
    k = nn.kv_append(kc.past(past.bind(t)), x @ kg.Tensor(wk, device=device))
    v = nn.kv_append(vc.past(past.bind(t)), x @ kg.Tensor(wv, device=device))
    q = (x @ kg.Tensor(wq, device=device)).exp()        # a query kernel before them: joined too
    assert len(_launches([k, v] if t == 0 else [q, k, v])) == 1
    np.testing.assert_allclose(k.numpy(), xs[:t + 1] @ wk, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(v.numpy(), xs[:t + 1] @ wv, rtol=1e-4, atol=1e-5)
    if t:
      np.testing.assert_allclose(q.numpy(), np.exp(xs[t:t + 1] @ wq), rtol=1e-4, atol=1e-5)
