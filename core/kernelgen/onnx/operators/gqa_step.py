"""What every GroupQueryAttention node of one model run computes alike, computed once: in a
decoder every layer's node reads the same `seqlens_k` and `total_sequence_length` inputs and a
past cache of the same length, so each row's key count, where the new keys go, the rows the
KV cache writes take (contrib.write_cache's mask) and the attention mask are the same lazy
tensors for all layers. The scheduler then gives each one kernel per decode step (where it is
not fused), not one per layer: a decode step's dispatches (issue 35) drop by those kernels
times the layers less one.
"""
from __future__ import annotations

from ...dtype import dtypes
from ...graph.dims import Sym
from ...tensor.tensor import Tensor, where


def past_len(past_k: Tensor | None, lens: Tensor, s) -> Tensor:
  """(B,) int32: where each batch row's new keys go, 0 on a prompt (no past), else lens - s (s:
  the new tokens, a Sym read at run time, never its padded size); likewise a symbolic past."""
  from ...tensor.symbolic import scalar
  if past_k is None:
    return lens * 0
  n, new = past_k.symbolic_shape[2], scalar(Tensor, s, lens.device) if isinstance(s, Sym) else s
  if not isinstance(n, Sym):
    return lens * 0 if n == 0 else lens - new
  return where(scalar(Tensor, n, lens.device) == 0, lens * 0, lens - new)


def step_shared(ins, b: int, s, past_k: Tensor | None) -> dict:
  """The dict the GroupQueryAttention nodes of this run share where they read the same
  seqlens_k and total_sequence_length inputs with `b` rows, `s` new tokens and a past of the
  same length (kept on the run's Runner): "lens" (B,) int32 each row's keys, "past_len" where
  its new keys go, and whatever the nodes add (the cache writes' mask, the attention mask)."""
  runner = ins.runner
  past = None if past_k is None else past_k.symbolic_shape[2]
  total = ins.names[6] if len(ins.names) > 6 else ""
  key = (ins.names[5], total, str(past), str(s), b, runner.folding)
  store = runner.__dict__.setdefault("_gqa_step", {})
  if key not in store:
    lens = ins[5].cast(dtypes.int32).reshape(b) + 1
    store[key] = {"lens": lens, "past_len": past_len(past_k, lens, s)}
    from .kv_write import enabled
    store[key]["in_place"] = enabled(ins)
  return store[key]


__all__ = ["past_len", "step_shared"]
