"""The WGSL renderer: a linearized kernel to WGSL source and a `Launch` (program.py).

`legalize(sink, **options)` runs first, on the kernel graph: typed errors for what WGSL cannot do
(64-bit types, tensor cores, too many buffers), then the target's own rules (8/16-bit integer
arithmetic moved to 32 bits, f16 math in f32 without `shader-f16`, isnan as a bit test).
`render(kernel, **options)` writes the text. Values live in 32-bit registers: int8/int16 in i32
(sign-extended), uint8/uint16 in u32, f16 in f16 with the f16 option or else in f32. Memory keeps
numpy's layout: bool, 8- and 16-bit buffers (and f16 without the f16 option) are arrays of u32
words read with extractBits; a kernel that writes one uses `atomic<u32>` words and writes with
atomicAnd/atomicOr, so neighbouring threads writing bytes of one word never race.

The launch contract, the same for wgpu here and navigator.gpu in the page:
  - storage buffer `slot` is `@group(0) @binding(slot)`; `Binding.nbytes` is what to allocate;
    bindings with access "read" are read-only-storage, the others storage; a kernel that binds
    more buffers than max_storage_buffers binds its smallest read-only inputs of at most
    max_uniform_bytes as uniform buffers instead (`Binding.kind` "uniform": `array<vec4<T>, N>`
    of the buffer's 32-bit words, `nbytes` = 16 N bytes bound from offset 0; buffers get
    the UNIFORM usage and sizes in multiples of 16 for it);
  - scalar arguments (VAR) are the i32 fields, in `Launch.uniforms` order, of one uniform struct at
    `@group(0) @binding(uniform_binding(bindings))` (after the last storage buffer), 16 bytes a
    field group: the buffer is `4 * len(uniforms)` bytes rounded up to 16;
  - `Launch.dispatch` is the workgroup grid as launched: a grid over 65535 per dimension is folded
    across x/y/z and the kernel re-derives its group ids (extra groups return at once);
  - `Launch.features` names the WebGPU features the kernel needs ("subgroups", "shader-f16"). The
    source has `enable f16;` where it uses f16 but never `enable subgroups;`: naga (wgpu-native)
    rejects that directive and Tint (Chromium, Dawn) requires it, so a Tint runtime prepends it.

Subgroups (W14): SUBGROUP_REDUCE renders as subgroupAdd/Mul/Max/Min/And/Or/Xor (float max/min
keep IR's NaN propagation through subgroupAny), QUAD_BROADCAST as quadBroadcast(x, ju), SPECIAL
sglane is @builtin(subgroup_invocation_id), a workgroup buffer that ATOMIC_ADD uses is
array<atomic<i32>>, read with workgroupUniformLoad (itself a workgroup barrier, so a BARRIER
right before such a read is not written out).

The parts: target.py (the WGSL Target, options, target facts, names, launch geometry and limits),
legalize.py (the checks and rules on the graph), expressions.py (a value's text), writer.py (the
statements of one kernel), adapters.py (option defaults per adapter class); this file puts the
module together (`legalize`, `render`, `buffer_limit`, `adapter_defaults`: what the WGSL Target
calls, render/target.py).
"""
from __future__ import annotations

from ...uop.ops import Ops, UOp
from ...uop.program import Binding, CompiledKernel, Kernel, Launch
from .adapters import defaults as adapter_defaults  # noqa: F401 (Target.adapter_defaults)
from .legalize import legalize
from .target import (HELPERS, SPECIAL_BITS, TARGET, binding_nbytes, buffer_limit, buffer_name,
                     check_buffer_count, check_buffer_sizes, check_workgroup, entry_name,
                     fold_grid, make_options, uniform_binding, uniform_nbytes,
                     uniform_slots)  # buffer_limit: Target's
from ..templates import ENTRY_MARK, Templates, buffer_mark, fill
from .writer import Writer


# ---- the module ----------------------------------------------------------------------------------

def _declarations(w: Writer, variables: tuple[UOp, ...]) -> list[str]:
  lines = []
  if variables:
    lines.append("struct KgVars {")
    lines += [f"  {w.var_fields[v]}: i32," for v in variables]
    lines.append("}")
    lines.append(f"@group(0) @binding({uniform_binding(w.kernel.buffers)}) "
                 f"var<uniform> kg_vars: KgVars;")
  for b in w.kernel.buffers:
    access = "read" if b.access == "read" and not w.atomic(b.slot) else "read_write"
    elem = "atomic<u32>" if w.atomic(b.slot) else "u32" if w.packed(b.slot) else w.reg(b.dtype)
    if b.slot in w.uniform:     # 16-byte words: uniform arrays' stride
      words = uniform_nbytes(b.dtype, b.size) // 16
      lines.append(f"@group(0) @binding({b.slot}) var<uniform> {w.buffer_names[b.slot]}: "
                   f"array<vec4<{elem}>, {words}>;")
      continue
    elem = w.reg(b.dtype.vec(4)) if b.slot in w.vec4 else elem
    lines.append(f"@group(0) @binding({b.slot}) var<storage, {access}> "
                 f"{w.buffer_names[b.slot]}: array<{elem}>;")
  for u in w.locals:
    elem = w.reg(u.dtype.base)
    elem = f"atomic<{elem}>" if u in w.atomic_locals else elem
    lines.append(f"var<workgroup> l{u.arg}: array<{elem}, {u.dtype.size}>;")
  return lines


def module_source(w: Writer, entry: str) -> str:
  """The whole WGSL module of the kernel `w` renders."""
  variables = w.vars
  for i, u in enumerate(w.kernel.uops):
    w.node(i, u)
  declarations = _declarations(w, variables)
  head = ["enable f16;", ""] if w.uses_f16 else []
  head += declarations + ([SPECIAL_BITS] if w.special_bits else [])
  helpers = [HELPERS[name] for name in HELPERS if name in w.helpers]
  lx, ly, lz = w.kernel.local_size
  lane = ", @builtin(subgroup_invocation_id) kg_sglane: u32" if w.uses_subgroups else ""
  lane += ", @builtin(num_workgroups) kg_nwg: vec3<u32>" if w.opaque else ""
  entry_lines = [f"@compute @workgroup_size({lx}, {ly}, {lz})",
                 f"fn {entry}(@builtin(workgroup_id) kg_wid: vec3<u32>, "
                 f"@builtin(local_invocation_id) kg_lid: vec3<u32>{lane}) {{"]
  parts = head + [""] + ([*"\n\n".join(helpers).split("\n"), ""] if helpers else [])
  return "\n".join(parts + entry_lines + w.prologue() + w.lines + ["}", ""])


# the modules written last, names left as marks (render/templates.py): a kernel of the same
# structure under other names is filled in, not written again
_TEMPLATES = Templates()


def _template(kernel: Kernel, opts, dispatch: tuple) -> tuple:
  """(the module with names left as marks, packed slots, uniforms, features, uniform slots) of
  `kernel`."""
  w = Writer(kernel, opts, dispatch)
  return (module_source(w, ENTRY_MARK), tuple(b.slot for b in kernel.buffers if w.packed(b.slot)),
          tuple((v.arg[0], "int32") for v in w.vars),
          ("shader-f16",) * w.uses_f16 + ("subgroups",) * w.uses_subgroups, w.uniform)


def _binding(b, packed: tuple, uniform: frozenset) -> Binding:
  if b.slot in uniform:
    return Binding(b.slot, b.name, b.dtype.name, b.size, b.access,
                   uniform_nbytes(b.dtype, b.size), "uniform")
  return Binding(b.slot, b.name, b.dtype.name, b.size, b.access,
                 binding_nbytes(b.dtype, b.size, b.slot in packed))


def render(kernel: Kernel, **options) -> CompiledKernel:
  """WGSL source and the Launch for a linearized kernel (options: see WGSLOptions)."""
  opts = make_options(options)
  check_buffer_count(len(kernel.buffers) - len(uniform_slots(kernel, opts)), opts)
  check_buffer_sizes(kernel, opts)
  check_workgroup(kernel.local_size, opts)
  dispatch = fold_grid(kernel.global_size, opts.max_workgroups_per_dim)
  template, packed, uniforms, features, uniform = _TEMPLATES.get(
    kernel, opts, lambda k: _template(k, opts, dispatch))
  entry = entry_name(kernel.name)
  source = fill(template, {ENTRY_MARK: entry, **{buffer_mark(b.slot): buffer_name(b.slot, b.name)
                                                 for b in kernel.buffers}})
  bindings = tuple(_binding(b, packed, uniform) for b in kernel.buffers)
  launch = Launch(TARGET, source, entry, bindings, tuple(kernel.local_size), dispatch, uniforms,
                  features)
  return CompiledKernel(kernel.name, TARGET, source, tuple(kernel.global_size),
                        tuple(kernel.local_size), kernel.buffers, launch, kernel)
