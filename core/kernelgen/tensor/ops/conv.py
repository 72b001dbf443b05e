"""conv2d as one recorded operation: the forward correlation (windows times weights, one
reduction) and its backward rule, which builds the input and weight gradients as reductions that
tile well instead of differentiating the forward's primitives one by one.

- The output gradient is computed once into a buffer (it is usually a ReLU mask times the next
  layer's gradient, which both gradients would otherwise recompute per term).
- Input gradient (a transposed convolution), split by phase: input row h = a*stride + ph gets
  only the kernel taps i with (ph + padding - i*dilation) divisible by the stride, so each of the
  stride_h * stride_w phases is an ordinary stride-1 correlation of the (padded) output gradient
  with a sub-kernel of the flipped, transposed weights; the phases are interleaved by one stack.
  No product with the zeros of a spread grid is computed (stride 2, 3x3: 9 taps in all instead
  of 4 x 9); stride 1 is one phase, the plain transposed convolution. (lavapipe, the bench CNN's
  second conv, 32x16x14x14 -> 32x8x28x28: 19 ms, where the product with the weights per window
  element, a grid of windows and a reduction over it took 77 ms, 320 ms inside the step.)
- Weight gradient: a reduction over batch x output pixels into few outputs (out channels x
  in channels x taps) is split: partial sums per batch element (and per block of output rows),
  each over at most WGRAD_CHUNK products, then a small sum of the partials. The split kernel has
  many outputs that register-tile (out x in channels share their loads) where the unsplit one
  was a grouped reduction per output (lavapipe, the same conv: 8.6 ms instead of 125 ms; the
  first conv, 8x1x3x3 over 32x28x28: 6 ms instead of 28 ms).
The bias gradient is the output gradient summed over batch and pixels.
"""
from __future__ import annotations

import math

from ...errors import ShapeError
from ..autograd import no_grad, record
from ..operands import TensorOps
from ..combine import stack

# the weight gradient's split: partial sums of at most WGRAD_CHUNK products each (batch elements
# first, then blocks of output rows), while the partials stay at most WGRAD_PARTIALS values
WGRAD_CHUNK, WGRAD_PARTIALS = 256, 1 << 20


def correlate(xp, weight, stride, dilation, groups):
  """The convolution of the padded NCHW input `xp` with OIHW `weight`: one reduction over input
  channels and kernel taps of the sliding windows (a view, no copy) times the weights."""
  n = xp.node.logical[0]     # (the logical sizes: some may be symbolic, tensor/symbolic.py)
  o, cg, kh, kw = weight.shape
  if groups > 1 and cg > 1:      # (n, groups, cg, ...) first: the windows one view of the input
    win = xp.reshape(n, groups, cg, *xp.node.logical[2:])._windows((kh, kw), stride, dilation)
  else:
    win = xp._windows((kh, kw), stride, dilation)   # (n, c, oh, ow, kh, kw)
  oh, ow = win.node.logical[-4], win.node.logical[-3]
  win = win.reshape(n, groups, 1, cg, oh, ow, kh, kw).permute(0, 1, 2, 4, 5, 3, 6, 7)
  w = weight.reshape(1, groups, o // groups, 1, 1, cg, kh, kw)
  return (win * w).sum((-3, -2, -1)).reshape(n, o, oh, ow)


def conv(x, weight, bias, stride, padding, dilation, groups):
  """x (N, C, H, W) convolved with weight (O, C/groups, kh, kw) (+ bias (O,)): the forward
  correlation, recorded as one operation with `conv_backward` as its rule."""
  (ph, pw) = padding
  with no_grad():
    out = correlate(x.pad(((0, 0), (0, 0), (ph, ph), (pw, pw))), weight, stride, dilation,
                    groups)
    if bias is not None:
      out = out + bias.reshape(1, -1, 1, 1)
  parents = (x, weight) if bias is None else (x, weight, bias)
  return record(out, parents, conv_backward, (stride, padding, dilation, groups))


def conv_backward(out, g, parents, arg):
  """The gradients of conv's input, weight (and bias) from the output gradient `g`."""
  x, weight = parents[0], parents[1]
  stride, padding, dilation, groups = arg
  g = g.contiguous()      # read by all the gradients below: computed once
  gx = input_grad(g, weight, x.shape, stride, padding, dilation, groups).cast(x.dtype) \
    if x.requires_grad else None
  gw = weight_grad(g, x, weight.shape, stride, padding, dilation, groups).cast(weight.dtype) \
    if weight.requires_grad else None
  if len(parents) == 2:
    return gx, gw
  bias = parents[2]
  gb = g.sum((0, 2, 3)).cast(bias.dtype) if bias.requires_grad else None
  return gx, gw, gb


def _transposed(weight, groups):
  """(O, C/g, kh, kw) -> (C, O/g, kh, kw): the weights of the transposed convolution."""
  o, cg = weight.shape[:2]
  rest = weight.shape[2:]
  w = weight.reshape(groups, o // groups, cg, *rest).permute(0, 2, 1, 3, 4)
  return w.reshape(groups * cg, o // groups, *rest)


def _phase_taps(phase, k, s, p, d, size, out_size):
  """For input positions a*s + phase (a < count) along one axis: (first tap of the flipped
  kernel, taps, tap step, the sub-correlation's dilation, left pad of the output gradient, right
  pad, count), or None when no tap reaches them. Tap i reads output row a + (phase + p - i*d)/s."""
  taps = [i for i in range(k) if (phase + p - i * d) % s == 0]
  count = -(-(size - phase) // s)
  if not taps or count <= 0:
    return None
  offsets = [(phase + p - i * d) // s for i in reversed(taps)]    # ascending
  step, common = s // math.gcd(d, s), math.gcd(d, s)
  return (k - 1 - taps[-1], len(taps), step, d // common, -offsets[0],
          count + offsets[-1] - out_size, count)


def _fit(t, axis, left, right):
  """Pad (positive) or shrink (negative) `t` along `axis` by `left` and `right`."""
  pads = tuple((max(left, 0), max(right, 0)) if a == axis else (0, 0) for a in range(t.ndim))
  t = t.pad(pads) if left > 0 or right > 0 else t
  if left >= 0 and right >= 0:
    return t
  n = t.shape[axis]
  return t.shrink(tuple((max(-left, 0), n - max(-right, 0)) if a == axis else None
                        for a in range(t.ndim)))


def _phase(g, wf, taps_h, taps_w, groups):
  """One phase of the input gradient: (N, C, count_h, count_w)."""
  (ih, nh, sh, dh, lh, rh, _), (iw, nw, sw, dw, lw, rw, _) = taps_h, taps_w
  sub = wf.shrink((None, None, (ih, ih + (nh - 1) * sh + 1), (iw, iw + (nw - 1) * sw + 1)))
  sub = sub._step((1, 1, sh, sw))
  gp = _fit(_fit(g, 2, lh, rh), 3, lw, rw)
  return correlate(gp, _transposed(sub, groups), (1, 1), (dh, dw), groups)


def input_grad(g, weight, shape, stride, padding, dilation, groups):
  """d(loss)/d(input) of shape `shape` (N, C, H, W): the phases of the transposed convolution."""
  n, c, h, w = shape
  kh, kw = weight.shape[2:]
  (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
  wf = weight.flip((2, 3))
  rows, cols = -(-h // sh), -(-w // sw)
  phases = []
  for a in range(sh):
    taps_h = _phase_taps(a, kh, sh, ph, dh, h, g.shape[2])
    for b in range(sw):
      taps_w = _phase_taps(b, kw, sw, pw, dw, w, g.shape[3])
      if taps_h is None or taps_w is None:
        phases.append(type(g).zeros(n, c, rows, cols, dtype=g.dtype, device=g.device))
        continue
      part = _phase(g, wf, taps_h, taps_w, groups)
      phases.append(part.pad(((0, 0), (0, 0), (0, rows - part.shape[2]),
                              (0, cols - part.shape[3]))))
  if len(phases) == 1:
    return phases[0]
  grid = stack(phases, -1).reshape(n, c, rows, cols, sh, sw).permute(0, 1, 2, 4, 3, 5)
  return grid.reshape(n, c, rows * sh, cols * sw).shrink((None, None, (0, h), (0, w)))


def wgrad_split(n: int, oh: int, ow: int, weights: int) -> tuple[int, int]:
  """(batch chunks, row blocks) of the weight gradient's partial sums: batch elements first,
  then blocks of output rows, until a partial sums at most WGRAD_CHUNK products, while the
  partials stay at most WGRAD_PARTIALS values."""
  chunks = max(d for d in range(1, n + 1) if n % d == 0 and d * weights <= WGRAD_PARTIALS) \
    if weights <= WGRAD_PARTIALS else 1
  blocks = 1
  if chunks == n:
    for r in range(1, oh + 1):
      if oh % r == 0 and n * r * weights <= WGRAD_PARTIALS:
        blocks = r
        if (oh // r) * ow <= WGRAD_CHUNK:
          break
  return chunks, blocks


def weight_grad(g, x, shape, stride, padding, dilation, groups):
  """d(loss)/d(weight) of shape `shape` (O, C/groups, kh, kw): sum over batch and output pixels
  of the output gradient times the input windows, split into partial sums (wgrad_split)."""
  o, cg, kh, kw = shape
  n, _, oh, ow = g.shape
  (ph, pw) = padding
  xp = x.pad(((0, 0), (0, 0), (ph, ph), (pw, pw)))
  win = xp._windows((kh, kw), stride, dilation)           # (n, c, oh, ow, kh, kw)
  s, r = wgrad_split(n, oh, ow, o * cg * kh * kw)
  og = o // groups
  gs = g.reshape(s, n // s, groups, og, 1, r, oh // r, ow, 1, 1)
  ws = win.reshape(s, n // s, groups, 1, cg, r, oh // r, ow, kh, kw)
  partial = (gs * ws).sum((1, 6, 7))                      # (s, groups, og, cg, r, kh, kw)
  # a kernel of its own: fused into an optimizer's flat gradient, every element of that would
  # loop over the partials (schedule.PADDED_REDUCE_WASTE lets the small sum fuse)
  return partial.sum((0, 4)).reshape(o, cg, kh, kw).contiguous()


# ---- the Tensor methods ---------------------------------------------------------------------

def pair(v) -> tuple[int, int]:
  """An int or a pair as a pair (kernel sizes, strides, padding, dilation)."""
  return (v, v) if isinstance(v, int) else tuple(v)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
  """2-d convolution (cross-correlation), NCHW input and OIHW weight, as torch.conv2d:
  (N, C, H, W) with weight (O, C / groups, kh, kw) and optional bias (O,) -> (N, O, OH, OW),
  OH = (H + 2 ph - dh (kh - 1) - 1) // sh + 1. stride, padding and dilation are ints or pairs.
  Result dtype: the promoted dtype of input and weight.

  Raises ShapeError for inputs that are not 4-d, channels that do not match the weight and
  groups, a stride or dilation below 1, or a bias not of shape (O,)."""
  if x.ndim != 4 or weight.ndim != 4:
    raise ShapeError(f"conv2d needs a 4-d NCHW input and OIHW weight, got {x.shape} and "
                     f"{weight.shape}")
  n, c, _, _ = x.shape
  o, cg, kh, kw = weight.shape
  if c % groups or o % groups or cg != c // groups:
    raise ShapeError(f"conv2d: input has {c} channels, weight {weight.shape} with groups="
                     f"{groups}: the weight's dim 1 must be channels/groups = {c // groups}")
  if min(pair(stride)) < 1 or min(pair(dilation)) < 1:
    raise ShapeError(f"conv2d stride {stride} and dilation {dilation} must be >= 1")
  if bias is not None and bias.shape != (o,):
    raise ShapeError(f"conv2d bias has shape {bias.shape}: it needs one value per output "
                     f"channel, shape ({o},)")
  return conv(x, weight, bias, pair(stride), pair(padding), pair(dilation), groups)


def check_1d(x, weight, what: str):
  """A ShapeError unless x is 3-d NCL (and weight, when given, 3-d OIK)."""
  if x.ndim != 3 or (weight is not None and weight.ndim != 3):
    got = f"{x.shape}" + (f" and {weight.shape}" if weight is not None else "")
    raise ShapeError(f"{what} needs a 3-d NCL input" + (" and OIK weight" if weight is not None
                                                       else "") + f", got {got}")


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
  """1-d convolution, NCL input and OIK weight (torch.conv1d): conv2d over a height of 1,
  (N, C, L) -> (N, O, OL); arguments and errors as conv2d's (ShapeError unless both are 3-d)."""
  check_1d(x, weight, "conv1d")
  out = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, stride), (0, padding),
               (1, dilation), groups)
  return out.squeeze(2)


class ConvOps(TensorOps):
  """Convolutions: conv1d and conv2d (torch's spelling; conv2d's backward rule above)."""
  __slots__ = ()
  conv1d, conv2d = conv1d, conv2d
