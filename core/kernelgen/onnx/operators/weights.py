"""Constant matmul weights held in the layout a CPU adapter's matrix-vector product reads fastest.

A MatMul's B given as an initializer (K, N), the layout of every transformers.js / Optimum
export, makes a decode step's matvec read B down its columns: each thread (an output) strides
N elements per reduced element. GPUs read that coalesced (a workgroup's threads take adjacent
columns), but a CPU adapter runs a workgroup's threads as the lanes of one SIMD group, each
group walking K rows that lie N * 4 bytes apart, so every load touches a new cache line and
page. Where the adapter asks for it (option `weights_t` of its row kernels' table,
render/wgsl/adapters.py: lavapipe's), such a weight is held transposed, (N, K) contiguous,
uploaded once per model and device (Model.uploads), and the MatMul reads it through a permuted
view: each output's reduction is then one contiguous run (the layout MatMulNBits' packed
weights already have).

Measured on lavapipe natively (wgpu, load 6-8 on 2 CPUs, best of 4 interleaved), a copy of the
weight's bytes' time over the matmul's, (K, N) -> (N, K): decode 1 x 576 @ 576 x 49152 (SmolLM2's
LM head) 0.24 -> 0.87, 1 x 576 @ 576 x 1536 0.46 -> 0.74, 1 x 1536 @ 1536 x 576 0.16 -> 0.41;
prefill 32 x 576 @ 576 x 1536 0.30 -> 0.33, 32 x 1536 @ 1536 x 576 0.10 -> 0.16, 128 x 576 @
576 x 576 0.07 -> 0.06 (the noise). bench/lm_decode_kernels.py, SmolLM2 widths at 2 layers, fp32:
the LM head's kernel 323 ms (load 2.5) -> 125 ms (load 10).
"""
from __future__ import annotations

from ...tensor.tensor import Tensor

# the uploads' key suffix (Model.uploads) of an initializer held transposed
TRANSPOSED = "#transposed"
# weights of fewer elements keep their layout (a tiny matmul gains nothing from a copy)
MIN_ELEMENTS = 1 << 14


def transposes_weights(device: str) -> bool:
  """`device`'s adapter asks for constant matmul weights held transposed (option weights_t of
  its adapter table's row kernels; no adapter, no table entry: False)."""
  from ...compiler import target_of
  from ...device import Device
  runtime = Device[device]
  adapter = runtime.render_options().get("adapter")
  if not adapter:
    return False
  return bool(target_of(runtime).adapter_defaults(adapter, "rows").get("weights_t"))


def held_transposed(ins, i: int) -> Tensor | None:
  """Input i of a MatMul as a (K, N) view of its transpose held (N, K) contiguous on the device,
  where it is a 2-D float initializer of at least MIN_ELEMENTS elements and the device's adapter
  asks for it (transposes_weights); else None (read the input as it is)."""
  runner, name = ins.runner, ins.names[i] if i < len(ins.names) else ""
  init = runner.model.initializers.get(name) if name else None
  if runner.folding or init is None or len(init[1]) != 2:
    return None
  dtype, shape = init[0], init[1]
  if not dtype.is_float() or shape[0] * shape[1] < MIN_ELEMENTS or \
      not transposes_weights(runner.device):
    return None
  key = (runner.device, name + TRANSPOSED)
  if key not in runner.model.uploads:
    t = runner.upload(init, f"tensor {name!r}")
    runner.model.uploads[key] = t.permute(1, 0).contiguous().realize()
  return runner.model.uploads[key].permute(1, 0)


__all__ = ["held_transposed", "transposes_weights"]
