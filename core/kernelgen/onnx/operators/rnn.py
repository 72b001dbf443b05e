"""ONNX RNN, GRU and LSTM: the recurrence unrolled over the (static) sequence length, as the ONNX
operators define them (gate order, default activations, clip, linear_before_reset,
input_forget, peepholes, layout, sequence_lens).

The input projections of every step and direction are one matmul before the loop (they do not
depend on h); each step is then one batched matmul of h_{t-1} against the stacked recurrent gate
weights of both directions (read once per step) and the gate arithmetic, which writes h_t (and
c_t). Both directions run in the same step's kernels when their activations agree; the reverse
direction's step k reads time seq - 1 - k."""
from __future__ import annotations

from ...dtype import dtypes
from ...errors import UnsupportedError
from ...tensor.tensor import Tensor, stack, where

_ACT = {"Tanh": lambda x: x.tanh(), "Sigmoid": lambda x: x.sigmoid(),
        "Relu": lambda x: x.relu()}
DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _activation_names(op, at, num_dirs):
  """Per direction, the activation names (the attribute, or the operator's defaults)."""
  names = at.values.get("activations", (None, None))[1] or DEFAULTS[op] * num_dirs
  names = [n.decode() if isinstance(n, bytes) else n for n in names]
  if len(names) == len(DEFAULTS[op]):
    names = names * num_dirs
  for name in names:
    if name not in _ACT:
      raise UnsupportedError(f"{op} activation {name!r} (Tanh, Sigmoid, Relu are supported)")
  per = len(DEFAULTS[op])
  return [tuple(names[d * per:(d + 1) * per]) for d in range(num_dirs)]


def _gru(gx, h, r, rb, acts, clipped, linear_before_reset, rec):
  """One GRU step on (D, batch, .) gates: the new h."""
  hidden = h.shape[-1]
  f, g = (_ACT[a] for a in acts)
  r_zr, r_h = r[:, :2 * hidden], r[:, 2 * hidden:]
  gh_zr = rec(h) @ r_zr.permute(0, 2, 1) + (rb[..., :2 * hidden] if rb is not None else 0)
  z = f(clipped(gx[..., :hidden] + gh_zr[..., :hidden]))
  rr = f(clipped(gx[..., hidden:2 * hidden] + gh_zr[..., hidden:]))
  rbh = rb[..., 2 * hidden:] if rb is not None else 0
  if linear_before_reset:
    hh = g(clipped(gx[..., 2 * hidden:] + rr * (rec(h) @ r_h.permute(0, 2, 1) + rbh)))
  else:
    hh = g(clipped(gx[..., 2 * hidden:] + rec(rr * h) @ r_h.permute(0, 2, 1) + rbh))
  return (1 - z) * hh + z * h


def _step(op, gx, h, c, r, rb, p, acts, at, rec):
  """One time step of the directions in h's first axis: (new h, new c). gx: the step's input
  projections (with W's bias), r: the (D, gates * H, H) recurrent weights, rb: R's bias,
  rec: what h goes through before its matmul (the identity, or a quantizer)."""
  hidden = h.shape[-1]
  clip = at.float("clip")

  def clipped(v):
    return v.clip(-clip, clip) if clip is not None else v

  if op == "GRU":
    return _gru(gx, h, r, rb, acts, clipped, at.int("linear_before_reset", 0), rec), None
  gates = gx + rec(h) @ r.permute(0, 2, 1) + (rb if rb is not None else 0)
  if op == "RNN":
    return _ACT[acts[0]](clipped(gates)), None
  f, g, hact = (_ACT[a] for a in acts)
  i, o, fg, cc = (gates[..., k * hidden:(k + 1) * hidden] for k in range(4))
  if p is not None:
    i = i + p[..., :hidden] * c
    fg = fg + p[..., 2 * hidden:] * c
  i, fg = f(clipped(i)), f(clipped(fg))
  if at.int("input_forget", 0):
    fg = 1 - i
  c_new = fg * c + i * g(clipped(cc))
  if p is not None:
    o = o + p[..., hidden:2 * hidden] * c_new
  return f(clipped(o)) * hact(c_new), c_new


def _at_step(values, k, seq, dirs, reverse):
  """(D, ...) of values[t_d] for the directions in dirs, t_d = k or seq - 1 - k (reverse)."""
  parts = [values(seq - 1 - k if reverse(d) else k, d) for d in dirs]
  return parts[0].unsqueeze(0) if len(parts) == 1 else stack(parts, 0)


def _groups(names, num_dirs):
  """Directions that share a step's kernels: both when their activations agree."""
  if num_dirs == 2 and names[0] == names[1]:
    return [[0, 1]]
  return [[d] for d in range(num_dirs)]


def _initial(state, dirs, batch, hidden, x):
  if state is None:
    return Tensor.zeros(len(dirs), batch, hidden, dtype=x.dtype, device=x.device)
  return state if len(dirs) == state.shape[0] else state[dirs[0]:dirs[-1] + 1]


def _projections(x, w, b, n, quantize):
  """Every step's and direction's input projection x_t @ W^T + Wb: (seq, batch, D, n)."""
  seq, batch, width = x.shape
  dirs = w.shape[0]
  xs = quantize(x) if quantize is not None else x
  gx = xs.reshape(seq * batch, width) @ w.reshape(dirs * n, width).T
  if b is not None:
    gx = gx + b[:, :n].reshape(dirs * n)
  return gx.reshape(seq, batch, dirs, n)


def recurrent(op, ins, at, quantize=None):
  """ONNX RNN / GRU / LSTM outputs [Y, Y_h(, Y_c)]; `quantize` (a Tensor -> Tensor, given an
  axis or None) makes the matmuls see quantized activations: all of X at once and each step's
  h per batch row (com.microsoft DynamicQuantizeLSTM)."""
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
  names = _activation_names(op, at, num_dirs)
  n = GATES[op] * hidden
  gx_all = _projections(x, w, b, n, quantize)
  valid = None
  if seq_lens is not None:
    lens = seq_lens.cast(dtypes.int32).reshape(1, batch, 1)
    valid = Tensor.arange(seq, device=x.device).reshape(seq, 1, 1) < lens

  def reverse(d):
    return direction == "reverse" or d == 1

  rec = (lambda v: quantize(v, -1)) if quantize is not None else (lambda v: v)
  outs, finals = [[None] * seq for _ in range(num_dirs)], [None] * num_dirs
  for dirs in _groups(names, num_dirs):
    lo, hi = dirs[0], dirs[-1] + 1
    rb = b[lo:hi, n:].unsqueeze(1) if b is not None else None
    pd = p[lo:hi].unsqueeze(1) if p is not None else None
    h = _initial(h0, dirs, batch, hidden, x)
    c = _initial(c0, dirs, batch, hidden, x) if op == "LSTM" else None
    for k in range(seq):
      gx = _at_step(lambda t, d: gx_all[t, :, d], k, seq, dirs, reverse)
      h_new, c_new = _step(op, gx, h, c, r[lo:hi], rb, pd, names[lo], at, rec)
      out = h_new
      if valid is not None:
        ok = _at_step(lambda t, d: valid[t], k, seq, dirs, reverse)
        h_new = where(ok, h_new, h)
        c_new = where(ok, c_new, c) if c is not None else None
        out = where(ok, h_new, 0)
      for i, d in enumerate(dirs):
        outs[d][seq - 1 - k if reverse(d) else k] = out[i]
      h, c = h_new, c_new
    for i, d in enumerate(dirs):
      finals[d] = (h[i], c[i] if c is not None else None)
  return _outputs(op, outs, finals, layout)


def _outputs(op, outs, finals, layout):
  y = stack([stack(o, 0) for o in outs], 1)       # (seq, dirs, batch, hidden)
  y_h = stack([f[0] for f in finals], 0)
  y_c = stack([f[1] for f in finals], 0) if op == "LSTM" else None
  if layout:
    y = y.permute(2, 0, 1, 3)
    y_h = y_h.permute(1, 0, 2)
    y_c = y_c.permute(1, 0, 2) if y_c is not None else None
  return [y, y_h, y_c] if op == "LSTM" else [y, y_h]
