"""The scheduler: a lazy tensor graph -> an ordered list of kernels.

Each kernel computes one node (its output) into a buffer of its own, reading realized buffers and
the outputs of earlier kernels. Elementwise ops and views fuse into their consumer. A reduction
fuses into its kernel when it sits at the kernel's output side (only elementwise ops and views
that never repeat an element lie between it and the output), and it has one user; otherwise
(a reduction whose result is broadcast, reduced again, or reused) it gets a kernel of its own,
except a reduction that a fused reduction's source reads only through a broadcast along the same
reduced axes (the mean in var, the max in argmax or logsumexp), and that no kernel reads per
element: it joins that kernel, computed once per output (lower.py hoists it out of the loop).
`contiguous()` nodes and the requested outputs are always kernels. So is an elementwise
expression that reads at least REREAD_LOADS buffer elements per element when its consumer reads
it more than once per element (through a broadcast or overlapping windows: a conv's or a pool's
input): fused, it would be recomputed per read (an Inception concat or an LRN under a 3x3 pool,
9 times; a DenseNet concat under a conv, once per output channel), and so is one computing a
transcendental per element under overlapping windows, or in a tiny kernel two (REREAD_SMALL;
those measures of a re-read are reread.py's).

A matmul (two output axes longer than 1, at least TILED_REDUCE_MIN outputs) that several kernels
would compute fused is a kernel of its own: it has one user, but the elementwise op above it (its
bias) has several, each fusing it at its output side (an LSTM's input projection of every step,
hoisted out of the loop, read one step's slice by each step's kernel). Fused, each kernel computes
its part with no register tile, reading all of the weights; alone, its tiles read them once.
ddddocr's OCR LSTM (issue 42: 20 steps, both directions, W and R 2 x 2048 x 512): fused, its 40
step kernels read W's 8 MB each step beside R's; apart, one kernel reads W. bench/pypi_kernels.py,
lavapipe natively, GPU timestamps, best of 3 per kernel, 5 interleaved runs each, load 5-9 on 2
cores, the step kernels (+ the projection) in ms: 94 81 138 224 311 -> 74 111 75 95 62.
So is each but one of two matmuls that one kernel would compute fused (an MLP's silu(gate) * up):
the optimizer tiles a kernel of one reduction only, so together they ran a thread per output.

A short reduction (a few elements, no reduction inside) that a kernel reads per element is
recomputed there, unrolled, instead (RECOMPUTE_LENGTH below: ScheduleItem.recomputed).

Row kernels: given `row_max`, an elementwise kernel whose output reads reductions of its own
shape over the same axes (its "rows") only through broadcasts back along those axes (softmax's
max and sum, layernorm's mean and variance) fuses them too, when a row has at most `row_max`
elements: ScheduleItem.rows names the axes, and the lowering loops over each row for its
reductions, then again for its outputs (lowering/rows.py). The reductions' own nested
reductions (the max inside softmax's exp-sum) fuse as above.

Prologues (prologue.py): a matmul whose source reads whole rows of such a row expression (a
decode step's LayerNorm or RMSNorm of one row, read by the next projection) computes it itself,
its row reductions once per output, while its outputs times the row length are small (or once
per workgroup, staged: one row). So does a decode step's output projection its attention (one
query row per head), where the projection is one workgroup (prologue.staged_attention).

Write fusion: an in-place write's value (L.WRITE, a KV cache written at a symbolic position)
lies at its kernel's output side, so a projection that only the write reads computes in the
write's kernel (its prologue and epilogue too), each value element stored straight into the
cache: one kernel, not a projection and a copy (lowering/lower.py write_stores).

A target may bind only so many buffers to one kernel (WebGPU: maxStorageBuffersPerShaderStage,
8 by default). Given `max_buffers`, a kernel that would read too many is split: the fused
subexpression whose own kernel fits and that saves the parent the most buffers becomes a kernel
of its own (where none saves any, one that costs none: two operands reading the same buffers
need two cuts), until every kernel fits (or no split helps: the renderer raises LimitError).
Small read-only inputs may bind besides, up to the target's count (bind_limit.py: WebGPU's
uniform buffers), and do not count.

One concept, the scheduler (which nodes become kernels and how they fuse); it runs past 500
lines because its fusion rules, splitting and ordering read the same walks.
"""
from __future__ import annotations

from dataclasses import dataclass

from .bind_limit import BufferLimit, kernel_fits
from .split_wide import split_wide
from .epilogue import epilogue_top, single_users
from .lazy import L, LazyOp
from .prologue import reads_whole_rows, staged_attention, worth_it
from .reread import CONV_WINDOW, REREAD_CONV_LOADS, REREAD_LOADS, WINDOW, element_loads, \
  most_transcendentals, repeats, reread_kind, transcendentals, varying_loads
from .walkcache import WalkCache
from .view import contiguous_strides, prod


# a reduction padded into a larger output (an optimizer's flat gradient: every parameter's
# gradient concatenated) loops over its reduced axes for every output element of the kernel: it
# fuses only while those wasted iterations, (kernel outputs - its outputs) * reduced length, are
# at most this many (the digits MLP's do; a CNN's conv weight gradients, 816M, do not)
PADDED_REDUCE_WASTE = 1 << 22
# ... and, past PADDED_WASTE_FLOOR, while they are at most PADDED_WASTE_RATIO times its own
# iterations: every thread of the flat kernel runs every padded reduction's loop (masked), so the
# digits MLP's small gradients (b1, W2, b2: 32, 320 and 10 of 2410 outputs) cost 4 loops a thread
# fused; in kernels of their own, the flat kernel keeps W1's loop only (steady step under kg.jit,
# natively, medians of 3 interleaved runs: lavapipe 18 -> 13.5 ms, SwiftShader 23 -> 13.4 ms)
PADDED_WASTE_RATIO = 1
PADDED_WASTE_FLOOR = 1 << 16     # below this many wasted iterations, fusing is always cheaper
# ... and a reduction with two output axes longer than 1 and at least TILED_REDUCE_MIN outputs (a
# matmul's) never does: alone, the optimizer gives it register tiles (optimize.py TILE_MIN_SIZE),
# padded into the flat kernel it has none (lavapipe, the bench CNN's linear weight gradient,
# 3136x10 over a batch of 32: 27.6 ms fused, 5.9 ms alone and a copy into the flat gradient)
TILED_REDUCE_MIN = 4096

# row kernels (see above): rows of at most this many elements by default (a row's threads loop
# over it once per reduction and once for the outputs; option row_kernels=False: none)
ROW_MAX = 1 << 14
# a short reduction read per element (the filter chain's gray level, a sum over a pixel's 3
# channels, read by its colour and sepia kernel) is recomputed at each read, unrolled, instead of
# being a kernel of its own: when it reduces at most RECOMPUTE_LENGTH elements, its source holds no
# reduction and reads fewer than REREAD_LOADS buffer elements per element, and the kernel
# evaluates it at most RECOMPUTE_READS times per output: a few loads and multiply-adds, often of
# values the kernel loads anyway, against a kernel's pass through memory. The filter chain at
# 640x480 in Chromium (bench/peers_probe.py, best / median of 8, idle, ms; tinygrad 104-122):
# lavapipe 3 kernels 30.7 / 35.0 -> 2 kernels 23.4 / 25.2, SwiftShader 36.8 / 44.0 -> 20.7 / 23.9.
# Not for longer work: recomputing the digits MLP's hidden layer and logits in its softmax kernel
# (one kernel, ~61K multiply-adds in one thread) measured no faster (SwiftShader median 4.0 ms
# against 3.2, lavapipe 3.1 against 3.5: the submit floor, bench/submit_floor.py, ~3 ms)
RECOMPUTE_LENGTH, RECOMPUTE_READS = 4, 4


def row_limit(options: dict | None) -> int:
  """schedule()'s row_max from option row_kernels: True or absent ROW_MAX, False 0 (no row
  kernels), an int the longest row."""
  want = (options or {}).get("row_kernels", True)
  return ROW_MAX if want is True or want is None else int(want or 0)


@dataclass(eq=False)
class ScheduleItem:
  out: LazyOp                  # the node this kernel computes; stored contiguously into slot 0
  inputs: tuple[LazyOp, ...]   # the buffers it reads, in slot order 1, 2, ...
  name: str = ""               # stable, readable, unique within the schedule
  rows: tuple = ()             # a row kernel: the output axes each row loops over (see above)
  recomputed: tuple = ()       # reductions recomputed at each read (RECOMPUTE_LENGTH, above)
  extra: tuple = ()            # further outputs of `out`'s shape (join.py), stored contiguously
                               # into slots len(inputs) + 1, ...


def kernel_reduces(item: ScheduleItem) -> list:
  """The reductions computed inside the kernel `item` (its inputs are other kernels), but for
  those it recomputes at each read (ScheduleItem.recomputed)."""
  stop = {id(i) for i in item.inputs + item.recomputed}
  found, stack, seen = [], [*reversed(item.extra), item.out], set()
  while stack:
    node = stack.pop()
    if id(node) in seen or (id(node) in stop and node is not item.out) or node.realized:
      continue
    seen.add(id(node))
    if node.op is L.REDUCE:
      found.append(node)
    stack.extend(node.src)
  return found


def _toposort(roots: list[LazyOp]) -> list[LazyOp]:
  """Unrealized nodes reachable from `roots`, sources first (realized nodes are leaves)."""
  order, seen = [], set()
  stack = [(r, False) for r in reversed(roots)]
  while stack:
    node, expanded = stack.pop()
    if expanded:
      order.append(node)
    elif id(node) not in seen:
      seen.add(id(node))
      stack.append((node, True))
      if not node.realized:
        stack.extend((s, False) for s in reversed(node.src) if id(s) not in seen)
  return order


def _walk_kernel(root: LazyOp, boundary: set, users: dict,
                 row_max: int = 0) -> tuple[list[LazyOp], list[LazyOp], tuple, tuple]:
  """(inputs, the unrealized boundaries among them: kernels to compute, the row axes of a row
  kernel (axes of row_node(root)) or (), the reductions it recomputes at each read) of the
  kernel computing `root`. A reduction read by a fused reduction's source only through a
  broadcast along that reduction's axes (the max in a logsumexp) fuses too, when every other
  read of it in the kernel is at the output: it is computed once per output, not per element.
  With `row_max`, so does one the output reads that way (a row kernel)."""
  row = row_spec(root, boundary, row_max)
  fuse: set = set()
  for _ in range(4):
    bound = set(boundary)
    hits: set = set()
    inputs, new, nested, bad, again = _walk(root, bound, users, fuse, row, hits, row_max)
    ok = nested - bad - boundary
    if ok == fuse:
      boundary |= bound
      return inputs, new, (row.arg[1] if row is not None and hits & fuse else ()), again
    fuse = ok
  inputs, new, _, _, again = _walk(root, boundary, users, set())
  return inputs, new, (), again


@dataclass(eq=False)
class _Row:
  """A row kernel's rows, shaped like the reduction _walk's broadcast checks compare with: its
  output reads reductions of `src[0].shape` over axes `arg[1]`, broadcast back (shape: theirs)."""
  arg: tuple
  src: tuple
  shape: tuple


def row_node(out: LazyOp) -> LazyOp:
  """The node whose rows a row kernel computing `out` loops over: `out`, or the source of `out`
  when `out` only reshapes it (group_norm's output is its (N, groups, -1) rows reshaped back)."""
  if out.op is L.VIEW and out.arg.is_contiguous() and out.src[0].size == out.size and \
     not out.src[0].realized:
    return out.src[0]
  return out


def row_spec(root: LazyOp, boundary: set, row_max: int) -> _Row | None:
  """The rows of a candidate row kernel for `root`: the axes of the first reduction of `root`'s
  shape that the elementwise expression reads (not through another reduction), when a row has
  at most `row_max` elements; None when there is none."""
  if not row_max or root.realized:
    return None
  root = row_node(root)
  if root.op not in (L.ALU, L.CAST, L.BITCAST, L.CONTIGUOUS):
    return None
  stack, seen = list(root.src), set()
  while stack:
    node = stack.pop()
    if id(node) in seen or node.realized or id(node) in boundary and node is not root:
      continue
    seen.add(id(node))
    if node.op is L.REDUCE:
      axes, shape = node.arg[1], node.src[0].shape
      if shape == root.shape and 0 < prod(shape[a] for a in axes) <= row_max:
        return _Row((None, axes), (root,), node.shape)
      continue
    stack.extend(node.src)
  return None


def _walk(root: LazyOp, boundary: set, users: dict, fuse: set, row: _Row | None = None,
          hits: set | None = None, row_max: int = 0):
  """_walk_kernel with the nested reductions `fuse` fused: (inputs, new boundaries, ids of the
  reductions read only per output inside a fused reduction, ids of reductions read otherwise,
  the reductions recomputed at each read); with `row`, the root's rows count as such a reduction
  (their reductions are added to `hits`). `reads` counts the evaluations of a node per output
  of the kernel (the lengths of the fused reductions around it). With `row_max`, a row
  expression a reduction computed once per output reads whole rows of is its prologue
  (prologue.py): read in the context of its rows, as a row kernel's output."""
  inputs, new, seen, nested, bad, again = [], [], set(), set(), set(), {}
  per_output, rows_of = {id(root)}, {}   # reductions computed once per output; _prologue's rows
  ctx = (root, False) if root.op is L.REDUCE else (row, False) if row is not None else None
  reads = min(_length(root), RECOMPUTE_READS + 1) if root.op is L.REDUCE else 1
  # at the output: an elementwise root's sources, and a write's value (write fusion, above)
  stack = [(s, root.op not in (L.REDUCE, L.ATTENTION, L.WRITE) or root.op is L.WRITE and k == 1,
            ctx, False, reads, 0) for k, s in enumerate(root.src)]
  while stack:
    node, at_output, ctx, reread, reads, evals = stack.pop()
    key = (id(node), at_output, None if ctx is None else (id(ctx[0]), ctx[1]), reread, reads,
           evals)
    if key in seen:
      continue
    seen.add(key)
    if reread and node.op is L.ALU and not node.realized and id(node) not in boundary:
      most = most_transcendentals(evals)
      if element_loads(node, boundary, REREAD_LOADS) >= REREAD_LOADS or reread >= WINDOW and \
         transcendentals(node, boundary, most + 1) > most or \
         reread == CONV_WINDOW and varying_loads(node, boundary) >= REREAD_CONV_LOADS:
        boundary.add(id(node))      # recomputed per read: a kernel of its own (see above)
      reread = None                 # its sources read fewer: not checked again
    if node.op is L.REDUCE and not node.realized:
      if ctx is not None and ctx[1] and _same_rows(node, ctx[0]):
        nested.add(id(node))
        if ctx[0] is row:
          hits.add(id(node))
      elif not at_output:
        bad.add(id(node))
    if node.realized or id(node) in boundary:
      if node not in inputs:
        inputs.append(node)
        new.extend(() if node.realized else (node,))
      continue
    fusable = at_output and users.get(id(node), 0) <= 1 and _little_waste(node, root) or \
      id(node) in fuse
    if node.op is L.REDUCE and not fusable and _recomputable(node, boundary, reads):
      again[id(node)] = node
      fusable = True
    if node.op in (L.REDUCE, L.CONTIGUOUS, L.SORTNET, L.ATTENTION, L.WRITE) and \
        not (node.op is L.REDUCE and fusable) and not (ctx is not None and ctx[0] is _STAGED):
      boundary.add(id(node))
      new.append(node)
      inputs.append(node)
      continue
    keep = at_output and not (node.op is L.VIEW and repeats(node)) and \
      node.op not in (L.REDUCE, L.GATHER)     # a gather may read an element more than once
    if node.op is L.REDUCE:
      inner = (node, False)
      per_output.update((id(node),) if reads == 1 else ())
    elif node.op is L.VIEW and node.arg.is_contiguous() and node.shape == node.src[0].shape:
      inner = ctx          # an identity view (one that carries a symbolic shape) moves nothing
    elif node.op is L.VIEW:
      inner = (ctx[0], True) if ctx is not None and not ctx[1] and _expands(node, ctx[0]) \
        else _prologue(node, ctx, root, boundary, row_max, per_output, rows_of, row is None) or \
        (_staged_attention(node, ctx, root, boundary, users, per_output) if row is None else None)
    else:
      inner = ctx if node.op in (L.ALU, L.CAST, L.BITCAST) else None
    # a value broadcast along the kernel's reduced axes (a row's layernorm shift) is loop
    # invariant: computed once per output, not per read, so it is not a re-read
    kind = 0 if reread is None or node.op is not L.VIEW or inner is not None else \
      reread_kind(node)
    more = max(reread, kind) if kind else reread
    # the source's evaluations if fused: the elements of the widest view that re-reads it
    evals = max(evals, prod(node.shape)) if kind else evals
    # a reduction along the kernel's rows, or one computed once per output, adds one pass
    once = id(node) in nested or id(node) in fuse
    inside = (reads + 1 if once else reads * _length(node)) if node.op is L.REDUCE else reads
    inside = min(inside, RECOMPUTE_READS + 1)    # (only whether it exceeds that matters)
    stack.extend((s, keep, inner, more, inside, evals) for s in reversed(node.src))
  return inputs, new, nested, bad, tuple(n for n in again.values() if id(n) not in boundary)


def _prologue(view: LazyOp, ctx, root: LazyOp, boundary: set, row_max: int, per_output: set,
              rows_of: dict, staged: bool = False) -> tuple | None:
  """_walk's context for the source of VIEW `view` (read in context `ctx`) when that source is
  a prologue of the kernel of `root` (prologue.py): (its rows, False); else None. `rows_of`
  keeps each source's rows (one object per source: _walk's keys hold its id). `staged`: the
  kernel may stage one row (not a row kernel: lowering/staged.py)."""
  if not row_max or ctx is None or ctx[1] or id(ctx[0]) not in per_output:
    return None
  src = view.src[0]
  if src.realized or id(src) in boundary or src.op not in (L.ALU, L.CAST, L.BITCAST):
    return None
  if id(src) not in rows_of:
    rows_of[id(src)] = row_spec(src, boundary, row_max)
  row = rows_of[id(src)]
  if row is None or not reads_whole_rows(view, ctx[0], row.arg[1]) or \
     not worth_it(kernel_outputs(root), length := prod(src.shape[a] for a in row.arg[1]),
                  src.size // max(length, 1) if staged else 0) or \
     transcendentals(src, boundary, 1):
    return None
  return row, False


# _walk's context for an attention its kernel computes (_staged_attention)
_STAGED = _Row((None, ()), (), ())


def _staged_attention(view: LazyOp, ctx, root: LazyOp, boundary: set, users: dict,
                      per_output: set) -> tuple | None:
  """(_STAGED, False) when the source of VIEW `view` (read in context `ctx`) is an attention
  that the kernel of `root` (not a row kernel: lowering/staged.py stages it in a thread-per-
  output layout) computes itself (prologue.staged_attention: its one row, read whole by a
  reduction computed once per output); else None."""
  src = view.src[0]
  if ctx is None or ctx[1] or id(ctx[0]) not in per_output or src.op is not L.ATTENTION or \
     src.realized or id(src) in boundary or users.get(id(src), 0) != 1:
    return None
  whole = reads_whole_rows(view, ctx[0], tuple(range(len(src.shape))))
  return (_STAGED, False) if whole and staged_attention(kernel_outputs(root), src) else None


def _length(node: LazyOp) -> int:
  """The number of elements reduction `node` reduces for each of its outputs."""
  return prod(node.src[0].shape[a] for a in node.arg[1])


def _recomputable(node: LazyOp, boundary: set, reads: int) -> bool:
  """Whether reduction `node`, evaluated `reads` times per output of a kernel, is cheap enough
  to recompute at each read (RECOMPUTE_LENGTH, above)."""
  if not 0 < _length(node) <= RECOMPUTE_LENGTH or reads > RECOMPUTE_READS:
    return False
  stack, seen = [node.src[0]], set()
  while stack:
    n = stack.pop()
    if id(n) in seen or n.realized or id(n) in boundary:
      continue
    seen.add(id(n))
    if n.op in (L.REDUCE, L.CONTIGUOUS, L.SORTNET, L.ATTENTION, L.GATHER):
      return False
    stack.extend(n.src)
  return element_loads(node.src[0], boundary, REREAD_LOADS) < REREAD_LOADS


def kernel_outputs(root: LazyOp) -> int:
  """How many outputs the kernel computing `root` computes: an in-place write's value elements
  (Write fusion, above), else root's."""
  return root.src[1].size if root.op is L.WRITE else root.size


def _little_waste(node: LazyOp, root: LazyOp) -> bool:
  """Whether fusing `node` (a reduction when it matters) into the kernel of `root` wastes at most
  PADDED_REDUCE_WASTE iterations (see there)."""
  if node.op is not L.REDUCE or kernel_outputs(root) <= node.size:
    return True
  if _tiled(node):
    return False
  length = prod(node.src[0].shape[a] for a in node.arg[1])
  waste = (kernel_outputs(root) - node.size) * length
  return waste <= PADDED_REDUCE_WASTE and \
    (waste <= PADDED_WASTE_FLOOR or waste <= PADDED_WASTE_RATIO * node.size * length)


def _tiled(node: LazyOp) -> bool:
  """Whether reduction `node` is a matmul's (two output axes longer than 1, at least
  TILED_REDUCE_MIN outputs): alone, the optimizer gives it register tiles that share each
  operand's loads across a tile's rows and columns."""
  return node.size >= TILED_REDUCE_MIN and sum(n > 1 for n in node.shape) >= 2


def _split_matmuls(items: dict, boundary: set) -> bool:
  """Make each matmul (_tiled) that several kernels compute fused a kernel of its own, and each
  but one of the matmuls one kernel computes (adding them to `boundary`); False when there is
  none (see the module docstring)."""
  count: dict[int, int] = {}
  shared = set()
  for item in items.values():
    tiled = [node for node in kernel_reduces(item) if node is not item.out and _tiled(node)]
    for node in tiled:
      count[id(node)] = count.get(id(node), 0) + 1
    shared |= {id(node) for node in _joint_matmuls(item, tiled)}
  shared |= {k for k, n in count.items() if n > 1}
  boundary |= shared
  return bool(shared)


def _joint_matmuls(item: ScheduleItem, tiled: list) -> list:
  """The matmuls (_tiled) fused into `item` beside another that it keeps (the one it outputs,
  else the first found): a kernel of two reductions has no register tile (the optimizer tiles
  one reduction), so an MLP's silu(gate) * up, both projections fused at the output side, ran
  a thread per output; apart, the second is a tiled matmul with the product as its epilogue."""
  if item.out.op is L.REDUCE and _tiled(item.out):
    return tiled
  return tiled[1:]


def _expands(node: LazyOp, red: LazyOp) -> bool:
  """True when VIEW `node` broadcasts a value shaped like `red`'s output along `red`'s reduced
  axes to `red`'s source shape (and moves nothing else)."""
  view, src = node.arg, node.src[0]
  axes = red.arg[1]
  if view.shape != red.src[0].shape or src.shape != red.shape or view.offset or view.mask:
    return False
  want = tuple(0 if a in axes else s for a, s in enumerate(contiguous_strides(src.shape)))
  return view.strides == want


def _same_rows(node: LazyOp, red: LazyOp) -> bool:
  """True when reduction `node` reduces the same axes of a same-shaped source as `red`."""
  return node.arg[1] == red.arg[1] and node.src[0].shape == red.src[0].shape


def _size_name(n) -> str:
  """A size in a kernel name: an int, or a symbolic size by its expression (`n`, `posp1`,
  `np1d2` for (n + 1) // 2: names are file names in a bundle, no `/` or brackets)."""
  if isinstance(n, int):
    return str(n)
  text = str(n).replace(" ", "").replace("(", "").replace(")", "").replace("//", "d")
  return text.replace("+", "p").replace("-", "m").replace("*", "x")


def _kernel_name(node: LazyOp, item_inputs, order: dict) -> str:
  dims = "_".join(map(_size_name, node.logical)) or "1"
  if node.op is L.ATTENTION:
    return f"attn_{dims}"
  if node.op is L.WRITE:
    return f"write_{'_'.join(map(str, node.src[1].shape)) or '1'}"
  reduce = find_reduce(node, item_inputs)
  if reduce is None:
    return f"E_{dims}"
  src = reduce.src[0]
  red = "_".join(_size_name(src.logical[a]) for a in reduce.arg[1])
  staged = find_reduce(node, item_inputs, L.ATTENTION) is not None    # (_staged_attention)
  return f"{'attn_' if staged else ''}r_{dims}__{red}"


def find_reduce(node: LazyOp, inputs, op: L = L.REDUCE) -> LazyOp | None:
  """The first node of `op` (a reduction) computed in the kernel of `node` reading `inputs`."""
  stack, stop = [node], {id(i) for i in inputs}
  while stack:
    n = stack.pop()
    if id(n) in stop and n is not node:
      continue
    stop.add(id(n))
    if n.op is op:
      return n
    if not n.realized:
      stack.extend(n.src)
  return None


def _find_kernels(roots: list[LazyOp], boundary: set, walk: WalkCache) -> dict[int, ScheduleItem]:
  """One kernel per boundary node reachable from `roots` (adds the boundaries it finds)."""
  pending, items = list(roots), {}
  while pending:
    node = pending.pop()
    if id(node) in items:
      continue
    inputs, new, rows, again = walk(node, boundary)
    items[id(node)] = ScheduleItem(node, tuple(inputs), rows=rows, recomputed=again)
    pending.extend(new)
  return items


def schedule(roots: list[LazyOp], max_buffers: BufferLimit | int | None = None,
             row_max: int = ROW_MAX) -> list[ScheduleItem]:
  """The kernels that realize `roots`, each after the kernels it reads from; with
  `max_buffers`, kernels binding more buffers (inputs + the output) are split where possible;
  rows of at most `row_max` elements make row kernels (0: none)."""
  order = _toposort(roots)
  users: dict[int, int] = {}
  for node in order:
    if not node.realized:
      for s in {id(s): s for s in node.src}.values():
        users[id(s)] = users.get(id(s), 0) + 1
  boundary = {id(r) for r in roots if not r.realized}
  user_of, tried = single_users(order), set(boundary)
  walk = WalkCache(lambda root, bound: _walk_kernel(root, bound, users, row_max))
  while True:      # again until no kernel fuses a node that another kernel found as a boundary
    known = len(boundary)     # (walk: only the kernels whose boundaries changed are walked again)
    items = _find_kernels([r for r in roots if not r.realized], boundary, walk)
    if len(boundary) == known and not \
       _promote_epilogues(items, boundary, walk, user_of, tried, max_buffers) and \
       not (max_buffers and split_wide(items, boundary, users, max_buffers, _walk_kernel,
                                      row_max)) and \
       not _split_matmuls(items, boundary):
      break
  position = {id(n): i for i, n in enumerate(order)}
  ordered = sorted(items.values(), key=lambda it: position[id(it.out)])
  return _name_items(ordered, position)


def _promote_epilogues(items: dict, boundary: set, walk: WalkCache, user_of: dict, tried: set,
                       max_buffers: BufferLimit | int | None) -> bool:
  """Make the top of one kernel reduction's elementwise tail the kernel instead (epilogue.py);
  False when none moves. Each reduction moves once (a later split may cut it out again). Where
  none moves and an epilogue did not fit where its reduction computes an attention (staged,
  _staged_attention), the attention of the one closest to fitting becomes a kernel of its own
  again (then its epilogue may move, and the kernels reading it bind fewer buffers)."""
  unstage = []
  for item in items.values():
    node = item.out
    if node.op is not L.REDUCE or id(node) in tried:
      continue
    top = epilogue_top(node, user_of, boundary)
    if top is node:
      continue
    rest = (boundary - {id(node)}) | {id(top)}
    own, _, _, _ = walk(top, set(rest))
    if max_buffers and not kernel_fits(own, top, max_buffers):
      bound = binds(own, top)
      staged = find_reduce(node, item.inputs, L.ATTENTION)
      unstage += [(bound, len(unstage), staged)] if staged is not None else []
      continue
    tried.add(id(node))
    boundary.discard(id(node))
    boundary.add(id(top))
    return True
  if unstage:
    boundary.add(id(min(unstage)[2]))
    return True
  return False


def binds(inputs, root: LazyOp) -> int:
  """The buffers the kernel computing `root` from `inputs` binds: its output and its inputs, but
  an in-place write's target, which is its output's own buffer (where its value does not read
  the target, the input slot goes unused)."""
  target = root.src[0] if root.op is L.WRITE else None
  return 1 + sum(node is not target for node in inputs)


def _name_items(items: list[ScheduleItem], position: dict) -> list[ScheduleItem]:
  seen: dict[str, int] = {}
  for item in items:
    base = _kernel_name(item.out, item.inputs + item.recomputed, position)
    seen[base] = seen.get(base, 0) + 1
    item.name = base if seen[base] == 1 else f"{base}_n{seen[base]}"
  return items
