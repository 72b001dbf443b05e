"""An exported fp32 / fp16 causal LM bundle (export/onnx_lm.py causal_program) for a CPU adapter
(lavapipe, SwiftShader) holds its MatMul weights as a native run on that adapter does (issue 35):
the trace on PYTHON, which has no adapter, goes by the adapter given (`adapter=`, the row
defaults' weights_t and reduce_inner: onnx/operators/weights.py matmul_rows), so the weights are
stored transposed, the normed row is realized, and the 1-row LM head takes the stepped rows
layout (lowering/threads.py reduce_inner: several outputs a thread, its one reduced axis split
into a loop of 32-element runs, no workgroup memory). The bug: traced without the adapter, the
head stayed a thread (or a workgroup) per output staging the norm. Such bundles generate
onnxruntime's greedy tokens on WEBGPU natively; a bundle for another adapter keeps its layout."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

import kernelgen as kg
from onnx_contrib_util import onnx  # noqa: F401 (a missing onnx package is a missing tool)
from tools import device_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lm_models  # noqa: E402

PROMPT = [1, 5, 9, 2, 7, 3, 4, 8]
CONTEXT = 32
CPU_ADAPTERS = ("lavapipe", "swiftshader")
# the tiny config widened so the head's weight (128 x 512) is held transposed (weights.py
# MIN_ELEMENTS) and its 512 outputs are rows enough for the layout (threads.MIN_GATED_LOCAL)
WIDE = dataclasses.replace(lm_models.CONFIGS["tiny"], hidden=128, vocab=512, mlp=256)


def _export(path, dtype: str, step: int, adapter, last_logits: bool = False, cfg=WIDE):
  from kernelgen.export.onnx_lm import causal_program
  model = lm_models.build(cfg, dtype, last_logits=last_logits)
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), step, CONTEXT,
                                  adapter=adapter)
  return model, kg.export(outputs, str(path), format="webgpu", state=state, adapter=adapter)


def _head(bundle) -> tuple[int, str]:
  """(outputs per thread, WGSL) of the bundle's 1-row LM head (512 outputs over K = 128)."""
  (kernel,) = [k for k in bundle.manifest["kernels"] if k["name"].startswith("r_1_512__128")]
  threads = kernel["dispatch"][0] * kernel["workgroup_size"][0]
  source = (Path(bundle.path) / kernel["file"]).read_text()
  return 512 // threads, source


@pytest.mark.parametrize("adapter", CPU_ADAPTERS)
@pytest.mark.parametrize("dtype,step,last", [("fp32", 1, False), ("fp16", 1, False),
                                             ("fp32", 8, True)])
def test_exported_head_takes_the_rows_layout_on_cpu_adapters(tmp_path, adapter, dtype, step,
                                                             last):
  """The one-token bundle's head, and the symbolic-step bundle's head on the last position
  (logits_to_keep 1: one row whatever the step): several outputs a thread, a loop of 128 / 32 =
  4 trips, no workgroup memory; its weight stored (512, 128), the transposed initializer (as
  the embedding table: two such weights, none (128, 512))."""
  _, bundle = _export(tmp_path, dtype, step, adapter, last)
  rows, src = _head(bundle)
  assert rows > 1 and "< 4i;" in src and "var<workgroup>" not in src, src
  shapes = [w["shape"] for w in bundle.manifest["weights"]]
  assert shapes.count([512, 128]) == 2 and [128, 512] not in shapes, shapes


def test_other_adapters_keep_the_head_layout(tmp_path):
  """Traced for a discrete GPU, or for no adapter: the weight as given, a workgroup of lanes or
  a thread per output, as before."""
  for i, adapter in enumerate(("discrete", None)):
    _, bundle = _export(tmp_path / str(i), "fp32", 1, adapter)
    rows, src = _head(bundle)
    assert rows <= 1 and "< 4i;" not in src, (adapter, src)


@pytest.mark.parametrize("adapter", CPU_ADAPTERS)
@pytest.mark.parametrize("dtype,step", [("fp32", 1), ("fp16", 1), ("fp32", 8)])
def test_cpu_adapter_bundle_generates_onnxruntime_greedy_tokens(tmp_path, adapter, dtype, step):
  """Natively on WEBGPU, the bundle exported for each CPU adapter (its kernels are that
  adapter's), the prompt in one run (step 8) or a token at a time (step 1), then decoding."""
  pytest.importorskip("onnxruntime")
  device_runtime("WEBGPU")
  model, bundle = _export(tmp_path, dtype, step, adapter, last_logits=step > 1)
  want = lm_models.ort_greedy(model, PROMPT, 12)
  assert bundle.generate(PROMPT, max_new_tokens=12, device="WEBGPU") == want
  assert len(set(want)) > 1
