"""The WebGPU device limits a webgpu bundle needs beyond WebGPU's defaults (manifest `limits`).

WebGPU gives every device its default limits (8 storage buffers per shader stage, 256
invocations per workgroup, ...) unless requestDevice asks for more. A bundle compiled for more
(`kg.export(..., max_storage_buffers=32)`: the scheduler then splits fewer kernels, so a model
such as PP-OCRv4's recognizer runs in fewer, wider kernels) needs a device that was asked for
them. `declare(manifest)` derives what its kernels need from the manifest itself (bindings per
kernel, workgroup sizes, dispatches, storage sizes) and records each need over the default as
`limits: {WebGPU limit name: value}`; model.js requests those at requestDevice (an Error naming
the limit where the adapter cannot give it) and checks a device passed to load().
`check(m, fail)` is manifest.check's part for the field.
"""
from __future__ import annotations

# WebGPU's default limits (the spec's), for the limits a bundle's kernels can need
DEFAULTS = {"maxStorageBuffersPerShaderStage": 8, "maxComputeInvocationsPerWorkgroup": 256,
            "maxComputeWorkgroupSizeX": 256, "maxComputeWorkgroupSizeY": 256,
            "maxComputeWorkgroupSizeZ": 64, "maxComputeWorkgroupsPerDimension": 65535,
            "maxStorageBufferBindingSize": 134217728, "maxBufferSize": 268435456,
            "maxUniformBuffersPerShaderStage": 12, "maxUniformBufferBindingSize": 65536}


def _most(kernels: list, kind: str) -> int:
  """The most bindings of `kind` ("storage" or "uniform": a small read-only input bound as a
  uniform buffer, and the kernel's dims) any of the manifest's `kernels` has."""
  return max((sum(b.get("kind", "storage") == kind for b in k["bindings"]) +
              (kind == "uniform" and bool(k.get("uniforms"))) for k in kernels), default=0)


def needs(manifest: dict) -> dict:
  """{limit: the most any kernel or storage of the manifest needs} for every limit in DEFAULTS."""
  launches = [v for k in manifest["kernels"] for v in [k, *k.get("variants", ())]]
  sizes = [v["workgroup_size"] for v in launches]
  biggest = max((s["nbytes"] for s in manifest["storage"]), default=0)
  uniform = [b["nbytes"] for k in manifest["kernels"] for b in k["bindings"]
             if b.get("kind") == "uniform"]
  return {"maxStorageBuffersPerShaderStage": _most(manifest["kernels"], "storage"),
          "maxUniformBuffersPerShaderStage": _most(manifest["kernels"], "uniform"),
          "maxUniformBufferBindingSize": max(uniform, default=0),
          "maxComputeInvocationsPerWorkgroup": max((x * y * z for x, y, z in sizes), default=0),
          "maxComputeWorkgroupSizeX": max((s[0] for s in sizes), default=0),
          "maxComputeWorkgroupSizeY": max((s[1] for s in sizes), default=0),
          "maxComputeWorkgroupSizeZ": max((s[2] for s in sizes), default=0),
          "maxComputeWorkgroupsPerDimension": max((d for v in launches for d in v["dispatch"]),
                                                  default=0),
          "maxStorageBufferBindingSize": biggest, "maxBufferSize": biggest}


def declare(manifest: dict) -> None:
  """Record in `manifest["limits"]` each limit its kernels need over WebGPU's default (nothing
  when all fit the defaults)."""
  over = {name: value for name, value in needs(manifest).items() if value > DEFAULTS[name]}
  if over:
    manifest["limits"] = over


def check(m: dict, fail) -> None:
  """`fail(field, value, wants)` unless `m`'s limits (if any) name WebGPU limits with counts."""
  given = m.get("limits", {})
  if not isinstance(given, dict):
    fail("limits", given, "{WebGPU limit name: int}")
  for name, value in given.items():
    if name not in DEFAULTS or not isinstance(value, int) or isinstance(value, bool) or value < 1:
      fail(f"limits.{name}", value, f"an int >= 1 for one of {', '.join(DEFAULTS)}")
