"""The regression and binary losses of torch.nn.functional as Tensor methods, with torch's
definitions, defaults and reductions ("mean", "sum", "none"; kl_div also "batchmean"):
mse_loss, l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy (logs clamped at -100, as
torch), binary_cross_entropy_with_logits (the stable form, pos_weight), kl_div; and the
vector helpers normalize and cosine_similarity. nll_loss and cross_entropy are in model_ops.py.
"""
from __future__ import annotations

from ...errors import ShapeError
from .attention import reduce_loss
from ..operands import TensorOps


def _pair(x, target):
  target = target if isinstance(target, TensorOps) else type(x)(target, device=x.device)
  if target.shape != x.shape:
    raise ShapeError(f"the target's shape {target.shape} must equal the input's {x.shape}")
  return x, target.cast(x.dtype)


def _clamped_log(p):
  return p.log().maximum(-100.0)


class LossOps(TensorOps):
  """Tensor methods: the losses and vector helpers listed in the module docstring."""
  __slots__ = ()

  def mse_loss(self, target, reduction: str = "mean"):
    x, t = _pair(self, target)
    return reduce_loss((x - t) * (x - t), reduction)

  def l1_loss(self, target, reduction: str = "mean"):
    x, t = _pair(self, target)
    return reduce_loss((x - t).abs(), reduction)

  def smooth_l1_loss(self, target, reduction: str = "mean", beta: float = 1.0):
    x, t = _pair(self, target)
    d = (x - t).abs()
    if beta == 0:
      return reduce_loss(d, reduction)
    return reduce_loss((d < beta).where(0.5 * d * d / beta, d - 0.5 * beta), reduction)

  def huber_loss(self, target, reduction: str = "mean", delta: float = 1.0):
    x, t = _pair(self, target)
    d = (x - t).abs()
    return reduce_loss((d <= delta).where(0.5 * d * d, delta * (d - 0.5 * delta)), reduction)

  def binary_cross_entropy(self, target, weight=None, reduction: str = "mean"):
    """-w (t log p + (1 - t) log(1 - p)) of probabilities p = self."""
    p, t = _pair(self, target)
    loss = -(t * _clamped_log(p) + (1 - t) * _clamped_log(1 - p))
    return reduce_loss(loss * weight if weight is not None else loss, reduction)

  def binary_cross_entropy_with_logits(self, target, weight=None, reduction: str = "mean",
                                       pos_weight=None):
    """binary_cross_entropy of sigmoid(self), computed stably from the logits."""
    x, t = _pair(self, target)
    softplus_neg = (-x.abs()).exp().log1p() + (-x).maximum(0)      # log(1 + exp(-x))
    if pos_weight is None:
      loss = (1 - t) * x + softplus_neg
    else:
      loss = (1 - t) * x + (1 + (pos_weight - 1) * t) * softplus_neg
    return reduce_loss(loss * weight if weight is not None else loss, reduction)

  def kl_div(self, target, reduction: str = "mean", log_target: bool = False):
    """torch's kl_div of log-probabilities self against target (probabilities, or log ones):
    target * (log target - self), 0 where target is 0; "batchmean" divides the sum by dim 0."""
    x, t = _pair(self, target)
    if log_target:
      loss = t.exp() * (t - x)
    else:
      loss = (t > 0).where(t * ((t > 0).where(t, 1.0).log() - x), 0.0)
    if reduction == "batchmean":
      return loss.sum() / (x.shape[0] if x.ndim else 1)
    return reduce_loss(loss, reduction)

  def normalize(self, p: float = 2.0, axis: int = 1, eps: float = 1e-12):
    """self / max(||self||_p along axis, eps) (torch's F.normalize(dim=axis))."""
    norm = (self.abs() ** p).sum(axis, keepdim=True) ** (1.0 / p)
    return self / norm.maximum(eps)

  def cosine_similarity(self, other, axis: int = 1, eps: float = 1e-8):
    """self . other / max(||self|| ||other||, eps) along axis (torch's, dim=axis)."""
    dot = (self * other).sum(axis)
    norms = ((self * self).sum(axis) * (other * other).sum(axis)).sqrt()
    return dot / norms.maximum(eps)
