"""Which of a reduction's reduced axes its loop runs over and which each step unrolls whole:
register tiles' trailing axes of at most TILE_INNER elements (conv2d's window) and their loop
unrolled TILE_UNROLL times (Lowerer._tile_loop), and Opts.reduce_inner's split of a matvec's
row (Lowerer._split_points; the launch choices of lowering/threads.py read the same split).
"""
from __future__ import annotations

from ..graph.view import prod

# tiled kernels unroll their reduction loop this many times where it divides the loop (lavapipe,
# matmul 1024^2 f32, 8x8 tiles: unrolled 1 / 2 / 4 times ran 211 / 198 / 198 ms and compiled
# 512^3 in 18 / 22 / 30 ms: 2 keeps the kernel speed at two thirds of the compile time). With
# the tile's columns as vectors (regtile.py), 512^2 f32 on a loaded lavapipe: 1 / 2 ran about
# 37 / 34 ms (the scalar tiles 45) from 176 / 247 UOps
TILE_UNROLL = 2
# tiled reductions over several axes loop over the leading ones and unroll the trailing ones
# whose elements number at most TILE_INNER (conv2d: loop over input channels x window rows, unroll
# the window's columns, so neighbouring output columns share the loads of overlapping windows;
# lavapipe, conv2d 3x3 64ch 56x56 in 8x8 tiles: one loop over all 576 reduced elements 21.5 ms,
# the 3 columns unrolled 14.6 ms, the whole 3 x 3 window 16.1 ms and twice the compile time)
TILE_INNER = 8


def _inner_split(shape, most: int = 0) -> int:
  """Where a tiled reduction's axes split into its loop (shape[:k]) and the trailing axes it
  unrolls completely (shape[k:], at most TILE_INNER elements, or `most`: then all of them where
  they fit, k = 0): k = len(shape) for none."""
  k, inner, least = len(shape), 1, 0 if most else 1
  while k > least and inner * shape[k - 1] <= (most or TILE_INNER):
    k, inner = k - 1, inner * shape[k - 1]
  return k if inner > 1 else len(shape)


def inner_split(shape, most: int = 0) -> int:
  """_inner_split for the launch choices (lowering/threads.py's stepped matvec)."""
  return _inner_split(shape, most)


def tile_loop_unroll(shape, tile_inner: int = 0, tile_unroll: int = 0) -> int:
  """The trips of a tiled reduction's loop over `shape` that one step of it unrolls
  (Lowerer._tile_loop): TILE_UNROLL (Opts.tile_unroll where given) where that divides it and
  nothing else is unrolled; Opts.tile_unroll also around the trailing axes unrolled whole."""
  k, total = _inner_split(shape, tile_inner), prod(shape)
  step = tile_unroll or TILE_UNROLL
  unroll = step if k == len(shape) and total % step == 0 else 1
  if k < len(shape) and tile_unroll and prod(shape[:k]) % tile_unroll == 0:
    unroll = tile_unroll            # Opts.tile_unroll: the loop around an unrolled window too
  return unroll


def split_shape(shape, most: int) -> list:
  """A reduction's reduced axes `shape` as Opts.reduce_inner loops over them: one axis of K
  elements as (K // t, t), t the largest divisor of K of at most `most` leaving at least 2
  trips (an fp32 matvec's row: the packed-weight matvec's layout); several axes, or one with no
  such divisor, as they are."""
  if len(shape) != 1 or not most:
    return list(shape)
  n = shape[0]
  t = next((t for t in range(min(most, n // 2), 1, -1) if n % t == 0), 0)
  return [n // t, t] if t else list(shape)


def splits(shape, most: int) -> bool:
  """Opts.reduce_inner unrolls some trailing axes of reduced axes `shape` (split_shape's)."""
  split = split_shape(shape, most)
  return _inner_split(split, most) < len(split)
