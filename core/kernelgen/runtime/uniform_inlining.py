"""Lavapipe's uniform inlining, settled once per symbolic pipeline (issue 34, "no speed lost to
generality").

Mesa's lavapipe (22.x) inlines the uniforms that a shader's loop bounds and branch conditions read
(a symbolic kernel's dims: the uniform buffer after its bindings, render/wgsl) into the shader at
each dispatch of a pipeline, optimizes it and compiles it with LLVM again, for as long as the
inlined shader comes out less than half the size of the plain one or bigger; the first dispatch
whose inlined shader keeps between half and all of the plain one's size turns inlining off for
that pipeline for good. A symbolic matmul first run at k = 1 drops its loop of unrolled steps
(k // 4 = 0 of them), so every dispatch paid the compile (1.3 ms a run against 0.025 ms).

`settle` records one dispatch of no workgroups (lavapipe still updates the shader state for it)
with every uniform at SETTLE_VALUE, on small stand-in buffers: a large power of two, so loops
bounded by a dim keep too many steps to unroll and a tail loop over dim % U none, which leaves
most of the shader as it is and so turns inlining off before the pipeline's first real run.

The page does the same in web/gpu.js (settleInlining, counted in its stats.inliningSettles) for
every pipeline with uniforms on an adapter named lavapipe or llvmpipe, or one that describes
nothing: Chromium's compatibility mode on lavapipe (through ANGLE) reports an empty vendor,
device and description. There the wall time per run of a symbolic (64, k) @ (k, 512) first run
at k = 1 showed no difference with and without it (3-22 ms either way at load 9-13 on 2 CPUs;
natively 4-5 against 6-15 ms at the same load), so ANGLE's path may not inline at all; the
settle costs a submit of no work per pipeline.
"""
from __future__ import annotations

# the dims' value for the settling dispatch: a large power of two (see the module docstring)
SETTLE_VALUE = 1 << 16

# bytes of each stand-in buffer (at least one element of any binding; nothing is read)
STAND_IN_BYTES = 256


def settle(runtime, pipeline, layout, launch) -> None:
  """Record and submit one dispatch of no workgroups of `pipeline` (built for `launch`, which
  has uniforms) with every uniform at SETTLE_VALUE, on stand-in buffers kept by `runtime`."""
  stand_ins = runtime.stand_ins
  while len(stand_ins) < len(launch.bindings):    # one per slot: none is bound twice
    stand_ins.append(runtime.alloc(STAND_IN_BYTES))
  for i, b in enumerate(launch.bindings):          # a uniform binding reads all its nbytes
    if stand_ins[i].gpu.size < b.nbytes:
      stand_ins[i] = runtime.alloc(b.nbytes)
  values = {name: SETTLE_VALUE for name, _ in launch.uniforms}
  group = runtime._bind_group(launch, layout, stand_ins[:len(launch.bindings)], values)
  encoder = runtime.device.create_command_encoder()
  compute = encoder.begin_compute_pass()
  compute.set_pipeline(pipeline)
  compute.set_bind_group(0, group)
  compute.dispatch_workgroups(0, 0, 0)
  compute.end()
  runtime.device.queue.submit([encoder.finish()])
  runtime.settled += 1
