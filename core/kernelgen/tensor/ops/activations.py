"""Activation functions and small elementwise helpers in torch's spelling, as Tensor methods:
gelu (exact or tanh), leaky_relu, elu, selu, celu, softplus, softsign, hardsigmoid, hardswish,
hardtanh, relu6, mish, logsigmoid, glu; clamp, masked_fill, lerp, type_as, expand_as, isfinite
and the logical and/or/xor. Definitions and defaults are torch.nn.functional's; each is a few
fused elementwise ops (softplus and logsigmoid keep their range with torch's threshold)."""
from __future__ import annotations

import math

from ...dtype import dtypes
from ...errors import ShapeError
from ..operands import TensorOps
from .special import SpecialOps
from ..data import resolve_axes
from .elementwise import float_math

SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def _gelu_tanh(x):
  return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())


def _gelu_exact(x):
  return 0.5 * x * (1 + SpecialOps.erf(x * (1 / math.sqrt(2))))


def _softplus(x, beta=1.0, threshold=20.0):
  bx = x * beta
  return (bx > threshold).where(x, (1 + bx.exp()).log() / beta)


class ActivationOps(TensorOps):
  """Tensor methods: torch.nn.functional's activations and elementwise helpers (see module)."""
  __slots__ = ()

  def gelu(self, approximate: str = "tanh"):
    """GELU: approximate="tanh" (the default here, as jax.nn.gelu and tinygrad) or "none", the
    exact x * Phi(x) with erf (torch's default, and nn.GELU's). Elementwise, same shape; a
    float result (float32 for integer inputs).

    Raises ShapeError for another `approximate`."""
    if approximate not in ("tanh", "none"):
      raise ShapeError(f"gelu approximate={approximate!r}: use 'none' (erf) or 'tanh'")
    return float_math(_gelu_tanh if approximate == "tanh" else _gelu_exact)(self)

  def leaky_relu(self, negative_slope: float = 0.01):
    """x where x >= 0, else negative_slope * x (torch's leaky_relu). Elementwise, same shape; a
    float result (float32 for integer inputs)."""
    return float_math(lambda x: (x < 0).where(x * negative_slope, x))(self)

  def elu(self, alpha: float = 1.0):
    """x where x > 0, else alpha * (exp(x) - 1) (torch's elu). Elementwise, same shape; a float
    result (float32 for integer inputs)."""
    return float_math(lambda x: (x > 0).where(x, alpha * (x.exp() - 1)))(self)

  def selu(self):
    """scale * elu(x, alpha) with torch's constants (alpha 1.6733, scale 1.0507). Elementwise, same
    shape; a float result (float32 for integer inputs)."""
    return float_math(lambda x: SELU_SCALE * (x > 0).where(x, SELU_ALPHA * (x.exp() - 1)))(self)

  def celu(self, alpha: float = 1.0):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) (torch's celu). Elementwise, same shape; a
    float result (float32 for integer inputs)."""
    return float_math(lambda x: x.maximum(0) + (alpha * ((x / alpha).exp() - 1)).minimum(0))(self)

  def softplus(self, beta: float = 1.0, threshold: float = 20.0):
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (torch's softplus).
    Elementwise, same shape; a float result (float32 for integer inputs)."""
    return float_math(lambda x: _softplus(x, beta, threshold))(self)

  def softsign(self):
    """x / (1 + |x|). Elementwise, same shape; a float result (float32 for integer inputs)."""
    return float_math(lambda x: x / (1 + x.abs()))(self)

  def hardsigmoid(self):
    """clip(x / 6 + 1/2, 0, 1) (torch's hardsigmoid). Elementwise, same shape; a float result
    (float32 for integer inputs)."""
    return float_math(lambda x: (x / 6 + 0.5).clip(0, 1))(self)

  def hardswish(self):
    """x * hardsigmoid(x) (torch's hardswish). Elementwise, same shape; a float result (float32 for
    integer inputs)."""
    return float_math(lambda x: x * (x / 6 + 0.5).clip(0, 1))(self)

  def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0):
    """The values clipped to [min_val, max_val] (torch's hardtanh), same shape and dtype."""
    return self.clip(min_val, max_val)

  def relu6(self):
    """The values clipped to [0, 6], same shape and dtype."""
    return self.clip(0, 6)

  def mish(self):
    """x * tanh(softplus(x)). Elementwise, same shape; a float result (float32 for integer inputs).
    """
    return float_math(lambda x: x * _softplus(x).tanh())(self)

  def logsigmoid(self):
    """log(sigmoid(x)) = -softplus(-x), accurate for large |x|. Elementwise, same shape; a float
    result (float32 for integer inputs)."""
    return float_math(lambda x: -_softplus(-x))(self)

  def glu(self, axis: int = -1):
    """The first half of axis gated by the sigmoid of the second (torch's F.glu(dim)): self's
    shape with `axis` halved.

    Raises ShapeError when that axis has an odd size."""
    axis = resolve_axes(axis, self.ndim)[0]
    n = self.shape[axis]
    if n % 2:
      raise ShapeError(f"glu halves axis {axis}, which has odd size {n}")
    lead = (slice(None),) * axis
    return self[lead + (slice(0, n // 2),)] * self[lead + (slice(n // 2, n),)].sigmoid()

  def clamp(self, min=None, max=None):   # noqa: A002  (torch's names)
    """The values limited to [min, max] (torch's name for `clip`; either bound may be None, a number
    or a Tensor that broadcasts)."""
    return self.clip(min, max)

  def masked_fill(self, mask, value):
    """value where mask is true, else self (torch's; mask broadcasts to self's shape)."""
    mask = mask if isinstance(mask, TensorOps) else type(self)(mask, device=self.device)
    return mask.cast(dtypes.bool).where(self._const(value) if not isinstance(value, TensorOps)
                                   else value.cast(self.dtype), self)

  def lerp(self, end, weight):
    """self + weight * (end - self) (torch.lerp)."""
    return self + (end - self) * weight

  def type_as(self, other):
    """The values cast to `other`'s dtype (torch's type_as)."""
    return self.cast(other.dtype)

  def expand_as(self, other):
    """The tensor broadcast to `other`'s shape (see `expand`).

    Raises ShapeError when it does not broadcast."""
    return self.expand(other.shape)

  def isfinite(self):
    """True where a value is neither NaN nor infinite, a bool tensor of the same shape (all True for
    integer dtypes)."""
    if not self.dtype.is_float():
      return self._const(True, dtypes.bool)
    return ~(self.isnan() | self.isinf())

  def logical_and(self, other):
    """Elementwise `and` of the truth of self and `other` (a Tensor or a Python value; nonzero is
    true), broadcast, a bool tensor."""
    return self.cast(dtypes.bool) & _as_bool(other, self)

  def logical_or(self, other):
    """Elementwise `or` of the truth of self and `other` (a Tensor or a Python value; nonzero is
    true), broadcast, a bool tensor."""
    return self.cast(dtypes.bool) | _as_bool(other, self)

  def logical_xor(self, other):
    """Elementwise `xor` of the truth of self and `other` (a Tensor or a Python value; nonzero is
    true), broadcast, a bool tensor."""
    return self.cast(dtypes.bool) ^ _as_bool(other, self)


def _as_bool(x, like):
  return x.cast(dtypes.bool) if isinstance(x, TensorOps) else like._const(bool(x), dtypes.bool)
