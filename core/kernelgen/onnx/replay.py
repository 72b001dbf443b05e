"""Warm calls of an ONNX model: `Model.run` replays the kernels a call recorded, instead of
building the lazy graph again and doing each node's Python work.

A call's *signature* is what decides its kernels: the device; each input's buffer shape and
dtype and how it is viewed (its symbolic sizes as expressions, not their bound values); and the
values of the inputs whose host copies an operator read (a sample rate choosing an If branch,
a shape given as data; small feeds given as arrays or as Tensors computed on PYTHON have host
copies, a WEBGPU Tensor has none: an operator reading it keeps the call eager). The first
call of a signature runs as always (its outputs lazy). The second realizes its outputs while
recording each kernel launch (realize.recording) and keeps
the launches as a program: each bound buffer is a launch's output, an input's buffer, or a
constant (a weight, a folded value: the same buffer in every call). Later calls of the
signature upload their inputs, launch the recorded kernels with the new input buffers and the
dims' new bound values, and return the outputs as realized Tensors; no node is visited. Where
binding a launch's buffers costs host time per call (WEBGPU natively: a bind group), the small
inputs and returned outputs go through buffers of the program's own, a copy each, so every
launch binds the same buffers and the runtime keeps its bindings (Program._stage).

Never replayed wrongly: a call whose operators read a device tensor's values (a data-dependent
shape), return something other than Tensors (a sequence, an empty optional), draw random
numbers, or read host copies other than those its signature names keeps running eagerly; a
call fed placeholders (Tensor.empty, as kg.export does) or lazy tensors stays lazy. What a
replay freezes, as kg.jit does: options that change how kernels are compiled (environment
variables, search mode) are those of the recorded call; Model.run(..., replay=False) builds the
lazy graph every time.
"""
from __future__ import annotations

from .. import realize as realizing
from ..errors import ExecutionError, internal_errors
from ..graph.dims import Sym, bindings, rebind
from ..graph.lazy import Buffer, L, LazyOp
from ..tensor.tensor import Tensor
from .runner import Runner

MAX_PROGRAMS = 16     # signatures kept per model (then the oldest is dropped)
MAX_SEEN = 1024       # signatures remembered as run once (then forgotten: recorded later)
# inputs and returned outputs at most this large are copied through buffers of a program's own
# on a runtime that keeps bindings (Program._stage): a copy is a few microseconds there, a
# binding made again per call ~0.1 ms of host time (wgpu-py's bind group)
STAGE_BYTES = 1 << 16
# operators whose outputs differ between calls with equal inputs: never replayed
RANDOM = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
          "Multinomial", "Bernoulli", "Dropout"}


class Program:
  """The recorded launches of one signature: steps (runtime, kernel, slots) with each slot
  ("out", launch index), ("arg", input index) or ("const", Buffer); outputs the same with their
  (shape, logical shape)."""

  def __init__(self, launches: list, args: list, outputs: list):
    made = {id(buf): w for w, buf in enumerate(realizing.launch_outputs(launches))}
    given = {id(buf): k for k, buf in enumerate(args)}

    def slot(buf):     # an input's buffer first: an in-place write's output is its target
      if id(buf) in given:
        return ("arg", given[id(buf)])
      if id(buf) in made:
        return ("out", made[id(buf)])
      if id(buf) in given:
        return ("arg", given[id(buf)])
      return ("const", buf)
    self.steps = [(runtime, kernel, [slot(b) for b in bound])
                  for runtime, kernel, _, bound in launches]
    self.outputs = [(slot(buf), shape) for buf, shape in outputs]
    self.buffers = realizing.launch_outputs(launches)     # temporaries, reused by each replay
    self.returned = {x for (kind, x), _ in self.outputs if kind == "out"}
    self.dims = {name for _, kernel, _ in self.steps for name, _ in kernel.launch.uniforms}
    self.staged_in: list = []    # (input index, the program's buffer it is copied into)
    self.staged_out: set = set()    # returned outputs copied out of the program's buffer
    if len({runtime for runtime, _, _ in self.steps}) == 1 and self.steps[0][0].keeps_bindings:
      self._stage(args)
    # launches that bind the same buffers in every replay (no input, no returned output)
    fresh = self.returned - self.staged_out
    self.fixed = {i for i, (_, _, slots) in enumerate(self.steps)
                  if all(kind == "const" or kind == "out" and x not in fresh
                         for kind, x in slots)}
    self.kept: dict = {}        # what the runtime keeps per fixed launch (bind groups)

  def _stage(self, args: list) -> None:
    """On a runtime that keeps bindings (Runtime.keeps_bindings), bind buffers of the program's
    own instead of each call's small inputs and returned outputs: an input no launch writes is
    copied into one before the launches, an output is copied out of its temporary after them
    (a copy each, instead of a binding made again per call for each launch they touch)."""
    bound = {slot for _, _, slots in self.steps for slot in slots}
    written = {slot for _, kernel, slots in self.steps
               for b, slot in zip(kernel.buffers, slots) if b.access != "read"}
    own = {}
    for k, buf in enumerate(args):
      if buf.nbytes <= STAGE_BYTES and ("arg", k) in bound and ("arg", k) not in written:
        own[k] = Buffer(buf.device, buf.dtype, buf.size)
        self.staged_in.append((k, own[k]))
    self.steps = [(runtime, kernel, [("const", own[x]) if kind == "arg" and x in own else
                                     (kind, x) for kind, x in slots])
                  for runtime, kernel, slots in self.steps]
    self.staged_out = {w for w in self.returned if self.buffers[w].nbytes <= STAGE_BYTES}

  def _submit(self, runtime, batch: list, values: dict) -> None:
    """One submission of a device's consecutive launches."""
    with internal_errors(f"run on {runtime.name}", batch[0][0].name, ExecutionError):
      runtime.run_many(batch, values, self.kept)

  @staticmethod
  def _copy(source: Buffer, target: Buffer) -> None:
    with internal_errors(f"copy on {source.device}", "replay", ExecutionError):
      source.runtime.copy(source.handle, target.handle, source.nbytes)

  def replay(self, args: list, values: dict) -> list:
    """Launch the kernels on input buffers `args` with dims `values`; the output Tensors."""
    args = [a.node.buffer for a in args]
    steps = realizing.swapped(self.steps)    # larger kernels built since (realize.py)
    if steps is not self.steps:
      self.steps = steps
      self.kept.clear()        # a runtime's per-launch state was for the kernels before
    written = list(self.buffers)
    for w in self.returned - self.staged_out:    # a returned value gets a buffer of its own
      out = written[w]                           # (the caller keeps it)
      written[w] = Buffer(out.device, out.dtype, out.size)
    for k, _ in self.staged_in:    # (an upload first: a write submits the work recorded before)
      args[k].handle
    for k, own in self.staged_in:
      self._copy(args[k], own)
    batch, runtime = [], None
    for i, (step_runtime, kernel, slots) in enumerate(self.steps):
      if step_runtime is not runtime and batch:
        self._submit(runtime, batch, values)
        batch = []
      runtime = step_runtime
      batch.append((kernel, [(written[x] if kind == "out" else args[x] if kind == "arg" else
                              x).handle for kind, x in slots], i if i in self.fixed else None))
    if batch:
      self._submit(runtime, batch, values)
    for w in self.staged_out:
      out = written[w] = Buffer(written[w].device, written[w].dtype, written[w].size)
      self._copy(self.buffers[w], out)
    outs = []
    for (kind, x), (shape, sym) in self.outputs:
      buf = written[x] if kind == "out" else args[x] if kind == "arg" else x
      outs.append(Tensor(LazyOp(L.BUFFER, buf.dtype, shape, device=buf.device, buffer=buf,
                                sym=rebind(sym, values))))
    return outs


class Replayer:
  """A model's recorded programs by signature (see the module docstring)."""

  def __init__(self, model):
    self.model = model
    self.replayable = not any(n.op in RANDOM for n in _all_nodes(model.nodes))
    self.reads: dict = {}       # signature -> names of the feeds whose host copies it read
    self.seen: set = set()      # keys run once
    self.programs: dict = {}    # key -> Program, or None (not replayable)
    self.replays = 0            # calls answered by a replay (for tests and benchmarks)

  def run(self, feeds: dict, device: str) -> dict:
    runner = Runner(self.model, device)
    runner._feed(feeds)
    inputs = _inputs(runner, self.model.input_names)
    if inputs is None or not self.replayable:
      return runner.evaluate()
    args, views, sig = inputs
    sig = (device, sig)
    reads = self.reads.get(sig, ())
    key = (sig, tuple((n, tuple(runner.host[n].values)) for n in reads))
    program = self.programs.get(key)
    if program is not None:
      values = _dims(views)
      if program.dims <= set(values):
        self.replays += 1
        return dict(zip(self.model.output_names, program.replay(args, values)))
    if key not in self.seen or key in self.programs:
      if len(self.seen) >= MAX_SEEN:
        self.seen.clear()
      self.seen.add(key)
      for name, view in zip(self.model.input_names, views):
        runner.tensors[name] = _rebuilt(args, view)
      outs = runner.evaluate()
      self.reads[sig] = tuple(sorted(runner.host_reads))
      return outs
    return self._record(runner, key, args, views)

  def _record(self, runner, key, args, views) -> dict:
    """Run the model with its outputs realized while recording the launches; keep the program
    when the call is one a replay may stand for."""
    for name, view in zip(self.model.input_names, views):
      runner.tensors[name] = _rebuilt(args, view)
    launches = []
    realizing.recording = launches
    try:
      outs = runner.evaluate()
      tensors = [outs[n] for n in self.model.output_names]
      if all(isinstance(t, Tensor) for t in tensors):
        realizing.realize([t.node for t in tensors])
    finally:
      realizing.recording = None
    ok = bool(launches) and all(isinstance(t, Tensor) and t.node.realized for t in tensors) \
      and not runner.data_reads and tuple(sorted(runner.host_reads)) == tuple(n for n, _ in key[1])
    if len(self.programs) >= MAX_PROGRAMS:
      self.programs.pop(next(iter(self.programs)))
    self.programs[key] = Program(launches, [a.node.buffer for a in args],
                                 [(t.node.buffer, (t.shape, t.node.sym)) for t in tensors]) \
      if ok else None
    return outs


def _all_nodes(nodes):
  for node in nodes:
    yield node
    for graph in node.subgraphs.values():
      yield from _all_nodes(graph.nodes)


def _inputs(runner, names: list):
  """(input buffers as Tensors, how each input views its buffer, the signature part), or None
  when an input is not a tensor (a sequence, an empty optional) or is not computed yet (a lazy
  tensor: the call builds the lazy graph, which fuses it)."""
  args, views, sig = [], [], []
  for name in names:
    t = runner.tensors.get(name)
    if not isinstance(t, Tensor):
      return None
    node = t.node
    if node.op is L.VIEW and not node.src:   # a realized broadcast (Tensor.zeros(...).realize())
      return None                            # has no buffer of its shape: this call runs eagerly
    if node.op is L.VIEW and node.src[0].realized:
      base, view = node.src[0], (node.arg, node.shape, node.sym)
    elif node.realized:
      base, view = node, (None, node.shape, node.sym)
    else:                         # a lazy tensor fed in: it fuses into the model's graph
      return None
    if base.buffer.is_input:      # a placeholder (Tensor.empty: kg.export's inputs): stay lazy
      return None
    arg = Tensor(LazyOp(L.BUFFER, base.dtype, base.shape, device=base.device,
                        buffer=base.buffer))
    args.append(arg)
    views.append((len(args) - 1,) + view)
    sig.append((name, base.shape, base.dtype.name, repr(view[0]), view[1], view[2]))
  return args, views, tuple(sig)


def _rebuilt(args: list, view) -> Tensor:
  """The input tensor: buffer `args[k]` seen through the recorded view and logical shape."""
  k, arg, shape, sym = view
  base = args[k].node
  if arg is None:
    node = base if sym is None else LazyOp(L.BUFFER, base.dtype, base.shape,
                                           device=base.device, buffer=base.buffer, sym=sym)
  else:
    node = LazyOp(L.VIEW, base.dtype, shape, (base,), arg, sym=sym)
  return Tensor(node)


def _dims(views) -> dict:
  """{dim name: bound value} of the inputs' symbolic sizes."""
  return bindings(s for _, _, _, sym in views if sym is not None for s in sym
                  if isinstance(s, Sym))


__all__ = ["Program", "Replayer"]
