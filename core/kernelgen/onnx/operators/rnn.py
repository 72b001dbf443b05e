"""ONNX RNN, GRU and LSTM: the recurrence unrolled over the (static) sequence length, as the ONNX
operators define them (gate order, default activations, clip, linear_before_reset,
input_forget, peepholes, layout, sequence_lens).

Built for few kernels per step, each weight read once per step, a schedule linear in the steps:
- the input projection of every step (X @ W^T + Wb) is one batched matmul before the loop
  (reading W once), when there is more than one step (one step: it fuses into the step);
- the directions of a bidirectional layer that share their activations step together: direction
  d's state is row d of one (dirs, batch, hidden) state, the reverse direction walking its
  time-reversed input, so one kernel serves both;
- each gate is its own reduction (h @ R_gate^T), so the gates that meet in one elementwise
  expression fuse into one kernel: an RNN step is one kernel, a GRU step one
  (linear_before_reset) or two (r first), an LSTM step two (c, then h from c and the o gate);
- the LSTM cell state is a kernel of its own (`contiguous`), so no step recomputes the chain of
  earlier cell states.
"""
from __future__ import annotations

from ...dtype import dtypes
from ...errors import UnsupportedError
from ...tensor.tensor import Tensor, cat, stack, where

_ACT = {"Tanh": lambda x: x.tanh(), "Sigmoid": lambda x: x.sigmoid(),
        "Relu": lambda x: x.relu()}
DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
# the step outputs are stacked into Y this many at a time, each group a kernel (then the groups,
# the same way): a kernel binding them all would pass WebGPU's 8 buffers per kernel, and the
# scheduler's splitting of it walks the whole stack once per cut, quadratic in the steps
STACK_GROUP = 6


def _activations(op, at, num_dirs):
  names = at.values.get("activations", (None, None))[1] or DEFAULTS[op] * num_dirs
  if len(names) == len(DEFAULTS[op]):
    names = names * num_dirs
  fns = []
  for name in names:
    fn = _ACT.get(name)
    if fn is None:
      raise UnsupportedError(f"{op} activation {name!r} (Tanh, Sigmoid, Relu are supported)")
    fns.append(fn)
  per = len(DEFAULTS[op])
  return [fns[d * per:(d + 1) * per] for d in range(num_dirs)]


class _Layer:
  """One group of directions stepping together: weights, biases and inputs sliced to the group
  (leading axis G), the input projection hoisted, and each gate's pre-activation per step."""

  def __init__(self, op, at, x, ins, dirs, reversed_, rec):
    """op: RNN, GRU or LSTM; x: the (quantized) input; dirs: the group's directions."""
    w, r, b = ins[1], ins[2], ins[3]
    lo, hi = dirs[0], dirs[-1] + 1
    self.at, self.rec = at, rec
    self.hidden = hidden = r.shape[-1]
    n = GATES[op] * hidden
    self.r = r[lo:hi]                                               # (G, gates*H, H)
    self.wb = b[lo:hi, :n].unsqueeze(1) if b is not None else None  # (G, 1, gates*H)
    self.rb = b[lo:hi, n:].unsqueeze(1) if b is not None else None
    self.clip = at.float("clip")
    xs = stack([x.flip(0) if reversed_[d] else x for d in dirs], 0)  # (G, seq, batch, in)
    self.seq = x.shape[0]
    self.xs, self.w, self.gx_all = xs, w[lo:hi], None
    if self.seq > 1:   # every step's input projection: one matmul, W read once
      gx = xs @ self.w.unsqueeze(1).swapaxes(-1, -2)                # (G, seq, batch, gates*H)
      self.gx_all = gx + self.wb.unsqueeze(1) if self.wb is not None else gx

  def clipped(self, v):
    """v clipped to the clip attribute's range (when there is one)."""
    return v.clip(-self.clip, self.clip) if self.clip is not None else v

  def gx(self, s, k):
    """Gate k's input projection at step s (with Wb), (G, batch, H)."""
    cols = slice(k * self.hidden, (k + 1) * self.hidden)
    if self.gx_all is not None:
      return self.gx_all[:, s, :, cols]
    out = self.xs[:, s] @ self.w[:, cols].swapaxes(-1, -2)
    return out + self.wb[:, :, cols] if self.wb is not None else out

  def gh(self, h, k):
    """Gate k's recurrent term h @ R_k^T (+ Rb_k), (G, batch, H): a reduction of its own."""
    cols = slice(k * self.hidden, (k + 1) * self.hidden)
    out = h @ self.r[:, cols].swapaxes(-1, -2)
    return out + self.rb[:, :, cols] if self.rb is not None else out

  def pre(self, s, h, k):
    """Gate k's pre-activation at step s from state h (not clipped)."""
    return self.gx(s, k) + self.gh(self.rec(h), k)


def _kept(ok, new, old):
  """The new state where step s is inside the sequence (ok), the old one elsewhere: a kernel of
  its own, so no later step recomputes it (or the chain of states before it)."""
  return (where(ok, new, old) if ok is not None else new).contiguous()


def _rnn_step(layer, s, h, c, acts, p, ok):
  return _kept(ok, acts[0](layer.clipped(layer.pre(s, h, 0))), h), None


def _gru_step(layer, s, h, c, acts, p, ok):
  f, g = acts
  z = f(layer.clipped(layer.pre(s, h, 0)))
  rr = f(layer.clipped(layer.pre(s, h, 1)))
  if layer.at.int("linear_before_reset", 0):
    hh = layer.gx(s, 2) + rr * layer.gh(layer.rec(h), 2)
  else:                                 # r is a kernel of its own: the h kernel reads it
    hh = layer.gx(s, 2) + layer.gh(layer.rec(rr.contiguous() * h), 2)
  return _kept(ok, (1 - z) * g(layer.clipped(hh)) + z * h, h), None


def _lstm_step(layer, s, h, c, acts, p, ok):
  """(h, c) after step s: two kernels, c (the i, f and g gates) and h (the o gate, c)."""
  f, g, hact = acts
  hidden, clipped = layer.hidden, layer.clipped
  i, o, fg, cc = (layer.pre(s, h, k) for k in range(4))
  if p is not None:                               # peepholes (G, 1, 3H): i, o, f
    i, fg = i + p[:, :, :hidden] * c, fg + p[:, :, 2 * hidden:] * c
  i, fg = f(clipped(i)), f(clipped(fg))
  if layer.at.int("input_forget", 0):
    fg = 1 - i
  c_new = _kept(ok, fg * c + i * g(clipped(cc)), c)
  if p is not None:
    o = o + p[:, :, hidden:2 * hidden] * c_new
  return _kept(ok, f(clipped(o)) * hact(c_new), h), c_new


_STEPS = {"RNN": _rnn_step, "GRU": _gru_step, "LSTM": _lstm_step}


def _groups(acts, num_dirs):
  """The directions that step together: all of them when their activations agree."""
  same = all(a is b for a, b in zip(acts[0], acts[-1]))
  return [list(range(num_dirs))] if same else [[d] for d in range(num_dirs)]


def _initial(state, dirs, batch, hidden, like):
  lo, hi = dirs[0], dirs[-1] + 1
  if state is not None:
    return state[lo:hi]
  return Tensor.zeros(hi - lo, batch, hidden, dtype=like.dtype, device=like.device)


def _run(op, layer, states, valid, p, acts):
  """(each step's output (G, batch, hidden) in step order, final h, final c) of one group."""
  h, c = states
  outs = []
  for s in range(layer.seq):
    ok = valid[:, s] if valid is not None else None
    h, c = _STEPS[op](layer, s, h, c, acts, p, ok)
    outs.append(where(ok, h, 0) if ok is not None else h)
  return outs, h, c


def _outputs(op, runs, reversed_):
  """Y (seq, dirs, batch, hidden), Y_h, Y_c from each group's (dirs, (outs, h, c)): a group's
  step outputs stacked once (a reverse direction's time t is its step seq-1-t), and one group's
  final states as they are."""
  ys = []
  for dirs, (outs, _, _) in runs:
    steps = _stacked([o.unsqueeze(1) for o in outs])   # (G, seq, batch, hidden), step order
    ys += [steps[i].flip(0) if reversed_[d] else steps[i] for i, d in enumerate(dirs)]
  y = stack(ys, 1)
  if len(runs) == 1:
    return y, runs[0][1][1], runs[0][1][2]
  hs, cs = [h for _, (_, h, _) in runs], [c for _, (_, _, c) in runs]
  return y, cat(hs, 0), cat(cs, 0) if op == "LSTM" else None


def _stacked(parts):
  """cat(parts, 1), STACK_GROUP parts at a time (see STACK_GROUP)."""
  if len(parts) <= STACK_GROUP:
    return cat(parts, 1)
  return _stacked([cat(parts[k:k + STACK_GROUP], 1).contiguous()
                   for k in range(0, len(parts), STACK_GROUP)])


def _valid(seq_lens, seq, batch, dirs, reversed_, device):
  """(G, seq, batch, 1) bool: whether step s of each direction is inside its sequence."""
  if seq_lens is None:
    return None
  lens = seq_lens.cast(dtypes.int32).reshape(1, batch, 1)
  inside = Tensor.arange(seq, device=device).reshape(seq, 1, 1) < lens
  return stack([inside.flip(0) if reversed_[d] else inside for d in dirs], 0)


def recurrent(op, ins, at, quantize=None):
  """ONNX RNN / GRU / LSTM outputs [Y, Y_h(, Y_c)]; `quantize` (Tensor, axis or None ->
  Tensor) makes the matmuls see quantized activations: all of X at once and each step's h per
  batch row (com.microsoft DynamicQuantizeLSTM)."""
  x, r, seq_lens, h0 = ins[0], ins[2], ins[4], ins[5]
  c0 = ins[6] if op == "LSTM" else None
  p = ins[7] if op == "LSTM" and len(ins) > 7 else None
  layout = at.int("layout", 0)
  if layout:
    x, h0, c0 = (v.permute(1, 0, 2) if v is not None else None for v in (x, h0, c0))
  direction = at.str("direction", "forward")
  num_dirs = 2 if direction == "bidirectional" else 1
  batch, hidden = x.shape[1], r.shape[-1]
  acts = _activations(op, at, num_dirs)
  rec = (lambda v: quantize(v, -1)) if quantize is not None else (lambda v: v)
  xq = quantize(x) if quantize is not None else x
  reversed_ = [direction == "reverse" or d == 1 for d in range(num_dirs)]
  runs = []
  for dirs in _groups(acts, num_dirs):
    layer = _Layer(op, at, xq, ins, dirs, reversed_, rec)
    states = (_initial(h0, dirs, batch, hidden, x),
              _initial(c0, dirs, batch, hidden, x) if op == "LSTM" else None)
    pg = p[dirs[0]:dirs[-1] + 1].unsqueeze(1) if p is not None else None
    valid = _valid(seq_lens, x.shape[0], batch, dirs, reversed_, x.device)
    runs.append((dirs, _run(op, layer, states, valid, pg, acts[dirs[0]])))
  y, y_h, y_c = _outputs(op, runs, reversed_)
  if layout:
    y = y.permute(2, 0, 1, 3)
    y_h = y_h.permute(1, 0, 2)
    y_c = y_c.permute(1, 0, 2) if y_c is not None else None
  return [y, y_h, y_c] if op == "LSTM" else [y, y_h]
