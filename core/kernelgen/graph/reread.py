"""What fusing an elementwise expression under a view that re-reads it costs: how the view
re-reads (reread_kind: a broadcast, overlapping windows, a dense conv's windows), and what the
expression computes per element read (element_loads, varying_loads, transcendentals), with the
thresholds (REREAD_*) past which the scheduler (schedule.py) makes it a kernel of its own.
"""
from __future__ import annotations

from ..uop.ops import Ops
from .lazy import L, LazyOp
from .view import prod

# an elementwise expression reading at least this many buffer elements per element is a kernel of
# its own when its consumer re-reads it (see above); bias + relu (2) or batchnorm (5) stay fused;
# reads of one-element sources (scalars, loop invariant) are not counted (element_loads)
REREAD_LOADS = 8
# ... and so is one read through overlapping windows (not only broadcast: log_softmax's log of
# the row sum stays in its row kernel) that computes at least REREAD_TRANSCENDENTALS
# transcendental ops per element from values that vary per element (a sigmoid, SiLU, tanh or
# GELU; not batchnorm's rsqrt of the broadcast variance): a 3x3 conv re-reads each input
# 9 * Cout times, an overlapping 3x3 pool 9 times, so fused, one exp per element becomes 9 * Cout
# exps, against one write and one read materialized.
# Set by ddddocr's detection model (issue 42, natively on lavapipe): its sigmoid fused into each
# 3x3 conv ran the convs at ~2.6 GFLOP/s, ~170 ms a layer. bench/fusion_reread.py, 4 x (3x3
# conv 32->32 at 96x96, then the activation), lavapipe natively, load ~7.6 on 2 cores, medians
# of 5 interleaved: sigmoid recomputed per read 385 ms, once per element 250 ms; SiLU 474 -> 280.
# relu, add, bias, batchnorm (no transcendental that varies per element) stay fused.
REREAD_TRANSCENDENTALS = 1
# ... and so is one read through overlapping windows by every output channel (a dense or grouped
# conv's input: each element feeds kh * kw * Cout / tile products) that loads at least
# REREAD_CONV_LOADS distinct buffers that vary per element (varying_loads: a concat's maps, a
# residual add; not a per-channel scale or bias): fused, each of those reads loads and masks
# them all. Set by PP-OCRv4 detection's head (issue 42): a 3x3 conv 96->24 at 80x80 over the
# concat of four 24-channel maps (one of them x + x * s) ran 367 ms of the model's 586 ms of
# kernel time fused (0.7 GFLOP/s; lavapipe, GPU timestamps, load 5-7). bench/fusion_reread.py
# --conv, that conv, lavapipe natively, load ~9 on 2 cores, medians of 5 interleaved, fused ->
# own kernel, ms: concat of 2 128 -> 86, of 3 152 -> 80, of 4 208 -> 101, the model's 492 -> 83;
# one varying load: relu 124 -> 114, bias 140 -> 167 (stay fused; x + x * s 140 -> 46 and
# x * a + b 108 -> 60 gain too, but batchnorm stays fused until it is measured on whole models).
REREAD_CONV_LOADS = 2
# ... or, in a tiny kernel (its re-reading view evaluates the producer at most REREAD_SMALL times
# fused), at least REREAD_TRANSCENDENTALS + 1: there one transcendental per read costs less than a
# dispatch of its own. Silero VAD's STFT magnitude, sqrt(re * re + im * im) of 387 elements,
# under its first conv (128 x 3 outputs of 129 x 3 products, 148,608 evaluations; tiled, each
# thread computes each input once: 16 x 387 sqrt) in Chromium's SwiftShader (GPU timestamps,
# best of 10 runs, load ~8): the magnitude's own kernel 0.041 ms, the conv 0.206 -> 0.223 ms
# with it; and one dispatch less (bench/bundle_call_ab.py)
REREAD_SMALL = 1 << 18
WINDOW = 2        # _walk's `reread` when the read goes through overlapping windows (1: broadcast)
CONV_WINDOW = 3   # ... through overlapping windows that every output channel reads (a dense conv)
TRANSCENDENTAL = frozenset((Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT))


def repeats(node: LazyOp) -> bool:
  """True when the view reads some source element for more than one output element."""
  view = node.arg
  return any(s == 0 and n > 1 for s, n in zip(view.strides, view.shape))


def _rereads(node: LazyOp) -> bool:
  """True when VIEW `node` reads source elements more than once: a broadcast, or more valid
  elements than its source has (overlapping windows)."""
  view = node.arg
  valid = prod(hi - lo for lo, hi in view.mask) if view.mask else prod(view.shape)
  return repeats(node) or valid > node.src[0].size


def _windows(node: LazyOp) -> bool:
  """True when VIEW `node` reads source elements in overlapping windows (a conv's or an
  overlapping pool's input): more valid elements than its source has, broadcast axes left out."""
  view = node.arg
  mask = view.mask or tuple((0, n) for n in view.shape)
  valid = prod(hi - lo for (lo, hi), s in zip(mask, view.strides) if s != 0)
  return valid > node.src[0].size


def reread_kind(node: LazyOp) -> int:
  """How VIEW `node` re-reads its source: CONV_WINDOW (overlapping windows, and broadcast: every
  output channel of a conv reads each window), WINDOW (overlapping windows: a pool, a depthwise
  conv), 1 (a broadcast) or 0 (each element at most once)."""
  if _windows(node):
    return CONV_WINDOW if repeats(node) else WINDOW
  return int(_rereads(node))


def most_transcendentals(evals: int) -> int:
  """How many transcendental ops per element a producer re-read through windows may compute and
  stay fused, given its `evals` evaluations fused (REREAD_TRANSCENDENTALS, REREAD_SMALL)."""
  return REREAD_TRANSCENDENTALS - 1 + (0 < evals <= REREAD_SMALL)


def element_loads(node: LazyOp, boundary: set, limit: int) -> int:
  """How many buffer elements the elementwise expression `node` computes from per element: a
  subexpression read through several views is computed once per view, so it counts once per
  view. A source of one element already in a buffer (a run's key count, a cache's length)
  counts for none: every element reads that same element, loop invariant, so recomputing the
  expression per read loads nothing new: a decode step's attention mask, a handful of such
  scalars compared with an iota, stays fused into the attention kernel that re-reads it per
  head (one kernel less a step). A one-element reduction not yet in a buffer counts: a norm's
  statistics stay in its row kernel (tests/devices/test_write_fusion.py).
  Counted up to `limit` (and giving up, low, past 64 * limit nodes)."""
  def leaf(n: LazyOp) -> bool:
    return n is not node and (n.realized or id(n) in boundary or
                              n.op in (L.REDUCE, L.CONTIGUOUS, L.SORTNET, L.GATHER))
  counts: dict[int, int] = {}
  stack = [(node, False)]
  while stack:
    n, done = stack.pop()
    if id(n) in counts:
      continue
    if leaf(n) or n.op not in (L.ALU, L.CAST, L.BITCAST, L.VIEW):
      counts[id(n)] = int(leaf(n) and (n.size > 1 or not (n.realized or id(n) in boundary)))
    elif done:
      srcs = {id(x): x for x in n.src}
      counts[id(n)] = min(limit, sum(counts[x] for x in srcs))
    elif len(counts) > 64 * limit:
      return 0
    else:
      stack.append((n, True))
      stack.extend((x, False) for x in n.src if id(x) not in counts)
  return counts[id(node)]


# varying_loads: a broadcast view whose source has at most 1/BROADCAST_SHARE of its elements (a
# per-channel scale read across a feature map) is about loop invariant: not counted
BROADCAST_SHARE = 64


def varying_loads(node: LazyOp, boundary: set) -> int:
  """How many distinct buffers (realized, or other kernels' outputs) the elementwise expression
  `node` loads per element, leaving out those read through a broadcast from a source of at most
  1/BROADCAST_SHARE of the view's elements (giving up, low, past 512 nodes)."""
  leaves, seen, stack = set(), set(), [node]
  while stack:
    n = stack.pop()
    if id(n) in seen:
      continue
    seen.add(id(n))
    if n is not node and (n.realized or id(n) in boundary or
                          n.op in (L.REDUCE, L.CONTIGUOUS, L.SORTNET, L.GATHER)):
      leaves.add(id(n))
    elif len(seen) > 512:
      return 0
    elif n.op is L.VIEW and repeats(n) and n.src[0].size * BROADCAST_SHARE <= prod(n.shape):
      continue
    elif n.op in (L.ALU, L.CAST, L.BITCAST, L.VIEW):
      stack.extend(n.src)
  return len(leaves)


def transcendentals(node: LazyOp, boundary: set, limit: int) -> int:
  """How many transcendental ops (TRANSCENDENTAL) the elementwise expression `node` evaluates per
  element on values that vary per element: not those behind a broadcast or of constants only.
  Counted up to `limit` (and giving up, low, past 64 * limit nodes)."""
  info: dict[int, tuple[bool, int]] = {}     # id -> (varies per element, transcendentals)
  stack = [(node, False)]
  while stack:
    n, done = stack.pop()
    if id(n) in info:
      continue
    if n is not node and (n.realized or id(n) in boundary) or \
       n.op not in (L.ALU, L.CAST, L.BITCAST, L.VIEW):
      info[id(n)] = (n.op not in (L.CONST, L.VAR), 0)
    elif n.op is L.VIEW and repeats(n):
      info[id(n)] = (False, 0)            # a broadcast value: computed per channel, say
    elif done:
      srcs = [info[x] for x in {id(s): s for s in n.src}]
      varies = any(v for v, _ in srcs)
      own = int(varies and n.op is L.ALU and n.arg in TRANSCENDENTAL)
      info[id(n)] = (varies, min(limit, own + sum(c for _, c in srcs)))
    elif len(info) > 64 * limit + 64:
      return 0
    else:
      stack.append((n, True))
      stack.extend((x, False) for x in n.src if id(x) not in info)
  return info[id(node)][1]
