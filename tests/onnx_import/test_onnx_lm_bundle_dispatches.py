"""Kernels per decode run of an exported q4 causal LM bundle (export/onnx_lm.py causal_program)
traced for a CPU adapter (lavapipe), issue 35's dispatches per token: every run dispatches each
of the bundle's kernels once but those whose `runs` leave out its token count, so the manifest's
kernels that run at seq = 1 are the decode step's launch list.
The one-token bundle's step takes what kg.generate's native step does (tests/onnx_import/
test_onnx_decode_dispatches.py): 8 kernels per layer (the norm's realized row, the joined QKV
MatMulNBits, the k and v cache writes joined into one kernel (graph/join.py), the attention, the
output projection, the second norm, gate and up, down) and, once, the key count, the final norm,
the LM head and the token draw (one residual stream was realized where WebGPU's default of 8
storage buffers split a kernel, until small read-only inputs bound as uniform buffers). A
symbolic step (a prompt in one run) keeps its norms' statistics and
rows, and gate and up, apart (realizing its rows measured slower: onnx/operators/weights.py
packed_rows): 9 a layer, of which a decode run (one new token) launches 5, its gate computed in
the up*silu(gate) kernel of one row, its QKV projection and cache writes one kernel of one row
(graph/one_row.py: the pairs run for two tokens or more), each of those two also taking the sum
of squares of the norm it reads (one_row.norm_joins: the norms' sum kernels run for two or more).
The fp32 model's one-token step: 6 a layer (its norms computed in the
projections that read them; 7 while its attention's kernel bound more than 8 storage buffers).

The bugs: MatMulNBits traced on PYTHON ignored the adapter it was traced for (no row defaults
in row_input), so each normed row of a one-token step was staged into its matvec by two kernels
of its own (a row statistic, and the row broadcast over the outputs): 31 kernels, not 23; and
the attention mask, an expression of a few one-element values (the key count, the past length),
was a kernel of its own because graph/schedule.py _loads counted each read of such a scalar as
a load per element (now one-element sources count for none). Greedy tokens as onnxruntime's
(CPU) on WEBGPU."""
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
ADAPTER = "lavapipe"


def _bundle(path, config: str, step: int, layers: int = 2, buffers: int = 8, rotary="op",
            dtype="q4"):
  from kernelgen.export.onnx_lm import causal_program
  cfg = dataclasses.replace(lm_models.CONFIGS[config], layers=layers)
  model = lm_models.build(cfg, dtype, rotary=rotary, last_logits=step > 1)
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), step, CONTEXT,
                                  adapter=ADAPTER)
  more = {"max_storage_buffers": buffers} if buffers != 8 else {}
  return model, kg.export(outputs, str(path), format="webgpu", state=state, adapter=ADAPTER,
                          **more)


# (dtype, step, buffers, kernels a layer, the rest): one token a run, 8 storage buffers (the
# default), 20 kernels (21 while the output projection's epilogue, 9 buffers, realized one
# residual stream; 31, then 23 before the cache writes joined); a symbolic step of up to 4
# tokens, 23 (26, 29, 28); 23 at 32 buffers (26, 25); fp32, one token a run: 15 (17, 19). At 8
# storage buffers the kernels bind their small read-only inputs (norm weights, q4 scales, the
# key count) as uniform buffers where they would bind more (render/wgsl/target.py
# uniform_slots): as many kernels as at 32 (this tiny model's caches and weights are all small)
# A symbolic step's decode run (seq = 1) launches, for each layer's gate and up*silu(gate) pair,
# one kernel computing both (graph/one_row.py; the pair runs at seq >= 2): 9 -> 8 a layer.
# A one-token bundle's (static) QKV projection also writes the rotated key and the value into
# their caches (graph/join.py read_member, lowering/exchange.py): q4 8 -> 7, fp32 6 -> 5 a layer;
# a symbolic step's decode run launches its projection and cache writes cut to one row as one
# kernel the same way (graph/one_row.py write_joined_at; the pair runs at seq >= 2): 8 -> 7.
# Those two one-row kernels also compute the RMS norms they read (a sum of squares, or a row
# kernel's normed rows), beside their matmuls (one_row.norm_joins, lowering/row_factor.py; the
# norm kernels run at seq >= 2): 7 -> 5 a layer. The first layer's input norm, whose normed
# rows (a q4 embedding's) an elementwise kernel writes, is left: once 5 -> 6.
CASES = [("q4", 1, 8, 7, 4), ("q4", 4, 8, 5, 6), ("q4", 4, 32, 5, 6), ("fp32", 1, 8, 5, 3)]


def _launched(kernels: list, seq: int) -> list:
  """The kernels a run of `seq` new tokens launches: those without `runs`, or whose runs hold
  seq within lo..hi (export/README.md)."""
  return [k for k in kernels if "runs" not in k or k["runs"]["lo"] <= seq <= k["runs"]["hi"]]


@pytest.mark.parametrize("dtype,step,buffers,per_layer,once", CASES)
def test_bundle_decode_kernels_a_layer(tmp_path, dtype, step, buffers, per_layer, once):
  """Two layers against three: one more layer is `per_layer` kernels of a decode run (one new
  token); the rest is the once-a-run kernels. No kernel computes the attention mask (the
  attention computes it from the key count), and none broadcasts a normed row over a matvec's
  outputs (each norm writes its row once)."""
  counts = {}
  for layers in (2, 3):
    _, bundle = _bundle(tmp_path / str(layers), "tiny", step, layers, buffers, dtype=dtype)
    kernels = _launched(bundle.manifest["kernels"], 1)
    counts[layers] = len(kernels)
    names = [k["name"] for k in kernels]
    assert not [n for n in names if n.startswith("E_") and "total" in n], names
    hidden = lm_models.CONFIGS["tiny"].hidden
    assert not [k["name"] for k in kernels if k["name"].startswith("E_") and
                k["global_size"][0] * k["global_size"][1] * k["global_size"][2] > hidden *
                step], names
  assert counts[3] - counts[2] == per_layer, counts
  assert counts[2] == 2 * per_layer + once, counts


def test_symbolic_step_prefill_keeps_its_tiled_mlp_pair(tmp_path):
  """A prompt's run (seq = step) launches gate and up*silu(gate) as the two tiled kernels it
  had (9 a layer), never the one-row kernel; a decode run launches that kernel and neither of
  the pair (graph/one_row.py), each kernel a run launches once. So too the QKV projection and
  the k and v cache write: a decode run launches one kernel of both (write_joined_at), a
  prompt's run the two."""
  _, bundle = _bundle(tmp_path, "tiny", 4, 2)
  kernels = bundle.manifest["kernels"]
  joined = [k["name"] for k in kernels if k.get("runs", {}).get("hi") == 1]
  pair = [k["name"] for k in kernels if k.get("runs", {}).get("lo") == 2]
  # (the pairs, and the three norm kernels that the joined kernels compute themselves)
  assert len(joined) == 4 and len(pair) == 11, (joined, pair)
  assert [n for n in joined if n.startswith("write_")] == \
    [n + "_seq1" for n in pair if n.startswith("write_")], (joined, pair)
  prefill, decode = ([k["name"] for k in _launched(kernels, seq)] for seq in (4, 1))
  assert len(prefill) == 2 * 9 + 5 and not set(joined) & set(prefill), prefill
  assert set(pair) <= set(prefill) and not set(pair) & set(decode), decode
  assert set(joined) <= set(decode) and len(decode) == len(kernels) - len(pair)


@pytest.mark.parametrize("config,rotary,step", [("tiny", "op", 1), ("tiny", "op", 4),
                                                ("tiny-qwen", "gqa", 4)])
def test_q4_cpu_adapter_bundle_generates_onnxruntime_greedy_tokens(tmp_path, config, rotary,
                                                                   step):
  """The same bundles natively on WEBGPU: the prompt a token at a time (step 1) or in two runs
  (step 4), then decoding; GroupQueryAttention's own rotary too (tiny-qwen, one KV head)."""
  pytest.importorskip("onnxruntime")
  device_runtime("WEBGPU")
  model, bundle = _bundle(tmp_path, config, step, rotary=rotary)
  want = lm_models.ort_greedy(model, PROMPT, 10)
  assert bundle.generate(PROMPT, max_new_tokens=10, device="WEBGPU") == want
  assert len(set(want)) > 1


def _wide_bundle(path, dtype: str):
  """A symbolic-step (4) bundle of a 2-layer model whose fp32 weights pass graph/one_row.py's
  FLOAT_WEIGHT_LEAST (hidden 256: q/k/v 256 x 512, gate and up 256 x 512)."""
  from kernelgen.export.onnx_lm import causal_program
  cfg = dataclasses.replace(lm_models.CONFIGS["tiny"], hidden=256, mlp=512)
  model = lm_models.build(cfg, dtype, last_logits=True)
  outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), 4, CONTEXT,
                                  adapter=ADAPTER)
  return model, kg.export(outputs, str(path), format="webgpu", state=state, adapter=ADAPTER)


@pytest.mark.parametrize("dtype,joined", [("fp32", 0), ("q4", 4)])
def test_one_row_joins_leave_float_weight_matrices_to_the_pair(tmp_path, dtype, joined):
  """A one-row joined kernel sums each output in one thread's loop: fine over q4's packed rows,
  5-50x slower over a float (K, N) weight than the pair's seq = 1 variants (measured: the
  comment at one_row.FLOAT_WEIGHT_SHARE). The fp32 bundle of weights that size joins nothing
  (its decode runs the pairs' variants), the q4 one keeps its two joins a layer; both give
  onnxruntime's greedy tokens natively on WEBGPU."""
  pytest.importorskip("onnxruntime")
  model, bundle = _wide_bundle(tmp_path, dtype)
  one_row = [k["name"] for k in bundle.manifest["kernels"] if k.get("runs", {}).get("hi") == 1]
  assert len(one_row) == joined, one_row
  device_runtime("WEBGPU")
  want = lm_models.ort_greedy(model, PROMPT, 6)
  assert bundle.generate(PROMPT, max_new_tokens=6, device="WEBGPU") == want
