"""What a language model's decode step needs: a KV cache written in place (KVCache, kv_append)
and sampling the next token on the device (sample_token).

    past = kg.Dim("past", 0, 63)                  # tokens already in the cache
    cache = kg.nn.KVCache(64, 128, name="past_k")  # past's top + 1 new row, of width 128
    keys = kg.nn.kv_append(cache.past(past), k)    # k (1, 128) written at row `past`: (past + 1, 128)

The cache is one preallocated buffer; `cache.past(n)` reads its first n rows (n a kg.Dim, bound
per step with `past.bind(t)` in Python, or left unbound for kg.export's state), and `kv_append`
writes the new rows at row n by one small kernel and returns the buffer read as its first
n + s rows: no kernel or copy moves the n rows before. Exported with `state={"past_k":
"present_k"}` (the output `present_k` that kv_append returned), a bundle's present IS its
state buffer: no cache is copied after a run (export/state.py).
"""
from __future__ import annotations

import weakref

from ..dtype import dtypes
from ..errors import DTypeError, ShapeError
from ..graph.dims import Sym
from ..tensor.kv_append import append, prefix_base
from ..tensor.symbolic import scalar, with_sym
from ..tensor.tensor import Tensor, where

_CACHES = weakref.WeakSet()   # the buffers KVCache made: the only ones kv_append writes


class KVCache:
  """A KV cache of `rows` rows of `width` values, written in place: one buffer (Tensor.empty,
  an input called `name` when given: kg.export's state), read by `past(n)` as its first n rows
  and grown by `kv_append`. `rows`: at least the most rows a step's result holds, past's top
  plus the step's new rows (exactly that for a bundle's state: for a decode step of one token,
  the context).

  Raises ShapeError when rows or width is not a positive int."""

  def __init__(self, rows: int, width: int, *, dtype=dtypes.float32, name: str | None = None,
               device: str | None = None):
    for what, n in (("rows", rows), ("width", width)):
      if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ShapeError(f"KVCache {what} {n!r}: give a positive int (a cache has a fixed "
                         f"number of rows; its logical length is past(n)'s n, a kg.Dim)")
    self.rows, self.width = rows, width
    self.buffer = Tensor.empty(rows, width, dtype=dtype, name=name, device=device)
    _CACHES.add(self.buffer.node.buffer)

  def past(self, n) -> Tensor:
    """The cache's first `n` rows, (n, width) of the cache's dtype: the past of a step, to give
    kv_append. `n` a kg.Dim (or an expression of one) whose top is at most `rows`, bound
    (`past.bind(t)`) to run in Python or unbound to export (the bundle's state input is this
    view: its manifest gives n's range), or an int.

    Raises ShapeError when n can exceed rows or be negative."""
    lo, hi = (n.lo, n.hi) if isinstance(n, Sym) else (n, n)
    if not isinstance(hi, int) or lo < 0 or hi > self.rows:
      raise ShapeError(f"KVCache.past({n}): the cache holds 0..{self.rows} rows, {n} can be "
                       f"{lo}..{hi}; give a size in that range (a kg.Dim(name, 0, "
                       f"{self.rows - 1}) for a decode step of one token)")
    if not isinstance(n, Sym):
      return self.buffer[:n]
    view = with_sym(self.buffer, (n, self.width))
    self.buffer.node.buffer.public_view = view.node     # the manifest's state input
    return view

  def __repr__(self) -> str:
    return f"KVCache(rows={self.rows}, width={self.width}, dtype={self.buffer.dtype})"


def kv_append(past: Tensor, new: Tensor) -> Tensor:
  """The cache that `past` (KVCache.past(n): its first n rows) reads, with `new` (s, width)
  written at rows n .. n + s - 1 in place by one small kernel, read as its first n + s rows: a
  tensor (n + s, width). s may be a kg.Dim (a step of several tokens). The rows before n are not
  copied. Where n's top plus s's top is the cache's rows the result is the buffer itself (a
  bundle's present of the state cache.past(n): no copy after a run), else a prefix of it. A
  later `cache.past(m)` reads the written rows once this result is realized (realize each step,
  as reading its logits does, before building the next).

  Raises ShapeError when `past` is not a KVCache's past(n), when new is not (s, width), or when
  n's top + s's top exceeds the cache's rows (it would overflow); DTypeError when new's dtype
  is not the cache's."""
  base = prefix_base(past.node) if isinstance(past, Tensor) else None
  if base is None or base.buffer not in _CACHES:
    raise ShapeError("kv_append: `past` is not a KV cache's rows; make the cache with "
                     "kg.nn.KVCache(rows, width) and pass cache.past(n) (a computed tensor, "
                     "or any other buffer, is never written in place)")
  rows, width = base.shape
  p, sym = past.symbolic_shape[0], new.symbolic_shape if isinstance(new, Tensor) else None
  if sym is None or len(sym) != 2 or sym[1] != width:
    raise ShapeError(f"kv_append: new rows {sym} for a cache of width {width}: give a tensor "
                     f"(s, {width}) (reshape the step's keys or values to it)")
  if new.dtype != base.dtype:
    raise DTypeError(f"kv_append: new rows are {new.dtype}, the cache holds {base.dtype}: "
                     f"cast them (new.cast(kg.dtypes.{base.dtype.name})) or make the cache "
                     f"with dtype={new.dtype.name}")
  s_hi = sym[0].hi if isinstance(sym[0], Sym) else sym[0]
  top = (p.hi if isinstance(p, Sym) else p) + s_hi
  if top > rows:
    raise ShapeError(f"kv_append: the cache has {rows} rows, but past ({p}) plus the new rows "
                     f"({sym[0]}) can reach {top}: it would overflow; make the past's top "
                     f"{rows - s_hi} (kg.Dim(name, 0, {rows - s_hi})) or the cache "
                     f"KVCache({top}, {width})")
  start = scalar(Tensor, p, past.device)
  if top == rows:     # the result is the buffer itself (a bundle's present: its state's buffer)
    return append(past, new, 0, start, (p + sym[0], width))
  return append(past, new, 0, start, (rows, width))[:p + sym[0]]


def sample_token(logits: Tensor, temperature: Tensor, seed: Tensor) -> Tensor:
  """The next token (1,) int32 of `logits` (its last axis the vocabulary), on the device: the
  argmax where `temperature` (1,) float32 is 0, else a draw from softmax(logits / temperature)
  by the Gumbel-max trick with the noise of `seed` (1,) int32 (Tensor.rand). A causal LM
  bundle's output `token` (kg.export; model.js `generate` reads only it)."""
  x = logits.cast(dtypes.float32).reshape(-1)
  u = Tensor.rand(x.shape[0], seed=seed, device=x.device).maximum(1e-20).minimum(1.0 - 1e-7)
  hot = temperature.reshape(1) > 0
  scaled = where(hot, x / where(hot, temperature.reshape(1), 1.0) - (-u.log()).log(), x)
  return scaled.argmax(0, keepdim=True).cast(dtypes.int32)


__all__ = ["KVCache", "kv_append", "sample_token"]
