"""MatMulNBits over a symbolic row count (the page's one-bundle causal LM: `seq` new tokens,
1..step, export/onnx_lm.py): one program, compiled once, gives onnxruntime's values at every
bound row count (1, 2, 5, 77 and the top, 128) on PYTHON, WEBGPU (an exported bundle) and PTXSIM
(a small one), 4-bit weights with and without zero points, blocks of 32 and 64. Its kernel is the
register-tiled reduction over (words, fields) (quant_nbits.matmul_dequant) with a variant per
range of small counts: one row a thread at seq = 1 (decoding), the variants' wide tiles up to
the top. At SmolLM2's widths a one-off run's compile budget caps the kernel's own tile
(lowering/compile_cost.py) and its variants' (variants.py VARIANT_BUDGET), so the top count (a
prompt of exactly `step` tokens: the page's prefill) runs the capped kernel."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.uop.program import variant_for
from onnx_contrib_util import ort_run
from tools import device_runtime

from test_onnx_quant_nbits import nbits_model

HI = 128
SEQS = (1, 2, 5, 77, HI)
CASES = [(32, "none", False), (32, "uint8", True), (64, "float", True)]


def _symbolic(n: int, k: int, block: int, zp: str, bias: bool):
  """A MatMulNBits model whose A is (1, seq, k): (model, its ONNX bytes loaded with seq a dim
  1..HI)."""
  model, _ = nbits_model(1, n, k, 4, block, zp, bias, seed=block + n)
  model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "seq"
  return model, kg.onnx.load(model.SerializeToString(), dims={"seq": (1, HI)})


def _rows(seq: int, k: int) -> np.ndarray:
  return np.random.default_rng(seq).standard_normal((1, seq, k)).astype(np.float32)


def _program(model, k: int) -> dict:
  """{"Y": the symbolic output of `model`}: A an input of (1, seq, k) rows, seq a kg.Dim
  1..HI (as export/onnx_lm.py traces a causal LM)."""
  a = kg.Tensor.empty(1, kg.Dim("seq", 1, HI).bind(1), k, name="A", device="PYTHON")
  loaded = kg.onnx.load(model.SerializeToString())
  return {"Y": loaded.run({"A": a}, device="PYTHON", replay=False)["Y"]}


@pytest.mark.parametrize("block,zp,bias", CASES)
def test_one_program_matches_onnxruntime_at_every_row_count_on_python(block, zp, bias):
  model, loaded = _symbolic(24, 64, block, zp, bias)
  for seq in SEQS:
    got = loaded.run({"A": _rows(seq, 64)}, device="PYTHON")["Y"].numpy()
    want = ort_run(model, {"A": _rows(seq, 64)})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"seq {seq}")


@pytest.mark.parametrize("block,zp,bias", CASES)
def test_one_bundle_matches_onnxruntime_at_every_row_count_on_webgpu(tmp_path, block, zp, bias):
  device_runtime("WEBGPU")
  model, loaded = _symbolic(64, 128, block, zp, bias)
  bundle = kg.export(_program(model, 128), str(tmp_path), format="webgpu")
  for seq in SEQS:
    got = bundle.run({"A": _rows(seq, 128)}, device="WEBGPU")["Y"].numpy()
    want = ort_run(model, {"A": _rows(seq, 128)})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"seq {seq}")


def test_one_bundle_matches_onnxruntime_on_ptxsim(tmp_path):
  model, loaded = _symbolic(16, 64, 32, "uint8", True)
  bundle = kg.export(_program(model, 64), str(tmp_path), format="ptx")
  for seq in (1, 2, 5):
    got = bundle.run({"A": _rows(seq, 64)}, device="PTXSIM")["Y"].numpy()
    want = ort_run(model, {"A": _rows(seq, 64)})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"seq {seq}")


def _rows_per_thread(kernel) -> int:
  """The register tile's rows: the run-time grid's threads per workgroup over its workgroup."""
  (_, _, per, *_), = kernel.launch.grid
  return per // kernel.local_size[0]


@pytest.fixture(scope="module")
def smollm_width():
  """SmolLM2-135M's MLP up projection (576 -> 1536, block 32, uint8 zero points) over seq rows:
  (model, loaded, its one kernel for lavapipe, one-off)."""
  model, loaded = _symbolic(1536, 576, 32, "uint8", False)
  kernels = kg.compile(list(_program(model, 576).values()), target="wgsl", adapter="lavapipe")
  assert len(kernels) == 1
  return model, loaded, kernels[0]


def test_the_prefill_takes_the_tiled_kernel_and_decoding_one_row_a_thread(smollm_width):
  """The kernel reduces over K as (words, fields) (K / 8 words of 8 fields: matmul_dequant);
  seq = 1 runs a variant of one row a thread, the top count (a prompt of the bundle's step) the
  capped kernel itself: a one-off run's variants take at most its tile (variants.py
  VARIANT_BUDGET; issue 35 had the top in a 16 x 16 variant when the kernel was 4 x 4, a build of
  3.5-4.5 CPU s on lavapipe once the kernel was 8 x 8 rolled, for no faster a run)."""
  _, _, kernel = smollm_width
  assert kernel.name.split("__")[-1].split("_")[:2] == ["72", "8"], kernel.name
  assert kernel.capped
  one, below, top = (variant_for(kernel, {"seq": v}) for v in (1, HI - 1, HI))
  assert _rows_per_thread(one) == 1
  assert top is kernel and below is kernel


def test_the_top_variant_matches_onnxruntime_on_webgpu(smollm_width, tmp_path):
  device_runtime("WEBGPU")
  model, loaded, _ = smollm_width
  bundle = kg.export(_program(model, 576), str(tmp_path), format="webgpu", adapter="lavapipe")
  for seq in (1, 77, HI):
    got = bundle.run({"A": _rows(seq, 576)}, device="WEBGPU")["Y"].numpy()
    want = ort_run(model, {"A": _rows(seq, 576)})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"seq {seq}")
