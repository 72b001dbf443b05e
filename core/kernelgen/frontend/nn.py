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
from ..errors import KernelgenError, ShapeError
from .tensor import Tensor, hash_u32


class StateDictError(KernelgenError, KeyError):
  """load_state_dict with missing or unexpected names (strict=True)."""

  def __str__(self):
    return str(self.args[0]) if self.args else ""


class _Seeds:
  next = 0


def manual_seed(seed: int) -> None:
  """Restart the seed counter that parameter initialisation and Dropout draw from."""
  _Seeds.next = int(seed) * 1000003


def _seed() -> int:
  _Seeds.next += 1
  return _Seeds.next


# new running statistics waiting to be realized (by optim's step, or when read)
PENDING: list = []


def take_pending() -> list:
  out = list(PENDING)
  PENDING.clear()
  return out


def Parameter(data, dtype=None, device=None):
  """A leaf tensor that requires grad (a copy of `data`)."""
  if isinstance(data, Tensor):
    data = data.detach()
    t = data.cast(dtype) if dtype else data
    t = Tensor(t.to(device).node) if device else t
  else:
    t = Tensor(data, dtype=dtype, device=device)
  return t.requires_grad_()


def _uniform(shape, bound: float, device=None):
  u = Tensor.rand(*shape, seed=_seed(), device=device)
  return Parameter((u * (2 * bound) - bound).realize())


class Module:
  """Base class: parameters, buffers and submodules are registered by attribute assignment."""

  def __init__(self):
    object.__setattr__(self, "_parameters", {})
    object.__setattr__(self, "_buffers", {})
    object.__setattr__(self, "_modules", {})
    object.__setattr__(self, "training", True)

  def __setattr__(self, name, value):
    if "_parameters" not in self.__dict__:
      raise KernelgenError(f"assign {name!r} after calling Module.__init__() (super().__init__())")
    for table in (self._parameters, self._buffers, self._modules):
      table.pop(name, None)
    if isinstance(value, Module):
      self._modules[name] = value
    elif isinstance(value, Tensor) and value.requires_grad and value.is_leaf:
      self._parameters[name] = value
    elif isinstance(value, Tensor) and name in self.__dict__.get("_buffer_names", ()):
      self._buffers[name] = value
    else:
      object.__setattr__(self, name, value)
      return
    self.__dict__.pop(name, None)

  def __getattr__(self, name):
    d = self.__dict__
    for table in ("_parameters", "_buffers", "_modules"):
      if table in d and name in d[table]:
        return d[table][name]
    raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

  def register_buffer(self, name: str, tensor) -> None:
    """A tensor that is state (saved in state_dict) but not a parameter (running stats)."""
    self.__dict__.setdefault("_buffer_names", set()).add(name)
    setattr(self, name, tensor)

  # ---- traversal ----
  def named_modules(self, prefix: str = ""):
    yield prefix, self
    for name, m in self._modules.items():
      yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

  def modules(self):
    return [m for _, m in self.named_modules()]

  def children(self):
    return list(self._modules.values())

  def named_parameters(self):
    seen = set()
    for prefix, m in self.named_modules():
      for name, p in m._parameters.items():
        if id(p) not in seen:
          seen.add(id(p))
          yield (f"{prefix}.{name}" if prefix else name), p

  def parameters(self):
    return [p for _, p in self.named_parameters()]

  def named_buffers(self):
    for prefix, m in self.named_modules():
      for name, b in m._buffers.items():
        yield (f"{prefix}.{name}" if prefix else name), b

  def state_dict(self) -> dict:
    """name -> Tensor for every parameter and buffer (the tensors themselves, not copies)."""
    out = dict(self.named_parameters())
    out.update(self.named_buffers())
    return out

  def load_state_dict(self, state: dict, strict: bool = True) -> None:
    """Copy values (Tensors, numpy arrays or nested lists) into the parameters and buffers."""
    own = self.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if strict and (missing or unexpected):
      raise StateDictError(f"load_state_dict: missing {missing}, unexpected {unexpected}; "
                           f"pass strict=False to load the names that match")
    for name, target in own.items():
      if name not in state:
        continue
      value = state[name]
      value = value.detach() if isinstance(value, Tensor) else Tensor(value, dtype=target.dtype)
      if value.shape != target.shape:
        raise ShapeError(f"load_state_dict: {name!r} has shape {value.shape} in the state, "
                         f"{target.shape} in the module")
      target.node = value.cast(target.dtype).to(target.device).contiguous().realize().node
      target.grad = None

  # ---- modes and calls ----
  def train(self, mode: bool = True):
    for m in self.modules():
      object.__setattr__(m, "training", bool(mode))
    return self

  def eval(self):
    return self.train(False)

  def to(self, device: str):
    """Move every parameter and buffer to `device` (in place; returns the module)."""
    for t in self.state_dict().values():
      t.node = t.detach().to(device).node
      t.grad = None
    return self

  def zero_grad(self) -> None:
    for p in self.parameters():
      p.grad = None

  def forward(self, *args, **kwargs):
    raise NotImplementedError(f"{type(self).__name__} must define forward()")

  def __call__(self, *args, **kwargs):
    return self.forward(*args, **kwargs)

  def __repr__(self):
    inner = "".join(f"\n  ({n}): {repr(m).replace(chr(10), chr(10) + '  ')}"
                    for n, m in self._modules.items())
    return f"{type(self).__name__}({self.extra_repr()}{inner}{chr(10) if inner else ''})"

  def extra_repr(self) -> str:
    return ""


class Linear(Module):
  """y = x @ W.T + b, W of shape (out, in), initialised U(-1/sqrt(in), 1/sqrt(in)) as torch."""

  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    super().__init__()
    self.in_features, self.out_features = in_features, out_features
    bound = 1 / math.sqrt(in_features) if in_features else 0.0
    self.weight = _uniform((out_features, in_features), bound)
    self.bias = _uniform((out_features,), bound) if bias else None

  def forward(self, x):
    out = x @ self.weight.T
    return out + self.bias if self.bias is not None else out

  def extra_repr(self):
    return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


def _pair(v):
  return (v, v) if isinstance(v, int) else tuple(v)


class Conv2d(Module):
  """NCHW convolution with an OIHW weight, as torch.nn.Conv2d."""

  def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
               groups=1, bias=True):
    super().__init__()
    if in_channels % groups or out_channels % groups:
      raise ShapeError(f"Conv2d: channels {in_channels} -> {out_channels} must divide by "
                       f"groups={groups}")
    kh, kw = _pair(kernel_size)
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    fan_in = in_channels // groups * kh * kw
    bound = 1 / math.sqrt(fan_in)
    self.weight = _uniform((out_channels, in_channels // groups, kh, kw), bound)
    self.bias = _uniform((out_channels,), bound) if bias else None

  def forward(self, x):
    return x.conv2d(self.weight, self.bias, stride=self.stride, padding=self.padding,
                    dilation=self.dilation, groups=self.groups)


class LayerNorm(Module):
  """Normalise over the last len(normalized_shape) dims, then scale and shift."""

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
  """Per-channel batch normalisation of NCHW input; running mean/var (unbiased) with momentum."""

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
    n = x.numel() // self.num_features
    m = self.momentum
    unbiased = var.detach().reshape(self.num_features) * (n / max(n - 1, 1))
    for name, new in (("running_mean", mean.detach().reshape(self.num_features)),
                      ("running_var", unbiased)):
      buf = self._buffers[name]
      buf.node = (buf * (1 - m) + new * m).node
      PENDING.append(buf)


class Embedding(Module):
  """Rows of a (num_embeddings, dim) table by integer index: a gather (one load per element;
  negative indices count from the end, out-of-range ones give zero rows), differentiable."""

  def __init__(self, num_embeddings: int, embedding_dim: int):
    super().__init__()
    self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
    self.weight = Parameter(Tensor.randn(num_embeddings, embedding_dim, seed=_seed()).realize())

  def forward(self, idx):
    idx = idx if isinstance(idx, Tensor) else Tensor(idx, device=self.weight.device)
    if idx.dtype.is_float():
      raise ShapeError(f"Embedding indices must be integers, got {idx.dtype}")
    return self.weight.take(idx, axis=0)


class Dropout(Module):
  """Zero each element with probability p in training (scaling the rest by 1/(1-p))."""

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
      state = (_seed(), Tensor([0], dtype=dtypes.uint32, device=device))
    key, count = state
    if not count.node.realized:
      count.realize()       # no optimizer step since the last call: keep the graph one add deep
    self._rng = (key, count + 1)
    PENDING.append(self._rng[1])
    return hash_u32(count, key)


class Sequential(Module):
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
  def forward(self, x):
    return x.relu()


class GELU(Module):
  """The tanh approximation (Tensor.gelu), torch's GELU(approximate='tanh')."""

  def forward(self, x):
    return x.gelu()


class Tanh(Module):
  def forward(self, x):
    return x.tanh()


class Sigmoid(Module):
  def forward(self, x):
    return x.sigmoid()


class Flatten(Module):
  """Flatten dims start_dim.. (default 1: keep the batch)."""

  def __init__(self, start_dim: int = 1):
    super().__init__()
    self.start_dim = start_dim

  def forward(self, x):
    return x.reshape(x.shape[:self.start_dim] + (-1,))
