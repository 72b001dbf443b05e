"""Option seq_vec (the CPU adapters' default for matvec kernels of a thread per output, issue 42:
render/wgsl/adapters.py, lowering/lower.py SEQ_VEC): each reduction over one axis reads 4
consecutive elements a step, its runs of loads as vec4 loads, the weights' row included where it
is read through a concat whose bounds the thread's range decides (an LSTM cell's gate rows of its
stacked weights: lowering/vector.py _always_read). Values as numpy's on the WEBGPU device with
SwiftShader's and lavapipe's options; other adapters' kernels keep their scalar loads."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

from ops_util import on  # noqa: F401 (a fixture)

N = 128


def _inputs(seed: int = 0) -> dict:
  rng = np.random.default_rng(seed)
  return {"x": rng.standard_normal(N).astype(np.float32),
          "a": rng.standard_normal((N, N)).astype(np.float32),
          "b": rng.standard_normal((N, N)).astype(np.float32)}


def _cell(v: dict, device: str | None = None):
  """sigmoid(B @ x) * (A @ x), A and B the two halves of cat([A, B]) (as an LSTM's gates)."""
  t = {k: kg.Tensor(a, device=device) if device else kg.Tensor(a) for k, a in v.items()}
  w = kg.cat([t["a"], t["b"]], axis=0)
  return (w[N:] @ t["x"]).sigmoid() * (w[:N] @ t["x"])


def _want(v: dict) -> np.ndarray:
  x, a, b = (v[k].astype(np.float64) for k in ("x", "a", "b"))
  return 1 / (1 + np.exp(-(b @ x))) * (a @ x)


def _source(**options) -> str:
  (kernel,) = kg.compile([_cell(_inputs(), "PYTHON")], target="wgsl", **options)
  return kernel.source


def test_swiftshader_reads_a_thread_per_output_matvec_as_vectors():
  """One kernel, a thread per output: x and both halves of the concat's rows read as vec4 (3
  bindings of vec4), 32 steps of 4, on both CPU adapters; without the option (or on a GPU) 128
  steps of scalars."""
  for adapter in ("swiftshader", "lavapipe"):
    vec = _source(adapter=adapter)
    assert vec.count("array<vec4<f32>>") == 3, vec
    assert "< 32i;" in vec and "< 128i;" not in vec
  for plain in (_source(adapter="swiftshader", seq_vec=0), _source(adapter="discrete"),
                _source()):
    assert "vec4" not in plain and "< 128i;" in plain


@pytest.mark.parametrize("adapter, seed", [("swiftshader", 0), ("lavapipe", 1)])
def test_seq_vec_values_on_webgpu(on, adapter, seed):
  v = _inputs(seed)
  on("WEBGPU", adapter=adapter)
  got = _cell(v).numpy()
  np.testing.assert_allclose(got, _want(v), rtol=1e-4, atol=1e-4)
