"""kg.nn: layers with parameters, in torch's spelling (Module, Linear, Conv2d, LayerNorm,
BatchNorm2d, Embedding, Dropout, Sequential, activations).

A parameter is a leaf Tensor that requires grad; assigning one (or a Module) to a Module attribute
registers it, as torch does. Initialisation is deterministic: every layer draws its seed from a
global counter (`manual_seed(n)` resets it), using Tensor.rand/randn (counter-based hashes).

BatchNorm2d's running statistics are updated lazily in training; the new values are queued and
realized by the next optimizer `step()` (together with the parameters) or when read. Dropout's
mask is drawn from a seed on the device, a counter each call advances the same way, so every
training step runs the same kernels (an int seed per call would compile new ones each step) and
kg.jit replays advance it as carried state (new masks each step, as eager).
"""
from __future__ import annotations

import math

from ..dtype import dtypes
from ..errors import ShapeError
from .module import (PENDING, Module, Parameter, StateDictError, manual_seed,  # noqa: F401
                     next_seed, take_pending, uniform_parameter)
from ..tensor.tensor import Tensor, hash_u32


class Linear(Module):
  """y = x @ W.T + b, as torch.nn.Linear: input (..., in_features) -> (..., out_features).

  weight (out_features, in_features) and bias (out_features,), when `bias`, are float32
  parameters initialised U(-1/sqrt(in), 1/sqrt(in)) as torch, from the seed counter
  (`kg.nn.manual_seed`)."""

  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    super().__init__()
    self.in_features, self.out_features = in_features, out_features
    bound = 1 / math.sqrt(in_features) if in_features else 0.0
    self.weight = uniform_parameter((out_features, in_features), bound)
    self.bias = uniform_parameter((out_features,), bound) if bias else None

  def forward(self, x):
    out = x @ self.weight.T
    return out + self.bias if self.bias is not None else out

  def extra_repr(self):
    return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


def _pair(v):
  return (v, v) if isinstance(v, int) else tuple(v)


def _conv_init(layer, in_channels, out_channels, kernel: tuple, stride, padding, dilation,
               groups, bias) -> None:
  """A convolution layer's settings and torch's initialisation: U(-1/sqrt(fan_in), ...)."""
  if in_channels % groups or out_channels % groups:
    raise ShapeError(f"{type(layer).__name__}: channels {in_channels} -> {out_channels} must "
                     f"divide by groups={groups}")
  layer.stride, layer.padding, layer.dilation, layer.groups = stride, padding, dilation, groups
  bound = 1 / math.sqrt(in_channels // groups * math.prod(kernel))
  layer.weight = uniform_parameter((out_channels, in_channels // groups) + kernel, bound)
  layer.bias = uniform_parameter((out_channels,), bound) if bias else None


class Conv2d(Module):
  """2-d convolution as torch.nn.Conv2d: input (N, in_channels, H, W) -> (N, out_channels, OH,
  OW). kernel_size, stride, padding and dilation are ints or pairs; groups splits the channels
  (both counts must divide by it). weight (out, in / groups, kh, kw) and bias (out,) are float32
  parameters initialised U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as torch.

  Raises ShapeError when the channels do not divide by groups (and, in forward, for an input
  that does not fit)."""

  def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
               groups=1, bias=True):
    super().__init__()
    _conv_init(self, in_channels, out_channels, _pair(kernel_size), stride, padding, dilation,
               groups, bias)

  def forward(self, x):
    return x.conv2d(self.weight, self.bias, stride=self.stride, padding=self.padding,
                    dilation=self.dilation, groups=self.groups)


class LayerNorm(Module):
  """torch.nn.LayerNorm: each input normalised to mean 0 and variance 1 over its last
  len(normalized_shape) dims (which must equal normalized_shape, an int or a tuple), `eps`
  added to the variance, then scaled by `weight` and shifted by `bias` (parameters of that
  shape, ones and zeros at first; none when elementwise_affine=False). Same shape and dtype.

  Raises ShapeError (in forward) when the input's last dims differ from normalized_shape."""

  def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True):
    super().__init__()
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.normalized_shape, self.eps = shape, eps
    self.weight = Parameter(Tensor.ones(*shape)) if elementwise_affine else None
    self.bias = Parameter(Tensor.zeros(*shape)) if elementwise_affine else None

  def forward(self, x):
    n = len(self.normalized_shape)
    if x.shape[x.ndim - n:] != self.normalized_shape:
      raise ShapeError(f"LayerNorm{self.normalized_shape} of an input of shape {x.shape}: its "
                       f"last dims must be {self.normalized_shape}")
    axes = tuple(range(x.ndim - n, x.ndim))
    return x.layernorm(axes, self.eps, self.weight, self.bias)


class BatchNorm2d(Module):
  """torch.nn.BatchNorm2d of (N, num_features, H, W) input, same shape: in training each
  channel is normalised by the batch's mean and (biased) variance, and the running mean and
  (unbiased) variance move by `momentum`; in eval mode (or with track_running_stats=False, the
  batch statistics always) the running statistics are used. Then the per-channel affine
  weight and bias when `affine`. The running statistics are buffers (in state_dict), updated
  lazily and realized by the next optimizer step or when read.

  Raises ShapeError (in forward) for input that is not 4-d with num_features channels."""

  def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
               affine: bool = True, track_running_stats: bool = True):
    super().__init__()
    self.num_features, self.eps, self.momentum = num_features, eps, momentum
    self.weight = Parameter(Tensor.ones(num_features)) if affine else None
    self.bias = Parameter(Tensor.zeros(num_features)) if affine else None
    self.track_running_stats = track_running_stats
    if track_running_stats:
      self.register_buffer("running_mean", Tensor.zeros(num_features))
      self.register_buffer("running_var", Tensor.ones(num_features))

  def forward(self, x):
    if x.ndim != 4 or x.shape[1] != self.num_features:
      raise ShapeError(f"BatchNorm2d({self.num_features}) needs NCHW input with "
                       f"{self.num_features} channels, got shape {x.shape}")
    shape = (1, self.num_features, 1, 1)
    if self.training or not self.track_running_stats:
      mean = x.mean((0, 2, 3), keepdim=True)
      var = ((x - mean) * (x - mean)).mean((0, 2, 3), keepdim=True)
      if self.training and self.track_running_stats:
        self._update_stats(x, mean, var)
    else:
      mean, var = self.running_mean.reshape(shape), self.running_var.reshape(shape)
    out = (x - mean) * (var + self.eps).rsqrt()
    if self.weight is not None:
      out = out * self.weight.reshape(shape) + self.bias.reshape(shape)
    return out

  def _update_stats(self, x, mean, var):
    n = x._elements() // self.num_features
    m = self.momentum
    unbiased = var.detach().reshape(self.num_features) * (n / max(n - 1, 1))
    for name, new in (("running_mean", mean.detach().reshape(self.num_features)),
                      ("running_var", unbiased)):
      buf = self._buffers[name]
      buf.node = (buf * (1 - m) + new * m).node
      PENDING.append(buf)


class Embedding(Module):
  """torch.nn.Embedding: integer indices of any shape (...) -> rows of the (num_embeddings,
  embedding_dim) float32 weight table, shape (..., embedding_dim). A gather (one load per
  element; negative indices count from the end, out-of-range ones give zero rows),
  differentiable in the table. The table is initialised N(0, 1) from the seed counter.

  Raises ShapeError (in forward) for float indices."""

  def __init__(self, num_embeddings: int, embedding_dim: int):
    super().__init__()
    self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
    self.weight = Parameter(Tensor.randn(num_embeddings, embedding_dim, seed=next_seed()).realize())

  def forward(self, idx):
    idx = idx if isinstance(idx, Tensor) else Tensor(idx, device=self.weight.device)
    if idx.dtype.is_float():
      raise ShapeError(f"Embedding indices must be integers, got {idx.dtype}")
    return self.weight.take(idx, axis=0)


class Dropout(Module):
  """torch.nn.Dropout: in training, each element zeroed with probability p and the rest scaled
  by 1/(1-p); in eval mode the input itself. Same shape and dtype. The masks come from a seed
  on the device that advances every call (a new mask each step, the same kernels).

  Raises ShapeError when p is outside [0, 1]."""

  def __init__(self, p: float = 0.5):
    super().__init__()
    if not 0 <= p <= 1:
      raise ShapeError(f"Dropout probability must be in [0, 1], got {p}")
    self.p = p

  def forward(self, x):
    if not self.training or self.p == 0:
      return x
    if self.p == 1:
      return x * 0
    keep = Tensor.rand(*x.shape, seed=self._draw(x.device), device=x.device) >= self.p
    return x * keep.cast(x.dtype) * (1 / (1 - self.p))

  def _draw(self, device: str) -> Tensor:
    """This call's seed, a uint32 on the device: a hash of the module's key (drawn at its
    first call) and its call counter, which is advanced and queued like BatchNorm's stats."""
    state = self.__dict__.get("_rng")
    if state is None or state[1].device != device:
      state = (next_seed(), Tensor([0], dtype=dtypes.uint32, device=device))
    key, count = state
    if not count.node.realized:
      count.realize()       # no optimizer step since the last call: keep the graph one add deep
      PENDING[:] = [t for t in PENDING if t is not count]   # (and the queue from growing)
    self._rng = (key, count + 1)
    PENDING.append(self._rng[1])
    return hash_u32(count, key)


class Sequential(Module):
  """torch.nn.Sequential: the given modules called in order, each on the previous one's output
  (registered as submodules "0", "1", ...; `seq[i]` and `len(seq)` work)."""

  def __init__(self, *layers):
    super().__init__()
    for i, layer in enumerate(layers):
      setattr(self, str(i), layer)

  def __getitem__(self, i):
    return list(self._modules.values())[i]

  def __len__(self):
    return len(self._modules)

  def forward(self, x):
    for layer in self._modules.values():
      x = layer(x)
    return x


class ReLU(Module):
  """max(x, 0) elementwise (Tensor.relu), same shape and dtype."""

  def forward(self, x):
    return x.relu()


class GELU(Module):
  """torch's GELU, x * Phi(x) elementwise: exact (erf) by default, approximate='tanh' for the
  tanh form (Tensor.gelu). Same shape; a float dtype.

  Raises ShapeError for another `approximate`."""

  def __init__(self, approximate: str = "none"):
    super().__init__()
    if approximate not in ("none", "tanh"):
      raise ShapeError(f"GELU approximate={approximate!r}: use 'none' (erf) or 'tanh'")
    self.approximate = approximate

  def forward(self, x):
    return x.gelu(self.approximate)


class Tanh(Module):
  """The hyperbolic tangent elementwise (Tensor.tanh), same shape; a float dtype."""

  def forward(self, x):
    return x.tanh()


class Sigmoid(Module):
  """1 / (1 + exp(-x)) elementwise (Tensor.sigmoid), same shape; a float dtype."""

  def forward(self, x):
    return x.sigmoid()


class Flatten(Module):
  """The dims from start_dim on flattened into one (default 1: (N, ...) -> (N, rest), keeping
  the batch)."""

  def __init__(self, start_dim: int = 1):
    super().__init__()
    self.start_dim = start_dim

  def forward(self, x):
    return x.reshape(x.shape[:self.start_dim] + (-1,))


class _Elementwise(Module):
  """A layer that applies one Tensor method with fixed keyword arguments."""
  method, defaults = "", {}

  def __init__(self, *args, **kwargs):
    super().__init__()
    names = list(self.defaults)
    if "dim" in kwargs and "axis" in names:     # torch's spelling of the axis
      kwargs["axis"] = kwargs.pop("dim")
    if len(args) > len(names):
      raise ShapeError(f"{type(self).__name__} takes at most {len(names)} arguments")
    self.kwargs = {**self.defaults, **dict(zip(names, args)), **kwargs}

  def forward(self, x):
    return getattr(x, self.method)(**self.kwargs)


def _layer(name: str, method: str, doc: str, **defaults):
  args = ", ".join(f"{k}={v!r}" for k, v in defaults.items())
  doc += (f" Elementwise (or along `axis`) with Tensor.{method}, same shape; a float dtype."
          f"\n\nArguments ({args or 'none'}) by position or keyword (torch's `dim` for axis); "
          f"ShapeError for too many.")
  return type(name, (_Elementwise,), {"method": method, "defaults": defaults, "__doc__": doc})


SiLU = _layer("SiLU", "silu", "x * sigmoid(x) (torch.nn.SiLU).")
LeakyReLU = _layer("LeakyReLU", "leaky_relu", "x, or negative_slope * x below 0 "
                   "(torch.nn.LeakyReLU).", negative_slope=0.01)
ELU = _layer("ELU", "elu", "x, or alpha * (exp(x) - 1) below 0 (torch.nn.ELU).", alpha=1.0)
Softplus = _layer("Softplus", "softplus", "log(1 + exp(beta x)) / beta (torch.nn.Softplus).",
                  beta=1.0, threshold=20.0)
Hardswish = _layer("Hardswish", "hardswish", "x * clip(x / 6 + 1/2, 0, 1) (torch.nn.Hardswish).")
Mish = _layer("Mish", "mish", "x * tanh(softplus(x)) (torch.nn.Mish).")
Softmax = _layer("Softmax", "softmax", "softmax along dim (torch.nn.Softmax(dim)).", axis=-1)
LogSoftmax = _layer("LogSoftmax", "log_softmax", "log(softmax) along dim "
                    "(torch.nn.LogSoftmax(dim)).", axis=-1)


class Identity(Module):
  """Its input, unchanged (torch.nn.Identity; arguments are ignored, as torch)."""

  def __init__(self, *args, **kwargs):
    super().__init__()

  def forward(self, x):
    return x


class MaxPool2d(Module):
  """torch.nn.MaxPool2d: the maximum of each window over the last two dims, (..., H, W) ->
  (..., OH, OW); arguments as Tensor.max_pool2d (stride defaults to kernel_size)."""

  def __init__(self, kernel_size, stride=None, padding=0, dilation=1):
    super().__init__()
    self.args = (kernel_size, stride, padding, dilation)

  def forward(self, x):
    return x.max_pool2d(*self.args)


class AvgPool2d(Module):
  """torch.nn.AvgPool2d: the mean of each window over the last two dims (padded zeros counted),
  (..., H, W) -> (..., OH, OW); arguments as Tensor.avg_pool2d."""

  def __init__(self, kernel_size, stride=None, padding=0):
    super().__init__()
    self.args = (kernel_size, stride, padding)

  def forward(self, x):
    return x.avg_pool2d(*self.args)


class AdaptiveAvgPool2d(Module):
  """torch.nn.AdaptiveAvgPool2d: (..., H, W) averaged over torch's windows to (..., oh, ow);
  output_size is an int or a pair (None keeps that size). ShapeError (in forward) for a size
  below 1 or an input of fewer than 2 dims."""

  def __init__(self, output_size):
    super().__init__()
    self.output_size = output_size

  def forward(self, x):
    return x.adaptive_avg_pool2d(self.output_size)


class Conv1d(Module):
  """1-d convolution as torch.nn.Conv1d: input (N, in_channels, L) -> (N, out_channels, OL);
  arguments, parameters (weight (out, in / groups, k)) and errors as Conv2d's."""

  def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
               groups=1, bias=True):
    super().__init__()
    _conv_init(self, in_channels, out_channels, (kernel_size,), stride, padding, dilation,
               groups, bias)

  def forward(self, x):
    return x.conv1d(self.weight, self.bias, self.stride, self.padding, self.dilation,
                    self.groups)


class GroupNorm(Module):
  """torch.nn.GroupNorm of (N, num_channels, *spatial), same shape: each group of num_channels /
  num_groups channels normalised (Tensor.group_norm), then the per-channel weight and bias
  (ones and zeros at first) when `affine`.

  Raises ShapeError when num_groups does not divide num_channels."""

  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    super().__init__()
    if num_groups <= 0 or num_channels % num_groups:
      raise ShapeError(f"GroupNorm: {num_channels} channels must divide into {num_groups} groups")
    self.num_groups, self.eps = num_groups, eps
    self.weight = Parameter(Tensor.ones(num_channels)) if affine else None
    self.bias = Parameter(Tensor.zeros(num_channels)) if affine else None

  def forward(self, x):
    return x.group_norm(self.num_groups, self.weight, self.bias, self.eps)


class RMSNorm(Module):
  """torch.nn.RMSNorm: x / sqrt(mean(x^2) + eps) over the last len(normalized_shape) dims, times
  the weight (ones at first; none when elementwise_affine=False). eps None: the dtype's machine
  epsilon. Same shape and dtype; ShapeError (in forward) when the last dims differ."""

  def __init__(self, normalized_shape, eps=None, elementwise_affine: bool = True):
    super().__init__()
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.normalized_shape, self.eps = shape, eps
    self.weight = Parameter(Tensor.ones(*shape)) if elementwise_affine else None

  def forward(self, x):
    return x.rms_norm(self.normalized_shape, self.weight, self.eps)


class ModuleList(Module):
  """Submodules in a list (registered as "0", "1", ...): append, extend, index, iterate."""

  def __init__(self, modules=()):
    super().__init__()
    self.extend(modules)

  def append(self, module):
    """Add `module` at the end (registered as the next index); returns the list."""
    setattr(self, str(len(self._modules)), module)
    return self

  def extend(self, modules):
    """Append each module of `modules` in order; returns the list."""
    for m in modules:
      self.append(m)
    return self

  def __getitem__(self, i):
    return list(self._modules.values())[i]

  def __len__(self):
    return len(self._modules)

  def __iter__(self):
    return iter(list(self._modules.values()))


class _Loss(Module):
  """A loss layer: loss(input, target) -> the Tensor method's result."""
  method, defaults = "", {}

  def __init__(self, **kwargs):
    super().__init__()
    unknown = set(kwargs) - set(self.defaults)
    if unknown:
      raise ShapeError(f"{type(self).__name__} has no argument(s) {', '.join(sorted(unknown))}")
    self.kwargs = {**self.defaults, **kwargs}

  def forward(self, x, target):
    return getattr(x, self.method)(target, **self.kwargs)


def _loss(name: str, method: str, **defaults):
  args = ", ".join(f"{k}={v!r}" for k, v in defaults.items())
  doc = (f"torch.nn.{name}: `loss(input, target)` is `input.{method}(target, ...)` with this "
         f"layer's keyword arguments ({args}); see Tensor.{method} for the shapes, dtypes and "
         f"errors. ShapeError for an unknown argument.")
  return type(name, (_Loss,), {"method": method, "defaults": defaults, "__doc__": doc})


CrossEntropyLoss = _loss("CrossEntropyLoss", "cross_entropy", weight=None, ignore_index=-100,
                         reduction="mean", label_smoothing=0.0)
NLLLoss = _loss("NLLLoss", "nll_loss", weight=None, ignore_index=-100, reduction="mean")
MSELoss = _loss("MSELoss", "mse_loss", reduction="mean")
L1Loss = _loss("L1Loss", "l1_loss", reduction="mean")
SmoothL1Loss = _loss("SmoothL1Loss", "smooth_l1_loss", reduction="mean", beta=1.0)
HuberLoss = _loss("HuberLoss", "huber_loss", reduction="mean", delta=1.0)
BCELoss = _loss("BCELoss", "binary_cross_entropy", weight=None, reduction="mean")
BCEWithLogitsLoss = _loss("BCEWithLogitsLoss", "binary_cross_entropy_with_logits", weight=None,
                          reduction="mean", pos_weight=None)
KLDivLoss = _loss("KLDivLoss", "kl_div", reduction="mean", log_target=False)
