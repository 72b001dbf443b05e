"""A webgpu bundle's second form of a kernel: the one compiled with subgroups.

`kg.export(..., format="webgpu")` compiles every kernel twice by default, without and with option
`subgroups` (grouped reductions folded per subgroup, lowering/quad_share.py's shared weight
loads). A kernel whose launch differs so (its source, sizes or variants) and binds the same
buffers keeps its plain form as it was and carries the other as its entry's `subgroups`:

    {"name": ..., "file": "k.wgsl", ..., "subgroups": {"file": "k_sg.wgsl", "entry_point": ...,
     "workgroup_size": [...], "dispatch": [...], "global_size": [...], "local_size": [...],
     "features": ["subgroups"], "grid"?: ..., "work"?: ..., "variants"?: [...]}}

and the manifest lists `"optional_features": ["subgroups"]`. model.js runs those forms only on a
device with the `subgroups` feature whose quads pass a probe at load (the layout quad_share
assumes); anywhere else it runs the plain forms, which give the same numbers. `features` (what a
device must have) names only what the plain forms need. `Bundle.run` (Python) runs the plain
forms.
"""
from __future__ import annotations

from ..uop.program import work_json

KEY = "subgroups"                  # a kernel entry's field holding its subgroups form
SUFFIX = "_sg"                     # that form's file names: <kernel>_sg<.wgsl>
# the fields a form may hold (a kernel's bindings and uniforms are the plain form's)
FIELDS = ("file", "entry_point", "workgroup_size", "dispatch", "global_size", "local_size",
          "features", "grid", "work", "variants")


def attach(entry: dict, plain, other, launch_entry, suffix: str) -> None:
  """Sets entry[KEY] to `other`'s launch (a CompiledKernel of the same schedule item as `plain`,
  entry's kernel) where it differs from plain's and binds the same slots alike; else nothing.
  launch_entry(compiled, file) is plan.py's launch fields of a kernel or variant."""
  if _binds(plain) != _binds(other) or not _differs(plain, other):
    return
  form = launch_entry(other, other.name + SUFFIX + suffix)
  if other.launch.work:
    form["work"] = work_json(other.launch.work)
  if other.variants:
    form["variants"] = [{"dim": dim, "most": most, **({"exact": True} if v.exact else {}),
                         **launch_entry(v, f"{other.name}{SUFFIX}_v{i}{suffix}")}
                        for i, (dim, most, v) in enumerate(other.variants, 1)]
  entry[KEY] = form


def _binds(compiled) -> tuple:
  launch = compiled.launch
  return (tuple((b.slot, b.access, b.nbytes, b.kind) for b in launch.bindings),
          tuple(launch.uniforms))


def _shape(compiled) -> tuple:
  launch = compiled.launch
  return (compiled.source, launch.entry_point, launch.workgroup_size, launch.dispatch,
          compiled.global_size, compiled.local_size, launch.features, launch.grid)


def _differs(plain, other) -> bool:
  """Whether the two compilations of one kernel launch anything differently."""
  ours = [_shape(plain)] + [(d, m, _shape(v)) for d, m, v in plain.variants]
  theirs = [_shape(other)] + [(d, m, _shape(v)) for d, m, v in other.variants]
  return ours != theirs


def launches(kernel: dict) -> list:
  """A kernel entry's launches that name a source file: it, its variants, its subgroups form
  and that form's variants."""
  form = kernel.get(KEY)
  forms = [kernel] + ([form] if isinstance(form, dict) else [])
  return [e for f in forms for e in [f, *f.get("variants", ())]]


def declare(manifest: dict) -> None:
  """manifest["optional_features"]: ["subgroups"] where some kernel has that form (else none)."""
  manifest.pop("optional_features", None)
  if any(KEY in k for k in manifest["kernels"]):
    manifest["optional_features"] = [KEY]


def fit(manifest: dict, sources: dict, needs, defaults: dict) -> None:
  """Drops each subgroups form that needs a device limit past what the plain forms declare
  (manifest.limits, else `defaults`; needs(manifest) is device_limits.needs), and the files no
  launch names then, from `sources`: the device load() makes for the plain forms runs either."""
  have = {**defaults, **manifest.get("limits", {})}
  for kernel in manifest["kernels"]:
    if KEY in kernel:
      need = needs({**manifest, "kernels": [chosen(kernel, True)]})
      if any(need[name] > have[name] for name in need):
        del kernel[KEY]
  named = {e["file"] for k in manifest["kernels"] for e in launches(k)}
  for name in [n for n in sources if n not in named]:
    del sources[name]
  declare(manifest)


def chosen(kernel: dict, form: bool) -> dict:
  """The kernel entry run: with `form`, its subgroups form over its own fields (bindings and
  uniforms kept), else the entry without that form."""
  plain = {k: v for k, v in kernel.items() if k != KEY}
  if not form or KEY not in kernel:
    return plain
  kept = {k: v for k, v in plain.items() if k not in FIELDS}
  return {**kept, **kernel[KEY]}
