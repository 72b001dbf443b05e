"""Issue 43 probe: softmax over rows of 4096x1024 f32 with each row held in registers, against the
kernel the compiler emits today, natively (wgpu) on one Vulkan ICD, timed by GPU timestamps.

Today's row kernel for the swiftshader class (adapters.py ("swiftshader", "rows"): a thread per
row, online max + exp-sum) reads each row twice (the loop of the online max and exp-sum, then the
output loop) and computes two exps per element. The probes here are hand-written WGSL, NOT
compiler output: a workgroup of G lanes per row (R rows per workgroup), each lane loading its
1024 / G values as vec4 words into registers (unrolled lets, no array), the row's max folded
through workgroup memory, each exp computed once and kept, the sum folded the same way, then the
kept exps scaled and written: one read and one write of the row, one exp per element. `bare`
uses the max and exp2 builtins; `guarded` adds what compiled code needs (kg_fmax's NaN
propagation, the exp's NaN select, an all -inf row's max taken as 0 in the exps). `private`: a
thread per row reading its row once into a function-scope array (private_wgsl). The probes'
outputs are checked against numpy natively, -inf, +inf and NaN rows included (`bare` ones get
the NaN rows wrong: timing only). Results: adapters.py, the ("swiftshader", "rows") entry.

Each round runs every variant once, in turn (interleaved), on the same input; a variant's figure
is its best and median ms over the rounds, so variants compare under the same machine load.

    python bench/softmax_regs.py [swiftshader|lavapipe] [ROUNDS]
    python bench/softmax_regs.py --chromium [lavapipe] [ROUNDS]   (bench/peers_probe.py's page
        and timing, Chromium's SwiftShader or lavapipe: today's program, tinygrad's and the
        workgroup-memory and array probes; each further argument, JSON options, adds today's
        kernel compiled under them)
"""
from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS, COLS = 4096, 1024
ICDS = {"lavapipe": "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
        "swiftshader": "/usr/lib/chromium/vk_swiftshader_icd.json"}
GUARDS = """var<private> kg_inf: u32 = 0x7f800000u;
fn kg_fmax(a: f32, b: f32) -> f32 {
  let nan = max(bitcast<u32>(a) & 0x7fffffffu, bitcast<u32>(b) & 0x7fffffffu) > 0x7f800000u;
  return select(max(a, b), a + b, nan);
}
fn kg_max4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(kg_fmax(a.x, b.x), kg_fmax(a.y, b.y), kg_fmax(a.z, b.z), kg_fmax(a.w, b.w));
}
fn kg_exp4(t: vec4<f32>) -> vec4<f32> {
  return select(exp2(t), t, !(t == t));
}
"""
# (Tint rejects a constant expression that evaluates to inf: -inf is read from a private var)
# (lanes per row, rows per workgroup) of the probes
SHAPES = ((16, 4), (16, 1), (8, 8), (8, 1), (4, 16), (4, 1))


def regs_wgsl(lanes: int, rows: int, guarded: bool, subgroup: bool = False) -> str:
  """Softmax with a row per `lanes` lanes (`rows` rows per workgroup), the row in registers;
  with `subgroup`, the lanes of a row are one subgroup and fold by subgroupMax / subgroupAdd."""
  words = COLS // 4 // lanes                      # vec4 words per lane
  mx, ex = ("kg_max4", "kg_exp4") if guarded else ("max", "exp2")
  fmax = "kg_fmax" if guarded else "max"
  load = "\n".join(f"  let x{j} = b1_in1[base + {j * lanes}u];" for j in range(words))
  fold = "x0"
  for j in range(1, words):
    fold = f"{mx}({fold}, x{j})"
  exps = "\n".join(f"  let e{j} = {ex}((x{j} - mv) * k);" for j in range(words))
  esum = " + ".join(f"e{j}" for j in range(words))
  stores = "\n".join(f"  b0_out[base + {j * lanes}u] = e{j} * inv;" for j in range(words))
  zero = "  let m0 = select(m, 0.0f, m == -bitcast<f32>(kg_inf));\n" if guarded else \
    "  let m0 = m;\n"
  source = _wgsl(lanes, rows, guarded, load, fold, zero, exps, esum, stores, mx, fmax)
  if subgroup:
    source = _subgroup(source, lanes, fmax)
  return source


def private_wgsl(local: int = 64) -> str:
  """Softmax with a thread per row (`local` rows per workgroup) that reads its row once into a
  function-scope array (4 KB), then takes the max, the exps (kept in the array) and the sum from
  it, and writes the scaled exps: one read of global memory, one exp per element."""
  words = COLS // 4
  return f"""@group(0) @binding(0) var<storage, read_write> b0_out: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> b1_in1: array<vec4<f32>>;
{GUARDS}
@compute @workgroup_size({local}, 1, 1)
fn ENTRY(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
  let base = (wid.x * {local}u + lid.x) * {words}u;
  let k = vec4<f32>(1.4426950216293335f);
  var a: array<vec4<f32>, {words}>;
  var p = vec4<f32>(-bitcast<f32>(kg_inf));
  for (var i = 0u; i < {words}u; i++) {{
    let x = b1_in1[base + i];
    a[i] = x;
    p = kg_max4(p, x);
  }}
  let m = kg_fmax(kg_fmax(p.x, p.y), kg_fmax(p.z, p.w));
  let mv = vec4<f32>(select(m, 0.0f, m == -bitcast<f32>(kg_inf)));
  var sv = vec4<f32>(0.0f);
  for (var i = 0u; i < {words}u; i++) {{
    let e = kg_exp4((a[i] - mv) * k);
    a[i] = e;
    sv += e;
  }}
  let inv = vec4<f32>(1.0f / ((sv.x + sv.y) + (sv.z + sv.w)));
  for (var i = 0u; i < {words}u; i++) {{ b0_out[base + i] = a[i] * inv; }}
}}
"""


def _subgroup(source: str, lanes: int, fmax: str) -> str:
  """The workgroup-memory folds of `source` replaced by subgroup folds (no barrier)."""
  head, body = source.split("  wm[slot", 1)
  part, rest = body.split("\n", 1)
  _, rest = rest.split("m = " + fmax + "(m, wm[slot + j]); }\n", 1)
  pm = part.split("= ", 1)[1].rstrip(";")
  _, tail = rest.split("  ws[slot", 1)
  ps, tail = tail.split("\n", 1)
  ps = ps.split("= ", 1)[1].rstrip(";")
  _, tail = tail.split("s += ws[slot + j]; }\n", 1)
  return head + f"  var m = subgroupMax({pm});\n" + rest.split("  ws[slot", 1)[0] + \
    f"  let s = subgroupAdd({ps});\n" + tail


def _wgsl(lanes, rows, guarded, load, fold, zero, exps, esum, stores, mx, fmax) -> str:
  """The probe's WGSL from its parts (regs_wgsl)."""
  return f"""@group(0) @binding(0) var<storage, read_write> b0_out: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> b1_in1: array<vec4<f32>>;
var<workgroup> wm: array<f32, {lanes * rows}>;
var<workgroup> ws: array<f32, {lanes * rows}>;
{GUARDS if guarded else ""}
@compute @workgroup_size({lanes}, {rows}, 1)
fn ENTRY(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
  let row = wid.x * {rows}u + lid.y;
  let slot = lid.y * {lanes}u;
  let base = row * {COLS // 4}u + lid.x;
  let k = vec4<f32>(1.4426950216293335f);
{load}
  let p = {fold};
  wm[slot + lid.x] = {fmax}({fmax}(p.x, p.y), {fmax}(p.z, p.w));
  workgroupBarrier();
  var m = wm[slot];
  for (var j = 1u; j < {lanes}u; j++) {{ m = {fmax}(m, wm[slot + j]); }}
{zero}  let mv = vec4<f32>(m0);
{exps}
  let sv = {esum};
  ws[slot + lid.x] = (sv.x + sv.y) + (sv.z + sv.w);
  workgroupBarrier();
  var s = 0.0f;
  for (var j = 0u; j < {lanes}u; j++) {{ s += ws[slot + j]; }}
  let inv = vec4<f32>(1.0f / s);
{stores}
}}
"""


def worker(rounds: int) -> None:
  """Times today's kernel and the probes on this process's adapter; prints one line each."""
  sys.path.insert(0, str(ROOT / "core"))
  import numpy as np
  import kernelgen as kg
  from kernelgen.compiler import compile_item
  from kernelgen.graph.lazy import Buffer
  from kernelgen.graph.schedule import schedule
  rt = kg.Device["WEBGPU"]
  options = rt.render_options()
  data = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32) * 4
  data[1, :] = -np.inf
  data[2, 5] = np.nan
  data[3, :7] = -np.inf
  data[4, 9] = np.inf
  x = kg.Tensor(data, device="WEBGPU").realize()
  with np.errstate(all="ignore"):
    e = np.exp(data.astype(np.float64) - data.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
  [item] = schedule([x.softmax(-1).node])
  today = compile_item(item, "wgsl", options)
  out = Buffer("WEBGPU", item.out.dtype, item.out.size)
  handles = [out.handle, x.node.buffer.handle]
  variants = {f"today ({options.get('adapter')})": today, **_probes(today, options)}
  times = {name: [] for name in variants}
  errors = {}
  for name, kernel in variants.items():
    rt.run(kernel, handles, {}, timed=True)
    got = np.frombuffer(rt.copyout(out.handle), np.float32).reshape(ROWS, COLS)
    errors[name] = _error(np, got, ref)
  for _ in range(rounds):
    for name, kernel in variants.items():
      times[name].append(rt.run(kernel, handles, {}, timed=True) * 1e3)
  print(f"adapter: {dict(rt.adapter.info).get('device', '?')}")
  for name, ms in times.items():
    print(f"{name:28s} best {min(ms):7.2f}  median {statistics.median(ms):7.2f} ms  {errors[name]}")


def _probes(today, options: dict) -> dict:
  """{name: CompiledKernel}: `today` with its source, workgroup and dispatch swapped for each
  probe (subgroup folds only where the device has subgroups)."""
  subgroups = ("subgroups",) if options.get("subgroups") else ()
  shapes = [(lanes, rows, False) for lanes, rows in SHAPES] + \
    [(lanes, rows, True) for lanes, rows in SHAPES if subgroups and lanes == 4]
  probes = {}

  def add(name, source, size, groups, features=()):    # size: the workgroup's (x, y)
    source = source.replace("ENTRY", today.launch.entry_point)
    launch = dataclasses.replace(today.launch, source=source, workgroup_size=(*size, 1),
                                 dispatch=(groups, 1, 1), grid=(), features=features)
    probes[name] = dataclasses.replace(today, source=source, launch=launch,
                                       global_size=launch.dispatch, local_size=(*size, 1))
  for lanes, rows, sub in shapes:
    for guarded in (False, True):
      add(f"regs G={lanes} R={rows}{' sub' if sub else ''} {'guarded' if guarded else 'bare'}",
          regs_wgsl(lanes, rows, guarded, sub), (lanes, rows), ROWS // rows,
          subgroups if sub else ())
  for local in (64, 16):
    add(f"private local={local}", private_wgsl(local), (local, 1), ROWS // local)
  return probes


def _error(np, got, ref) -> str:
  """Max relative error over the finite reference, and whether NaN rows match."""
  finite = np.isfinite(ref)
  nan_ok = bool(np.array_equal(np.isnan(got), np.isnan(ref)))
  with np.errstate(all="ignore"):
    err = float(np.max(np.abs(got[finite] - ref[finite]) / np.maximum(ref[finite], 1e-30)))
  return f"max_rel_err {err:.1e} nan_rows_match {nan_ok}"


def chromium(rounds: int, shapes=((4, 1), (16, 1)), compiled=(), adapter="swiftshader") -> None:
  """The guarded probes in Chromium's `adapter` through bench/peers_probe.py (its page has no
  subgroups): each probe is today's program with its one kernel's source and dispatch swapped."""
  sys.path.insert(0, str(ROOT / "bench"))
  sys.path.insert(0, str(ROOT / "core"))
  import peers_probe
  plain = peers_probe.variant_program

  def variant(row, adapter, options, files, folder, tag):
    lanes, rows = options.pop("_regs", (0, 0))
    local = options.pop("_private", 0)
    program = plain(row, adapter, options, files, folder, tag)
    if local:                      # the row read once into a function-scope array
      [kernel] = program["kernels"]
      kernel["source"] = private_wgsl(local).replace("ENTRY", kernel["entry"])
      kernel["dispatch"] = [ROWS // local, 1, 1]
      return program
    if not lanes:                  # a compiled variant (other options)
      return program
    [kernel] = program["kernels"]
    kernel["source"] = regs_wgsl(lanes, rows, True).replace("ENTRY", kernel["entry"])
    kernel["dispatch"] = [ROWS // rows, 1, 1]
    return program
  peers_probe.variant_program = variant
  variants = {f"regs G={lanes} R={rows}": {"_regs": (lanes, rows)} for lanes, rows in shapes}
  if adapter == "swiftshader":     # (lavapipe takes over a minute to build each array probe)
    variants.update({f"private local={n}": {"_private": n} for n in (64, 16)})
  variants.update({f"kg {json.dumps(o)}": o for o in compiled})
  peers_probe.probe("softmax", adapter, rounds, variants, [])


def main(argv: list[str]) -> None:
  if argv[:1] == ["--chromium"]:
    adapter = next((a for a in argv if a in ICDS), "swiftshader")
    argv = [a for a in argv if a not in ICDS]
    compiled = [json.loads(a) for a in argv[2:]]     # more compiled variants: options as JSON
    shapes = ((16, 1), (8, 1)) if adapter == "lavapipe" else ((4, 1), (16, 1))
    chromium(int(argv[1]) if argv[1:] else 10, shapes, compiled, adapter)
    return
  adapter = argv[0] if argv and argv[0] in ICDS else "swiftshader"
  rounds = int(argv[-1]) if argv and argv[-1].isdigit() else 15
  env = {**os.environ, "VK_ICD_FILENAMES": ICDS[adapter], "VK_DRIVER_FILES": ICDS[adapter],
         "PYTHONPATH": str(ROOT / "core")}
  subprocess.run([sys.executable, __file__, "--worker", str(rounds)], env=env, check=True)


if __name__ == "__main__":
  if sys.argv[1:2] == ["--worker"]:
    worker(int(sys.argv[2]))
  else:
    main(sys.argv[1:])
