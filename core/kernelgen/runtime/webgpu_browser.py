"""Device WEBGPU inside the web page: kernels run on navigator.gpu through web/gpu.js.

The only module that imports `js`/`pyodide` (lazily, so the core still imports in CPython). It
passes plain data across the FFI — a Launch as JSON, buffer ids, bytes — to gpu.js's
GpuExecutor, which owns every WebGPU object. WebGPU reads are asynchronous: with JSPI
(`pyodide.ffi.run_sync`, Chromium 137+) `.tolist()` simply blocks; without it, reading raises
a clear error and `await read_async(tensor)` is the way to get the bytes.

Running a kernel waits for nothing once its pipeline is compiled: gpu.js's enqueue() encodes it
into a batch that is submitted and checked later, and the first read (or the next compile)
raises a failed dispatch's typed error, naming the batch's kernels. Each kernel's launch
object and the device's render options are converted across the FFI once, not per kernel.
Buffers read together (kg.numpy_of: a model call's outputs) go through one staging buffer and
one map (gpu.js readMany), as natively.
"""
from __future__ import annotations

import time

from ..errors import CompileError, DeviceError, KernelgenError, LimitError
from ..render.wgsl.adapters import SOFTWARE, classify
from ..uop.program import CompiledKernel, launch_dispatch, launch_work, serves, variant_for
from .base import Runtime

# WGSL renderer option -> the WebGPU device limit it comes from
LIMIT_OPTIONS = {"max_storage_buffers": "maxStorageBuffersPerShaderStage",
                 "max_workgroup_size": "maxComputeInvocationsPerWorkgroup",
                 "max_workgroups_per_dim": "maxComputeWorkgroupsPerDimension",
                 "max_buffer_bytes": "maxStorageBufferBindingSize",
                 "max_uniform_buffers": "maxUniformBuffersPerShaderStage",
                 "max_uniform_bytes": "maxUniformBufferBindingSize"}

# When a symbolic kernel's variant not built yet is built (ski rental; the same rule as an
# exported bundle's, export/loader_builds.js DEFAULT_MS_PER_BYTE): until it is built, the kernel
# runs its values (renting); once the time its runs lost reaches the variant's build cost, it is
# built (buying).
# - cost: the variant's WGSL bytes x the build rate (build_rate): the time the background builds
#   so far added to the reads they overlapped, per source byte: each read's runs during a build
#   against the time per work (launch_work) of the last read of their like (the same kernels,
#   variants taken) with no build under way. That is what a build costs the runs, not its own
#   wall time: a driver that compiles on another thread builds beside the runs, one that
#   compiles on the runs' thread holds them up (measure). Before any background build was
#   measured: the wall time the driver was busy building pipelines per source byte (gpu.js
#   stats pipelineBusyMs / pipelineBytes), or DEFAULT_MS_PER_BYTE;
# - lost: at each read, the wall time from the first run since the previous read to the read is
#   shared out among those runs' kernels by their estimated work at the bound values (Launch .work:
#   multiply-adds or outputs, times the padding their grid launches there: whole tiles at small
#   values; launch_work) under the launch that runs: a built variant's own grid, so a variant built
#   for small values counts its own work, not its kernel's padding, and does not absorb the charge
#   of the unbuilt variants beside it (issue 37). A built variant's work counts at its measured
#   rate (time per work, the kernels' being 1: rate): at the first read no build overlapped that
#   takes it where the last such read of the same shape took its kernel, its runs took what the
#   kernel's did then less the time saved (a variant of the same work at a value, without padding
#   to save, runs ~10x faster on lavapipe: counted at its work it kept the charge of the unbuilt
#   ones beside it). Each variant asked for is charged the share of the kernels that ran in its
#   place: their own time, the most it could save (an upper bound; a run of one kernel charges its
#   whole time). Charged the run's whole time each, the variants of every layer's matmuls that one
#   128-token prefill asks for were all bought in its first rounds, and their builds slowed
#   SwiftShader's decode (5.0 tok/s, 8.6 once settled); shared out equally, the prefill's were
#   never bought (issue 37). So the charges of one read add up to at most its time, and a variant
#   whose kernels are most of a run is bought first;
# - at a read, a variant charged its cost or more is queued; the builds start after a read, one
#   at a time, the shortest first (build_next). So a build costs at most the time already lost
#   (at most twice the best choice made knowing the future), and a value asked once for a short
#   run builds nothing.
# Measured (bench/lm_page.py smollm2-135m q4, 2 layers, 128-token prompt, 32 tokens, 6 rounds,
# A/B against the whole-run rule in turn, wall ms, loaded machine): SwiftShader decode 6.9-14.5 s
# per 31 tokens against 12.9-19.3, prefill 1.1-1.6 s against 1.7-3.7 (load 4-8); lavapipe
# decode alike (2.0-3.0 s against 1.7-2.6) but its prefill's 7 variants (365-396 KB each, 7-23 %
# of the prefill's work each) not bought in 7 prompts: 0.6-1.1 s against 0.18-0.23 once the
# whole-run rule bought them (load 3-5): open, issue 37 asks them bought in 1-3 prompts.
# Priced at what the builds cost the runs (measure) instead of their wall time, the same bench
# A/B against main's whole-run rule in turn: the background builds held SwiftShader's runs up about
# as long as they took (0.059 ms per byte measured against 0.066 wall, load 18), lavapipe's less
# (0.015 against 0.027 at load 18, 0.006 against 0.025 at load 12): lavapipe's decode variants
# bought in 1-3 prompts, its prefill's biggest two (each charged ~0.2 s a prompt at 2 s) due
# about the 7th prompt, the others later: their shares of the prefill's work undercount their
# time (the LM head's variant, built, keeps ~75 % of the work), so lavapipe's prefill stays at
# 2.9-5.4 s against main's 1.5-2.1 from its 3rd prompt (load 10-12): open. SwiftShader: prefill
# 5.6-11.9 s, decode 1.1-2.3 tok/s against main's 12-28 s and 0.7-1.0 (load 18-22).
# Logged in lavapipe's 128-token prefill (--last-logits: its LM head is static, so main's shares
# are the same there): the 7 variants asked for hold 89 % of the work, 22 % each the two
# 1536-wide, bought by the 3rd prompt; built, they counted 44 % of the work while running
# faster: measured, their rate came out 0.28-0.34 (load 11), so the others' shares rise. Whether
# the prefill's variants are bought in 1-3 prompts still turns on the build rate measured first:
# 0.001 ms per byte (all 7 bought at the first prompt; prefill 0.5-0.6 s from the 4th, load 11)
# or 0.006-0.011 (the two by the 3rd, the rest later); A/B runs against main (load 10-16) fall
# within that spread either way.
# 20 ms per KB: SwiftShader's ~300 KB (9,000-line) 128-row matmul variants take 4-10 s
DEFAULT_MS_PER_BYTE = 0.02
# The least share of its runs' time a built variant is measured to take (rate)
RATE_FLOOR = 0.02

# gpu.js's error types -> kernelgen's typed errors
ERRORS = {"CompileError": CompileError, "LimitError": LimitError, "DeviceError": DeviceError}


def _ffi():
  try:
    import js
    from pyodide import ffi
  except ImportError:
    raise DeviceError("the browser WEBGPU runtime only works inside Pyodide in a web page; "
                      "in CPython use the native WEBGPU device (pip install wgpu)") from None
  return js, ffi


def typed_error(exc: BaseException) -> KernelgenError:
  """A kernelgen error from a JavaScript exception thrown by gpu.js."""
  js_error = getattr(exc, "js_error", None)
  kind = getattr(js_error, "type", None) if js_error is not None else None
  message = str(getattr(js_error, "message", None) or exc)
  if kind == "CompileError":
    line = getattr(js_error, "line", None)
    return CompileError(message, line=int(line) if isinstance(line, (int, float)) else None)
  return ERRORS.get(kind, DeviceError)(message)


def cpu_adapter(adapter: dict) -> bool:
  """Whether gpu.js's adapter description is of a CPU implementation (SwiftShader, lavapipe, a
  fallback adapter): its grouped reductions read a run per lane (optimize.py, group_chunk)."""
  return classify(adapter) in SOFTWARE


class BrowserWebGPU(Runtime):
  name = "WEBGPU"
  target = "wgsl"

  def __init__(self, gpu=None, jspi: bool = True):
    self.js, self.ffi = _ffi()
    if gpu is None:
      raise DeviceError("this page has no WebGPU adapter, so there is no WEBGPU device: use "
                        "PYTHON (or a browser with WebGPU enabled)")
    self.gpu = gpu     # a JsProxy of web/gpu.js's GpuExecutor
    self.jspi = jspi
    self.handles: set[int] = set()  # buffers allocated and not freed yet
    self.launches: dict[int, tuple] = {}   # id(kernel) -> (kernel, launch dict, as a JS object)
    self.options: tuple = (None, None)    # (gpu.generation, render_options()) last read
    # id(variant) -> [variant, ms its runs lost so far] (pick charges it at a read: build_next)
    self.asked: dict[int, list] = {}
    # the entries asked for since the last read -> [entry, work of the kernels run in their place]
    self.asking: dict[int, list] = {}
    self.since: float | None = None     # when the first run since the last read began (clock, ms)
    self.work = 0.0                     # the work of the runs since then (launch_work)
    self.time = 0.0                     # their estimated time: each one's work x its rate (pick)
    self.ran: list[tuple] = []          # each run since then: (kernel taken, work, time, variant?)
    self.shape: list[tuple] = []        # each run since then: (id(kernel asked), bound values)
    self.rates: dict[int, list] = {}    # id(built variant) -> [variant, time per work] (rate)
    # a read's shape -> (ms, ran) of its last clean read, and (ms, ran) of the last one before
    # that took other kernels (rate)
    self.last: dict[tuple, tuple] = {}
    self.queued: dict[int, CompiledKernel] = {}   # variants to build, after a read (build_next)
    self.background: CompiledKernel | None = None   # the variant build_next started last
    self.clean: dict[tuple, float] = {}   # a read's like -> its ms per work, no build under way
    # id(variant) -> [variant, ms it added to the reads so far, whether each had a base]
    self.during: dict[int, list] = {}
    self.overlapped: set[int] = set()   # the background builds under way since the last read
    self.picked: list[int] = []         # the kernels the runs since the last read took
    self.foreground = [0.0, 0]          # measured background builds: [ms added, WGSL bytes]

  def info(self) -> dict:
    return self.gpu.info().to_py()

  def render_options(self) -> dict:
    """What the WGSL renderer may use on this device: its limits and f16/subgroups (read again
    only when gpu.js has made a new device)."""
    generation = getattr(self.gpu, "generation", None)
    if generation is None or generation != self.options[0]:
      self.options = (generation, self._render_options())
    return dict(self.options[1])

  def _render_options(self) -> dict:
    info = self.info()
    limits, features = info.get("limits", {}), info.get("features", ())
    options = {key: int(limits[name]) for key, name in LIMIT_OPTIONS.items() if name in limits}
    options["f16"] = "shader-f16" in features
    options["subgroups"] = "subgroups" in features
    # the adapter's class picks measured defaults (render/wgsl/adapters.py: CPU adapters read a
    # run per lane in grouped reductions, group_chunk)
    options["adapter"] = classify(info.get("adapter") or {})
    return options

  def _call(self, method: str, *args):
    try:
      return getattr(self.gpu, method)(*args)
    except self.ffi.JsException as exc:
      raise typed_error(exc) from None

  def _wait(self, promise, what: str):
    """The value of a JS promise, blocking through JSPI."""
    if not self.ffi.can_run_sync():
      raise DeviceError(f"{what} needs to wait for the GPU, which this browser cannot do "
                        "synchronously (no JSPI): use `await read_async(tensor)` from "
                        "kernelgen.runtime.webgpu_browser")
    try:
      return self.ffi.run_sync(promise)
    except self.ffi.JsException as exc:
      raise typed_error(exc) from None

  def alloc(self, nbytes: int):
    handle = int(self._call("alloc", nbytes))
    self.handles.add(handle)
    return handle

  def copyin(self, handle, data) -> None:
    self._call("write", handle, self.ffi.to_js(memoryview(bytes(data))))

  def copyout(self, handle) -> bytes:
    return self.copyout_many([handle])[0]

  def copyout_many(self, handles: list) -> list[bytes]:
    """The bytes of each buffer, read back together: gpu.js's readMany copies them into one
    staging buffer, joined to the open batch's submit, and maps it once."""
    read = self._call("readMany", self.ffi.to_js(list(handles)))
    data = [each.to_bytes() for each in self._wait(read, "reading a tensor")]
    self.build_next()
    return data

  def free(self, handle) -> None:
    self.handles.discard(handle)
    try:
      self.gpu.free(handle)
    except Exception:  # freeing after a lost device: nothing left to free
      pass

  def release_unreachable(self) -> int:
    """Free every buffer of this device that no live Buffer holds (call after gc.collect());
    returns how many were freed. Buffers have no finalizer, so this is what frees them. Only
    WEBGPU buffers count: another device's handle may be anything (PYTHON's is a bytearray)."""
    import gc
    from ..graph.lazy import Buffer
    live = {o._handle for o in gc.get_objects() if isinstance(o, Buffer) and o.device == "WEBGPU"}
    dead = self.handles - live
    for handle in dead:
      self.free(handle)
    return len(dead)

  def _launch(self, kernel: CompiledKernel):
    """(the launch as plain data, the same as a JS object made once per kernel)."""
    known = self.launches.get(id(kernel))
    if known is None or known[0] is not kernel:
      if len(self.launches) > 4096:   # kernels dropped from the compile cache
        self.launches.clear()
      launch = kernel.launch.to_json()
      js_launch = self.ffi.to_js(launch, dict_converter=self.js.Object.fromEntries)
      known = self.launches[id(kernel)] = (kernel, launch, js_launch)
    return known[1], known[2]

  def prepare(self, kernel: CompiledKernel) -> None:
    """Start creating the kernel's pipeline in the page (gpu.js prepare:
    createComputePipelineAsync, not waited for), so the driver compiles it, and every other
    kernel prepared, while Python goes on; a failure is raised where the kernel runs. A
    symbolic kernel's variants (lowering/variants.py) are not started here: the kernel serves
    every bound value, and a variant is built once runs ask for it (pick)."""
    try:
      self.gpu.prepare(self._launch(kernel)[1])
    except Exception:   # no device yet, or a lost one: run() says what is wrong
      pass

  def ready(self, kernel: CompiledKernel) -> bool:
    """Whether the kernel's pipeline is no longer being built by prepare (gpu.js pipelineState:
    createComputePipelineAsync under way); a failed or dropped build counts as ready, so that
    run() builds it again or says why it fails. Its variants do not count: run() never takes one
    that is not built (pick)."""
    return self._state(kernel) != "making"

  def _state(self, kernel: CompiledKernel) -> str:
    """gpu.js pipelineState of the kernel's launch: 'ready', 'making' or 'none'."""
    try:
      return str(self.gpu.pipelineState(self._launch(kernel)[1]))
    except Exception:   # no device yet, or a lost one: run() says what is wrong
      return "none"

  def pick(self, kernel: CompiledKernel, var_values: dict[str, int]):
    """The kernel to run for the dims' bound values: the variant whose range holds them first
    (variant_for) where its pipeline is built, else the first built variant that serves them
    (uop/program.py serves: never a pin of another value), else the kernel itself (prepared
    with it; it serves every value). A variant not built is never dispatched: asked for, it is
    charged its share of the runs' time at the next read (the estimated work of what runs in
    its place over theirs, each launch's own: charge) and built in the background once that
    reaches its build cost (DEFAULT_MS_PER_BYTE's comment), and the runs after its build take
    it."""
    if self.since is None:
      self.since, self.picked, self.ran, self.shape = self.clock(), [], [], []
      building = self.background is not None and self._state(self.background) == "making"
      self.overlapped = {id(self.background)} if building else set()
    chosen, wanted = self._choose(kernel, var_values)
    work = launch_work(chosen.launch, var_values)   # under the kernel that runs (charge)
    rate = self._rate_of(chosen)
    time = work * (1.0 if rate is None else rate)
    self.work += work
    self.time += time
    self.ran.append((chosen, work, time, chosen is not kernel))
    self.shape.append((id(kernel), tuple(sorted(var_values.items()))))
    if wanted is not None:
      self.asking.setdefault(id(wanted[0]), [wanted, 0.0])[1] += time
    self.picked.append(id(chosen))
    return chosen

  def _choose(self, kernel: CompiledKernel, var_values: dict[str, int]):
    """pick's choice: (the kernel to run, the self.asked entry of the variant asked for or None)."""
    variants = getattr(kernel, "variants", ()) or ()
    if not variants or not var_values:
      return kernel, None
    fits = [v for dim, most, v in variants if serves(dim, most, v, var_values)]   # (no other pin)
    if not fits:
      return kernel, None
    built = next((v for v in fits if self._state(v) == "ready"), None)
    entry = None
    if fits[0] is not built and self._state(fits[0]) == "none":
      wanted = fits[0]
      entry = self.asked.get(id(wanted))
      if entry is None or entry[0] is not wanted:
        if len(self.asked) > 4096:
          self.asked.clear()
        entry = self.asked[id(wanted)] = [wanted, 0.0]
    return (built if built is not None else kernel), entry

  def clock(self) -> float:
    """Milliseconds (a test may stand in a fake clock on the instance)."""
    return time.perf_counter() * 1e3

  def ms_per_byte(self) -> float:
    """The page's build rate: the wall time the driver was busy building pipelines per WGSL byte
    built (gpu.js stats), or DEFAULT_MS_PER_BYTE before any build was timed."""
    stats = getattr(self.gpu, "stats", None)
    busy = float(getattr(stats, "pipelineBusyMs", 0) or 0)
    built = float(getattr(stats, "pipelineBytes", 0) or 0)
    return busy / built if busy > 0 and built > 0 else DEFAULT_MS_PER_BYTE

  def build_rate(self) -> float:
    """The rate (ms per WGSL byte) a variant's build cost is priced at: the time the background
    builds measured so far added to the reads they overlapped, per byte (DEFAULT_MS_PER_BYTE's
    comment; none or less: 0), or ms_per_byte before any was."""
    ms, built = self.foreground
    return max(0.0, ms) / built if built > 0 else self.ms_per_byte()

  def measure(self, ms: float, work: float) -> None:
    """At a read: runs of `ms` and estimated `work` that no background build overlapped are the
    base of their like (the kernels they took), else their time over the base's ms per work is
    shared out among the builds that did (one of them is not measured where the like has no
    base); a build done is added to self.foreground."""
    like = tuple(self.picked)
    base = self.clean.get(like)
    if not self.overlapped:
      if len(self.clean) > 4096:
        self.clean.clear()
      self.clean[like] = ms / max(work, 1e-30)
    for key in self.overlapped:
      entry = self.during.get(key)
      if entry is not None and base is None:
        entry[2] = False
      elif entry is not None:
        entry[1] += (ms - base * work) / len(self.overlapped)
    for key, (variant, added, known) in list(self.during.items()):
      if self._state(variant) != "making":
        del self.during[key]
        if known:
          self.foreground[0] += added     # signed: a read's noise either way evens out
          self.foreground[1] += len(variant.launch.source)

  def charge(self) -> None:
    """At a read: charge each variant asked for since the last read its kernels' share of the
    wall time since the first run (their work over the runs', launch_work of the launches that
    ran: a built variant's own), and queue those whose
    charges reach their build cost (ski rental: DEFAULT_MS_PER_BYTE's comment)."""
    if self.since is None:
      return
    lost, total = self.clock() - self.since, self.time
    self.measure(lost, self.work)
    if not self.overlapped:
      self.rate(lost)
    rate = self.build_rate()
    for key, (entry, time) in self.asking.items():
      entry[1] += lost * time / max(total, time, 1e-30)
      if entry[1] >= rate * len(entry[0].launch.source):
        self.queued[key] = entry[0]
    self.asking, self.since, self.work, self.time = {}, None, 0.0, 0.0

  def _rate_of(self, kernel: CompiledKernel) -> float | None:
    """The built variant's measured time per work (rate), or None."""
    known = self.rates.get(id(kernel))
    return known[1] if known is not None and known[0] is kernel else None

  def rate(self, ms: float) -> None:
    """At a read no build overlapped (`ms` since the first run): where the last such read of the
    same shape (the kernels asked at the same bound values) that took other kernels took them at
    some runs, each now a built variant, those variants get the rate (time per work, the kernels'
    being 1) that makes their runs' time what the same runs took then less what this read saved:
    the time a built variant takes, measured (at least RATE_FLOOR of what its runs took, at most
    all of it), again at each such read (the first after a build may pay the driver's first-use
    compile). As export/loader_builds.js rate."""
    shape = tuple(self.shape)
    last = self.last.get(shape)
    same = last is not None and len(last[1]) == len(self.ran) and all(
      r[0] is k[0] for r, k in zip(self.ran, last[1]))
    before = last[2] if same else last and last[:2]
    if len(self.last) > 4096:
      self.last.clear()
    self.last[shape] = (ms, list(self.ran), before)
    if before is None or len(before[1]) != len(self.ran):
      return
    then_ms, then = before
    moved = [i for i, r in enumerate(self.ran) if r[0] is not then[i][0]]
    if not moved or not all(self.ran[i][3] for i in moved):
      return
    took = sum(then[i][2] for i in moved) * then_ms / max(sum(r[2] for r in then), 1e-30)
    now = min(took, max(RATE_FLOOR * took, took - (then_ms - ms)))    # ms, then and now
    if len(self.rates) > 4096:
      self.rates.clear()
    for i in moved:
      variant, work = self.ran[i][:2]
      self.rates[id(variant)] = [variant, now / max(took, 1e-30) * then[i][2] / max(work, 1e-30)]

  def build_next(self) -> None:
    """After a read: charge the variants asked for (charge), then start building the queued
    variant of the shortest WGSL (gpu.js prepare) unless the last one started is still building:
    one at a time, after a read, so that the builds hold up no result and leave the CPU
    adapters' cores to the runs (as export/loader_builds.js startBuilds)."""
    self.charge()
    if not self.queued or (self.background is not None and
                           self._state(self.background) == "making"):
      return
    key = min(self.queued, key=lambda k: len(self.queued[k].launch.source))
    self.background = self.queued.pop(key)
    self.during[key] = [self.background, 0.0, True]
    self.prepare(self.background)

  def _dispatch(self, kernel: CompiledKernel, var_values: dict[str, int]):
    """The workgroups to launch where the kernel has a run-time grid (a JS array), else None
    (gpu.js launches launch.dispatch)."""
    if not kernel.launch.grid:
      return None
    return self.ffi.to_js(list(launch_dispatch(kernel.launch, var_values)))

  def run(self, kernel: CompiledKernel, handles: list, var_values: dict[str, int]) -> None:
    kernel = self.pick(kernel, var_values)    # a symbolic kernel's built variant for the values
    launch, js_launch = self._launch(kernel)
    values = [var_values[name] for name, _ in launch["uniforms"]]
    promise = self._call("enqueue", js_launch, self.ffi.to_js(list(handles)),
                         self.ffi.to_js(values), kernel.name, self._dispatch(kernel, var_values))
    if promise is not None and self.ffi.can_run_sync():   # its pipeline was compiled first
      self._wait(promise, "running a kernel")
    return None


  def time_run(self, kernel: CompiledKernel, handles: list, var_values: dict[str, int],
               repeat: int = 1) -> float:
    """Seconds the kernel took (GPU timestamps where the page's device has them, else the wall
    time until the queue drained): gpu.js's runTimed (`repeat` > 1: the mean of that many)."""
    if repeat > 1:
      return sum(self.time_run(kernel, handles, var_values) for _ in range(repeat)) / repeat
    kernel = variant_for(kernel, var_values)
    launch, js_launch = self._launch(kernel)
    values = [var_values[name] for name, _ in launch["uniforms"]]
    promise = self._call("runTimed", js_launch, self.ffi.to_js(list(handles)),
                         self.ffi.to_js(values), kernel.name, self._dispatch(kernel, var_values))
    return float(self._wait(promise, "timing a kernel (the search mode)")) * 1e-3


def install(gpu, jspi: bool = True) -> BrowserWebGPU:
  """Make the page's GPU the WEBGPU device (and the default one)."""
  from ..device import Device
  runtime = BrowserWebGPU(gpu, jspi=jspi)
  Device.register("WEBGPU", runtime)
  Device.DEFAULT = "WEBGPU"
  return runtime


async def read_async(tensor) -> bytes:
  """The bytes of `tensor` realized on the page's WEBGPU device, without JSPI."""
  from ..device import Device
  tensor.realize()
  buffer = tensor.node.buffer
  runtime = Device["WEBGPU"]
  try:
    data = await runtime.gpu.read(buffer.handle)
  except runtime.ffi.JsException as exc:
    raise typed_error(exc) from None
  runtime.build_next()
  return data.to_bytes()[:buffer.nbytes]
