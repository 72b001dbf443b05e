"""The ONNX ConvTranspose operator (1-d to 3-d, groups, dilations, pads, output_padding,
output_shape, auto_pad): a convolution of the zero-stuffed input with the flipped, transposed
kernel, cut to the output size (a 2-d kernel equal to its stride: a 1x1 convolution whose taps
fill each input pixel's output tile, tile_taps); registered in registry.OPS."""
from __future__ import annotations

from ...errors import UnsupportedError
from ..registry import op
from .nn import conv3d


@op("ConvTranspose")
def _conv_transpose(ins, at):
  """The transposed convolution as a convolution of the zero-stuffed input with the flipped,
  transposed kernel, cut to the output size (pads, output_padding, output_shape, auto_pad)."""
  x, w, b = ins[0], ins[1], ins[2]
  if x.ndim not in (3, 4, 5):
    raise UnsupportedError(f"ConvTranspose of a {x.ndim}-d input: kernelgen has 1-d to 3-d")
  one_d = x.ndim == 3
  if one_d:
    x, w = x.unsqueeze(2), w.unsqueeze(2)
  g = at.int("group", 1)
  n_sp = x.ndim - 2
  pre = [1] if one_d else []
  strides = pre + at.ints("strides", [1] * (x.ndim - 2 - len(pre)))
  dil = pre + at.ints("dilations", [1] * (x.ndim - 2 - len(pre)))
  kernel = list(w.shape[2:])
  out_pad = [0] * len(pre) + at.ints("output_padding", [0] * (n_sp - len(pre)))
  full_size = [strides[i] * (x.shape[2 + i] - 1) + (kernel[i] - 1) * dil[i] + 1
               for i in range(n_sp)]
  pads = _transpose_pads(at, x, strides, dil, kernel, out_pad, one_d)
  c, m_g = w.shape[0], w.shape[1]
  spatial = tuple(range(3, 3 + n_sp))
  if n_sp == 2 and kernel == strides and dil == [1, 1]:
    y = tile_taps(x, w, g)
  else:
    wt = w.reshape(g, c // g, m_g, *kernel).permute(0, 2, 1, *spatial).reshape(g * m_g, c // g,
                                                                               *kernel)
    wt = wt.flip(tuple(range(2, 2 + n_sp)))
    stuffed = x
    for i in range(n_sp):
      stuffed = _zero_stuff(stuffed, 2 + i, strides[i])
    edge = [((kernel[i] - 1) * dil[i],) * 2 for i in range(n_sp)]
    padded = stuffed.pad(((0, 0), (0, 0)) + tuple(edge))
    y = conv3d(padded, wt, [1] * 3, dil, g) if n_sp == 3 else \
      padded.conv2d(wt, None, stride=1, padding=0, dilation=tuple(dil), groups=g)
  cuts, fills = [], []
  for i in range(n_sp):      # the output window of the full result, zero-filled past its ends
    size = full_size[i] + out_pad[i] - pads[i][0] - pads[i][1]
    lo = pads[i][0]
    before, after = max(0, -lo), max(0, lo + size - full_size[i])
    fills.append((before, after))
    cuts.append((lo + before, lo + before + size))
  y = y.pad(((0, 0), (0, 0)) + tuple(fills))
  y = y.shrink([(0, y.shape[0]), (0, y.shape[1])] + cuts)
  if b is not None:
    y = y + b.reshape((1, -1) + (1,) * n_sp)
  return y.squeeze(2) if one_d else y


def tile_taps(x, w, g):
  """A 2-d transposed convolution whose kernel equals its stride (dilation 1: DBNet's and
  U-Nets' 2x2 stride-2 upsampling) before its cut: each input pixel writes its own kh x kw
  output tile, one kernel tap per output, so it is a 1x1 convolution to C_out * kh * kw channels
  whose taps move into the tile (a pixel shuffle). The zero-stuffed convolution reads kh * kw
  taps per output where one is not zero: PP-OCRv4 detection's 24 -> 24 one at 160x160 took
  20.9 ms of GPU time on lavapipe, as taps 2.2 (natively, GPU timestamps, best of 7
  interleaved, load 13-19 on 2 shared CPUs; issue 42)."""
  c, m_g, kh, kw = w.shape
  n, _, h, wd = x.shape
  taps = m_g * kh * kw
  wt = w.reshape(g, c // g, taps).permute(0, 2, 1).reshape(g * taps, c // g, 1, 1)
  y = x.conv2d(wt, None, stride=1, padding=0, groups=g)           # (N, G * M_g * kh * kw, H, W)
  y = y.reshape(n, g * m_g, kh, kw, h, wd).permute(0, 1, 4, 2, 5, 3)
  return y.reshape(n, g * m_g, h * kh, wd * kw)


def _zero_stuff(x, axis, s):
  """Insert s - 1 zeros between neighbours along axis."""
  if s == 1:
    return x
  n = x.shape[axis]
  y = x.unsqueeze(axis + 1)
  pads = [(0, 0)] * y.ndim
  pads[axis + 1] = (0, s - 1)
  y = y.pad(tuple(pads))
  shape = list(x.shape)
  shape[axis] = n * s
  y = y.reshape(tuple(shape))
  bounds = [(0, d) for d in y.shape]
  bounds[axis] = (0, (n - 1) * s + 1)
  return y.shrink(bounds)


def _transpose_pads(at, x, strides, dil, kernel, out_pad, one_d):
  n_sp = x.ndim - 2
  pads = at.ints("pads")
  auto = at.str("auto_pad", "NOTSET")
  out_shape = at.ints("output_shape")
  if out_shape is not None and one_d:
    out_shape = [1] + out_shape
  if pads is not None and auto not in ("SAME_UPPER", "SAME_LOWER") and out_shape is None:
    if one_d:
      return [(0, 0), (pads[0], pads[1])]
    return [(pads[i], pads[i + n_sp]) for i in range(n_sp)]
  if pads is None and auto not in ("SAME_UPPER", "SAME_LOWER") and out_shape is None:
    return [(0, 0)] * n_sp
  if out_shape is None:
    out_shape = [x.shape[2 + i] * strides[i] for i in range(n_sp)]
  out = []
  for i in range(n_sp):
    total = strides[i] * (x.shape[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1 - \
      out_shape[i]
    if auto == "SAME_UPPER":
      out.append((total // 2, total - total // 2))
    else:
      out.append((total - total // 2, total // 2))
  return out
