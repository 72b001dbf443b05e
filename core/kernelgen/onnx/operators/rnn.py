"""ONNX RNN, GRU and LSTM: the recurrence unrolled over the (static) sequence length, one step
of lazy Tensor code per time step and direction, as the ONNX operators define them (gate
order, default activations, clip, linear_before_reset, input_forget, peepholes, layout,
sequence_lens)."""
from __future__ import annotations

from ...dtype import dtypes
from ...errors import UnsupportedError
from ...tensor.tensor import Tensor, stack, where

_ACT = {"Tanh": lambda x: x.tanh(), "Sigmoid": lambda x: x.sigmoid(),
        "Relu": lambda x: x.relu()}
DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


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


def _step(op, x_t, h, c, w, r, wb, rb, p, acts, at, rec=lambda v: v):
  """One time step of one direction: (new h, new c); rec: what h goes through before its
  matmuls (the identity, or a quantizer)."""
  hidden = h.shape[-1]
  clip = at.float("clip")

  def clipped(v):
    return v.clip(-clip, clip) if clip is not None else v

  gx = x_t @ w.T + (wb if wb is not None else 0)
  if op == "RNN":
    return acts[0](clipped(gx + rec(h) @ r.T + (rb if rb is not None else 0))), None
  if op == "GRU":
    f, g = acts
    gh_zr = rec(h) @ r[:2 * hidden].T + (rb[:2 * hidden] if rb is not None else 0)
    z = f(clipped(gx[:, :hidden] + gh_zr[:, :hidden]))
    rr = f(clipped(gx[:, hidden:2 * hidden] + gh_zr[:, hidden:]))
    rh = r[2 * hidden:]
    rbh = rb[2 * hidden:] if rb is not None else 0
    if at.int("linear_before_reset", 0):
      hh = g(clipped(gx[:, 2 * hidden:] + rr * (rec(h) @ rh.T + rbh)))
    else:
      hh = g(clipped(gx[:, 2 * hidden:] + rec(rr * h) @ rh.T + rbh))
    return (1 - z) * hh + z * h, None
  f, g, hact = acts
  gates = gx + rec(h) @ r.T + (rb if rb is not None else 0)
  i, o, fg, cc = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
  if p is not None:
    i, o = i + p[:hidden] * c, o
    fg = fg + p[2 * hidden:] * c
  i, fg = f(clipped(i)), f(clipped(fg))
  if at.int("input_forget", 0):
    fg = 1 - i
  c_new = fg * c + i * g(clipped(cc))
  if p is not None:
    o = o + p[hidden:2 * hidden] * c_new
  return f(clipped(o)) * hact(c_new), c_new


def recurrent(op, ins, at, quantize=None):
  """ONNX RNN / GRU / LSTM outputs [Y, Y_h(, Y_c)]; `quantize` (Tensor, axis or None ->
  Tensor) makes the matmuls see quantized activations: all of X at once and each step's h per
  batch row (com.microsoft DynamicQuantizeLSTM)."""
  x, w, r = ins[0], ins[1], ins[2]
  b, seq_lens, h0 = ins[3], ins[4], ins[5]
  c0 = ins[6] if op == "LSTM" else None
  p = ins[7] if op == "LSTM" and len(ins) > 7 else None
  layout = at.int("layout", 0)
  if layout:
    x = x.permute(1, 0, 2)
    h0 = h0.permute(1, 0, 2) if h0 is not None else None
    c0 = c0.permute(1, 0, 2) if c0 is not None else None
  direction = at.str("direction", "forward")
  num_dirs = 2 if direction == "bidirectional" else 1
  seq, batch = x.shape[0], x.shape[1]
  hidden = r.shape[-1]
  acts = _activations(op, at, num_dirs)
  rec = (lambda v: quantize(v, -1)) if quantize is not None else (lambda v: v)
  xq = quantize(x) if quantize is not None else x
  steps_valid = None
  if seq_lens is not None:
    lens = seq_lens.cast(dtypes.int32).reshape(1, batch, 1)
    steps_valid = Tensor.arange(seq, device=x.device).reshape(seq, 1, 1) < lens
  ys, hs, cs = [], [], []
  n = GATES[op] * hidden
  for d in range(num_dirs):
    wb = b[d, :n] if b is not None else None
    rb = b[d, n:] if b is not None else None
    h = h0[d] if h0 is not None else Tensor.zeros(batch, hidden, dtype=x.dtype,
                                                   device=x.device)
    c = c0[d] if c0 is not None else Tensor.zeros(batch, hidden, dtype=x.dtype,
                                                   device=x.device) if op == "LSTM" else None
    reverse = direction == "reverse" or d == 1
    outs = [None] * seq
    for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
      h_new, c_new = _step(op, xq[t], h, c, w[d], r[d], wb, rb,
                           p[d] if p is not None else None, acts[d], at, rec)
      if steps_valid is not None:
        ok = steps_valid[t]
        h_new = where(ok, h_new, h)
        c_new = where(ok, c_new, c) if c is not None else None
        outs[t] = where(ok, h_new, 0)
      else:
        outs[t] = h_new
      h, c = h_new, c_new
    ys.append(stack(outs, 0))
    hs.append(h)
    cs.append(c)
  y = stack(ys, 1)                       # (seq, dirs, batch, hidden)
  y_h = stack(hs, 0)
  y_c = stack(cs, 0) if op == "LSTM" else None
  if layout:
    y = y.permute(2, 0, 1, 3)
    y_h = y_h.permute(1, 0, 2)
    y_c = y_c.permute(1, 0, 2) if y_c is not None else None
  return [y, y_h, y_c] if op == "LSTM" else [y, y_h]
