"""Device WEBGPU in CPython: WGSL kernels run through wgpu-py (Mesa lavapipe on a machine with no
GPU; Vulkan, Metal or DX12 elsewhere).

It consumes a kernel's `Launch` (program.py) exactly as the page's navigator.gpu runtime does: the
bindings in slot order, the uniform buffer of scalar arguments after them (render/wgsl.py), the
dispatch as given. The features a launch lists must be the device's; naga takes subgroup builtins
without `enable subgroups;` (which it rejects), so the source is used as it is. wgpu is imported
when the runtime is created, so this module imports without it.

Pipelines are built once per source, with the layout their shader implies ("auto"), on one
builder thread: realize() hands each compiled kernel to `prepare` and runs it only after the
next kernel is compiled, so the driver's shader compile (lavapipe: LLVM, in C without the GIL)
overlaps kernelgen's compile of the next kernel; `run` waits for the pipeline it needs.

Dispatches are recorded into one command encoder (a compute pass each) and submitted together
when something needs their results or must come after them: a read back, a write (queue writes
run before unsubmitted work), a timed run, `synchronize`, or MAX_BATCH of them. A decode step
replayed under kg.jit, or an ONNX call replayed (run_many), is one submit, at its read back, whose
copies join it: every buffer read at once goes through one staging buffer, mapped once
(copyout_many). Buffers freed meanwhile are destroyed after that submit. A replay's launches
that bind the same buffers every call keep their bind groups (run_many's `keep`). `dispatches`,
`submits`, `maps` and `bind_groups` count them (benchmarks, tests).
"""
from __future__ import annotations

import os
import re
import struct
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor

from ..errors import CompileError, DeviceError
from ..render.wgsl.adapters import classify
from ..uop.program import (CompiledKernel, Launch, launch_dispatch, unnamed_source, variant_for,
                           with_variants)
from .base import Runtime
from .uniform_inlining import settle

# WebGPU features the device asks for when the adapter has them (standard names only, so what
# runs here also runs in a browser); wgpu-native calls subgroups "subgroup"
WANTED_FEATURES = ("shader-f16", "timestamp-query", "subgroups", "subgroup")

# a Launch's feature (WebGPU name) -> the names the device may have it under
FEATURE_NAMES = {"subgroups": ("subgroups", "subgroup"), "shader-f16": ("shader-f16",)}

# renderer option <- adapter limit
LIMIT_OPTIONS = {"max_storage_buffers": "max-storage-buffers-per-shader-stage",
                 "max_workgroup_size": "max-compute-invocations-per-workgroup",
                 "max_workgroups_per_dim": "max-compute-workgroups-per-dimension",
                 "max_buffer_bytes": "max-storage-buffer-binding-size",
                 "max_uniform_buffers": "max-uniform-buffers-per-shader-stage",
                 "max_uniform_bytes": "max-uniform-buffer-binding-size"}

# recorded dispatches submitted at once at the latest (a loop that never reads back)
MAX_BATCH = 256

# the position wgpu's shader errors give: "┌─ wgsl:LINE:COLUMN"
ERROR_POSITION = re.compile(r"wgsl:(\d+):(\d+)")


def _import_wgpu():
  try:
    import wgpu
  except ImportError:
    raise DeviceError("device WEBGPU needs wgpu-py: pip install kernelgen[webgpu] (and on Linux "
                      "without a GPU, apt-get install mesa-vulkan-drivers)") from None
  return wgpu


class _Buffer:
  """A device buffer and the byte count the caller asked for (the buffer is padded to 4)."""
  __slots__ = ("gpu", "nbytes")

  def __init__(self, gpu, nbytes: int):
    self.gpu, self.nbytes = gpu, nbytes


def _padded(nbytes: int) -> int:
  """Bytes of a buffer holding `nbytes`: a multiple of 16 (a uniform binding's array of 16-byte
  words reads whole words)."""
  return max(16, -(-nbytes // 16) * 16)


def _bound_bytes(binding, size: int) -> int:
  """Bytes of a buffer of `size` bytes that `binding` binds: all of it, a uniform binding its
  nbytes (at most the device's uniform binding size; the buffer may be bigger)."""
  if binding.kind != "uniform":
    return size
  if size < binding.nbytes:
    raise DeviceError(f"buffer {binding.name} has {size} bytes; its uniform binding reads "
                      f"{binding.nbytes}")
  return binding.nbytes


def compile_error(error: Exception, source: str) -> CompileError:
  """wgpu's shader error as a CompileError naming the WGSL line it points at."""
  message = str(error)
  found = ERROR_POSITION.search(message)
  line = int(found.group(1)) if found else None
  lines = source.splitlines()
  where = f"\nWGSL line {line}: {lines[line - 1].strip()}" if line and line <= len(lines) else ""
  return CompileError(f"the WebGPU shader compiler rejected the kernel's WGSL{where}\n{message}\n"
                      f"(this is a kernelgen bug: please report it with the WGSL source)",
                      source=source, line=line)


class WebGPURuntime(Runtime):
  name = "WEBGPU"
  target = "wgsl"
  keeps_bindings = True     # (run_many's `keep`: a bind group costs ~0.1 ms of wgpu-py's time)

  def __init__(self, power_preference: str = "high-performance"):
    if not os.access(os.environ.get("XDG_RUNTIME_DIR", "/nonexistent"), os.W_OK):
      os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="kernelgen-xdg-")
    self.wgpu = wgpu = _import_wgpu()
    try:
      self.adapter = wgpu.gpu.request_adapter_sync(power_preference=power_preference)
    except RuntimeError as error:
      raise DeviceError(f"no WebGPU adapter: {error}; install a Vulkan driver "
                        f"(apt-get install mesa-vulkan-drivers)") from None
    if self.adapter is None:
      raise DeviceError("no WebGPU adapter: install a Vulkan driver (mesa-vulkan-drivers)")
    self.features = sorted(f for f in WANTED_FEATURES if f in self.adapter.features)
    self.limits = dict(self.adapter.limits)
    self.device = self.adapter.request_device_sync(required_features=self.features,
                                                   required_limits=self.limits)
    self.pipelines: dict[tuple[str, str, tuple], tuple | Future] = {}
    self._builder: ThreadPoolExecutor | None = None    # started by the first prepare()
    self.timestamps = "timestamp-query" in self.features
    self._encoder = None          # the command encoder recording dispatches not yet submitted
    self._batched, self._doomed = 0, []    # its dispatches; buffers to destroy after it
    self.dispatches = self.submits = self.maps = 0     # (maps: read backs, one map each)
    self.bind_groups = 0          # bind groups made (a replay's kept ones: once)
    self._staging = None          # the buffer reads back go through (copyout_many)
    # lavapipe inlines a symbolic kernel's dims and compiles again at every dispatch until
    # told otherwise: each pipeline with uniforms settles that first (uniform_inlining.py)
    self.settles = classify(dict(self.adapter.info)) == "lavapipe"
    self.stand_ins, self.settled = [], 0

  def render_options(self) -> dict:
    options = {key: int(self.limits[limit]) for key, limit in LIMIT_OPTIONS.items()}
    options["f16"] = "shader-f16" in self.features
    options["subgroups"] = "subgroups" in self.features or "subgroup" in self.features
    # the adapter's class picks measured defaults (render/wgsl/adapters.py: a CPU adapter such as
    # lavapipe runs invocations as SIMD lanes, each lane of a grouped reduction reads one run)
    options["adapter"] = classify(dict(self.adapter.info))
    return options

  # ---- memory ----
  def alloc(self, nbytes: int) -> _Buffer:
    usage = self.wgpu.BufferUsage
    gpu = self.device.create_buffer(size=_padded(nbytes),
                                    usage=usage.STORAGE | usage.UNIFORM | usage.COPY_SRC |
                                    usage.COPY_DST)
    return _Buffer(gpu, nbytes)

  def copyin(self, handle: _Buffer, data) -> None:
    self.flush()
    data = bytes(data)
    pad = _padded(len(data)) - len(data)
    self.device.queue.write_buffer(handle.gpu, 0, data + b"\0" * pad)

  def copyout(self, handle: _Buffer) -> bytes:
    return self.copyout_many([handle])[0]

  def copyout_many(self, handles: list) -> list[bytes]:
    """The bytes of each buffer, read back together: copies into one staging buffer (kept and
    grown as needed) joined to the recorded dispatches' submit, then one map."""
    offsets, end = [], 0
    for handle in handles:
      offsets.append(end)
      end += -(-handle.gpu.size // 8) * 8       # (a mapped range starts at a multiple of 8)
    staging = self._staging
    if staging is None or staging.size < end:
      if staging is not None:
        staging.destroy()
      usage = self.wgpu.BufferUsage.MAP_READ | self.wgpu.BufferUsage.COPY_DST
      staging = self._staging = self.device.create_buffer(size=max(8, end), usage=usage)
    encoder = self._encoder or self.device.create_command_encoder()
    self._encoder = encoder
    for handle, offset in zip(handles, offsets):
      encoder.copy_buffer_to_buffer(handle.gpu, 0, staging, offset, handle.gpu.size)
    self.flush()
    self.maps += 1
    staging.map_sync(self.wgpu.MapMode.READ, 0, max(8, end))
    try:
      data = staging.read_mapped(0, max(8, end), copy=True)
    finally:
      staging.unmap()
    return [bytes(data[offset:offset + handle.nbytes]) for handle, offset in zip(handles, offsets)]

  def copy(self, source: _Buffer, target: _Buffer, nbytes: int) -> None:
    """Record a copy of `source`'s first bytes into `target` after the recorded dispatches (it
    joins their submit)."""
    encoder = self._encoder = self._encoder or self.device.create_command_encoder()
    encoder.copy_buffer_to_buffer(source.gpu, 0, target.gpu, 0,
                                  min(_padded(nbytes), source.gpu.size, target.gpu.size))

  def free(self, handle: _Buffer) -> None:
    if self._encoder is not None:      # (recorded work may use it; free may run inside `run`)
      self._doomed.append(handle.gpu)
    else:
      handle.gpu.destroy()

  def flush(self) -> None:
    """Submit the dispatches recorded so far (one submit), then destroy the buffers freed
    meanwhile."""
    if self._encoder is None:
      return
    self.device.queue.submit([self._encoder.finish()])
    self.submits += 1
    doomed = self._doomed        # (frees until here, garbage collected mid-call, joined it)
    self._encoder, self._batched, self._doomed = None, 0, []
    for gpu in doomed:
      gpu.destroy()

  # ---- kernels ----
  @staticmethod
  def _pipeline_key(launch: Launch) -> tuple:
    """What a launch's pipeline depends on: its source but for the entry point's name (kernels
    of one structure under other names, a model's layers, share one: ResNet-50's 74 kernels are
    48 structures), its bindings and its uniforms."""
    return (unnamed_source(launch.source, launch.entry_point),
            tuple((b.slot, b.access) for b in launch.bindings), len(launch.uniforms))

  def prepare(self, kernel: CompiledKernel) -> None:
    """Start building the pipeline of `kernel` on the runtime's builder thread: the driver
    compiles the shader there (lavapipe: LLVM, in C without the GIL) while the caller compiles
    the next kernel; `pipeline` waits for it. A symbolic kernel's variants start with it."""
    for each in with_variants(kernel):
      key = self._pipeline_key(each.launch)
      if key not in self.pipelines:
        if self._builder is None:
          self._builder = ThreadPoolExecutor(1, thread_name_prefix="kernelgen-webgpu-pipelines")
        self.pipelines[key] = self._builder.submit(self._build, each.launch)

  def pipeline(self, launch: Launch):
    """The (pipeline, bind group layout) of `launch`, built once per source and binding layout
    (here, or by `prepare`: its error, a CompileError, is raised here)."""
    key = self._pipeline_key(launch)
    found = self.pipelines.get(key)
    if found is None:
      found = self.pipelines[key] = self._build(launch)
    elif isinstance(found, Future):
      try:
        found = found.result()
      except BaseException:
        del self.pipelines[key]
        raise
      self.pipelines[key] = found
    return found

  def clear_pipelines(self) -> int:
    """Drop every pipeline built so far (the driver's compiled code goes with the last
    reference); returns how many. A later run builds its kernel's pipeline again: for a program
    that is done with a set of kernels (tests that run one model after another)."""
    count = len(self.pipelines)
    self.pipelines.clear()
    return count

  def _build(self, launch: Launch):
    missing = [f for f in launch.features
               if not any(name in self.features for name in FEATURE_NAMES.get(f, (f,)))]
    if missing:
      raise DeviceError(f"kernel {launch.entry_point} needs the WebGPU feature(s) "
                        f"{', '.join(missing)}, which this device does not have: compile it "
                        f"with subgroups=False (or without f16)")
    # the layout the shader implies ("auto"): every binding of a launch is one its WGSL declares
    # and uses (a kernel binds only the buffers it reads or writes), read-only where it only
    # reads. No layout objects to describe: wgpu-py builds each C struct type it passes from
    # its header the first time (tens of ms each), and a fresh process's first kernels paid
    # for the six that explicit bind group and pipeline layouts take.
    try:
      module = self.device.create_shader_module(code=launch.source)
      pipeline = self.device.create_compute_pipeline(
        layout=self.wgpu.AutoLayoutMode.auto,
        compute={"module": module, "entry_point": launch.entry_point})
      layout = pipeline.get_bind_group_layout(0)
    except self.wgpu.GPUError as error:
      raise compile_error(error, launch.source) from None
    if launch.uniforms and self.settles:
      settle(self, pipeline, layout, launch)
    return pipeline, layout

  def _bind_group(self, launch: Launch, layout, handles: list, var_values: dict):
    from ..render.wgsl.target import uniform_binding
    if len(handles) != len(launch.bindings):
      raise DeviceError(f"kernel needs {len(launch.bindings)} buffers, got {len(handles)}")
    entries = [{"binding": b.slot, "resource": {"buffer": h.gpu, "offset": 0,
                                                "size": _bound_bytes(b, h.gpu.size)}}
               for b, h in zip(launch.bindings, handles)]
    if launch.uniforms:
      missing = [name for name, _ in launch.uniforms if name not in var_values]
      if missing:
        raise DeviceError(f"no value given for the kernel argument(s) {', '.join(missing)}")
      data = b"".join(struct.pack("<i", int(var_values[name])) for name, _ in launch.uniforms)
      data += b"\0" * (-len(data) % 16)
      usage = self.wgpu.BufferUsage.UNIFORM | self.wgpu.BufferUsage.COPY_DST
      uniform = self.device.create_buffer_with_data(data=data, usage=usage)
      entries.append({"binding": uniform_binding(launch.bindings),
                      "resource": {"buffer": uniform, "offset": 0, "size": len(data)}})
    self.bind_groups += 1
    return self.device.create_bind_group(layout=layout, entries=entries)

  def time_run(self, kernel: CompiledKernel, handles: list, var_values: dict[str, int],
               repeat: int = 1) -> float:
    return self.run(kernel, handles, var_values, timed=True, repeat=repeat)

  def run(self, kernel: CompiledKernel, handles: list, var_values: dict[str, int] | None = None,
          timed: bool = False, repeat: int = 1) -> float | None:
    """Dispatch `kernel`; with `timed`, wait for it and return its seconds (GPU timestamps when
    the device has them, else wall clock up to a completed read-back); a symbolic kernel runs
    its variant for `var_values`. A timed run with `repeat` > 1 dispatches it that many times
    back to back in one pass between one pair of timestamps and returns the mean (a kernel
    shorter than the timer's noise)."""
    launch = variant_for(kernel, var_values).launch
    pipeline, layout = self.pipeline(launch)
    bind_group = self._bind_group(launch, layout, handles, var_values or {})
    if timed:
      self.flush()
    elif self._encoder is None:
      self._encoder = self.device.create_command_encoder()
    encoder = self._encoder if not timed else self.device.create_command_encoder()
    queries = self._queries() if timed and self.timestamps else None
    compute = encoder.begin_compute_pass(**({"timestamp_writes": queries[0]} if queries else {}))
    compute.set_pipeline(pipeline)
    compute.set_bind_group(0, bind_group)
    count = max(1, repeat) if timed else 1
    for _ in range(count):
      compute.dispatch_workgroups(*launch_dispatch(launch, var_values))
    compute.end()
    self.dispatches += count
    if not timed:
      self._batched += 1
      if self._batched >= MAX_BATCH:
        self.flush()
      return None
    if queries:
      encoder.resolve_query_set(queries[0]["query_set"], 0, 2, queries[1], 0)
    start = time.perf_counter()
    self.device.queue.submit([encoder.finish()])
    self.submits += 1
    if queries:
      begin, end = struct.unpack("<2Q", bytes(self.device.queue.read_buffer(queries[1])))
      return (end - begin) * 1e-9 / count
    self.synchronize()
    return (time.perf_counter() - start) / count

  def run_many(self, launches: list, var_values: dict[str, int], keep: dict | None = None) -> None:
    """Dispatch [(kernel, handles, key)] in order in one compute pass (WebGPU orders the
    dispatches of a pass and makes each one's writes visible to the next), recorded with the
    dispatches waiting for a submit: the read back that follows joins that one submit. A
    launch with a key reuses the bind group kept for it (and its dims' values) in `keep`."""
    encoder = self._encoder = self._encoder or self.device.create_command_encoder()
    compute = encoder.begin_compute_pass()
    for kernel, handles, key in launches:
      kernel = variant_for(kernel, var_values)
      pipeline, layout = self.pipeline(kernel.launch)
      compute.set_pipeline(pipeline)
      if key is not None and keep is not None:
        key = (key, id(kernel),      # (a variant's bind group fits its own pipeline only)
               tuple(var_values.get(name) for name, _ in kernel.launch.uniforms))
        group = keep.get(key)
        if group is None:
          group = keep[key] = self._bind_group(kernel.launch, layout, handles, var_values)
      else:
        group = self._bind_group(kernel.launch, layout, handles, var_values)
      compute.set_bind_group(0, group)
      compute.dispatch_workgroups(*launch_dispatch(kernel.launch, var_values))
    compute.end()
    self.dispatches += len(launches)
    self._batched += len(launches)
    if self._batched >= MAX_BATCH:
      self.flush()

  def _queries(self):
    query_set = self.device.create_query_set(type=self.wgpu.QueryType.timestamp, count=2)
    usage = self.wgpu.BufferUsage
    resolved = self.device.create_buffer(size=16, usage=usage.QUERY_RESOLVE | usage.COPY_SRC)
    writes = {"query_set": query_set, "beginning_of_pass_write_index": 0,
              "end_of_pass_write_index": 1}
    return writes, resolved

  def synchronize(self) -> None:
    """Wait for submitted work (queue.on_submitted_work_done_sync is broken in wgpu 0.32)."""
    self.flush()
    if not hasattr(self, "_fence"):
      self._fence = self.alloc(4)
    self.device.queue.read_buffer(self._fence.gpu)
