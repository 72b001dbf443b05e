"""MatMulNBits' scales and zero points held grouped by a thread's rows (issue 35): where the
adapter's matvec gives each thread reduce_rows consecutive rows (reduce_step, the CPU adapters),
the importer holds the scales ordered (N / rows, blocks, rows) (quant_nbits.row_grouped) and the
4-bit zero points 8 rows to a 32-bit word (grouped_nibbles), so a thread loads a block's scales as
vec4s (lowering/lower.py _rows_vector_loads) and its zero points as one word, not a scalar load
and a byte per row and block. The values are those given; the results onnxruntime's."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.onnx.operators.quant_nbits import grouped_nibbles, matmul_words, row_grouped
from kernelgen.render.wgsl.adapters import TABLE
from onnx_contrib_util import ort_run
from test_onnx_quant_nbits import nbits_model


def test_row_grouped_and_grouped_nibbles_keep_the_values():
  t = np.arange(48, dtype=np.float32).reshape(16, 3)
  zp = (np.arange(80).reshape(16, 5) * 7 % 16).astype(np.float32)
  held = grouped_nibbles(kg.Tensor(zp, device="PYTHON"), 8)
  np.testing.assert_array_equal(row_grouped(kg.Tensor(t, device="PYTHON"), 8).numpy(), t)
  np.testing.assert_array_equal(held.numpy(), zp)
  with pytest.raises(kg.errors.ShapeError, match="groups of 8"):
    row_grouped(kg.Tensor(t[:12], device="PYTHON"), 8)


def _loads(src: str, buf) -> int:
  return src.count(f"b{buf.slot}_{buf.name}[")


def _words_kernel(out, adapter: str, words: int):
  """The kernel reading the `words` packed weight words, compiled for `adapter`'s decode step."""
  kernels = kg.compile(out, target="wgsl", adapter=adapter, runs=100)
  return next(kern for kern in kernels for b in kern.buffers
              if b.dtype == kg.dtypes.uint32 and b.size == words)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_q4_matvec_traced_for_an_adapter_reads_grouped_scales_and_zero_points(adapter):
  """Per trip and block: two vec4 loads of the 8 rows' scales and one word of their zero points
  (before: 8 scalar scale loads and 8 zero-point bytes); the outputs onnxruntime's."""
  n, k = 64, 256
  blocks, rows = k // 32, TABLE[(adapter, "rows")]["reduce_rows"]
  model, feeds = nbits_model(1, n, k, 4, 32, "uint8", bias=True, seed=3)
  m = kg.onnx.load(model.SerializeToString())
  m.row_adapter = adapter          # as export/onnx_lm.py traces a bundle for the adapter
  out = m.run(feeds, device="PYTHON")
  kern = _words_kernel(list(out.values()), adapter, n * k // 8)
  np.testing.assert_allclose(out["Y"].numpy(), ort_run(model, feeds)[0], rtol=1e-4, atol=1e-4)
  spec = {b.dtype.name + str(b.size): b for b in kern.buffers}
  step = TABLE[(adapter, "rows")]["reduce_step"]
  per_trip = max(b for b in range(1, step // 32 + 1) if blocks % b == 0)
  assert rows == 8 and f"uint32{n // rows * blocks}" in spec, sorted(spec)
  assert _loads(kern.source, spec[f"uint32{n // rows * blocks}"]) == per_trip
  assert _loads(kern.source, spec[f"float32{n * blocks}"]) == 2 * per_trip
  assert "array<vec4<f32>>" in kern.source.split(f"b{spec[f'float32{n * blocks}'].slot}_")[1]


def test_rows_vector_loads_read_a_threads_grouped_scales_as_vec4():
  """The lowering alone: scales viewed (N, blocks) over an (N / 8, blocks, 8) buffer, 8 rows a
  thread: each block's 8 scales are two vec4 loads."""
  n, k, blocks = 128, 256, 8
  x = kg.Tensor.empty(1, k, device="PYTHON")
  words = kg.Tensor.empty(n, k // 8, dtype=kg.dtypes.uint32, device="PYTHON")
  held = kg.Tensor.empty(n // 8, blocks, 8, device="PYTHON")
  scale = held.permute(0, 2, 1).reshape(n, blocks)
  y = matmul_words(x, words, scale, 8.0, 4, 32)
  kern = _words_kernel([y], "lavapipe", n * k // 8)
  spec = {b.dtype.name + str(b.size): b for b in kern.buffers}
  src = kern.source
  per_trip = max(b for b in range(1, TABLE[("lavapipe", "rows")]["reduce_step"] // 32 + 1)
                 if blocks % b == 0)
  assert _loads(src, spec[f"float32{n * blocks}"]) == 2 * per_trip, src[:3000]


def test_q4_matvec_on_webgpu_holds_grouped_params_and_matches_onnxruntime():
  model, feeds = nbits_model(1, 64, 320, 4, 32, "uint8", bias=False, seed=11)
  m = kg.onnx.load(model.SerializeToString())
  out = m.run(feeds, device="WEBGPU")
  np.testing.assert_allclose(out["Y"].numpy(), ort_run(model, feeds)[0], rtol=1e-4, atol=1e-4)
  assert {name for dev, name in m.uploads if "#rows" in name} == {"scales#rows8", "zp#rows8"}


@pytest.mark.parametrize("scale_dtype", ["float32", "float16"])
def test_host_regrouping_equals_the_kernels(scale_dtype):
  """regroup.host_stored (an initializer's bytes reordered in CPython: an export traces on PYTHON,
  whose interpreter took ~18 s for the SmolLM2 head's scales) gives row_grouped's and
  grouped_nibbles' copies, byte for byte."""
  from kernelgen.onnx.operators.regroup import host_stored
  rng = np.random.default_rng(2)
  n, blocks, rows = 64, 5, 16
  scales = rng.standard_normal((n, blocks)).astype(scale_dtype)
  zp = rng.integers(0, 16, (n, blocks))
  packed = np.zeros((n, (blocks + 1) // 2), np.uint8)
  for b in range(blocks):
    packed[:, b // 2] |= (zp[:, b] << 4 * (b % 2)).astype(np.uint8)
  model = type("Model", (), {"initializers": {
    "s": (getattr(kg.dtypes, scale_dtype), scales.shape, scales.tobytes()),
    "z": (kg.dtypes.uint8, packed.shape, packed.tobytes())}})()
  ins = type("Ins", (), {"names": ["x", "w", "s", "z"],
                         "runner": type("Runner", (), {"model": model, "device": "PYTHON"})()})()
  t, z = (kg.Tensor(v.astype(np.float32), device="PYTHON") for v in (scales, zp))
  kernel, host = row_grouped(t, rows), row_grouped(t, rows, host_stored(ins, 2, (n, blocks, rows)))
  np.testing.assert_array_equal(host.numpy(), kernel.numpy())
  held = host_stored(ins, 3, (n, blocks, rows), nibbles=True)
  assert held.dtype == kg.dtypes.uint32 and held.shape == (n // rows, blocks, rows // 8)
  np.testing.assert_array_equal(grouped_nibbles(z, rows, held).numpy(), zp.astype(np.float32))
  assert host_stored(ins, 3, (n, blocks, 12), nibbles=True) is None     # rows not a multiple of 8


def test_a_trace_on_python_regroups_the_initializers_on_the_host(monkeypatch):
  """As export/onnx_lm.py traces a q4 bundle: both grouped copies come from host_stored, and the
  results are onnxruntime's."""
  from kernelgen.onnx.operators import quant_nbits
  made = []
  real = quant_nbits.host_stored
  monkeypatch.setattr(quant_nbits, "host_stored",
                      lambda *a, **k: made.append(real(*a, **k)) or made[-1])
  model, feeds = nbits_model(1, 64, 256, 4, 32, "uint8", bias=True, seed=3)
  m = kg.onnx.load(model.SerializeToString())
  m.row_adapter = "lavapipe"
  out = m.run(feeds, device="PYTHON")
  np.testing.assert_allclose(out["Y"].numpy(), ort_run(model, feeds)[0], rtol=1e-4, atol=1e-4)
  assert len(made) == 2 and all(t is not None for t in made), made
