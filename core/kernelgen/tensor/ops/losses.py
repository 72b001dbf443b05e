"""The regression and binary losses of torch.nn.functional as Tensor methods, with torch's
definitions, defaults and reductions ("mean", "sum", "none"; kl_div also "batchmean"):
mse_loss, l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy (logs clamped at -100, as
torch), binary_cross_entropy_with_logits (the stable form, pos_weight), kl_div; and the
vector helpers normalize and cosine_similarity; and the class-index losses nll_loss and
cross_entropy (targets of any integer dtype; indices out of 0..C-1 that are not `ignore_index`
contribute 0, where torch raises on the device).
"""
from __future__ import annotations

from ...dtype import dtypes
from ...errors import DTypeError, ShapeError
from ..combine import where
from ..operands import TensorOps


def _pair(x, target):
  target = target if isinstance(target, TensorOps) else type(x)(target, device=x.device)
  if target.shape != x.shape:
    raise ShapeError(f"the target's shape {target.shape} must equal the input's {x.shape}")
  return x, target.cast(x.dtype)


def _clamped_log(p):
  return p.log().maximum(-100.0)


def _batched(x, target):
  """(N, C, *d) input and (N, *d) or (N, C, *d) target; a (C,) input gets N = 1."""
  if x.ndim == 1:
    x = x.unsqueeze(0)
    target = target.reshape((1,) + target.shape)
  if x.ndim < 2:
    raise ShapeError(f"a loss needs (N, C, ...) or (C,) input, got {x.shape}")
  return x, target


def _class_axis(x, values):
  return values.reshape((1, x.shape[1]) + (1,) * (x.ndim - 2))


def reduce_loss(loss, reduction: str, denominator=None):
  if reduction == "none":
    return loss
  if reduction == "sum":
    return loss.sum()
  if reduction == "mean":
    return loss.sum() / denominator if denominator is not None else loss.mean()
  raise ShapeError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _pick(x, target, weight, ignore_index: int):
  """(-x[target] * w[target], w[target]) per element, 0 where target == ignore_index."""
  if target.dtype.is_float() or target.dtype == dtypes.bool:
    raise DTypeError(f"class-index targets need an integer dtype, got {target.dtype}")
  if target.shape != (x.shape[0],) + x.shape[2:]:
    raise ShapeError(f"target shape {target.shape} does not fit input {x.shape}: class indices "
                     f"need shape {(x.shape[0],) + x.shape[2:]}")
  c = x.shape[1]
  work = dtypes.int32 if target.dtype.itemsize < 4 else target.dtype   # (no int64 promotion)
  target = target.cast(work)
  classes = _class_axis(x, type(x).arange(c, dtype=work, device=x.device))
  hit = (target.unsqueeze(1) == classes) & (target != ignore_index).unsqueeze(1)
  w = _class_axis(x, weight.cast(x.dtype)) if weight is not None else x._const(1.0)
  w_t = where(hit, w, 0.0).sum(1)
  picked = where(hit, x * w, 0.0).sum(1)
  return -picked, w_t


def nll_loss(x, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):
  """torch's nll_loss of log-probabilities x (N, C, *d) and class indices (N, *d): -x[target]
  weighted by weight[target]; "mean" divides by the summed weights of the targets counted."""
  squeeze = x.ndim == 1
  x, target = _batched(x.cast(dtypes.float32) if not x.dtype.is_float() else x, target)
  loss, w_t = _pick(x, target, weight, ignore_index)
  out = reduce_loss(loss, reduction, w_t.sum())
  return out.squeeze(0) if squeeze and reduction == "none" else out


def cross_entropy(x, target, weight=None, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0):
  """torch's cross_entropy of logits x (N, C, *d): log_softmax over C, then nll_loss against
  class indices (an integer target) or, for a float target of x's shape, -sum(p * log_softmax)
  per element ("mean" then divides by N * prod(d)). label_smoothing mixes in the uniform
  distribution, as torch."""
  squeeze = x.ndim == 1
  x, target = _batched(x, target)
  logp = x.log_softmax(axis=1)
  c = x.shape[1]
  w = _class_axis(x, weight.cast(logp.dtype)) if weight is not None else None
  if target.dtype.is_float():
    if target.shape != x.shape:
      raise ShapeError(f"probability targets need the input's shape {x.shape}, got "
                       f"{target.shape}")
    p = target * (1 - label_smoothing) + label_smoothing / c if label_smoothing else target
    terms = logp * p * w if w is not None else logp * p
    loss = -terms.sum(1)
    count = loss._elements() if loss.node.sym is None else None   # (symbolic: mean over values)
    out = reduce_loss(loss, reduction, count if reduction == "mean" else None)
    return out.squeeze(0) if squeeze and reduction == "none" else out
  nll, w_t = _pick(logp, target, weight, ignore_index)
  out = reduce_loss(nll, reduction, w_t.sum())
  if label_smoothing:
    smooth = -(logp * w).sum(1) if w is not None else -logp.sum(1)
    valid = target != ignore_index
    smooth = where(valid, smooth, 0.0)
    count = w_t.sum() if w is not None else valid.sum().cast(logp.dtype)
    out = (1 - label_smoothing) * out + reduce_loss(smooth, reduction, count) * (label_smoothing / c)
  return out.squeeze(0) if squeeze and reduction == "none" else out


class LossOps(TensorOps):
  """Tensor methods: the losses and vector helpers listed in the module docstring."""
  __slots__ = ()

  def mse_loss(self, target, reduction: str = "mean"):
    """The squared error (self - target) ** 2, reduced by `reduction`: "mean" (a 0-d tensor), "sum"
    or "none" (self's shape). `target` must have self's shape; it is cast to self's dtype.

    Raises ShapeError when the shapes differ or `reduction` is unknown."""
    x, t = _pair(self, target)
    return reduce_loss((x - t) * (x - t), reduction)

  def l1_loss(self, target, reduction: str = "mean"):
    """The absolute error |self - target|, reduced by `reduction` ("mean", "sum" or "none"), as
    `mse_loss`.

    Raises ShapeError when the shapes differ or `reduction` is unknown."""
    x, t = _pair(self, target)
    return reduce_loss((x - t).abs(), reduction)

  def smooth_l1_loss(self, target, reduction: str = "mean", beta: float = 1.0):
    """torch's smooth L1 loss: 0.5 d**2 / beta where d = |self - target| < beta, else d - 0.5 beta
    (beta 0: the L1 loss), reduced by `reduction` ("mean", "sum" or "none").

    Raises ShapeError when the shapes differ or `reduction` is unknown."""
    x, t = _pair(self, target)
    d = (x - t).abs()
    if beta == 0:
      return reduce_loss(d, reduction)
    return reduce_loss((d < beta).where(0.5 * d * d / beta, d - 0.5 * beta), reduction)

  def huber_loss(self, target, reduction: str = "mean", delta: float = 1.0):
    """torch's Huber loss: 0.5 d**2 where d = |self - target| <= delta, else delta (d - 0.5 delta),
    reduced by `reduction` ("mean", "sum" or "none").

    Raises ShapeError when the shapes differ or `reduction` is unknown."""
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

  def nll_loss(self, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):
    """torch's nll_loss of log-probabilities self, (N, C, *d) or (C,), against class indices
    `target` (an integer tensor of shape (N, *d), or () for a (C,) input): -self[target], times
    weight[target] when `weight` (C,) is given; targets equal to `ignore_index` count 0. "mean"
    divides by the summed weights of the counted targets (a 0-d tensor), "sum" adds, "none" gives
    shape (N, *d).

    Raises DTypeError for a float or bool target, ShapeError when the shapes do not fit."""
    return nll_loss(self, target, weight, ignore_index, reduction)

  def cross_entropy(self, target, weight=None, ignore_index: int = -100,
                    reduction: str = "mean", label_smoothing: float = 0.0):
    """torch's cross_entropy of logits self (N, C, *d) or (C,): log_softmax over C, then `nll_loss`
    against class indices (an integer target of shape (N, *d)), or, for a float target of self's
    shape (class probabilities), -sum(target * log_softmax) over C. weight (C,), ignore_index and
    reduction as `nll_loss`; label_smoothing mixes the uniform distribution into the targets, as
    torch.

    Raises DTypeError for a bool target, ShapeError when the shapes do not fit."""
    return cross_entropy(self, target, weight, ignore_index, reduction, label_smoothing)
