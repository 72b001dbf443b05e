"""kg.nn's base: Module (parameters, buffers and submodules registered by attribute assignment,
state_dict, train/eval), Parameter, the seed counter that initialisation and Dropout draw from
(manual_seed), and the queue of running statistics waiting to be realized. The layers are in
nn.py."""
from __future__ import annotations


from ..errors import KernelgenError, ShapeError
from ..tensor.tensor import Tensor


class StateDictError(KernelgenError, KeyError):
  """load_state_dict with missing or unexpected names (strict=True)."""

  def __str__(self):
    return str(self.args[0]) if self.args else ""


class _Seeds:
  next = 0


def manual_seed(seed: int) -> None:
  """Restart the seed counter that parameter initialisation and Dropout draw from."""
  _Seeds.next = int(seed) * 1000003


def next_seed() -> int:
  """The next seed of the counter `manual_seed` restarts (parameter initialisation and Dropout draw
  from it), an int."""
  _Seeds.next += 1
  return _Seeds.next


# new running statistics waiting to be realized (by optim's step, or when read)
PENDING: list = []


def take_pending() -> list:
  """The queued tensors (running statistics, Dropout counters) waiting to be realized, emptying the
  queue; the optimizer's step realizes them."""
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


def uniform_parameter(shape, bound: float, device=None):
  """A float32 parameter of `shape` drawn from U(-bound, bound) with the next seed, realized."""
  u = Tensor.rand(*shape, seed=next_seed(), device=device)
  return Parameter((u * (2 * bound) - bound).realize())


class Module:
  """Base class of the layers (torch.nn.Module): parameters (leaf Tensors that require grad),
  buffers (`register_buffer`) and submodules are registered by attribute assignment; a
  subclass calls `super().__init__()` first and defines `forward`. Assigning before
  `Module.__init__` raises KernelgenError."""

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
    """Yield (name, module) for this module (named `prefix`) and every submodule below it, depth
    first; names are dotted paths ("0.conv")."""
    yield prefix, self
    for name, m in self._modules.items():
      yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

  def modules(self):
    """This module and every submodule below it, a list (depth first)."""
    return [m for _, m in self.named_modules()]

  def children(self):
    """The direct submodules, a list in assignment order."""
    return list(self._modules.values())

  def named_parameters(self):
    """Yield (dotted name, parameter) for every parameter of this module and its submodules, each
    tensor once."""
    seen = set()
    for prefix, m in self.named_modules():
      for name, p in m._parameters.items():
        if id(p) not in seen:
          seen.add(id(p))
          yield (f"{prefix}.{name}" if prefix else name), p

  def parameters(self):
    """Every parameter of this module and its submodules (each once), a list of leaf Tensors that
    require grad: what an optimizer takes."""
    return [p for _, p in self.named_parameters()]

  def named_buffers(self):
    """Yield (dotted name, tensor) for every buffer (state that is not a parameter, such as
    BatchNorm's running statistics) of this module and its submodules."""
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
    """Set training mode (mode=True) or eval mode on this module and all submodules (Dropout and
    BatchNorm2d behave differently); returns the module."""
    for m in self.modules():
      object.__setattr__(m, "training", bool(mode))
    return self

  def eval(self):
    """Eval mode: `train(False)`; returns the module."""
    return self.train(False)

  def to(self, device: str):
    """Move every parameter and buffer to `device` (in place; returns the module)."""
    for t in self.state_dict().values():
      t.node = t.detach().to(device).node
      t.grad = None
    return self

  def zero_grad(self) -> None:
    """Clear the gradient (`.grad = None`) of every parameter."""
    for p in self.parameters():
      p.grad = None

  def forward(self, *args, **kwargs):
    """The module's computation; subclasses define it, and `module(x)` calls it.

    Raises NotImplementedError on a Module that does not define it."""
    raise NotImplementedError(f"{type(self).__name__} must define forward()")

  def __call__(self, *args, **kwargs):
    return self.forward(*args, **kwargs)

  def __repr__(self):
    inner = "".join(f"\n  ({n}): {repr(m).replace(chr(10), chr(10) + '  ')}"
                    for n, m in self._modules.items())
    return f"{type(self).__name__}({self.extra_repr()}{inner}{chr(10) if inner else ''})"

  def extra_repr(self) -> str:
    """The text inside the module's repr's parentheses (its settings); subclasses may define it."""
    return ""
