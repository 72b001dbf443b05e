"""B3 softmax, per kernel: our softmax 4096x1024 kernels on wgpu (lavapipe), timed interleaved.

On a shared machine one run of throughput_wgpu.py swings 2x; here each variant's kernels run
in turn, REPS rounds, and each kernel's fastest time is kept, so variants compare under the same
load. Variants:

  today     the three kernels softmax schedules now (max, exp-sum, exp-divide)
  lse       x.max, then lse = max + log(sum(exp(x - max))) as one kernel (the max fuses into the
            sum kernel, computed in a first pass over the row), then exp(x - lse): two kernels
  online    a PROBE, not compiler output: the lse kernel replaced by hand-written WGSL that finds
            each row's max and exp-sum in ONE pass (online softmax: each lane keeps a running max
            m and sum s, s rescaled by exp(m_old - m_new) as m grows; lanes combine (m, s) pairs
            alike), then the compiler's exp(x - lse). It measures what an online reduction in the
            compiler would gain; it does not handle -inf rows (the running max starts at -3e38).
  online+guards  the same probe with the renderer's NaN-propagating max and range-guarded exp2
            per lane (kg_fmax, kg_exp2), as compiled code would have them
  today-bare  today's kernels with kg_fmax and kg_exp2 cut to the bare max and exp2 builtins:
            what those guards cost (timing only: it changes NaN and overflow results)

Each line: the variant, each kernel's fastest ms, their sum, and the max relative error against
numpy float64 (the lse variants round lse = m + log(s) once: about |lse| * 2^-24 more).

    python bench/softmax_kernels.py [REPS]
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS, COLS, LANES = 4096, 1024, 16

ONLINE_WGSL = f"""@group(0) @binding(0) var<storage, read_write> b0_out: array<f32>;
@group(0) @binding(1) var<storage, read> b1_in1: array<vec4<f32>>;
var<workgroup> lm: array<f32, {LANES}>;
var<workgroup> ls: array<f32, {LANES}>;

@compute @workgroup_size({LANES}, 1, 1)
fn ENTRY(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
  let row = i32(wid.x);
  let lane = i32(lid.x);
  let k = vec4<f32>(1.4426950216293335f);
  var m = vec4<f32>(-3.0e38f);
  var s = vec4<f32>(0.0f);
  let base = row * {COLS // 4} + lane;
  for (var r: i32 = 0i; r < {COLS // 16 // LANES}i; r++) {{
    let i = base + r * {LANES * 4};
    let a = b1_in1[i];
    let b = b1_in1[i + {LANES}];
    let c = b1_in1[i + {LANES * 2}];
    let d = b1_in1[i + {LANES * 3}];
    let n = MAX4(m, MAX4(MAX4(a, b), MAX4(c, d)));
    s = s * EXP4((m - n) * k) + EXP4((a - n) * k) + EXP4((b - n) * k) + EXP4((c - n) * k)
      + EXP4((d - n) * k);
    m = n;
  }}
  let m1 = max(max(m.x, m.y), max(m.z, m.w));
  lm[lane] = m1;
  ls[lane] = dot(s, EXP4((m - vec4<f32>(m1)) * k));
  workgroupBarrier();
  if (lane == 0i) {{
    var mm = lm[0];
    for (var j: i32 = 1i; j < {LANES}i; j++) {{ mm = max(mm, lm[j]); }}
    var ss = 0.0f;
    for (var j: i32 = 0i; j < {LANES}i; j++) {{ ss += ls[j] * exp2((lm[j] - mm) * k.x); }}
    b0_out[row] = mm + log(ss);
  }}
}}
"""


def guarded_wgsl() -> str:
  """ONLINE_WGSL with the renderer's NaN- and range-guarded max and exp2 per lane (what the
  compiler would emit for MAX and EXP2), instead of the bare builtins."""
  from kernelgen.render.wgsl.target import HELPERS
  vec4 = ("fn kg_max4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {\n  return vec4<f32>(kg_fmax(a.x, b.x), "
          "kg_fmax(a.y, b.y), kg_fmax(a.z, b.z), kg_fmax(a.w, b.w));\n}\n"
          "fn kg_exp4(t: vec4<f32>) -> vec4<f32> {\n  return vec4<f32>(kg_exp2(t.x), kg_exp2(t.y), "
          "kg_exp2(t.z), kg_exp2(t.w));\n}\n")
  helpers = "\n".join(HELPERS[h] for h in ("kg_isnan", "kg_fmax", "kg_exp2")) + "\n" + vec4
  head, body = ONLINE_WGSL.split("@compute", 1)
  return head + helpers + "\n@compute" + body.replace("MAX4", "kg_max4").replace("EXP4", "kg_exp4")


def main(reps: int = 40):
  sys.path.insert(0, str(ROOT / "core"))
  import numpy as np
  import kernelgen as kg
  from kernelgen.compiler import compile_item
  from kernelgen.device import Device
  from kernelgen.graph.lazy import Buffer
  from kernelgen.graph.schedule import schedule
  rt = Device["WEBGPU"]
  data = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
  x64 = data.astype(np.float64)
  e = np.exp(x64 - x64.max(-1, keepdims=True))
  ref = e / e.sum(-1, keepdims=True)

  def lse_softmax(x):
    m = x.max(-1, keepdim=True)
    return (x - (m + (x - m).exp().sum(-1, keepdim=True).log()).contiguous()).exp()

  def plan(expr, patch=None):
    x = kg.Tensor(data, device="WEBGPU").realize()
    out = expr(x)
    steps = []
    for i, item in enumerate(schedule([out.node])):
      compiled = compile_item(item, "wgsl", rt.render_options())
      source = patch(i, compiled.launch) if patch else compiled.launch.source
      if source != compiled.launch.source:
        compiled = dataclasses.replace(compiled, source=source,
                                       launch=dataclasses.replace(compiled.launch, source=source))
      item.out.buffer, item.out.src = Buffer("WEBGPU", item.out.dtype, item.out.size), ()
      steps.append((compiled, [item.out.buffer.handle] + [s.buffer.handle for s in item.inputs]))
    return steps, out

  def first(source):   # replaces the first kernel (the lse kernel) with `source`
    return lambda i, launch: source.replace("ENTRY", launch.entry_point) if i == 0 else \
      launch.source

  def unguarded(i, launch):   # bare max and exp2 (timing only: NaN/overflow semantics differ)
    from kernelgen.render.wgsl.target import HELPERS
    bare = {"kg_fmax": "fn kg_fmax(a: f32, b: f32) -> f32 {\n  return max(a, b);\n}",
            "kg_exp2": "fn kg_exp2(t: f32) -> f32 {\n  return exp2(t);\n}"}
    source = launch.source
    for name, text in bare.items():
      source = source.replace(HELPERS[name], text)
    return source

  bare = ONLINE_WGSL.replace("MAX4", "max").replace("EXP4", "exp2")
  softmax = lambda x: x.softmax(axis=-1)
  variants = {"today": plan(softmax), "today-bare": plan(softmax, unguarded),
              "lse": plan(lse_softmax), "online": plan(lse_softmax, first(bare)),
              "online+guards": plan(lse_softmax, first(guarded_wgsl()))}
  times = {name: [] for name in variants}
  for _ in range(3 + reps):
    for name, (steps, _) in variants.items():
      times[name].append([rt.run(c, handles, {}, timed=True) * 1e3 for c, handles in steps])
  for name, (steps, out) in variants.items():
    runs = times[name][3:]
    best = [min(run[k] for run in runs) for k in range(len(steps))]
    err = float(np.max(np.abs(out.numpy() - ref) / ref))
    print(f"{name:13s} kernels_min_ms={[round(b, 2) for b in best]} sum={sum(best):.2f} "
          f"max_rel_err={err:.2e}")


if __name__ == "__main__":
  main(int(sys.argv[1]) if sys.argv[1:] else 40)
