"""Small read-only inputs bound as WGSL uniform buffers (render/wgsl/target.py uniform_slots): a
kernel that would bind more than max_storage_buffers binds its smallest read-only inputs of at
most max_uniform_bytes as `var<uniform>` arrays of 16-byte words instead (WebGPU's defaults: 8
storage and 12 uniform buffers per stage, one of those for a symbolic kernel's dims), so the
scheduler keeps it whole (graph/bind_limit.py). Values against numpy natively on WEBGPU
(lavapipe, its storage-buffer limit forced down: the uniforms carry every dtype's layout, packed
8/16-bit words and f16 included), kernel counts and bindings on the compiled WGSL."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from tools import forced_options, wgsl_validate


def _weighted_sum(arrays, device=None):
  """sum((i + 1) * float(a_i)): one elementwise kernel reading every array."""
  total = None
  for i, a in enumerate(arrays):
    term = kg.Tensor(a, device=device).cast("float32") * float(i + 1)
    total = term if total is None else total + term
  return total


def _want(arrays):
  return sum(a.astype(np.float64) * (i + 1) for i, a in enumerate(arrays))


def _kinds(compiled) -> list[list[str]]:
  return [[b.kind for b in k.launch.bindings] for k in compiled]


def test_twelve_small_inputs_are_one_kernel_five_of_them_uniform():
  """12 inputs and the output are 13 buffers: at 8 storage buffers, the five smallest inputs
  bind as uniform buffers (main split it into two kernels)."""
  rng = np.random.default_rng(0)
  arrays = [rng.standard_normal(64 + 4 * i).astype(np.float32)[:64] for i in range(12)]
  compiled = kg.compile(_weighted_sum(arrays), target="wgsl", max_storage_buffers=8)
  assert len(compiled) == 1
  kinds = _kinds(compiled)[0]
  assert (kinds.count("storage"), kinds.count("uniform")) == (8, 5)
  assert compiled[0].source.count("var<uniform>") == 5
  assert all(b.nbytes % 16 == 0 and b.access == "read" for b in compiled[0].launch.bindings
             if b.kind == "uniform")
  wgsl_validate(compiled[0].source)


def test_a_kernel_within_its_storage_buffers_binds_no_uniform():
  arrays = [np.ones(64, np.float32)] * 7
  compiled = kg.compile(_weighted_sum(arrays), target="wgsl", max_storage_buffers=8)
  assert _kinds(compiled) == [["storage"] * 8]


def test_inputs_over_the_uniform_binding_size_still_split():
  """64 KiB + 4 bytes each: none may be a uniform buffer; the scheduler splits as before."""
  arrays = [np.ones(16385, np.float32)] * 12
  compiled = kg.compile(_weighted_sum(arrays), target="wgsl", max_storage_buffers=8)
  assert len(compiled) > 1 and all(k == "storage" for ks in _kinds(compiled) for k in ks)


def test_no_uniform_buffers_to_spare_splits_as_before():
  arrays = [np.ones(64, np.float32)] * 12
  compiled = kg.compile(_weighted_sum(arrays), target="wgsl", max_storage_buffers=8,
                        max_uniform_buffers=1)
  assert len(compiled) > 1 and all(len(k.launch.bindings) <= 8 for k in compiled)


DTYPES = ["float32", "int32", "uint32", "float16", "int16", "uint16", "int8", "uint8", "bool"]


def _array(dtype: str, size: int, seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed)
  if dtype == "bool":
    return rng.random(size) < 0.5
  if dtype.startswith("float"):
    return rng.standard_normal(size).astype(dtype)
  info = np.iinfo(dtype)
  return rng.integers(max(info.min, -1000), min(info.max, 1000), size).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_reads_right_from_a_uniform_buffer(monkeypatch, dtype):
  """Four inputs of 7, 13, 22 and 9 elements (no multiple of 4 or of a word's lanes) and the
  output, at 2 storage buffers: three inputs are uniform arrays; values as numpy's."""
  device = forced_options("WEBGPU", monkeypatch, max_storage_buffers=2)
  arrays = [_array(dtype, n, i) for i, n in enumerate((7, 13, 22, 9))]
  total = None
  for i, a in enumerate(arrays):          # the first 7 elements of each
    term = kg.Tensor(a, device=device)[:7].cast("float32") * float(i + 1)
    total = term if total is None else total + term
  want = sum(a[:7].astype(np.float64) * (i + 1) for i, a in enumerate(arrays))
  compiled = kg.compile(total, target="wgsl", **kg.Device[device].render_options())
  assert len(compiled) == 1 and _kinds(compiled)[0].count("uniform") == 3
  np.testing.assert_allclose(total.numpy(), want, rtol=1e-3 if dtype == "float16" else 1e-6)


def test_a_matvec_reads_its_small_weight_from_a_uniform_buffer(monkeypatch):
  """A row reduction over a small weight (vec4 loads where the renderer takes them) with three
  bias vectors, at 2 storage buffers: the weight and biases are uniform arrays."""
  device = forced_options("WEBGPU", monkeypatch, max_storage_buffers=2)
  rng = np.random.default_rng(1)
  w, x = rng.standard_normal((24, 64)).astype(np.float32), rng.standard_normal(64).astype(
    np.float32)
  biases = [rng.standard_normal(24).astype(np.float32) for _ in range(3)]
  out = kg.Tensor(w, device=device) @ kg.Tensor(x, device=device)
  for b in biases:
    out = out + kg.Tensor(b, device=device)
  compiled = kg.compile(out, target="wgsl", **kg.Device[device].render_options())
  assert len(compiled) == 1 and "uniform" in _kinds(compiled)[0]
  np.testing.assert_allclose(out.numpy(), w @ x + sum(biases), rtol=1e-5, atol=1e-5)
