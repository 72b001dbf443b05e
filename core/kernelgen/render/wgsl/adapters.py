"""WebGPU adapter classes and the launch-option defaults measured for each.

`classify(info)` names the class of a WebGPU adapter from what it says about itself (the page's
GPUAdapterInfo vendor / architecture / device / description and isFallbackAdapter, or wgpu's
`adapter.info` natively, whose adapter_type is CPU / IntegratedGPU / DiscreteGPU):

  swiftshader  Chromium's software adapter (its fallback adapter; Vulkan SwiftShader natively)
  lavapipe     Mesa's CPU Vulkan driver (reports itself as llvmpipe; in Chromium through ANGLE)
  software     another CPU adapter (a fallback adapter that names nothing we know)
  integrated   an integrated GPU (wgpu: IntegratedGPU; the page: Intel, Apple, ARM, Qualcomm...)
  discrete     a discrete GPU (wgpu: DiscreteGPU; the page: NVIDIA, AMD)
  unknown      nothing to go by (the defaults are the Target's, as before adapters were known)

`defaults(adapter, shape)` is the front-end options that class prefers for one shape class of
kernel (`shape_class` of a schedule item: "rows" row reductions with few enough outputs for a
workgroup each, "reduce" a reduction to one value, "tile" matmul-like reductions of two output
axes, "elementwise"); options given explicitly (compile's keywords, search's forced options)
win over them. The option `adapter` (a class name, or an adapter-info dict / description string)
is what `kg.compile(..., target="wgsl", adapter=...)` takes, and what the WEBGPU devices set from
their adapter. `group_chunk` (lanes read a run each) and `group` (lanes per row, 0: one thread
per row) are the reduction layout; more entries (e.g. a fused-row option) are one line each in
TABLE.
"""
from __future__ import annotations

from ...errors import UnsupportedError

CLASSES = ("swiftshader", "lavapipe", "software", "integrated", "discrete", "unknown")
SOFTWARE = ("swiftshader", "lavapipe", "software")
SHAPES = ("rows", "reduce", "tile", "elementwise", "attention")

# words in an adapter's self-description -> its class, first match wins
NAMES = (("swiftshader", "swiftshader"), ("subzero", "swiftshader"), ("lavapipe", "lavapipe"),
         ("llvmpipe", "lavapipe"), ("softpipe", "software"), ("warp", "software"),
         ("basic render", "software"), ("cpu", "software"),
         ("nvidia", "discrete"), ("geforce", "discrete"), ("radeon rx", "discrete"),
         ("intel", "integrated"), ("apple", "integrated"), ("arm", "integrated"),
         ("mali", "integrated"), ("qualcomm", "integrated"), ("adreno", "integrated"),
         ("powervr", "integrated"), ("imagination", "integrated"), ("amd", "discrete"))
# wgpu's adapter_type -> class (when its names say nothing more precise)
ADAPTER_TYPES = {"CPU": "software", "IntegratedGPU": "integrated", "DiscreteGPU": "discrete"}

# a packed weight's matrix-vector product on CPU adapters (lowering/threads.py, option
# reduce_step): looped in steps of STEP reduced elements, ROWS outputs per thread (the
# MEASUREMENTS note at reduce_inner below); unrolled whole (option reduce_whole, not a default:
# tens of seconds of lavapipe build per kernel) up to WHOLE elements
STEP, ROWS, WHOLE = 32, 8, 2048
# from GROUP_OUTPUTS outputs a reduction takes a thread each, not a workgroup of lanes (option group_outputs,
# both CPU adapters' rows; lowering/optimize.py group_size). Natively, bench/group_outputs.py (x (1, K) @ w.T,
# GPU timestamps, best of 5-9 interleaved, load 4-16 on 2 CPUs), grouped / thread ms: lavapipe, a thread
# faster from N=32 (K <= 1024) and N=256 (K=4096; below: 0.72 in one run, 1.07-1.10 in another), K=576 N=49152
# 94.1 / 70.1 and 187 / 134; SwiftShader 1.1-6x (CPU s 1.2-2.8x) from N=64, K=576 N=49152 1020 / 498;
# SmolLM2's fp32 decode (lm_bundle_native, CPU ms/token) lavapipe 280 -> 120, SwiftShader 670 -> 350. Limit:
# the crossover (256 outputs, a workgroup of 256 threads, for 2 workers) x 8 for 16-thread CPUs.
GROUP_OUTPUTS = 2048

# (adapter class, shape class) -> front-end option defaults, one dict per entry: a new option
# (e.g. the fused row kernels' layout) is one more key in an entry. Measured with
# bench/adapter_options.py (each kernel under every candidate: thread per row, 16..128 lanes
# strided or chunked; tiles for matmul; best of N interleaved rounds, wgpu natively on the
# adapter; the machine was shared, 2 CPUs): the numbers are ms per kernel.
TABLE: dict[tuple[str, str], dict] = {
  # SwiftShader: a CPU adapter like lavapipe (invocations are SIMD lanes), the default the page's
  # device had before this table. NOT re-measured yet: bench/adapter_options.py swiftshader did
  # not finish on the shared machine in this session (a 4096x1024 row kernel takes 20-60 ms on
  # SwiftShader there, x 9 candidates x rounds); run it and record the numbers here.
  # Fused row kernels (lowering/rows.py), measured natively on SwiftShader (Chromium's Vulkan
  # ICD, bench/row_kernels.py 3, shared machine), ms for rows of 4096x1024 f32:
  #   softmax    thread per row 121 | 16 lanes 199 | 32 lanes 313 | 64 lanes 415 | split 263
  #   layernorm  thread per row 100 | 16 lanes 215 | 32 lanes 239 | 64 lanes 261 | split 174
  # (lavapipe prefers 16-32 lanes: rows.py's default)
  # Softmax's row kernel in one pass instead of max then exp-sum (online: a running max and a
  # rescaled sum, one exp per element as exp2(-|x - m|) and a select), measured by hand-edited
  # WGSL in Chromium's SwiftShader (the same page and timing as bench/peers.py, best of 6
  # interleaved, shared machine, ms for 4096x1024 f32, thread per row): with the former branchy
  # kg_exp2, 3 passes 163 | online 148 | exp values stored then rescaled 143; with today's
  # branch-free kg_exp2 (render/wgsl/target.py), 3 passes 95 | online 102 (tinygrad 133). Kept:
  # the 3 passes (a 4 KB row stays in cache, so the extra read costs less than the rescaling).
  # Natively (wgpu on the SwiftShader ICD, load ~7): 3 passes 259 | online 388 best of 4.
  # What the thread-per-row softmax spends beyond tinygrad's formulas, by hand-edited WGSL in
  # Chromium's SwiftShader (the peers page, best / median of 15 interleaved, load ~8, ms): as
  # compiled 98 / 114 | the row's sum as one reciprocal then multiplies, and a plain max() for the
  # NaN-propagating kg_fmax 86 / 100 | also a bare exp2 for kg_exp2 70 / 98 | the max as select
  # plus one NaN flag per row (exact) 78 / 112 | tinygrad's 3 kernels 121 / 160. The NaN guards
  # (kg_fmax, kg_exp2) cost about a quarter of the kernel here; not changed: softmax needs neither
  # (a NaN reaches every output through the sum), but the kernel does not know it is softmax.
  # Later, at idle (load ~0.5, bench/peers_probe.py, best / median of 16 interleaved, ms), the
  # max loop as compare-and-select plus one NaN flag (exact, no kg_fmax) and the row's sum as one
  # reciprocal then multiplies, each on and off: 41.7-49.0 / 55.3-58.7 over the four (tinygrad
  # 61.4 / 77.5); on lavapipe (12 rounds) 38.8-39.2 / 41.8-42.9 (tinygrad 66.3 / 71.9): noise.
  # On a faster machine (idle, hand-edited WGSL in Chromium, best of 10-12 interleaved, ms; two
  # runs): as compiled 35.1 / 39.9 | kg_exp2 as only its NaN select 36.7 (second run) | exp values
  # stored then rescaled 32.1 / 39.4 | both 36.7 | no guards at all 27.6-34.8; tinygrad's 3
  # kernels 43.8-50 in bench/peers.py. Not kept: within the noise but for dropping every guard.
  # SwiftShader's exp2 there gives 0 from t = -126.5 down (denormals flushed), inf from 128 up,
  # and inf for NaN (lavapipe: IEEE denormals, NaN for NaN): the NaN select is needed on both.
  # layernorm's row kernel reads its row 3 times (mean, variance, output): on SwiftShader every
  # load is a per-lane gather, so passes cost (4096x1024 f32, 63 ms, a copy kernel of its bytes
  # 44 ms). Hand-edited WGSL with 2 passes (the mean and a shifted variance, sums of x - x[0] and
  # of its squares, in one loop), the peers page, best / q25 / median of 8 interleaved, load ~17,
  # ms: as compiled 72 / 80 / 87 | 2 passes 33 / 56 / 68 | tinygrad 131 / 221 / 376. Done since
  # (layernorm's shifted statistics, tensor/ops/linalg.py, in one loop: reductions.sibling_reduces;
  # the shift read as a lane of the row's vec4 words): on a faster machine at idle, hand-edited
  # WGSL best / median of 10, ms: 3 passes 23.3 / 24.5 | 2 passes 12.6 / 15.1; as compiled, in
  # bench/peers_probe.py best / median of 8: 23.5 -> 14.3 / 16.8 (tinygrad 35.1 / 37.7).
  # Tried on the same machine, not kept: the row staged in workgroup memory so that later passes
  # read it there (16 KB hold 4 rows of 1024 f32: workgroups of 4 threads): softmax 63.6-78.2 ms
  # against 32.9-37.4 unstaged; 4 lanes per row folding with subgroupAdd (SwiftShader's
  # subgroups are 4 wide): layernorm 22.3 against 23.3, within the noise.
  # The online softmax (row_online: the max and the exp-sum in one loop, rescaled every 8 values,
  # reductions.online_accumulate) on this faster machine, bench/peers_probe.py best / median of 10, ms:
  # two loops 35.6 / 39.3 | online 30.9 / 34.8 (tinygrad 42.7 / 49.4); rescaled every 16 values
  # 33.1 / 38.4 against 34 / 40.6. Hand-edited WGSL (best of 12): every 4 values 30.9, every 8
  # 28.8, two loops 34.3. Its parts there, best ms: the max loop 9.5, the exp-sum loop 9.6, the
  # output loop 18.2 (a copy kernel of the same bytes 14.6-17.4); both exps of each value 7.
  # The guards of those exps (kg_exp2), hand-edited WGSL, best / median of 25-50 interleaved, ms,
  # several runs: as compiled 29.5-33.3 / 34.1-41.1 | no guard at all 24.6-26.3 / 29.9-34.5 |
  # without the overflow selects (softmax's exponent is never above 0) 30.4 / 35.5 | only the
  # NaN select 29.3-31.3 / 34.3-36.7 | the loop's exps bare with its sum made NaN after the loop
  # where m is NaN or +inf, the output's NaN select as !(t == t) 24.6-28.1 / 29.2-34.6, as
  # compiled now 24.5-24.7 / 30.0-31.3 against 29.7-29.8 / 34.5-35.5 in the same runs (kept:
  # EXP2_NONPOSITIVE / EXP2_NAN_UNREAD, render/wgsl/expressions.py bounded_exp2) | the same
  # with kg_isnan's bit test 27.1-28.1 / 33.7-34.7 | with max(t, -150) before each bare exp2
  # 28.6-29.0 / 33.4-37.9.
  # reduce_inner (optimize.py): a packed weight's matrix-vector product (MatMulNBits as
  # quant_nbits.matmul_words writes it) a thread per output, each word's fields and each block
  # unrolled; lavapipe, bench/q4_matvec.py's 1536x576 q4 (load 9-16 on 2 CPUs, best of 10-20,
  # ms): a workgroup of 16 lanes per output over the bytes 3.0 | over the words, grouped 6.6 |
  # a thread per output, looped 1.9-2.3 | reduce_inner 1.6-1.8, with its words and x as vec4
  # loads 0.82-0.99, and the block's scale once per block 0.95 (copy of the packed bytes 0.27:
  # ratio 0.28) | hand-written WGSL, a thread per row, vec4 math 0.93-1.1. M=32 (prefill)
  # through kg.onnx, whole runs: 100 ms against 140 before. Unrolled whole (reduce_whole, no loop
  # and no gate: the activation loads leave llvmpipe's per-lane path; lowering/threads.py),
  # bench/q4_matvec.py's ratio of the copy's time to the matvec's (load 3-7 on 2 CPUs, best of
  # 10, one run): lavapipe 1536x576 looped 0.28 | whole, rows per thread 1 / 2 / 4 / 8 0.55 /
  # 0.62 / 0.72 / 0.70 | with the zero point folded out and the fields in place
  # (quant_nbits.matmul_words), 2 / 4 / 8 rows 0.56 / 0.70 / 0.70; 4864x896 looped 0.13 | whole
  # 0.52 / 0.66 / 0.62 / 0.67 | folded 0.63 / 0.68 / 0.72. SwiftShader (load 7-11, best of 8):
  # 1536x576 looped 0.04 | whole 0.04 / 0.07 / 0.20 / 0.03 | folded 0.21 / 0.26 / 0.13; 4864x896
  # looped 0.06 | whole 0.03 / 0.05 / 0.04 / 0.02 | folded 0.06 / 0.19 / 0.07 (noisy, and far
  # from the copy: not understood yet). All four shapes at the defaults (whole / looped), lavapipe,
  # load 8-10, best of 10: 1536x576 0.64 / 0.25, 576x1536 0.64 / 0.26, 4864x896 0.70 / 0.25,
  # 49152x576 0.98 / 0.12 (2 rows per thread: 0.55, 0.56, 0.58, 0.53); SwiftShader, load 7-9,
  # best of 6: 1536x576 0.14 / 0.09, 576x1536 0.11 / 0.32, 4864x896 0.10 / 0.07, 49152x576
  # 0.18 / 0.12: K = 1536 unrolled whole is 3x slower there (Subzero's code for 40k lines), so
  # SwiftShader unrolls at most WHOLE // 2 = 1024 elements. Lavapipe at load ~1.5, 4 rows (K =
  # 1536: 2), whole / looped: 0.62 / 0.27, 0.51 / 0.28, 0.65 / 0.23, 0.60 / 0.25 (main's kernel in
  # the same minute: 0.27, 0.26, 0.23, 0.25); 576x1536 with 4 rows (threads.WHOLE_WORK 6144) at
  # load ~1: 0.58 against 2 rows 0.50. But lavapipe builds those whole kernels in 19-37 s each
  # (SwiftShader 43-89 s), so the default loops (issue 37): STEP reduced elements (U blocks) a
  # trip, ROWS outputs per thread sharing the loop (lowering/threads.py, option reduce_step).
  # bench/q4_matvec.py, lavapipe, best of 10, load 3 -> 15 during the run, copy/matvec ratio and
  # cold build (pipeline + first dispatch, Mesa cache off) for 1536x576 / 576x1536 / 4864x896 /
  # 896x4864 / 49152x576: U=1 R=8 (1658 lines) 0.68 / 0.69 / 0.60 / 0.72 / 0.40, 0.85-1.1 s |
  # U=1 R=4 0.53 / 0.58 / 0.21 / 0.65 / 0.34, 0.6-0.8 s | U=1 R=16 0.69 / (8) / 0.40 / 0.75 /
  # 0.51, 1.6-2.1 s | U=2 R=8 0.60 / 0.65 / 0.22 / 0.70 / 0.43, 1.7-2.0 s | U=4 R=8 0.51 / 0.60 /
  # 0.55 / 0.20 / 0.38, 3.4-4.5 s | U=2 R=16 4-4.5 s | a block, a row per thread 0.25 / 0.27 /
  # 0.07 / 0.07 / 0.19, 0.3-0.5 s (the 4864 rows are noise: the load rose 11 -> 15 there). One
  # run at load ~25 (1536x576, 576x1536): U=1 R=8 0.71 / 0.67 | whole (reduce_whole=2048, 4
  # rows) 0.73 / 0.59, built in 23 / 150 s | U=1 R=16 0.75 / -, 2.2 s | looped 0.31 / 0.25.
  # SwiftShader (load 21-25: noisy, the same kernel twice 0.07 and 0.10) every form 0.05-0.3 of
  # the copy, 0.7 only once (U=4 R=4 896x4864): still far from it, not understood (Subzero's
  # code for the per-lane loads?); whole (1024, 4 rows) 0.05-0.24, built in 43-89 s.
  # The row read ONCE (issue 43; hand-written WGSL, bench/softmax_regs.py, guarded as compiled code is,
  # outputs checked against numpy with -inf / NaN rows): G lanes per row, each holding its 1024 / G values
  # as vec4 lets, max and sum folded through workgroup memory, one exp per element kept and scaled; or a
  # thread per row with the row in a function-scope array. In Chromium's SwiftShader (peers_probe's page,
  # best / median of 16 interleaved, load 7-9, ms): today's kernel 27.0 / 51.2 | G=4 53.8 / 101 | G=16 54.8
  # / 120 (tinygrad 48 / 85); another run 44.3 / 66.8 | G=4 62 / 131 | the array, 64 / 16 rows per workgroup
  # 49.5 / 129, 50.7 / 135; a third (load 4-6) 25.2 / 32.8 | G=4 30.8 / 58.1 | G=16 42.3 / 73.4 | the array
  # 28.3-29.4 / 50.7-54.9. Natively (wgpu, SwiftShader ICD, best of 8, load 7-9): today 105-116 | G=4
  # 108-111 | G=8 124-131 | G=16 151-160 | G=32 225-240 | G=64 542 | G=4 folding by subgroups 108-117 | the
  # array 131. More lanes cost more (barriers, folds) than the read saves: not kept.
  # row_short, row_short_groups (34): lowering/variants.py (SwiftShader ran 8 workgroups of 8 rows
  # slower than one of 64: lavapipe only); seq_vec (42, both CPU adapters): lowering/lower.py
  ("swiftshader", "rows"): {"group_chunk": True, "row_lanes": 1, "row_online": True, "weights_t": True,
                            "reduce_inner": 32, "reduce_step": STEP, "reduce_rows": ROWS, "row_short": 8,
                            "seq_vec": 4, "group_outputs": GROUP_OUTPUTS, "min_groups": 8},
  ("swiftshader", "reduce"): {"group_chunk": True},
  # register tiles (option tiles: the heuristic's preference order, optimize.py), SwiftShader in Chromium
  # (bench/peers.py's page and timing, kernelgen's kernel under forced tiles against tinygrad's, best of 3
  # interleaved, load 5-6 on 2 CPUs, ms), matmul 1024^3: 8x8 (the default) 2541 | 8x16 1954 | 16x8 2087 |
  # 4x4 3180 | 16x8 with 64 threads 2366 | tinygrad 3573; a second run: 8x16 2265 | 8x16 with 64 / 128
  # threads 2943 / 4349 | 4x16 3174 | 4x32 4956 | through workgroup memory (stage) 4555 | tinygrad 5091.
  # SwiftShader loads every lane's element on its own (a gather per load, vector loads too), so the tile
  # with the most outputs per load wins. conv2d 1x64x56x56 3x3 (56 columns: 8x16 does not divide them, 8x8
  # stays): 8x8 136 | 16x8 138 | 4x8 184 | 16x4 300 | tinygrad 270; blur 5x5 3x480x640: 8x8 58 | 8x16 53 |
  # 4x8 66 | 16x8 60 | 1x8 61 | 4x4 103 | tinygrad 114. Later, on a quieter machine (load ~1), matmul best
  # of 3: 8x16 1121 | 8x8 1110 | 16x8 1091 | 8x4 1200 | 4x8 1391 | 4x4 1475 | tinygrad 1668: a wash between
  # the three largest tiles there (8x16 kept: it held up better under load). With MAX_TILE_ACC 256: 16x16
  # tiles (32 loads per 256 multiply-adds), where the reduction is long (optimize.py LONG_TILE_REDUCE), the
  # same page and timing, best / median of 4, load 9-11, ms: matmul 1024^3 8x16 2185 / 3724 | 16x16 1529 /
  # 1921 | 16x8 1730 / 2999 | tinygrad 4555 / 4973; again 8x16 3788 / 3874 | 16x16 1547 / 2167 | 32x16 1931
  # / 3668 | 16x32 1495 / 2898 | 8x32 2163 / 2776 | tinygrad 3082 / 3689; then old (8x16) against new
  # (16x16) at load 15-19, best / median of 5 and of 6: 3316 / 5615 vs 1840 / 2452 (tinygrad 9600 / 11372)
  # and 1873 / 6179 vs 2518 / 3641 (tinygrad 5320 / 7315): the median always, the best mostly. conv2d (16
  # does not divide 56 columns: 16x8 does), best / median of 5 and of 6: 8x8 214 / 320, 196 / 260 | 16x8 121
  # / 212, 178 / 233 | 32x8 148 / 196, 163 / 277 | 16x14 159 / 188, 184 / 341 | tinygrad 391 / 512, 240 /
  # 338; old against new at load 19: 8x8 162 / 227 | 16x8 117 / 172 | tinygrad 204 / 984. The 5x5 blur (25
  # reduced elements) keeps the tiles above: 8x16 86 / 98 | 16x16 118 / 152 | 16x8 64 / 109 | tinygrad 109 /
  # 138 (best / median of 6).
  # tile_window (as lavapipe's, below), in Chromium (bench/peers_probe.py, kernelgen looped / unrolled /
  # tinygrad, best / median of 6 interleaved, load ~1, ms): blur 5x5 3x480x640 37.4 / 45.8 | 16.4 / 24.7 |
  # 49.2 / 64.9; the filter chain 640x480 63.4 / 76.4 | 39.8 / 48.2 | 115 / 132 (under load ~10 earlier:
  # blur 51.8 -> 28, chain 120 -> 75.5). Its cost is compile time: the edge-padded blur's WGSL grows from
  # ~2,200 to ~3,850 lines; in Pyodide (the page's worker, compile_plan of the blur at 160x120 and 640x480,
  # two runs) 0.31-0.40 s -> 0.66-0.79 s, in CPython 0.20-0.28 -> 0.40-0.58 s.
  # tile_unroll 4 (issue 43): the reduction loop unrolled 4 times and A's row read as one vec4
  # per 4 steps (16 vector loads of A and 16 of B per 4 steps of a 16x16 tile, where 2 steps took
  # 32 scalar loads of A and 8 vector loads of B): MEASURED_TILE_UNROLL below.
  ("swiftshader", "tile"): {"small_tiles": True, "tiles": ((8, 16), (8, 8), (4, 4)),
                            "long_tiles": ((16, 16), (16, 8), (8, 16), (8, 8), (4, 4)),
                            "long_tiles_cost": True, "tile_window": True, "tile_unroll": 4,
                            "slide": True, "exact_local": 8, "whole_tiles": True, "min_groups": 8,
                            "variant_groups": 8, "cheap_first": True, "quad_weights": True},
  # lavapipe (Mesa 22.3 llvmpipe 256 bits, AMD EPYC, load ~9 on 2 CPUs), ms best of 3, rows of
  # 4096x1024 f32 (the heuristic's choice with group_chunk is 16 lanes chunked):
  #   exp-sum  16 lanes chunked 44.8 | 64 chunked 63.8 | 32 chunked 65.1 | 64 strided 67.1
  #   mean     16 lanes chunked 65.4 | 16 strided 67.4 | 64 strided 72.4 | 32 chunked 77.3
  #   max      32 lanes strided 53.8 | thread per row 56.4 | 16 chunked 56.7 (within the noise)
  # and sum 16M: strided 44 ms -> chunked 12 ms (optimize.py, CHUNK_MAX_GROUP)
  # The online softmax where a row has a thread (rows.py's default for many short rows, or
  # row_lanes=1), Chromium, 4096x1024 f32, best / median of 8, ms: 16 lanes (the default here)
  # 13.6 / 17.2 | thread per row 15.1 / 17.0 | thread per row, online 12.2 / 12.9.
  # row_thread_rows 4096 (issue 43), a thread per row from 4096 rows: MEASURED_ROW_THREADS
  # A LEAD, not built: softmax's row read once into registers (bench/softmax_regs.py, see
  # ("swiftshader", "rows")), Chromium's lavapipe, best / median of 12 interleaved, load ~7, ms:
  # today's kernel 16.8 / 34.7 | 8 lanes 10.6 / 26.9 | 16 lanes 16.1 / 29.4 (tinygrad 33 / 41);
  # a second run (16 rounds) 16.7 / 41.8 | 8 lanes 19.4 / 44.4 | 16 lanes 15.3 / 30.5; natively
  # (best / median of 12, load 7-9) today 12.0 / 37.0 | 8 or 16 lanes 7.3 / 34. Inconsistent
  # under load: needs an idle re-measurement before a lowering (each lane's words as values).
  ("lavapipe", "rows"): {"group_chunk": True, "row_online": True, "row_thread_rows": 4096, "q4_lanes": 8,
                         "reduce_inner": 32, "reduce_step": STEP, "reduce_rows": ROWS, "seq_vec": 4,
                         "row_short": 96, "row_short_groups": 8, "weights_t": True,
                         "group_outputs": GROUP_OUTPUTS},
  # sum 16M in Chromium (lavapipe through ANGLE; bench/peers.py's page, best of 6, load ~7), the
  # first kernel's 256 x 65536 in ms: 16 / 32 / 64 lanes chunked 116 / 122 / 117, 32 / 128 lanes
  # strided 127 / 135 (tinygrad's 133): 64 MB at ~0.55 GB/s, the page's copy-kernel bandwidth
  # (0.7 GB/s): bound by memory, no lane count wins
  ("lavapipe", "reduce"): {"group_chunk": True},
  # matmul-like reductions with few outputs over a long reduction (optimize.py _small_tile): a
  # register tile of outputs that share loads instead of a grouped reduction per output
  # (bench/training.py's CNN, its linear layer (32, 3136) @ (3136, 10), ms best of 4, load ~7:
  # 64 lanes per output 47-60 | 8x8 tiles 2.3 | 4x4 3.1)
  # register tiles as on SwiftShader (above), lavapipe in Chromium (the same page and timing, ms):
  # matmul 1024^3: 8x8 2391 | 8x16 1897 | tinygrad 4466 (best of 3); blur 5x5 3x480x640 (best of
  # 5): 8x8 71 | 8x16 57 | 4x16 60 | 2x16 65 | 4x8 70 | 16x8 70 | 8x4 98 | tinygrad 129; on a
  # quieter machine (load ~1-2): matmul 8x16 826 | 8x8 1094 | tinygrad 2317 (best of 3), blur
  # 8x16 31.5 | 8x8 38.7 | tinygrad 68.1 (best of 6)
  # tile_window (optimize.py, TILE_WINDOW): a 5x5 blur's window unrolled, so that a tile's rows
  # share the loads of overlapping windows: 8x8 tiles load 12x12 values for 64 outputs where the
  # looped 1x16 or 8x16 tiles load 5 x 20 per 16 (lavapipe runs each lane's load on its own).
  # In Chromium (bench/peers_probe.py, best / median of 6 interleaved, load 8-15 on 2 CPUs, ms):
  # blur 3x480x640 looped 61.7 / 69.7 -> 30.4 / 32.2 (tinygrad 116 / 130); again at load 15:
  # 68.6 / 230 -> 27.9 / 65 (tinygrad 345 / 477); the filter chain's edge-padded blur kernel
  # 61.6 / 146 -> 32.2 / 103 (more in optimize.py)
  # tile_size_cap (optimize.py, TILE_MAX_UOPS): tiles whose lowering is too large for lavapipe's
  # first-dispatch compile take the next smaller one (ResNet-50's 1x1 convs over a fused batch norm
  # + ReLU: 8x8, 2224 lines, 4.3 s to compile -> 4x4, 648 lines, 1.1 s); for a one-off run, the
  # tile whose estimated build also fits its budget (compile_cost.py; natively, Mesa's cache
  # empty, CPU s of the first run, base / capped interleaved at load 7-17 on 2 shared CPUs:
  # Inception v2 35.1 -> 16.4 (its 34 largest kernels, 1x1 convs and pools in 8x8 tiles of 41-43
  # KB, to 9-12 KB; 1.89 -> 0.88 MB of WGSL), ResNet-50 26.2 -> 16.4; many runs' kernels as before)
  # Tried and not kept: short reductions (3 elements: the filter chain's gray level and its 3x3
  # sepia matrix) built unrolled as elementwise ops, so the colour steps fuse into one kernel
  # (3 kernels -> 2). In Chromium (bench/peers_probe.py --split, best of 6, load ~1, ms) the chain
  # went 34.5 -> 43.9: the fused elementwise kernel (26.7, against 9 + 11.2 for the two it
  # replaced) recomputes the pixel's gray level for each of its 3 channels and splits its flat
  # index with 4 integer divisions per element (8 flat elements a thread, 3 channels a pixel);
  # with the blur fused too (1 kernel), 60.2. What was kept instead: the gray level recomputed in
  # the sepia kernel (graph/schedule.py RECOMPUTE_LENGTH), whose layout stays as it was: 3 -> 2
  # kernels, the chain 30.7 -> 23.4 ms best of 8 at idle; per kernel (--split): gray + colour +
  # sepia 7.9 ms (a copy kernel of its bytes 7.6), the edge-padded blur + invert 16.7 (its copy
  # kernel 5.5): the blur bounds the chain's frame.
  # long_tiles, tile_unroll 4 as SwiftShader's (issue 43), for a one-off run where the unrolled
  # build's estimate fits its budget (long_tiles_cost: MEASURED_LAVAPIPE_TILES); tile_rate: a
  # one-off run's long tile is quickest to a first result (not static_low_end: lowering/variants).
  # slide, exact_local, whole_tiles (both CPU adapters): depthwise windows slide (slide.py, MEASURED_SLIDE);
  # workgroups divide tiles' threads (threads.EXACT_LOCAL; min_groups), tiles their axes (_whole_tile)
  ("lavapipe", "tile"): {"small_tiles": True, "tiles": ((8, 16), (8, 8), (4, 4)),
                         "long_tiles": ((16, 16), (16, 8), (8, 16), (8, 8), (4, 4)),
                         "tile_window": True, "tile_size_cap": True, "tile_unroll": 4,
                         "long_tiles_cost": True, "slide": True, "quad_weights": True,
                         "exact_local": 8, "whole_tiles": True, "tile_rate": 5000, "min_groups": 8},
  # fused attention (lowering/attention.py): query rows per thread, which share each key's k and
  # v loads (lavapipe runs a thread's loads per SIMD lane with bounds checks: they dominate).
  # lavapipe, B=1 H=8 L=512 d=64 f32 (bench/attention_times.py's workload, shared machine, best
  # of 2, ms): 1 row 2235 | 2 2957 | 4 1393 | 8 458-776 | 16 294 | 32 228; split kernels 1107.
  # In Chromium (bench/peers.py --adapters lavapipe --reps 2 --rows attention, causal L=512):
  # kernelgen 275 ms (1 kernel), tinygrad 3030 (5), TF.js 13400 (5), ORT-web 13200 (6).
  ("lavapipe", "attention"): {"upcast": 32},   # SwiftShader, other CPU adapters: as lavapipe (not measured)
  ("swiftshader", "attention"): {"upcast": 32},
  ("software", "attention"): {"upcast": 32},
  # any other CPU adapter: lanes are SIMD lanes there too (as lavapipe, not measured)
  ("software", "rows"): {"group_chunk": True}, ("software", "reduce"): {"group_chunk": True},
}


# DRIVER_COST: the driver's shader compile of one kernel, ms ~ a * uops + b * uops^2 / 1000 in
# the UOps of its lowered graph (lowering/compile_cost.py weighs it, with kernelgen's own compile,
# against the runs asked for), per (adapter class, shape class) whose choices it steers; classes
# without an entry (GPUs, unknown) are not capped. Fitted through the origin by
# bench/compile_cost.py: wgpu natively, Mesa's shader cache off, the driver's time as the CPU time
# of pipeline creation + first dispatch less a later dispatch's (what an idle machine's clock
# shows: the compile runs on the calling thread), on the shared 2-CPU machine at load 13-19:
#   lavapipe, tiled kernels with a 5x5 window (UOps -> CPU ms): blur 3x480x640 looped 1x16
#   508 -> 86 | unrolled 4x4 1895 -> 196 | 8x8 7254 -> 1005; depthwise 5x5 96x80x80 with a
#   hard-swish looped 1x16 1172 -> 117 | 4x8 6555 -> 523 | 8x8 12842 -> 1314 (0.106 ms per UOp;
#   the 8x8 kernel is 4181 lines, 139 KB). Matmul-like tiles cost more per UOp (float work rather
#   than index math): matmul 512^3 4x4 100 -> 70 | 8x8 260 -> 144 | 8x16 430 -> 284, conv2d 3x3
#   64ch 8x8 576 -> 248 (0.5-0.7); no choice of theirs is capped yet.
#   lavapipe, fused attention L=512 d=64, query rows per thread 1 | 2 | 4 (UOps -> CPU ms):
#   2370 -> 2624 | 3953 -> 4497 | 7114 -> 7425 (1.07 per UOp; 32 rows, lavapipe's choice for
#   many runs, 26332 UOps: the issue's ~64 s cold at load ~3).
#   SwiftShader (Chromium's Vulkan ICD): the same windows 508 -> 31 | 1895 -> 91 | 7254 -> 387 |
#   1172 -> 53 | 6555 -> 383 | 12842 -> 782 (0.058 per UOp); attention 1 row 2370 -> 1085 (0.46);
#   matmul 8x16... 16x16 820 -> 411, conv2d 879 -> 188.
# kernelgen's own compile (CPython, CPU ms) is about 0.04 ms per UOp on the same kernels
# (compile_cost.PYTHON_MS_PER_UOP): dwconv 8x8 574, blur 8x8 254, attention 1 row 96.
#   The light models' 3x3 depthwise windows over a fused prologue cost lavapipe far more per UOp:
#   ShuffleNet's r_1_112_1_28_28_1_1_1__1_3_3 unrolled 4x4, 5612 UOps (2297 lines) -> 3280 ms
#   (0.58 per UOp), r_1_24_56_56_1_1__3_3 4x4 5154 -> 740 | 8x8 20703 -> 3750 (0.15-0.18). The
#   cost per UOp of a window kernel thus spans 0.1-0.6 ms on lavapipe; the table keeps the worst,
#   so that a one-off run's estimate does not fall short (a one-off run then keeps most windows
#   rolled: their one run is 20-50 ms slower, their build 0.5-3 s faster). SwiftShader's tile
#   entry is its measured 0.058 scaled by the same worst-case factor (5.5; not measured there).
#   The worst of all, as the light models compile today: r_1_112_1_28_28_1_1_1__1_3_3 in 8x8
#   tiles (its choice for many runs before this cost), 21398 UOps, 14,242 lines, 590 KB ->
#   109.6 s of CPU (1,566 s wall at load ~20), where r_1_24_56_56_1_1__3_3's 20703 UOps took
#   3.75 s: lavapipe's tile entry takes b = 0.21 so that the worst is bounded (109.6 s
#   estimated), which keeps such a kernel from even a many-runs budget (RUNS_MANY x 1 s).
# Where the cap bites (lavapipe, a one-off run; every other kernel byte-identical to the uncapped
# choice, compared by kernel hash): ShuffleNet 15 of 69 kernels, its 3x3 depthwise
# convs over a fused batch norm from 7,000-14,241 lines each to 404-866 (the model 130,499 lines
# -> 24,956); Inception v2 9 of 131 (65,380 -> 43,526 lines); ResNet-50 1 of 67 (28,758 ->
# 26,294); SqueezeNet none. sdpa L=512 d=64: 32 query rows per thread (23,118
# lines) -> 1 (2,229 lines, what GPUs and unknown adapters always take).
DRIVER_COST: dict[tuple[str, str], tuple[float, float]] = {
  ("lavapipe", "tile"): (0.58, 0.21), ("lavapipe", "attention"): (1.07, 0.0),
  ("swiftshader", "tile"): (0.32, 0.0), ("swiftshader", "attention"): (0.46, 0.0),
  ("software", "tile"): (0.58, 0.21), ("software", "attention"): (1.07, 0.0),   # as lavapipe
  # (reduce_whole's q4 matvec, lowering/threads.py, lavapipe at load ~8, K = 1536, 1 / 2 / 4 rows
  # per thread: 13200 / 21632 / 38494 lines -> 19 / 30 / 37 s at the first dispatch; not an entry:
  # a capped kernel grows at a replayed decode's second step. Not a default any more: the
  # stepped loop, reduce_step, builds in ~1 s for most of its speed; see TABLE's rows notes)
}

# MEASUREMENTS: the numbers behind lowering/optimize.py's constants and the Target facts they
# steer (wgsl/target.py, ptx/target.py), kept here with the table's (machine shared, load noted):
# - MIN_GATED_LOCAL (lowering/threads.py), one workgroup of exactly n threads: the digits demo's
#   10 logits were 5 workgroups of 2, each a task for SwiftShader's thread pool to wake up on a loaded CPU
#   (Chromium, best / q25 / median of 45 submits, load ~7, ms: 3 kernels with 5 groups of 2
#   0.6 / 2.7 / 3.1, with 1 group of 10 0.4 / 0.9 / 2.7; tinygrad 1.5 / 2.9 / 3.4; again, 90
#   submits, load ~6: 0.6 / 2.7 / 3.0 -> 0.5 / 0.9 / 2.9, tinygrad 1.3 / 3.1 / 3.3).
# - Target.upcast_vec (WGSL array<vec4<f32>>; lavapipe, softmax's exp-divide over 4096x1024:
#   1.25x); Target.upcast / upcast_local, the same 1024 outputs per workgroup in fewer, busier
#   threads (WGSL 8 and 128; lavapipe, 4096x1024: x * 2 + 1 and softmax's exp-divide 1.2x,
#   x + x[:1] 1.25x, a transpose 1.1x, int8 the same).
# - SUBGROUP_MIN_GROUP (lavapipe, sum over rows of 1024 and of 16384: 32 threads 0.8x and 1.0x
#   the plain fold's speed, 64 threads 4.4x and 1.2x, 256 9x and 3.4x).
# - Target.group_unroll / group_vec (lavapipe, sum 16M: unrolled, with the fold in lane 0 only,
#   1.4x; vec4 loads 1.7x more).
# - group_chunk and CHUNK_MAX_GROUP: GPUs want the strided order (coalesced loads); CPU adapters
#   run invocations as SIMD lanes, each streaming its own run best (lavapipe on AMD EPYC, sum 16M:
#   44 -> 12 ms; rows of softmax 4096x1024, max and exp-sum: bench/results.json); sum 16M's
#   256 x 65536 first kernel, 16 / 32 / 64 / 256 lanes: 6.4 / 6.5 / 6.7 / 7.8 ms at best,
#   11.2 / 10.9 / 11.4 / 14.7 median.
# - Target.group_min_steps (lavapipe, max over rows of 1024: 16 threads 1.2x faster than 32; rows
#   of 16384 and 65536 keep 128 and 256). Target.max_local / max_local_bytes: WebGPU guarantees
#   256 threads and 16 KiB.
# - TILES (lavapipe, 512^3 f32: 8x8 is 10x, 4x4 4x one output per thread); a clipped axis under
#   TILE_MIN_REDUCE (640x480x3 times the 3x3 sepia matrix: SwiftShader in Chromium 58 -> 8 ms;
#   wgpu on lavapipe 57 -> 10-15 ms).
# - LONG_TILE_REDUCE: SwiftShader's matmul and conv2d take 16-row tiles, its 5x5 blur's
#   25-element reduction not.
# - TILE_SHARE_MAX: 2.5-3.1 for 3x3 pools and depthwise convs in the light ONNX models, at most
#   2.1 for their convs and 1x1 convs with a fused epilogue.
# - TILE_WINDOW (lavapipe's tile_window): a 5x5 blur of 3x480x640 on lavapipe in Chromium
#   (bench/peers_probe.py, best / median of 6 interleaved, load ~8, ms): looped 1x16 tiles
#   61.7 / 69.7 | unrolled 8x8 30.4 / 32.2 | 4x16 32.2 / 35.3 | 8x16 23.4 / 40 | tinygrad
#   116 / 130; the filter chain's edge-padded blur: looped 8x16 61.6 / 146 | unrolled 8x8
#   32.2 / 103 | 8x16 26.4 / 47.9, but 8x16's 7600 lines of WGSL took lavapipe 18.7 s to compile
#   (8x8: 3.9 s, looped 1.5 s). The blur again (load ~16): unrolled 8x8 30.9 / 32.9 | 4x8
#   39.8 / 104 | 4x4 51 / 52.2 | tinygrad 127 / 133. The cost: a larger kernel to build (CPython,
#   the filter chain at 640x480, load ~16: compile_plan 2.6 -> 6.9 s; 160x120 3.2 -> 5.6 s).
# - TILE_MAX_UOPS: lavapipe compiles a kernel at its first dispatch in time superlinear in its
#   size (ResNet-50's r_1_1024_14_14__256_1_1, 1x1 conv over a fused batch norm + ReLU of a
#   residual sum, load ~10, CPU seconds of the first dispatch / run best of 3: 8x8 tile, 2224
#   lines 4.3 s / 4662 ms; 4x4, 648 lines 1.1 s / 4050 ms). In the light models the tiles kept
#   lower to at most 1491 UOps (ResNet-50's 7x7 stem conv in 8x16; its 3x3 convs 1262), those it
#   shrinks to 1700-2490 (1x1 convs over a fused batch norm + ReLU: ResNet-50, ShuffleNet).
# - Target.tile_over_group: measured on lavapipe only; PTX keeps the grouped reduction, whose many
#   small blocks fill a large GPU, until a GPU says otherwise.
# - Workgroup-memory tiles (stage): the standard shared-memory win on GPUs (PTX's default); each
#   step is a loop (wgtile.STAGE_UNROLL per trip; ptxas unrolls it), and lavapipe ran steps of 8
#   as fast as 16 (no GPU was at hand to compare).
# - Target.tile_fma: PTX fma.rn is one instruction and one rounding instead of mul + add; WGSL
#   keeps mul + add (fma() is a libcall on CPU adapters without FMA).
# - MEASURED_TILE_UNROLL (SwiftShader's tile_unroll 4, issue 43): matmul 1024^3 in Chromium (the peers page,
#   kernelgen's kernel under options interleaved with tinygrad's, 10 rounds, wall / GPU-timestamp ms best /
#   median, load 14-16 on 2 CPUs): 16x16 tiles unrolled 2 (before) 1301 / 2446, 1609 / 3905 | unrolled 4, A
#   read as vec4 1003 / 1512 wall 867 / 1320 | unrolled 8 953 / 1416, 882 / 1633 | tinygrad 1590 / 3717,
#   1695 / 4609. Hand-edited WGSL first (4 rounds, load ~16): unrolled 4 with A scalar 1668 / 2648: the vec4
#   loads are the gain. conv2d 1x64x56x56 3x3 pad 1 (16x8 tiles; the loop over input channel x window row
#   unrolled 4 times around the window's 3 columns: an output channel's 12 weights per step in 3 vec4 loads,
#   where each step loaded 3 scalars), the same page, 12 rounds, load ~15: before 137 / 188, GPU 123 / 171 |
#   tile_unroll 4 108 / 161, GPU 109 / 128 | tinygrad 230 / 357, GPU 242 / 381. Other tiles for it,
#   tile_unroll off (12 rounds, load ~15; noisy: no clear winner): 16x8 124 / 303 | 8x28 143 / 386 | 16x14
#   132 / 378 | 8x14 136 / 286 (wall).
# - MEASURED_ROW_THREADS (lavapipe's row_thread_rows 4096, issue 43): layernorm 4096x1024 in Chromium
#   (bench/peers_probe.py, interleaved, best / median ms of 6, 6 and 3 rounds in three phases, load ~15 on 2
#   CPUs): 32 lanes per row (before) 83.1 / 138, 67.4 / 120, 95.3 / 108 | a thread per row 29.5 / 85.2, 54.7
#   / 86.1, 66.1 / 113 | 16 lanes 37.4 / 89.7, 97 / 132, 124 / 179 | tinygrad 133 / 241, 232 / 300, 283 /
#   326; onnxruntime-web on lavapipe 649 / 705 (its layernorm ran on SwiftShader in the peers page before
#   issue 43: see bench/web/peers.js). A thread per row reads the row twice (layernorm's two sums share one
#   loop: a thread's loop only, reductions.sibling_reduces), lanes three times. Softmax 4096x1024, a thread
#   per row with the online max and sum: see ("lavapipe", "rows") above (12.2 / 12.9 against 16 lanes' 13.6
#   / 17.2).
# - MEASURED_LAVAPIPE_TILES (lavapipe's long_tiles and tile_unroll 4, issue 43): at idle the bench's three
#   runs had lavapipe matmul 1024^3 at 128 / 309 / 203 ms best of 5 (8x16 tiles, A read as scalars) against
#   TF.js 379 / 444 / 529 (worst ratio 1.44), conv2d 1x64x56x56 3x3 (8x8) 18.9 / 20.2 / 35.8 against TF.js
#   46.9 / 52.5 / 46.6 (1.30). Why the times fall in two modes: llvmpipe splits a dispatch's workgroups into
#   one fixed chunk per worker thread (lp_cs_tpool: num_iters / num_threads each, no stealing), so with 2
#   CPUs a dispatch takes as long as its slower half; our reading of the 2x (not verified inside Chromium's
#   GPU process): where one worker gets no CPU the other runs both halves (conv2d 37 ms against 19). No
#   workgroup count or size balances that (local 64 / 32 below: no gain), only less work per dispatch.
#   Natively (bench/lavapipe_tiles.py, best / median of 6 interleaved, load 3-12 on 2 CPUs, ms), matmul:
#   8x16 (before) 1047 / 2418 | 8x16 local 64 1727 / 2096 | 8x16 local 32 1603 / 1955 | 8x8 1683-1695 /
#   2392-2415 | 16x8 1563 / 2228 | 8x16 unrolled 4 (A as vec4) 748 / 1462 | 16x16 unrolled 4 555 / 902 | 8x8
#   unrolled 4 1132 / 1559; conv2d: 8x8 (before) 73 / 102 | 16x8 68 / 96 | 8x8 unrolled 4 56 / 84 | 16x16
#   unrolled 4 63 / 73 (3796 lines of WGSL, 20.9 s of lavapipe compile in Chromium at load 12; 16x8
#   unrolled, the heuristic's choice: 1564 lines, 4.8 s; 8x8 before: 299 lines, 0.4 s). In Chromium
#   (bench/peers_probe.py, best / median of 6-8 interleaved per phase, load 11-16): matmul 16x16 unrolled
#   172-201 / 413-1040 | before 285-1570 / 534-1770 | tinygrad 1060-2230 / 2420-4270; the same kernels old
#   against new, 8 rounds: 625 / 1790 -> 272 / 1030; conv2d 16x8 unrolled 26.9-28.7 / 49.5-71.7 | before
#   35.6-38.6 / 38.3-67.8 (its floor at load 12 is its floor at idle: one worker's time) | tinygrad 69-110 /
#   142-187 | TF.js 92.2 / 95.8; again, 8 rounds: new 29.6-51.1 / 118-141 | before 41.8-90.3 / 136-261;
#   again (10 rounds, load 15-17): 16x8 unrolled 39.8 / 193 | 8x4 unrolled 56.4 / 210 | 4x8 unrolled 49.1 /
#   336 | before 93.4 / 327 | tinygrad 178 / 729. bench/peers.py, 2 runs at load 16-22 (not idle): matmul
#   worst ratio 10.5x (TF.js), conv2d 3.3x (ours 27.9 and 161 ms best). The cost is the driver's compile:
#   natively (empty shader cache, load ~19, CPU s of the first run less a later one) matmul 0.5 -> 1.3,
#   conv2d 0.25 -> 1.2; ResNet-50's first run natively (test_onnx_light.py, CPU s) 31.1 -> 64.9, so
#   long_tiles_cost caps them for a one-off run (31.6 CPU s again): the estimate (compile_cost.py,
#   DRIVER_COST) of matmul's 16x16 unrolled is 965 ms (1127 UOps, within ONE_OFF_MS), conv2d's 16x8 unrolled
#   2376 ms (2197 UOps), so a one-off conv2d keeps the 8x8 scalar tile (capped; realized again, or with
#   runs, it takes 16x8).
# - MEASURED_SLIDE (option slide, lowering/slide.py; issues 42 and 37): bench/depthwise.py,
#   natively, Mesa's shader cache off, PP-OCRv4 detection's depthwise convs with bias and
#   hard-swish against dense convs with the same epilogue, GFLOP/s of the best of 5 dispatches
#   (lavapipe at load 1.9-2.3 on 2 shared CPUs; WGSL KB, driver compile CPU ms):
#   conv                  slide (C=8)        before, one-off     before, many runs (unrolled)
#   dw 3x3 s1 96x80x80    4.98   11 KB  62   3.21  12 KB 124     4.44 127 KB  855
#   dw 5x5 s1 96x80x80    10.07  22 KB  97   4.13  14 KB  74     8.61 139 KB  622
#   dw 3x3 s2 96x160x160  2.59   14 KB  99   3.39  13 KB 216     2.01 156 KB 3403
#   dw 5x5 s2 192x80x80   5.77   24 KB 146   2.43   9 KB  54     4.14 156 KB 1895
#   dw 5x5 s1 192x40x40   10.11  22 KB  88   5.82   8 KB 173    15.36 139 KB  812
#   dense 3x3 16ch 80x80 13.47, dense 1x1 96ch 40x40 19.28, dense 3x3 64ch 56x56 8.12. Again
#   at load 5.7-10 (best of 9): slide 4.14 / 8.49 / 2.54 / 5.65 / 11.05 against one-off 2.60 /
#   7.66 / 1.58 / 4.07 / 6.80 and unrolled 3.85 / 8.13 / 2.03 / 6.24 / 17.26. SwiftShader (load
#   ~2): slide 1.87 / 3.86 / 0.60 / 1.51 / 6.14 against one-off 0.88 / 1.36 / 0.58 / 1.94 / 2.36
#   and unrolled 1.43 / 2.14 / 0.81 / 2.99 / 5.26 (dense 2.76 / 1.86 / 3.85); its timings swing
#   2-8x between runs under load. Columns per thread (lavapipe, forced, R the default / whole):
#   C=4 3.66-8.78, C=8 4.13-11.13, C=16 2.25-11.01 GFLOP/s over the five: C=8 kept (scalar
#   accesses). Per FLOP 5x5 was 0.75x a dense 3x3, 3x3 0.35x, bound by per-lane loads and stores:
#   slide.py now reads and stores rows as vec4 words, 3x3 in C=16 (issue 42, its SLIDE_COLS).

def classify(info) -> str:
  """The class (one of CLASSES) of an adapter described by `info`: a class name itself, a
  description string, or a dict of GPUAdapterInfo / wgpu adapter.info fields."""
  if info is None:
    return "unknown"
  if isinstance(info, str):
    text, kind, fallback = info.lower(), "", False
    if text in CLASSES:
      return text
  elif isinstance(info, dict):
    text = " ".join(str(info.get(key) or "") for key in
                    ("vendor", "architecture", "device", "description")).lower()
    kind, fallback = str(info.get("adapter_type") or ""), bool(info.get("isFallbackAdapter"))
  else:
    raise UnsupportedError(f"adapter={info!r}: give one of {', '.join(CLASSES)}, an adapter "
                           f"description string, or a dict of its GPUAdapterInfo fields")
  words = set(text.replace("(", " ").replace(")", " ").replace(",", " ").split())
  for name, klass in NAMES:
    if (name in words) if len(name) <= 4 else (name in text):
      return klass
  if fallback:
    return "swiftshader" if not text.strip() else "software"
  return ADAPTER_TYPES.get(kind, "unknown")


def defaults(adapter, shape: str) -> dict:
  """The option defaults of adapter class `classify(adapter)` for kernels of shape class
  `shape` (empty when the table has none: the Target's own defaults apply), with its
  DRIVER_COST as `driver_cost` where measured (lowering/compile_cost.py)."""
  if shape not in SHAPES:
    raise UnsupportedError(f"unknown shape class {shape!r}: use one of {', '.join(SHAPES)}")
  klass = classify(adapter)
  cost = DRIVER_COST.get((klass, shape))
  return {**TABLE.get((klass, shape), {}), **({"driver_cost": cost} if cost else {})}
