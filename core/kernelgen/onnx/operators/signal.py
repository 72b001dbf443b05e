"""ONNX signal and linear-algebra operators: DFT (opsets 17 and 20: forward, inverse,
one-sided and the inverse of a one-sided spectrum) and STFT, as matrix products with cosine and
sine matrices computed on the host (the transform length is a static dim): a DFT of length L
costs two (L x K) products; MelWeightMatrix computed on the host from its scalar inputs; Det by
Gaussian elimination with partial pivoting, unrolled over the static matrix size."""
from __future__ import annotations

import math

from ...dtype import dtypes
from ...errors import ShapeError
from ...tensor.tensor import Tensor, stack, where
from ..registry import axis_index, op


def _trig(n_in: int, n_out: int, length: int, device: str, weights=None) -> tuple:
  """(cos, sin) matrices (n_in, n_out): entry [n, k] = cos/sin(2 pi k n / length) * w[n]."""
  cos, sin = [], []
  for n in range(n_in):
    w = weights[n] if weights else 1.0
    for k in range(n_out):
      a = 2 * math.pi * ((k * n) % length) / length
      cos.append(math.cos(a) * w)
      sin.append(math.sin(a) * w)
  shape = (n_in, n_out)
  return (Tensor(cos, dtype=dtypes.float32, device=device).reshape(shape),
          Tensor(sin, dtype=dtypes.float32, device=device).reshape(shape))


def _fit(x, n: int):
  """x (..., m) cut or zero-padded to (..., n)."""
  m = x.shape[-1]
  if m > n:
    return x.shrink(tuple((0, d) for d in x.shape[:-1]) + ((0, n),))
  if m < n:
    return x.pad(((0, 0),) * (x.ndim - 1) + ((0, n - m),))
  return x


def dft(x, axis: int, length: int | None, inverse: bool, onesided: bool):
  """The ONNX DFT of x (..., 1 or 2) along axis: (..., 2), or (..., 1) for an inverse one-sided
  (irfft) transform."""
  ndim = x.ndim
  axis = axis_index(axis, ndim)
  if axis == ndim - 1:
    raise ShapeError("DFT axis cannot be the last dim (it holds real and imaginary parts)")
  xf = x.cast(dtypes.float32)
  order = [d for d in range(ndim - 1) if d != axis] + [axis]
  re = xf[..., 0].permute(*order)
  im = xf[..., 1].permute(*order) if x.shape[-1] == 2 else None
  n = x.shape[axis]
  if length is None:
    length = 2 * (n - 1) if inverse and onesided else n
  dev = x.device
  if inverse and onesided:              # irfft: a Hermitian spectrum of length//2 + 1 terms
    half = length // 2 + 1
    w = [1.0 if k == 0 or 2 * k == length else 2.0 for k in range(half)]
    c, s = _trig(half, length, length, dev, w)
    re = _fit(re, half)
    out = re @ c - (_fit(im, half) @ s if im is not None else 0)
    outs = [out / length]
  else:
    k_out = length // 2 + 1 if onesided else length
    c, s = _trig(length, k_out, length, dev)
    re = _fit(re, length)
    im = _fit(im, length) if im is not None else None
    sign = 1 if inverse else -1
    out_re = re @ c - sign * (im @ s) if im is not None else re @ c
    out_im = sign * (re @ s) + (im @ c if im is not None else 0)
    outs = [out_re / length, out_im / length] if inverse else [out_re, out_im]
  back = list(range(ndim - 2))
  back.insert(axis, ndim - 2)
  return stack([o.permute(*back) for o in outs], -1).cast(x.dtype)


@op("DFT")
def _dft(ins, at):
  x = ins[0]
  length = int(ins.scalar(1)) if ins.has(1) else None
  if ins.opset >= 20:
    axis = int(ins.scalar(2)) if ins.has(2) else -2
  else:
    axis = at.int("axis", 1)
  return dft(x, axis, length, bool(at.int("inverse", 0)), bool(at.int("onesided", 0)))


@op("STFT")
def _stft(ins, at):
  x = ins[0]
  step = int(ins.scalar(1))
  window = ins[2]
  total = x.shape[1]
  size = int(ins.scalar(3)) if ins.has(3) else window.shape[0] if window is not None else total
  frames = (total - size) // step + 1
  parts = [x.shrink(((0, x.shape[0]), (f * step, f * step + size), (0, x.shape[2])))
           for f in range(frames)]
  y = stack(parts, 1)                                   # (B, frames, size, 1 or 2)
  if window is not None:
    y = y * window.cast(y.dtype).reshape(1, 1, size, 1)
  return dft(y, 2, size, False, bool(at.int("onesided", 1)))


def det(a):
  """Determinants of (..., n, n) by Gaussian elimination with partial pivoting (n static)."""
  n = a.shape[-1]
  batch = a.shape[:-2]
  m = a.cast(dtypes.float32).reshape(-1, n, n)
  b = m.shape[0]
  rows = Tensor.arange(n, device=a.device).reshape(1, n)
  out = Tensor.ones(b, dtype=dtypes.float32, device=a.device)
  for k in range(n):
    col = m[:, :, k].abs()
    col = col * (rows >= k).cast(dtypes.float32) - (rows < k).cast(dtypes.float32)
    p = col.argmax(1).cast(dtypes.int32).reshape(b, 1)
    perm = where(rows == k, p, where(rows == p, k, rows))
    m = m.gather(1, perm.reshape(b, n, 1).expand(b, n, n))
    pivot = m[:, k, k]
    out = out * pivot * where(p.reshape(b) != k, -1.0, 1.0)
    safe = where(pivot == 0, 1.0, pivot)
    factors = m[:, :, k] / safe.reshape(b, 1) * (rows > k).cast(dtypes.float32)
    m = m - factors.reshape(b, n, 1) * m[:, k:k + 1, :]
  return out.reshape(batch).cast(a.dtype)


@op("Det")
def _det(ins, at):
  x = ins[0]
  if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
    raise ShapeError(f"Det needs square matrices in the last two dims, got {x.shape}")
  return det(x)


@op("MelWeightMatrix")
def _mel(ins, at):
  """Triangular mel filters (peak 1) over the one-sided DFT bins, as the operator defines them
  (mel(f) = 2595 log10(1 + f/700); band edges floored to bins)."""
  bins, length, rate = int(ins.scalar(0)), int(ins.scalar(1)), ins.scalar(2)
  lo, hi = ins.scalar(3), ins.scalar(4)
  n_spec = length // 2 + 1
  lo_mel = 2595 * math.log1p(lo / 700) / math.log(10)
  hi_mel = 2595 * math.log1p(hi / 700) / math.log(10)
  step = (hi_mel - lo_mel) / (bins + 2)
  edges = [int(((length + 1) * 700 * math.expm1((i * step + lo_mel) / 2595 * math.log(10)))
               // rate) for i in range(bins + 2)]
  out = [0.0] * (n_spec * bins)
  for i in range(bins):
    left, mid, right = edges[i], edges[i + 1], edges[i + 2]
    if mid == left:
      out[mid * bins + i] = 1.0
    else:
      for j in range(left, mid + 1):
        out[j * bins + i] = (j - left) / (mid - left)
    for j in range(mid, right):
      out[j * bins + i] = (right - j) / (right - mid)
  dtype = ins.dtype(at.int("output_datatype", 1))
  return Tensor(out, dtype=dtype, device=ins.device).reshape(n_spec, bins)
