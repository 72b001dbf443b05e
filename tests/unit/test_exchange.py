"""A joined write whose value reads elements other threads compute (lowering/exchange.py): a
row's projection x @ w (its q, k and v columns) with k rotated per head, pairs (i, i + d/2) or
(2i, 2i + 1), appended to a KV cache in place (kg.nn.kv_append) and v to another, is one kernel
(main: 2, the projection and the cache writes) while another kernel reads q; the threads
exchange k through workgroup memory.
Values match numpy on every device (the interpreter, the PTX simulator, wgpu on lavapipe)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import nn
from kernelgen.graph.member_reads import member_reads
from kernelgen.lowering.exchange import exchangeable
from kernelgen.realize import realize
from spies import exchange_calls

D, HEADS, HD, AT = 64, 2, 16, 3        # hidden, kv heads, head size, the cache row written


def _rotated(k, cos, sin, interleaved: bool):
  """k (HEADS, HD) rotated by cos, sin (HD / 2,): numpy arrays or kg Tensors alike."""
  if interleaved:
    a, b = k[:, 0::2], k[:, 1::2]
    ra, rb = a * cos - b * sin, b * cos + a * sin
    pairs = [ra.reshape(HEADS, HD // 2, 1), rb.reshape(HEADS, HD // 2, 1)]
    joined = kg.cat(pairs, axis=2) if isinstance(k, kg.Tensor) else np.concatenate(
      pairs, 2)
    return joined.reshape(1, HEADS * HD)
  a, b = k[:, :HD // 2], k[:, HD // 2:]
  halves = [a * cos - b * sin, b * cos + a * sin]
  joined = kg.cat(halves, axis=1) if isinstance(k, kg.Tensor) else np.concatenate(
    halves, 1)
  return joined.reshape(1, HEADS * HD)


@pytest.mark.parametrize("interleaved", [False, True])
def test_a_rotated_key_is_written_by_the_projection_kernel(device, interleaved, monkeypatch):
  rng = np.random.default_rng(3)
  x = rng.standard_normal((1, D), np.float32)
  w = rng.standard_normal((D, D + 2 * HEADS * HD), np.float32)
  ang = rng.standard_normal(HD // 2).astype(np.float32)
  cos, sin = np.cos(ang), np.sin(ang)
  kc, vc = nn.KVCache(8, HEADS * HD, device=device), nn.KVCache(8, HEADS * HD, device=device)
  qkv = kg.Tensor(x, device=device) @ kg.Tensor(w, device=device)
  k = qkv[:, D:D + HEADS * HD].reshape(HEADS, HD)
  key = _rotated(k, kg.Tensor(cos, device=device), kg.Tensor(sin, device=device), interleaved)
  pos = kg.Dim("pos", 0, 7).bind(AT)
  kk = nn.kv_append(kc.past(pos), key)
  vv = nn.kv_append(vc.past(pos), qkv[:, D + HEADS * HD:])
  q = (qkv[:, :D] * 2).sum()                    # another kernel reads q (an LM's attention)
  exchanged = exchange_calls(monkeypatch)
  kg.clear_cache()
  names = [kern.name for kern in kg.compile([kk, vv, q], target="wgsl")]
  assert exchanged, "k recomputed, not exchanged"
  assert len(names) == 2, names                 # main: 3 (the projection, the cache writes, q's)
  realize([kk.node, vv.node, q.node])
  want = x.astype(np.float64) @ w
  np.testing.assert_allclose(q.numpy(), want[0, :D].sum() * 2, rtol=1e-4, atol=1e-3)
  want_k = _rotated(want[:, D:D + HEADS * HD].reshape(HEADS, HD), cos, sin, interleaved)
  np.testing.assert_allclose(kk.numpy()[AT], want_k[0], rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(vv.numpy()[AT], want[0, D + HEADS * HD:], rtol=1e-4, atol=1e-4)


def test_member_reads_lists_a_rotated_keys_pairs():
  qkv = kg.Tensor(np.zeros((1, 8), np.float32)) * 3   # a kernel's output (q, then one head k)
  k = qkv[:, 4:]                                     # a head of 4: pairs (0, 2), (1, 3)
  rot = kg.cat([k[:, :2] * 2 - k[:, 2:], k[:, 2:] * 2 + k[:, :2]], axis=1)
  reads = member_reads(rot.node, qkv.node, set())
  assert reads == [{4, 6}, {5, 7}, {4, 6}, {5, 7}]   # write element e: qkv elements read
  assert exchangeable(reads, 4, 4) and exchangeable(reads, 4, 8)
  assert not exchangeable(reads, 4, 2)               # blocks of 2 split each pair
  assert not exchangeable(reads, 6, 4)               # element 0 stored by element 6's block
  assert member_reads((k.sum() + rot).node, qkv.node, set()) is None  # read by a reduction
