"""ONNX loss operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (registered in
registry.OPS)."""
from __future__ import annotations

from ...dtype import dtypes
from ...tensor.tensor import Tensor, where
from ..registry import op


def _nll(logp, target, weight, at):
  """NegativeLogLikelihoodLoss of log-probabilities (N, C, d...) and targets (N, d...)."""
  c = logp.shape[1]
  target = target.cast(dtypes.int32).unsqueeze(1)
  classes = Tensor.arange(c, device=logp.device).reshape((1, c) + (1,) * (logp.ndim - 2))
  hit = classes == target
  picked = where(hit, logp, 0).sum(1)
  w = weight.reshape((1, c) + (1,) * (logp.ndim - 2)) if weight is not None else \
    Tensor.ones(1, dtype=logp.dtype, device=logp.device)
  wsel = where(hit, w, 0).sum(1)
  ignore = at.int("ignore_index")
  if ignore is not None:
    wsel = where(target.squeeze(1) == ignore, 0, wsel)
  loss = -picked * wsel
  reduction = at.str("reduction", "mean")
  if reduction == "none":
    return loss
  if reduction == "sum":
    return loss.sum()
  return loss.sum() / wsel.sum()


@op("NegativeLogLikelihoodLoss")
def _nllloss(ins, at):
  return _nll(ins[0], ins[1], ins[2], at)


@op("SoftmaxCrossEntropyLoss")
def _sce(ins, at):
  logp = ins[0].log_softmax(1)
  return [_nll(logp, ins[1], ins[2], at), logp]
