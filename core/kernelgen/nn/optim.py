"""kg.optim: SGD (momentum, nesterov, weight decay), Adam and AdamW, in torch's semantics.

The update is flat: the parameters of one device and dtype are kept as consecutive slices of one
flat buffer (each parameter Tensor becomes a view of it), the gradients are gathered into one
flat vector, and the optimizer state (momentum, Adam's moments) is flat too. A `step()` is then
one realize call: the gathered gradient, the new flat parameters and each new state vector are a
few kernels in all, however many parameter tensors the model has (plus the kernels the gradients
themselves need, and BatchNorm running statistics queued by kg.nn, realized in the same call).

A parameter whose `.grad` is None is left as it is (no decay, no state change), as torch does.
"""
from __future__ import annotations

from ..dtype import dtypes
from ..errors import DTypeError, KernelgenError
from ..realize import realize
from . import layers as nn
from ..tensor.autograd import no_grad
from ..tensor.jit import note_step
from ..tensor.tensor import Tensor, cat, where


class _Group:
  """The parameters of one (device, dtype): their flat buffer and the optimizer state."""

  def __init__(self, params):
    self.params = params
    self.sizes = [p._elements() for p in params]
    self.flat = None        # the realized flat parameters of the last step
    self.views = []         # the nodes the parameters were given from `flat`
    self.state: dict = {}

  def flat_params(self):
    if self.flat is not None and all(p.node is v for p, v in zip(self.params, self.views)):
      return self.flat     # nobody replaced a parameter since the last step
    return cat([p.detach().reshape(-1) for p in self.params])

  def flat_grads(self):
    pieces = [p.grad.detach().cast(p.dtype).reshape(-1) if p.grad is not None else
              Tensor.zeros(p._elements(), dtype=p.dtype, device=p.device) for p in self.params]
    return cat(pieces).contiguous()

  def has_grad_mask(self):
    """None when every parameter has a gradient, else a flat bool mask of those that do."""
    if all(p.grad is not None for p in self.params):
      return None
    return cat([Tensor.full((p._elements(),), p.grad is not None, dtype=dtypes.bool,
                            device=p.device) for p in self.params])

  def flatten(self, state: dict) -> None:
    """Make the parameters views of one realized flat buffer now, and the optimizer's first
    `state` (realized zeros) the group's: the first step's forward, backward and update then
    read what every later step reads, so they compile the kernels all steps share (a first
    step that read the separate parameters and no state compiled them twice: a TinyGPT's
    second step compiled 63 kernels more, kg.jit's recording included)."""
    flat = self.flat_params().contiguous()
    realize([flat.node] + [t.node for t in state.values()])
    self.assign(flat)
    self.state = state

  def assign(self, flat) -> None:
    self.flat, self.views, start = flat, [], 0
    for p, n in zip(self.params, self.sizes):
      p.node = flat.shrink(((start, start + n),)).reshape(p.shape).node
      self.views.append(p.node)
      start += n


class Optimizer:
  """The base of SGD, Adam and AdamW: `params` is a Module (its parameters()) or an iterable of
  leaf tensors that require grad (duplicates are taken once), `lr` the learning rate. The
  parameters are grouped by (device, dtype); `step()` updates each group as one flat vector.
  A subclass defines `update`.

  Raises DTypeError for a tensor that is not a leaf requiring grad, KernelgenError for an empty
  parameter list or a negative lr."""
  shared_state: tuple = ()   # state of the whole group, not per element (no has-grad mask)

  def __init__(self, params, lr: float):
    params = list(params.parameters() if hasattr(params, "parameters") else params)
    unique, seen = [], set()
    for p in params:
      if id(p) in seen:
        continue
      seen.add(id(p))
      if not p.requires_grad or not p.is_leaf:
        raise DTypeError("an optimizer updates leaf tensors that require grad: pass "
                         "model.parameters() (or tensors made with requires_grad=True)")
      unique.append(p)
    if not unique:
      raise KernelgenError("the optimizer got an empty parameter list")
    if lr < 0:
      raise KernelgenError(f"learning rate must be >= 0, got {lr}")
    self.params, self.lr, self.steps = unique, lr, 0
    by_key: dict = {}
    for p in unique:
      by_key.setdefault((p.device, p.dtype), []).append(p)
    self.groups = [_Group(ps) for ps in by_key.values()]
    with no_grad():
      for group in self.groups:
        p = group.params[0]
        group.flatten(self.initial_state(sum(group.sizes), p.dtype, p.device))

  def zero_grad(self) -> None:
    """Clear the gradient (`.grad = None`) of every parameter, before the next backward()."""
    for p in self.params:
      p.grad = None

  def step(self, *also) -> None:
    """Update every parameter: one realize call for all of them, their state, queued stats and
    the tensors in `also` (e.g. the loss, to log it without a second realize)."""
    self.steps += 1
    with no_grad():
      results = []
      for group in self.groups:
        p, g = group.flat_params(), group.flat_grads()
        new_p, new_state = self.update(p, g, group.state)
        mask = group.has_grad_mask()
        if mask is not None:
          new_p = where(mask, new_p, p)
          new_state = {k: where(mask, v, group.state[k]) if k in group.state and
                       k not in self.shared_state else v for k, v in new_state.items()}
        results.append((group, new_p, new_state))
      pending = nn.take_pending()
      realize([t.node for _, new_p, st in results for t in (new_p, *st.values())] +
              [t.node for t in pending] + [t.node for t in also])
      for group, new_p, new_state in results:
        group.assign(new_p)
        group.state = new_state
    note_step(self)   # kg.jit advances `steps` when it replays this step

  def initial_state(self, size: int, dtype, device) -> dict:
    """The state of a group of `size` elements before its first step, as realized Tensors
    whose first update is the same kernel as every later one (none by default: SGD's first
    momentum is the gradient itself, torch's rule)."""
    return {}

  def update(self, p, g, state: dict):
    """One step's new flat parameters and state from the flat parameters `p`, gradients `g`
    (1-d Tensors of one group) and the group's state (a dict of Tensors, empty at first):
    returns (new_p, new_state), lazily. Subclasses define it; `step()` calls it.

    Raises NotImplementedError on the base class."""
    raise NotImplementedError


class SGD(Optimizer):
  """torch.optim.SGD: p -= lr * g, with torch's momentum (dampening, nesterov) and L2 weight
  decay (weight_decay * p added to the gradient). Parameters without a gradient are left as
  they are.

  Raises KernelgenError for nesterov without momentum > 0 and dampening 0 (and as Optimizer)."""

  def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
               weight_decay: float = 0.0, nesterov: bool = False):
    super().__init__(params, lr)
    if nesterov and (momentum <= 0 or dampening != 0):
      raise KernelgenError("nesterov momentum needs momentum > 0 and dampening 0")
    self.momentum, self.dampening = momentum, dampening
    self.weight_decay, self.nesterov = weight_decay, nesterov

  def update(self, p, g, state):
    """SGD's step for one group (see Optimizer.update); the state holds the momentum buffer."""
    if self.weight_decay:
      g = g + self.weight_decay * p
    new_state = {}
    if self.momentum:
      buf = state.get("momentum")
      buf = g if buf is None else buf * self.momentum + (1 - self.dampening) * g
      new_state["momentum"] = buf
      g = g + self.momentum * buf if self.nesterov else buf
    return p - self.lr * g, new_state


class Adam(Optimizer):
  """torch.optim.Adam (Kingma & Ba) with bias correction: betas are the decay rates of the
  gradient's running mean and mean square, eps is added to the denominator; weight_decay is L2
  added to the gradient. Parameters without a gradient are left as they are. Errors as
  Optimizer's."""
  decoupled = False
  shared_state = ("bias",)

  def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 0.0):
    super().__init__(params, lr)
    self.betas, self.eps, self.weight_decay = tuple(betas), eps, weight_decay

  def initial_state(self, size: int, dtype, device) -> dict:
    """Zero moments and bias corrections (c = 0: the first step's c * b + (1 - b) is 1 - b,
    and 0 * b + x is x exactly, so the first step's values are those of m = (1 - b1) g)."""
    zeros = [Tensor.zeros(n, dtype=dtype, device=device).contiguous() for n in (size, size, 2)]
    return dict(zip(("exp_avg", "exp_avg_sq", "bias"), zeros))

  def update(self, p, g, state):
    """Adam's step for one group (see Optimizer.update); the state holds the moments exp_avg,
    exp_avg_sq and the bias corrections."""
    b1, b2 = self.betas
    if self.weight_decay and self.decoupled:
      p = p * (1 - self.lr * self.weight_decay)
    elif self.weight_decay:
      g = g + self.weight_decay * p
    m, v = state.get("exp_avg"), state.get("exp_avg_sq")
    m = (1 - b1) * g if m is None else m * b1 + (1 - b1) * g
    v = (1 - b2) * (g * g) if v is None else v * b2 + (1 - b2) * (g * g)
    # the bias corrections [1 - b1 ** steps, 1 - b2 ** steps] are state on the device (c' = c b +
    # (1 - b)), not constants of the kernel: the update compiles once and every later step reuses
    # it (the compile cache, cache.py), and kg.jit replays it (tensor/jit.py)
    first = (Tensor.arange(2, device=p.device) == 0).cast(p.dtype)   # [1, 0]
    betas, rest = first * (b1 - b2) + b2, first * ((1 - b1) - (1 - b2)) + (1 - b2)
    c = state.get("bias")
    c = rest if c is None else c * betas + rest
    denom = (v / c[1:2]).sqrt() + self.eps
    return p - (self.lr / c[0:1]) * m / denom, {"exp_avg": m, "exp_avg_sq": v, "bias": c}


class AdamW(Adam):
  """torch.optim.AdamW: Adam with decoupled weight decay (p *= 1 - lr * weight_decay before the
  Adam update; default weight_decay 0.01). Arguments and errors as Adam's."""
  decoupled = True

  def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 1e-2):
    super().__init__(params, lr, betas, eps, weight_decay)
