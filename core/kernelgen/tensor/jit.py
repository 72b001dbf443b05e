"""kg.jit: a function's kernels recorded once and replayed, without running its Python again.

    @kg.jit
    def step(x, y):
      opt.zero_grad()
      loss = model(x).cross_entropy(y)
      loss.backward()
      opt.step(loss)
      return loss

    for x, y in batches:
      step(x, y).item()

A training step spends most of its host time building the lazy graph, differentiating it and
keying its plan (cache.py); the kernels it then runs are the same every step. `kg.jit(fn)` runs
`fn` normally (eagerly) while recording every kernel launch of the call (realize.py's
`recording`): the compiled kernel and the buffers it binds. Once two consecutive calls with the
same argument signature have run the same kernels, the pair says what each bound buffer is:

- a kernel output of the same call (a temporary, or a value the call returns);
- a tensor argument (the i-th tensor passed in, new data each call);
- carried state: an output of the previous call (parameters, optimizer moments, running stats:
  what the call reads from the one before it);
- a constant: the same buffer in both calls (data the function closes over), or a tensor made
  anew in each call from equal values.

From then on a call with that signature only realizes its tensor arguments and launches the
recorded kernels with those bindings. Carried state is double-buffered: a replay writes the new
state into a spare buffer and then swaps storage with the buffer the Python objects hold (the
optimizer's flat parameters, its moments), so parameters read after a replay have its values.
Returned tensors are new buffers each call (they have no gradient history).

Re-recorded, never replayed wrongly: a call with other tensor shapes, dtypes or devices or other
plain Python arguments is recorded for that signature (each kept); and a recorded program is
dropped (the next calls record again) when an optimizer that stepped in it has had a parameter
replaced or read into a buffer of its own, or when a tensor that held the carried state the
replay updates was dropped or now holds another (eager steps outside it, also calls of another
signature, replace the state).

Typed errors (UnsupportedError): the function reads values back to Python (`.item()` inside),
assigns to a tensor argument, returns something other than tensors (None, a Tensor, a tuple or
list of them), returns a tensor it also carries to its next call, reads a tensor made anew in
each call from different Python values (pass it as an argument), or runs different kernels in
every call (RECORD_TRIES calls without two alike).

What a replay does not repeat: the Python side effects of `fn` (attributes it sets, lists it
appends to, an optimizer's step count, which the jit advances itself) and the Python values it
reads: a learning rate changed between calls, a flag, a value of a global are frozen into the
kernels as they were recorded, and tensors it closes over are captured by buffer (rebinding a
global to a new tensor is not seen; pass data that changes as arguments), as with tinygrad's
TinyJit and jax.jit; make a new kg.jit, or call `.reset()`, after changing them.
"""
from __future__ import annotations

import gc
import weakref

from .. import realize as realizing
from ..errors import ExecutionError, UnsupportedError, internal_errors
from ..graph.lazy import Buffer, L, LazyOp
from ..graph.dims import Sym, bindings, rebind
from .tensor import Tensor

RECORD_TRIES = 4   # eager calls of one signature without two alike before giving up

OUT, ARG, CARRY, CONST = "out", "arg", "carry", "const"   # what a bound buffer is (see above)

_stepped: list | None = None   # optimizers that stepped in the call being recorded


def note_step(optimizer) -> None:
  """Called by an optimizer's step(): a recorded call remembers which optimizers it stepped."""
  if _stepped is not None:
    _stepped.append(optimizer)


class _Recording:
  """One eager call: its launches, tensor-argument buffers, outputs (buffer, shape) and the
  optimizers it stepped."""

  def __init__(self, launches: list, args: list, outputs: list, shape: tuple, stepped: list):
    self.launches, self.args, self.outputs = launches, args, outputs
    self.shape, self.stepped = shape, stepped


def _key(value):
  """The signature of one argument: a tensor by shape (its symbolic sizes as expressions, not
  values), dtype and device; a symbolic size by its expression (not its bound value); a plain
  value exactly."""
  if isinstance(value, Tensor):
    return ("tensor", value.shape, value.node.sym, value.dtype.name, value.device)
  if isinstance(value, Sym):
    return ("dim", value, tuple(sorted(value.ranges.items())))
  if isinstance(value, float):
    return ("float", repr(value))
  try:
    hash(value)
  except TypeError:
    raise UnsupportedError(f"kg.jit functions take tensors and hashable Python values, got a "
                           f"{type(value).__name__}: close over it instead") from None
  return (type(value).__name__, value)


def _output_list(result) -> tuple[list, tuple]:
  """(the tensors `fn` returned, how to rebuild the result from them)."""
  if result is None:
    return [], ("none",)
  if isinstance(result, Tensor):
    return [result], ("tensor",)
  if isinstance(result, (tuple, list)) and all(isinstance(t, Tensor) for t in result):
    return list(result), (type(result).__name__, len(result))
  raise UnsupportedError(f"a kg.jit function returns None, a Tensor or a tuple or list of "
                         f"Tensors, not {type(result).__name__}")


def _held(tensor):
  """The buffer a tensor reads: its own, or that of the realized node its view is of."""
  node = tensor.node
  if node.buffer is None and node.op is L.VIEW:
    node = node.src[0]
  return node.buffer


def _same_kernel(a, b) -> bool:
  return a is b or (a.name, a.source, a.global_size, a.local_size) == \
    (b.name, b.source, b.global_size, b.local_size)


class _Classifier:
  """What each buffer of a call B is, given the call A just before it (the module docstring)."""

  def __init__(self, a: _Recording, b: _Recording):
    self.a_out = {id(buf): w for w, buf in enumerate(realizing.launch_outputs(a.launches))}
    self.b_out = {id(buf): w for w, buf in enumerate(realizing.launch_outputs(b.launches))}
    self.a_args = {id(buf): k for k, buf in enumerate(a.args)}
    self.b_args = {id(buf): k for k, buf in enumerate(b.args)}

  def __call__(self, a: Buffer, b: Buffer):
    """(kind, payload), or None when A and B do not bind alike."""
    w = self.b_out.get(id(b))
    if w is not None:
      return (OUT, w) if self.a_out.get(id(a)) == w else None
    k = self.b_args.get(id(b))
    if k is not None:
      return (ARG, k) if self.a_args.get(id(a)) == k else None
    w = self.a_out.get(id(b))
    if w is not None:
      return (CARRY, w) if id(a) not in self.a_out and id(a) not in self.a_args else None
    if id(a) in self.a_out or id(a) in self.a_args:
      return None
    if a is b or (a.size == b.size and a.dtype == b.dtype and a.copyout() == b.copyout()):
      return (CONST, b)
    raise _Mismatch("it reads a tensor made anew in each call from other Python values (e.g. "
                    "Tensor([...]) of a step count): pass it as an argument, or compute it on the "
                    "device from carried state")


class _Program:
  """The kernels of a recorded call with their bindings, and the state to replay them."""

  def __init__(self, a: _Recording, b: _Recording):
    if len(a.launches) != len(b.launches) or len(a.outputs) != len(b.outputs):
      raise _Mismatch(DIFFERENT)
    classify = _Classifier(a, b)
    self.steps = []
    for (runtime, kernel, _, bound), (_, a_kernel, _, a_bound) in zip(b.launches, a.launches):
      if not _same_kernel(kernel, a_kernel) or len(bound) != len(a_bound):
        raise _Mismatch(DIFFERENT)
      slots = [classify(x, y) for x, y in zip(a_bound, bound)]
      if None in slots:
        raise _Mismatch(DIFFERENT)
      self.steps.append((runtime, kernel, slots))
    self.outputs = [classify(x, y) for (x, _), (y, _) in zip(a.outputs, b.outputs)]
    if None in self.outputs:
      raise _Mismatch(DIFFERENT)
    self.shapes = [shape for _, shape in b.outputs]
    self.dims = {name for _, kernel, _, _ in b.launches for name, _ in kernel.launch.uniforms}
    self.result_shape = b.shape
    self.current = realizing.launch_outputs(b.launches)   # the latest value of each output
    self.carried = sorted({w for _, _, slots in self.steps for kind, w in slots if kind == CARRY})
    self.returned = {w for kind, w in self.outputs if kind == OUT}
    if self.returned & set(self.carried):
      raise UnsupportedError("a kg.jit function returns a tensor it also reads in its next call "
                             "(state): return a copy of it, t.contiguous()")
    self.spare = {w: None for w in self.carried}
    self.holders = None   # found at the first replay, once the recorded call's temporaries are gone
    self.optimizers = [(opt, b.stepped.count(opt), self._watch(opt)) for opt in set(b.stepped)]

  def _holders(self) -> list:
    """(weak reference, buffer) of each tensor that holds carried state (the optimizer's flat
    parameters and moments, the parameters as views of them, module buffers)."""
    wanted = {id(self.current[w]) for w in self.carried}
    gc.collect()   # no garbage among them: a holder that dies later was dropped or replaced
    return [(weakref.ref(o), _held(o)) for o in gc.get_objects()
            if isinstance(o, Tensor) and id(_held(o)) in wanted]

  @staticmethod
  def _watch(opt) -> list:
    return [(p, p.node, p.node.realized) for p in opt.params]

  def valid(self) -> bool:
    """Whether the Python objects still hold the state this program updates."""
    if self.holders is None:
      self.holders = self._holders()
    for ref, buffer in self.holders:
      tensor = ref()
      if tensor is None or _held(tensor) is not buffer:
        return False
    for _, _, watched in self.optimizers:
      for p, node, realized in watched:
        if p.node is not node or node.realized != realized:
          return False
    return True

  def replay(self, args: list[Buffer], values: dict):
    written = list(self.current)
    for w in self.carried:
      spare = self.spare[w]
      if spare is None:
        out = self.current[w]
        spare = self.spare[w] = Buffer(out.device, out.dtype, out.size)
      written[w] = spare
    for w in self.returned:
      out = self.current[w]
      written[w] = Buffer(out.device, out.dtype, out.size)
    self.steps = realizing.swapped(self.steps)    # larger kernels built since (realize.py)
    for runtime, kernel, slots in self.steps:
      handles = [self._handle(kind, x, written, args) for kind, x in slots]
      with internal_errors(f"run on {runtime.name}", kernel.name, ExecutionError):
        runtime.run(kernel, handles, values)
    for w in self.carried:
      self.current[w].swap_storage(self.spare[w])
    for opt, count, _ in self.optimizers:
      opt.steps += count
    return [self._output(kind, x, shape, written, args, values)
            for (kind, x), shape in zip(self.outputs, self.shapes)]

  def time_kernels(self, args: list[Buffer], values: dict,
                   repeat: int = 1) -> list[tuple[str, float]]:
    """(kernel name, device seconds) of each recorded kernel run once more, timed (the
    runtime's time_run), on the latest outputs and state: for benchmarks (bench/decode.py); the
    state's kernels run again (a cache write writes its value again). `repeat` > 1: each kernel
    runs that many times back to back and its mean is given (kernels shorter than the timer's
    noise; bench/symbolic_static.py)."""
    times = []
    for runtime, kernel, slots in self.steps:
      handles = [self._handle(kind, x, self.current, args) for kind, x in slots]
      seconds = (runtime.time_run(kernel, handles, values, repeat=repeat) if repeat > 1
                 else runtime.time_run(kernel, handles, values))
      times.append((kernel.name, seconds))
    return times

  def _handle(self, kind, x, written, args):
    if kind == OUT:
      return written[x].handle
    if kind == CARRY:
      return self.current[x].handle
    if kind == ARG:
      return args[x].handle
    return x.handle

  @staticmethod
  def _output(kind, x, shape, written, args, values):
    buffer = written[x] if kind == OUT else args[x] if kind == ARG else x
    shape, sym = shape
    return Tensor(LazyOp(L.BUFFER, buffer.dtype, shape, device=buffer.device, buffer=buffer,
                         sym=rebind(sym, values)))


def _dim_values(args, kwargs) -> dict:
  """{dim name: bound value} of the symbolic sizes among the arguments (bound dims, and the
  symbolic sizes of tensor arguments): what a replay passes its kernels."""
  syms = []
  for a in list(args) + list(kwargs.values()):
    if isinstance(a, Sym):
      syms.append(a)
    elif isinstance(a, Tensor) and a.node.sym is not None:
      syms.extend(s for s in a.node.sym if isinstance(s, Sym))
  return bindings(syms)


class _Mismatch(Exception):
  """Two recorded calls ran different kernels or bound them differently (args: why)."""


DIFFERENT = "it runs different kernels (or binds other buffers) in each call"


class _Signature:
  """What kg.jit keeps per argument signature: the last recording, or the program built."""

  def __init__(self):
    self.last: _Recording | None = None
    self.program: _Program | None = None
    self.tries = 0


class jit:
  """`kg.jit(fn)` (or `@kg.jit`): a callable that runs `fn` (a function of Tensors and plain
  Python values that returns None, a Tensor, or a tuple or list of Tensors) and, once two calls
  with the same argument signature (tensor shapes, dtypes and devices; the plain values) have
  launched the same kernels, replays those kernels without running fn's Python again. Returns
  what fn returns (new Tensors each call, without gradient history).

  Raises UnsupportedError (at the call that finds it) when fn reads values back to Python,
  assigns to a tensor argument, returns something other than tensors, or runs different kernels
  in every call; see the module kernelgen.tensor.jit for what a replay does not repeat."""

  def __init__(self, fn):
    self.fn = fn
    self.signatures: dict = {}
    self.previous_key = None
    self.__name__ = getattr(fn, "__name__", "jit")
    self.__doc__ = getattr(fn, "__doc__", None)

  def reset(self) -> None:
    """Forget every recording: the next calls run fn and record again."""
    self.signatures.clear()
    self.previous_key = None

  @property
  def replaying(self) -> bool:
    """Whether some signature has a program that later calls replay."""
    return any(s.program is not None for s in self.signatures.values())

  def __call__(self, *args, **kwargs):
    if realizing.recording is not None:
      raise UnsupportedError("kg.jit functions do not nest: call the inner function directly")
    names = sorted(kwargs)
    key = (tuple(_key(a) for a in args), tuple((n, _key(kwargs[n])) for n in names))
    tensors = [a for a in args if isinstance(a, Tensor)] + \
      [kwargs[n] for n in names if isinstance(kwargs[n], Tensor)]
    for t in tensors:
      t.realize()
    entry = self.signatures.setdefault(key, _Signature())
    if self.previous_key != key:   # two recordings are alike only as consecutive calls
      entry.last = None
    self.previous_key = key
    if entry.program is not None:
      if entry.program.valid():
        values = _dim_values(args, kwargs)
        missing = entry.program.dims - set(values)
        if missing:
          raise UnsupportedError(f"kg.jit {self.__name__}: its kernels read the dim(s) "
                                 f"{', '.join(sorted(missing))}, which no argument binds: pass "
                                 f"the bound dim (n.bind(v)) or a tensor of that size as an "
                                 f"argument")
        return self._result(entry.program.result_shape,
                            entry.program.replay([t.node.buffer for t in tensors], values))
      entry.program, entry.tries = None, 0
    try:
      result, recording = self._record(tensors, args, kwargs)
    except BaseException:
      entry.last = None   # a call cut short is no half of a pair
      raise
    self._learn(entry, recording)
    return result

  def _record(self, tensors: list, args, kwargs):
    """Run fn eagerly, recording its launches; (its result, the recording)."""
    global _stepped
    nodes = [t.node for t in tensors]
    launches, stepped = [], []
    realizing.recording, _stepped = launches, stepped
    try:
      result = self.fn(*args, **kwargs)
      outputs, shape = _output_list(result)
      realizing.realize([t.node for t in outputs])
    finally:
      realizing.recording, _stepped = None, None
    if any(t.node is not node for t, node in zip(tensors, nodes)):
      raise UnsupportedError("a kg.jit function assigned to a tensor argument (t[...] = v or an "
                             "in-place update): return the new value instead")
    # not the tensors (their graphs)
    outputs = [(t.node.buffer, (t.shape, t.node.sym)) for t in outputs]
    return result, _Recording(launches, [n.buffer for n in nodes], outputs, shape, stepped)

  def _learn(self, entry: _Signature, recording: _Recording) -> None:
    """Build the program once two consecutive calls ran the same kernels."""
    previous, entry.last = entry.last, recording
    if previous is None or not recording.launches:
      return
    try:
      entry.program = _Program(previous, recording)
      entry.last = None
    except _Mismatch as why:
      entry.tries += 1
      if entry.tries >= RECORD_TRIES:
        raise UnsupportedError(f"kg.jit cannot replay {self.__name__}: {why.args[0]} ("
                               f"{RECORD_TRIES + 1} calls without two alike; or its state was "
                               f"replaced between its calls each time)") from None

  @staticmethod
  def _result(shape: tuple, outputs: list):
    if shape[0] == "none":
      return None
    if shape[0] == "tensor":
      return outputs[0]
    return tuple(outputs) if shape[0] == "tuple" else list(outputs)
