"""Matmul operands held in the layout a CPU adapter's matrix-vector product reads fastest: constant
weights transposed (held_transposed) and a packed-weight matvec's normalized row realized on its
own (row_input, at the end); a dense Conv's weights held taps-last (held_taps_last).

A MatMul's B given as an initializer (K, N), the layout of every transformers.js / Optimum
export, makes a decode step's matvec read B down its columns: each thread (an output) strides
N elements per reduced element. GPUs read that coalesced (a workgroup's threads take adjacent
columns), but a CPU adapter runs a workgroup's threads as the lanes of one SIMD group, each
group walking K rows that lie N * 4 bytes apart, so every load touches a new cache line and
page. Where the adapter asks for it (option `weights_t` of its row kernels' table,
render/wgsl/adapters.py: lavapipe's and SwiftShader's), such a weight is held transposed, (N, K) contiguous,
uploaded once per model and device (Model.uploads), and the MatMul reads it through a permuted
view: each output's reduction is then one contiguous run (the layout MatMulNBits' packed
weights already have).

Measured on lavapipe natively (wgpu, load 6-8 on 2 CPUs, best of 4 interleaved), a copy of the
weight's bytes' time over the matmul's, (K, N) -> (N, K): decode 1 x 576 @ 576 x 49152 (SmolLM2's
LM head) 0.24 -> 0.87, 1 x 576 @ 576 x 1536 0.46 -> 0.74, 1 x 1536 @ 1536 x 576 0.16 -> 0.41;
prefill 32 x 576 @ 576 x 1536 0.30 -> 0.33, 32 x 1536 @ 1536 x 576 0.10 -> 0.16, 128 x 576 @
576 x 576 0.07 -> 0.06 (the noise). bench/lm_decode_kernels.py, SmolLM2 widths at 2 layers, fp32:
the LM head's kernel 323 ms (load 2.5) -> 125 ms (load 10). SwiftShader natively (load 4.7, best
of 15 interleaved, GPU ms, (K, N) -> (N, K)): 1 x 576 @ 576 x 49152 581 -> 348, 1 x 576 @ 576 x
1536 12.1 -> 10.4, 1 x 1536 @ 1536 x 576 7.3 -> 6.8.
"""
from __future__ import annotations

from ...tensor.tensor import Tensor
from ..registry import DOMAIN_OPS, OPS, domain_op
from ..siblings import JOINED

# the uploads' key suffix (Model.uploads) of an initializer held transposed
TRANSPOSED = "#transposed"
# the uploads' key suffix of a Conv's initializer held taps-last (held_taps_last)
TAPS_LAST = "#taps_last"
# weights of fewer elements keep their layout (a tiny matmul gains nothing from a copy)
MIN_ELEMENTS = 1 << 14


def row_defaults(device: str) -> dict:
  """The adapter table's row-kernel defaults of `device`'s adapter ({} without an adapter)."""
  from ...compiler import target_of
  from ...device import Device
  runtime = Device[device]
  adapter = runtime.render_options().get("adapter")
  return target_of(runtime).adapter_defaults(adapter, "rows") if adapter else {}


def traced_rows(runner) -> dict:
  """The row-kernel defaults of the adapter the runner's model is traced for (`row_adapter`,
  set on a copy of the model by export/onnx_lm.py causal_program where PYTHON traces a bundle
  for a CPU adapter: the WGSL target's table, render/wgsl/adapters.py); {} without one."""
  adapter = getattr(runner.model, "row_adapter", None)
  if not adapter:
    return {}
  from ...render.targets import WGSL
  return WGSL.adapter_defaults(adapter, "rows")


def matmul_rows(runner) -> dict:
  """The row-kernel defaults a MatMul's weight and row are held for: those of the runner's
  device's adapter, else those of the adapter its model is traced for (traced_rows)."""
  return row_defaults(runner.device) or traced_rows(runner)


def packed_rows(runner, a: Tensor) -> dict:
  """The row defaults a packed-weight matvec (MatMulNBits) over activations `a` realizes its
  normed row by (row_input): the device's adapter's, else, where `a` is one row (a one-token
  step's), those of the adapter the model is traced for (traced_rows: an exported bundle's, so
  its step takes a native run's kernels; without, each norm was staged into its matvec by two
  kernels, one broadcasting the row over the outputs: bench/lm_bundle_native.py, SmolLM2 widths,
  q4, 2 layers, step 1, lavapipe, 31 -> 23 dispatches, CPU ms a token 293 -> 18, load 10-13).
  Not for a symbolic count of rows (the symbolic-step bundle): realized there, its MLP took
  other kernels and its one-token runs ran slower (step 8, 46.6 against 26.1-34.3 CPU ms, load
  8-9)."""
  return row_defaults(runner.device) or (traced_rows(runner) if _one_row(a) else {})


def transposes_weights(device: str) -> bool:
  """`device`'s adapter asks for constant matmul weights held transposed (option weights_t of
  its adapter table's row kernels; no adapter, no table entry: False)."""
  return bool(row_defaults(device).get("weights_t"))


def held_transposed(ins, i: int) -> Tensor | None:
  """Input i of a MatMul as a (K, N) view of its transpose held (N, K) contiguous on the device,
  where it is a 2-D float initializer of at least MIN_ELEMENTS elements and the device's adapter
  asks for it (transposes_weights), or the model is traced for such an adapter (traced_rows) and
  the product is of one row (_one_row); else None (read the input as it is)."""
  runner, name = ins.runner, ins.names[i] if i < len(ins.names) else ""
  init = runner.model.initializers.get(name) if name else None
  if runner.folding or init is None or len(init[1]) != 2:
    return None
  dtype, shape = init[0], init[1]
  if not dtype.is_float() or shape[0] * shape[1] < MIN_ELEMENTS:
    return None
  if not transposes_weights(runner.device) and not (
      traced_rows(runner).get("weights_t") and _one_row(ins[0])):
    return None
  key = (runner.device, name + TRANSPOSED)
  if key not in runner.model.uploads and not transposes_weights(runner.device):
    # traced for an adapter (PYTHON, an export): the bytes transposed here, where PYTHON's
    # interpreter took minutes for SmolLM2's 576 x 49152 head
    runner.model.uploads[key] = runner.upload(transposed(init), f"tensor {name!r}")
  elif key not in runner.model.uploads:
    t = runner.upload(init, f"tensor {name!r}")
    runner.model.uploads[key] = t.permute(1, 0).contiguous().realize()
  return runner.model.uploads[key].permute(1, 0)


def held_taps_last(ins, i: int, groups: int) -> Tensor | None:
  """Input i of a Conv, its (O, C, kh, kw) weights, as a view of a copy held [C][kh][kw][O]
  contiguous on the device (uploaded once per model and device, Model.uploads), where it is a
  4-D float initializer of a dense conv (groups 1) with more than one tap and at least 4 output
  channels, and the device's adapter holds weights in the layouts it reads fastest
  (transposes_weights: the CPU adapters); else None (read the input as it is).

  A dense conv's register tile has output channels as rows: OIHW puts a tap's weights of two
  rows C*kh*kw apart, 4 scalar loads per 4 rows; taps-last puts them side by side, and the
  lowering reads them as one vector load (lowering/regtile.py tile_accumulators). A one-off
  run's 8x8 tile of a 64 -> 64 3x3 conv: 24 scalar weight loads per trip -> 6 vector loads.
  lavapipe natively, GPU timestamps, load 8-10 (directions only): PP-OCRv4 det's two 96 -> 24
  3x3 convs at 80x80, 76 and 77 ms on main -> 47 and 41 ms (bench/pypi_kernels.py, runs
  alternated); 64 -> 64 3x3 at 56x56 one-off, best of 16 interleaved, 39 -> 24 ms
  (bench/conv_taps_ab.py); the many-runs tiles (16x8 unrolled) read vectors already: unchanged."""
  runner, name = ins.runner, ins.names[i] if i < len(ins.names) else ""
  init = runner.model.initializers.get(name) if name else None
  if runner.folding or init is None or len(init[1]) != 4 or groups != 1:
    return None
  o, _, kh, kw = init[1]
  if not init[0].is_float() or kh * kw < 2 or o < 4 or not transposes_weights(runner.device):
    return None
  key = (runner.device, name + TAPS_LAST)
  if key not in runner.model.uploads:    # permuted on the host: no kernel, no pipeline to build
    dtype, (_, c, _, _), raw = init
    held = transposed((dtype, (o, c * kh * kw), raw))[2]
    runner.model.uploads[key] = runner.upload((dtype, (c, kh, kw, o), held), f"tensor {name!r}")
  return runner.model.uploads[key].permute(3, 0, 1, 2)


def _one_row(a: Tensor) -> bool:
  """Activations `a` are one row (a decode step's, or the last position's), not a symbolic
  count of rows: traced for an adapter, only such a product holds its weight transposed (the
  symbolic-step bundle's tiled products over (N, K) weights ran lavapipe's decode 1.8x slower:
  bench/lm_bundle_native.py, SmolLM2 widths, 2 layers, step 16, 104-112 -> 189-192 CPU ms)."""
  rows = a.symbolic_shape[:-1]
  return all(isinstance(d, int) and d == 1 for d in rows)


def transposed(init: tuple) -> tuple:
  """Initializer `init` (dtype, (K, N), bytes) as (dtype, (N, K), its bytes transposed)."""
  dtype, (k, n), raw = init
  code = {1: "B", 2: "H", 4: "I", 8: "Q"}[dtype.itemsize]
  flat = memoryview(raw).cast("B").cast(code)
  return dtype, (n, k), b"".join(flat[j::n].tobytes() for j in range(n))


def _reduces_read(node, limit: int = 64) -> tuple[set, bool]:
  """The reductions the lazy elementwise expression `node` reads before any realized buffer,
  and whether the walk saw the whole expression within `limit` nodes."""
  from ...graph.lazy import L
  stack, seen, reduces = [node], 0, set()
  while stack and seen < limit:
    n = stack.pop()
    seen += 1
    if n.realized:
      continue
    if n.op is L.REDUCE:
      reduces.add(n)
    elif n.op in (L.ALU, L.CAST, L.BITCAST, L.VIEW):
      stack.extend(n.src)
  return reduces, not stack


def _reads_reduce(node, limit: int = 64) -> bool:
  """The lazy elementwise expression `node` reads a reduction (a norm's statistics), within
  `limit` nodes, before any realized buffer."""
  return bool(_reduces_read(node, limit)[0])


def _one_product(node, limit: int = 64) -> bool:
  """The lazy elementwise expression `node` reads one reduction only, of at least as many
  outputs as its own (a matrix product, such as a joined projection's output read through its
  column slices: onnx/siblings.py). The scheduler writes that product to memory anyway, so a
  matvec staging the expression reads it as it would read a realized row; a boundary would be
  one more kernel."""
  reduces, whole = _reduces_read(node, limit)
  return whole and len(reduces) == 1 and next(iter(reduces)).size >= node.size


def row_input(ins, a: Tensor, table: dict | None = None) -> Tensor:
  """A packed-weight matvec's activations `a` (input 0 of MatMulNBits, or of a MatMul whose
  weight is held transposed: its 1-row product takes the same layout, lowering/threads.py
  reduce_inner), realized by a kernel of its own, one per run for every node reading the same
  input (a layer's Q, K and V), where the
  device's adapter gives such matvecs reduce_inner (CPU adapters) and `a` is computed from a
  reduction (an RMS norm; not one matrix product alone, _one_product): the norm would otherwise
  be staged into the matvec, whose thread per output then reads its own row's words (lavapipe,
  a 576-wide normed row: 1536 x 576 1.7 ms against 0.25 ms, 49152 x 576 155-316 ms against
  10-35 ms, load 13-15). Nor staged in the matvec's own reduce_inner layout (tried in issue 35:
  the row's statistics kept out of its loop, the row in workgroup memory, read as scalars): a
  q4 decode step of SmolLM2 widths (2 layers) on lavapipe took 19 dispatches, not 22, but GPU
  40-44 ms against 16.5-17.4 (bench/lm_decode_kernels.py, timestamps, interleaved, load ~8; the
  head 36-40 against 13 ms, QKV 0.43 against 0.23). Else `a` itself. `table`: the row defaults
  to go by (a MatMul's: matmul_rows), else the device's adapter's."""
  table = row_defaults(ins.runner.device) if table is None else table
  if a.node.realized or ins.runner.folding or not _reads_reduce(a.node) or \
      not table.get("reduce_inner") or _one_product(a.node):
    return a
  store = ins.runner.__dict__.setdefault("_row_inputs", {})
  if ins.names[0] not in store:
    store[ins.names[0]] = a.contiguous()
  return store[ins.names[0]]


@domain_op(JOINED, "MatMul", "MatMulNBits")
def _joined(ins, at):
  """Sibling projections joined at load (onnx/siblings.py): the MatMul or MatMulNBits over their
  weights concatenated along N, computed once, its last axis cut into each sibling's columns
  (attribute splits; views, fused into their readers)."""
  nbits = ins.node.op == "MatMulNBits"
  y = DOMAIN_OPS[("com.microsoft", "MatMulNBits")](ins, at) if nbits else OPS["MatMul"](ins, at)
  outs, start = [], 0
  for width in at.ints("splits"):
    outs.append(y[(slice(None),) * (y.ndim - 1) + (slice(start, start + width),)])
    start += width
  return outs


__all__ = ["held_taps_last", "held_transposed", "matmul_rows", "packed_rows", "row_defaults",
           "row_input", "traced_rows", "transposes_weights"]
