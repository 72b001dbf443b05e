// The WebGPU executor: runs kernelgen's plain launch descriptions (program.Launch.to_json()) on
// navigator.gpu. Works in a page and in a Web Worker. Python never touches WebGPU objects: it
// passes sources, sizes and bytes here (runtime/webgpu_browser.py) and gets bytes back.
// One concept, the page's WebGPU runtime (buffers, pipelines shared by source, batches,
// timestamps, lavapipe's inlining settle), so it runs past 500 lines.
//
//   const gpu = new GpuExecutor({ compatibility: false });
//   const info = await gpu.init();          // {available, reason?, adapter, features, limits}
//   const a = gpu.alloc(16); gpu.write(a, bytes);
//   await gpu.run(launch, [a, b], []);      // throws a KernelError {type, message, line}
//   const out = await gpu.read(b);          // Uint8Array
//
// Kernels are batched: enqueue() (what Python calls per kernel) encodes a dispatch into the open
// batch and returns at once when the pipeline is compiled. A batch is one command encoder, one
// pair of error scopes and one timestamp query set for up to BATCH_KERNELS kernels; flush()
// submits it (before any write, read, free or buffer growth, when full, and in a microtask once
// the caller yields) and pops its scopes; settle() (read() calls it) awaits those pops and
// throws the first error as a KernelError naming the batch's kernels. `stats` counts the
// submits, batches, kernels, workgroups dispatched and awaited scope pops (tests check that a
// steady training step awaits nothing per kernel, and that a symbolic size dispatches fewer).
//
// When the device is lost (a crash, a driver reset, device.destroy()), the next ensureDevice()
// makes a new one and reports that it did.
//
// On Mesa's lavapipe (Chromium's compatibility mode runs on it through ANGLE), a pipeline whose
// shader reads uniforms (a symbolic kernel's dims) is settled once it is built (settleInlining):
// lavapipe inlines the uniforms that loop bounds read and compiles the shader again at every
// dispatch until one inlined shader keeps most of the plain one's size; a dispatch of no
// workgroups with every uniform at SETTLE_VALUE does that first (runtime/uniform_inlining.py,
// the native runtime's same step). `stats.inliningSettles` counts them.

// Adapter features a kernel can use: requested whenever the adapter has them.
const OPTIONAL_FEATURES = ['shader-f16', 'subgroups', 'timestamp-query'];

// Buffer sizes are rounded up to this (WebGPU copies need multiples of 4; 16 suits vec4 access).
const ALIGN = 16;

// Kernels encoded into one command buffer at most before it is submitted (and timed together).
const BATCH_KERNELS = 64;

// The dims' value in a lavapipe pipeline's settling dispatch, and the bytes of each stand-in
// buffer it binds (runtime/uniform_inlining.py: SETTLE_VALUE, STAND_IN_BYTES).
const SETTLE_VALUE = 1 << 16;
const STAND_IN_BYTES = 256;

// Adapter names of Mesa's lavapipe (render/wgsl/adapters.py NAMES: lavapipe, llvmpipe).
const LAVAPIPE = /lavapipe|llvmpipe/i;

// Whether pipelines on this adapter settle lavapipe's uniform inlining: lavapipe by name, and an
// adapter that describes nothing (Chromium's compatibility mode on lavapipe through ANGLE gives
// an empty vendor, architecture, device and description; a dispatch of no workgroups costs
// other drivers nothing).
function settlesInlining(info) {
  const text = [info.vendor, info.architecture, info.device, info.description].join(' ');
  return LAVAPIPE.test(text) || (!text.trim() && !info.isFallbackAdapter);
}

// What a launch's pipeline depends on: its source but for the entry point's name, so that
// kernels of one structure under other names (a model's layers, `_n2`, `_n3`...) share one
// pipeline (uop/program.py unnamed_source; only the dispatch names the entry point).
const pipelineKey = (launch) => launch.source
  .split(new RegExp(`\\b${launch.entry_point}\\b`)).join('\0');

// A typed error that crosses to Python and to the page as plain data.
export class KernelError extends Error {
  constructor(type, message, line = null) {
    super(message);
    this.type = type;
    this.line = line;
  }

  toJSON() {
    return { type: this.type, message: this.message, line: this.line };
  }
}

function roundUp(n, to) {
  return Math.max(to, Math.ceil(n / to) * to);
}

function plainLimits(limits) {
  const out = {};
  for (const key in limits) {
    if (typeof limits[key] === 'number') out[key] = limits[key];
  }
  return out;
}

function adapterDescription(adapter, compatibility) {
  const info = adapter.info || {};
  return {
    vendor: info.vendor || '', architecture: info.architecture || '',
    device: info.device || '', description: info.description || '',
    isFallbackAdapter: Boolean(info.isFallbackAdapter ?? adapter.isFallbackAdapter),
    featureLevel: adapter.featureLevel || (compatibility ? 'compatibility' : 'core'),
  };
}

export class GpuExecutor {
  constructor({ compatibility = false } = {}) {
    this.compatibility = compatibility;  // ask for a compatibility-mode adapter (e.g. ANGLE/GL)
    this.device = null;
    this.adapterInfo = null;
    this.buffers = new Map();    // id -> {buffer, nbytes}
    this.pipelines = new Map();  // pipelineKey -> {pipeline, layout}
    this.making = new Map();     // source + entry point -> promise of one being created
    this.onPipelines = null;     // called with {made, making} as pipelines are created
    this.nextId = 1;
    this.lostReason = null;      // why the last device was lost, until a new one replaces it
    this.everHadDevice = false;
    this.pendingTimings = [];    // promises of [{name, ms}]
    this.batch = null;           // the open batch (see the header), or null
    this.checks = [];            // promises of a KernelError or null: submitted batches' scopes
    this.tail = Promise.resolve();  // the last enqueue that waited for a compile
    this.waiting = 0;            // enqueues waiting for a compile: later ones queue after them
    this.launchPipelines = new WeakMap();  // launch object -> pipeline entry (Python reuses them)
    this.generation = 0;         // +1 per device made: Python re-reads info() when it changes
    this.stats = { submits: 0, batches: 0, kernels: 0, workgroups: 0, scopeWaits: 0,
      pipelinesMade: 0, mostMaking: 0, pipelineMs: 0, pipelineBusyMs: 0, pipelineBytes: 0,
      inliningSettles: 0, maps: 0 };
    // mostMaking: the most pipelines in flight at once; pipelineMs: the builds' times summed
    // (shader module + createComputePipelineAsync, each); pipelineBusyMs: the time at least one
    // was building (what the builds add to a run's wall time at most, as they overlap);
    // pipelineBytes: the WGSL bytes built (busy ms per byte: the build rate, webgpu_browser.py)
    this.building = 0;           // pipeline builds under way (compile())
    this.busySince = 0;          // when the first of them started
    this.timing = false;         // runTimed's batch is being encoded: time it
    this.timeBatches = false;    // time every batch (takeTimings returns their times)
    this.settlesInlining = false;  // lavapipe: settle each pipeline with uniforms (settleInlining)
    this.standIns = [];          // the settling dispatches' stand-in storage buffers
  }

  get available() {
    return this.device !== null;
  }

  // The adapter and device; {available: false, reason} when this browser has no WebGPU adapter.
  async init() {
    if (!globalThis.navigator?.gpu) {
      return { available: false, reason: 'this browser has no WebGPU (navigator.gpu is missing)' };
    }
    try {
      await this.createDevice();
    } catch (error) {
      return { available: false, reason: error.message };
    }
    return this.info();
  }

  info() {
    if (!this.device) return { available: false, reason: this.lostReason || 'no device' };
    return {
      available: true, adapter: this.adapterInfo,
      features: [...this.device.features].sort(), limits: plainLimits(this.device.limits),
    };
  }

  async requestAdapter() {
    const options = this.compatibility ? { featureLevel: 'compatibility' } : {};
    const adapter = await navigator.gpu.requestAdapter(options);
    if (!adapter) {
      throw new KernelError('DeviceError',
        'no WebGPU adapter: this browser or machine offers none (enable WebGPU, or use PYTHON)');
    }
    return adapter;
  }

  async createDevice() {
    const adapter = await this.requestAdapter();
    const requiredFeatures = OPTIONAL_FEATURES.filter((name) => adapter.features.has(name));
    const requiredLimits = plainLimits(adapter.limits);
    let device;
    try {
      device = await adapter.requestDevice({ requiredFeatures, requiredLimits });
    } catch {
      device = await (await this.requestAdapter()).requestDevice({ requiredFeatures });
    }
    device.lost.then((info) => this.onLost(device, info));
    device.addEventListener?.('uncapturederror', (event) => {
      console.warn('kernelgen gpu: uncaptured error:', event.error?.message);
    });
    this.device = device;
    this.generation += 1;
    this.batch = null;
    this.adapterInfo = adapterDescription(adapter, this.compatibility);
    this.settlesInlining = settlesInlining(this.adapterInfo);
    this.standIns = [];
    this.everHadDevice = true;
    return device;
  }

  onLost(device, info) {
    if (this.device !== device) return;
    this.device = null;
    this.lostReason = info.message || info.reason || 'unknown reason';
    this.buffers.clear();
    this.pipelines.clear();
    this.making.clear();
  }

  // A working device: the current one, or a new one when the last was lost.
  async ensureDevice() {
    if (this.device) return { recreated: false };
    const reason = this.lostReason;
    await this.createDevice();
    this.lostReason = null;
    return { recreated: this.everHadDevice && reason !== null, reason };
  }

  requireDevice() {
    if (this.device) return this.device;
    throw new KernelError('DeviceError', `the WebGPU device was lost (${this.lostReason}); ` +
      'run again: the next run creates a new device');
  }

  // For tests and for the page's "lose device" button: destroy the device as a crash would.
  // Resolves once onLost has run (its handler was attached first), so the next run sees no device.
  async destroyDevice() {
    const device = this.device;
    if (!device) return;
    device.destroy();
    await device.lost;
  }

  checkBufferSize(nbytes) {
    const limits = this.requireDevice().limits;
    const allowed = Math.min(limits.maxBufferSize, limits.maxStorageBufferBindingSize);
    if (nbytes > allowed) {
      throw new KernelError('LimitError', `a buffer of ${nbytes} bytes is larger than this ` +
        `device allows (${allowed} bytes: maxStorageBufferBindingSize/maxBufferSize); ` +
        'use smaller tensors or split the computation');
    }
  }

  alloc(nbytes) {
    this.checkBufferSize(nbytes);
    // UNIFORM too: a kernel may bind a small read-only input as a uniform buffer (bindingKind)
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_SRC |
      GPUBufferUsage.COPY_DST;
    const buffer = this.requireDevice().createBuffer({ size: roundUp(nbytes, ALIGN), usage });
    const id = this.nextId++;
    this.buffers.set(id, { buffer, nbytes });
    return id;
  }

  handle(id) {
    this.requireDevice();
    const entry = this.buffers.get(id);
    if (!entry) {
      throw new KernelError('DeviceError', `buffer ${id} does not exist on this device ` +
        '(was the device lost since it was made?); run again');
    }
    return entry;
  }

  write(id, bytes) {
    this.flush();   // the kernels queued before this write run before it
    const { buffer } = this.handle(id);
    const data = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const padded = new Uint8Array(roundUp(data.byteLength, 4));
    padded.set(data);
    this.device.queue.writeBuffer(buffer, 0, padded);
  }

  // The copies to a mappable buffer join the open batch, so a step's kernels and the read back of
  // their results are one submit (a decode step replayed under kg.jit: one per token).
  async read(id) {
    return (await this.readMany([id]))[0];
  }

  // The bytes of each buffer in `ids` (a Uint8Array each), copied into one staging buffer and read
  // through one map (a model call's outputs: kg.numpy_of); `stats.maps` counts the maps.
  async readMany(ids) {
    const device = this.device;
    const parts = [];
    let size = 0;
    for (const id of ids) {
      const { buffer, nbytes } = this.handle(id);
      parts.push({ buffer, nbytes, offset: size });
      size += roundUp(nbytes, 4);
    }
    const staging = device.createBuffer({
      size: Math.max(size, 4), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    const batch = this.batch && this.batch.device === device ? this.batch : null;
    const encoder = batch ? batch.encoder : device.createCommandEncoder();
    for (const { buffer, nbytes, offset } of parts) {
      if (nbytes) encoder.copyBufferToBuffer(buffer, 0, staging, offset, roundUp(nbytes, 4));
    }
    this.flush();
    if (!batch) {
      device.queue.submit([encoder.finish()]);
      this.stats.submits += 1;
    }
    try {
      await this.settle();
    } catch (error) {
      staging.destroy();
      throw error;
    }
    try {
      await staging.mapAsync(GPUMapMode.READ);
      this.stats.maps += 1;
    } catch (error) {
      throw new KernelError('DeviceError', `reading a buffer failed: ${error.message}`);
    }
    const mapped = staging.getMappedRange(0, Math.max(size, 4));
    const out = parts.map(({ nbytes, offset }) =>
      new Uint8Array(mapped.slice(offset, offset + nbytes)));
    staging.destroy();
    return out;
  }

  free(id) {
    if (this.buffers.has(id)) this.flush();   // queued kernels may still use it
    this.buffers.get(id)?.buffer.destroy();
    this.buffers.delete(id);
  }

  checkLaunchLimits(launch) {
    const limits = this.requireDevice().limits;
    const [x, y, z] = launch.workgroup_size;
    const fail = (what) => {
      throw new KernelError('LimitError', `kernel ${launch.entry_point}: ${what}`);
    };
    if (x * y * z > limits.maxComputeInvocationsPerWorkgroup) {
      fail(`a workgroup of ${x}x${y}x${z} = ${x * y * z} threads is more than this device ` +
        `allows (${limits.maxComputeInvocationsPerWorkgroup}); use smaller local sizes`);
    }
    const storage = launch.bindings.filter((binding) => binding.kind !== 'uniform').length;
    if (storage > limits.maxStorageBuffersPerShaderStage) {
      fail(`${storage} storage buffers in one kernel is more than this device allows ` +
        `(${limits.maxStorageBuffersPerShaderStage} storage buffers per stage); ` +
        'use fewer inputs per kernel (realize() intermediate results)');
    }
    const most = Math.max(...launch.dispatch);
    if (most > limits.maxComputeWorkgroupsPerDimension) {
      fail(`a grid of ${most} workgroups in one dimension is more than this device allows ` +
        `(${limits.maxComputeWorkgroupsPerDimension})`);
    }
  }

  // Forget every compiled pipeline (a run compiles its kernels again); returns how many.
  clearPipelines() {
    const count = this.pipelines.size;
    this.pipelines.clear();
    this.making.clear();
    this.launchPipelines = new WeakMap();
    return count;
  }

  // Start creating a launch's pipeline (createComputePipelineAsync) without waiting for it:
  // Python calls this for each kernel as soon as it is compiled (and for all of a kept plan's
  // kernels at once), so the driver compiles them together while Python goes on. A failure is
  // thrown where the pipeline is needed (pipeline()).
  prepare(launch) {
    const key = pipelineKey(launch);
    if (!this.device || this.pipelines.has(key) || this.making.has(key)) return undefined;
    const device = this.device;
    const made = this.compile(launch).then((entry) => {
      if (this.making.get(key) === made && this.device === device) {
        this.pipelines.set(key, entry);
        this.stats.pipelinesMade += 1;
      }
      return entry;
    }).finally(() => {
      if (this.making.get(key) === made) this.making.delete(key);
      this.onPipelines?.({ made: this.stats.pipelinesMade, making: this.making.size });
    });
    made.catch(() => {});   // reported by pipeline(), where the kernel runs
    this.making.set(key, made);
    this.stats.mostMaking = Math.max(this.stats.mostMaking, this.making.size);
    this.onPipelines?.({ made: this.stats.pipelinesMade, making: this.making.size });
    return undefined;   // None in Python
  }

  // Where a launch's pipeline is: 'ready' (built), 'making' (prepare's build under way) or
  // 'none' (never prepared, dropped, or its build failed: pipeline() builds it or says why).
  // A kept plan swaps a larger kernel in once it is no longer 'making' (realize.py _swap).
  pipelineState(launch) {
    const key = pipelineKey(launch);
    if (this.pipelines.has(key)) return 'ready';
    return this.making.has(key) ? 'making' : 'none';
  }

  // The compute pipeline for a launch, compiled once per (source, entry point).
  async pipeline(launch) {
    const key = pipelineKey(launch);
    let entry = this.pipelines.get(key);
    if (!entry) {
      if (!this.making.has(key)) this.prepare(launch);
      entry = await (this.making.get(key) || this.compile(launch));
      this.pipelines.set(key, entry);
    }
    this.launchPipelines.set(launch, { entry, device: this.device });
    return entry;
  }

  // The compiled pipeline of a launch object seen before on this device, or null.
  cachedPipeline(launch) {
    const known = this.launchPipelines.get(launch);
    if (known && known.device === this.device) return known.entry;
    const entry = this.pipelines.get(pipelineKey(launch));
    if (entry) this.launchPipelines.set(launch, { entry, device: this.device });
    return entry || null;
  }

  // The launch's WGSL as Tint takes it: the source names no `enable subgroups;` (naga rejects
  // the directive, Tint requires it), so it is prepended for a launch that lists the feature.
  shaderSource(launch) {
    const features = launch.features || [];
    const missing = features.filter((name) => !this.requireDevice().features.has(name));
    if (missing.length) {
      throw new KernelError('DeviceError', `kernel ${launch.entry_point} needs the WebGPU ` +
        `feature(s) ${missing.join(', ')}, which this device does not have: compile it with ` +
        `subgroups=False`);
    }
    return { prefix: features.includes('subgroups') ? 1 : 0,
      code: (features.includes('subgroups') ? 'enable subgroups;\n' : '') + launch.source };
  }

  // compile(launch), timed into stats.pipelineMs and stats.pipelineBusyMs (its bytes counted).
  async compile(launch) {
    const start = performance.now();
    if (this.building++ === 0) this.busySince = start;
    try {
      return await this.build(launch);
    } finally {
      const end = performance.now();
      this.stats.pipelineMs += end - start;
      this.stats.pipelineBytes += launch.source.length;
      if (--this.building === 0) this.stats.pipelineBusyMs += end - this.busySince;
    }
  }

  // The shader module and compute pipeline of a launch (a typed error where it fails).
  async build(launch) {
    const device = this.requireDevice();
    const { code, prefix } = this.shaderSource(launch);
    const module = device.createShaderModule({ code, label: launch.entry_point });
    const info = await module.getCompilationInfo();
    const errors = info.messages.filter((message) => message.type === 'error');
    if (errors.length) {
      const first = errors[0];
      const text = errors.map((m) => `line ${m.lineNum - prefix}:${m.linePos}: ${m.message}`)
        .join('\n');
      throw new KernelError('CompileError',
        `the WGSL of kernel ${launch.entry_point} did not compile:\n${text}`,
        first.lineNum - prefix);
    }
    const layout = device.createBindGroupLayout({ entries: layoutEntries(launch) });
    const pipelineLayout = device.createPipelineLayout({ bindGroupLayouts: [layout] });
    try {
      const pipeline = await device.createComputePipelineAsync({
        layout: pipelineLayout, compute: { module, entryPoint: launch.entry_point },
      });
      if (this.settlesInlining && launch.uniforms?.length) {
        this.settleInlining(device, pipeline, layout, launch);
      }
      return { pipeline, layout };
    } catch (error) {
      const type = /workgroup|limit|exceed/i.test(error.message) ? 'LimitError' : 'CompileError';
      throw new KernelError(type,
        `the WebGPU pipeline for kernel ${launch.entry_point} failed: ${error.message}`);
    }
  }

  // Submit one dispatch of no workgroups of `pipeline` with every uniform at SETTLE_VALUE, on
  // stand-in buffers (see the header: lavapipe stops inlining the uniforms for good). A failure
  // here is only reported: the kernel's own runs check themselves.
  settleInlining(device, pipeline, layout, launch) {
    launch.bindings.forEach((binding, index) => {    // a uniform binding reads its nbytes
      const size = Math.max(STAND_IN_BYTES, binding.nbytes);
      if (index < this.standIns.length && this.standIns[index].size >= size) return;
      this.standIns[index] = device.createBuffer({
        size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.UNIFORM });
    });
    const values = launch.uniforms.map(() => SETTLE_VALUE);
    const data = packUniforms(launch.uniforms, values);
    const uniform = device.createBuffer({ size: data.byteLength,
      usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(uniform, 0, data);
    const entries = launch.bindings.map((binding, index) => ({
      binding: binding.slot, resource: boundRange(binding, this.standIns[index]),
    }));
    entries.push({ binding: uniformSlot(launch), resource: { buffer: uniform } });
    device.pushErrorScope('validation');
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, device.createBindGroup({ layout, entries }));
    pass.dispatchWorkgroups(0, 0, 0);
    pass.end();
    device.queue.submit([encoder.finish()]);
    device.popErrorScope().then((error) => {
      if (error) console.warn(`kernelgen gpu: settling ${launch.entry_point}: ${error.message}`);
    }, () => {});
    uniform.destroy();
    this.stats.inliningSettles += 1;
  }

  uniformBuffer(launch, values) {
    if (!launch.uniforms?.length) return null;
    const data = packUniforms(launch.uniforms, values);
    const buffer = this.device.createBuffer({
      size: data.byteLength, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
    });
    this.device.queue.writeBuffer(buffer, 0, data);
    return buffer;
  }

  // Grow a buffer (keeping its bytes) to what a binding needs, e.g. after packing.
  ensureSize(id, nbytes) {
    const entry = this.handle(id);
    if (entry.buffer.size >= nbytes) return;
    this.flush();   // the queued kernels use the buffer as it is
    const bigger = this.device.createBuffer({ size: roundUp(nbytes, ALIGN), usage: entry.buffer.usage });
    const encoder = this.device.createCommandEncoder();
    encoder.copyBufferToBuffer(entry.buffer, 0, bigger, 0, entry.buffer.size);
    this.device.queue.submit([encoder.finish()]);
    this.stats.submits += 1;
    entry.buffer.destroy();
    entry.buffer = bigger;
  }

  bindGroup(launch, layout, ids, uniform) {
    launch.bindings.forEach((binding, index) => this.ensureSize(ids[index], binding.nbytes));
    const entries = launch.bindings.map((binding, index) => ({
      binding: binding.slot, resource: boundRange(binding, this.handle(ids[index]).buffer),
    }));
    if (uniform) entries.push({ binding: uniformSlot(launch), resource: { buffer: uniform } });
    return this.device.createBindGroup({ layout, entries });
  }

  // Queue one kernel: `ids` are buffer ids in binding order, `values` the scalar arguments in
  // launch.uniforms order; `dispatch` the workgroups to launch (a symbolic size's run-time grid
  // needs fewer than launch.dispatch: Python's launch_dispatch). Returns undefined once encoded
  // into the open batch, or (when its pipeline must be compiled first, or an earlier kernel's is
  // being compiled) a promise that resolves once it is; errors of the dispatch itself come from
  // settle() (read() calls it).
  enqueue(launch, ids, values = [], name = launch.entry_point, dispatch = launch.dispatch) {
    this.checkLaunchLimits(launch);
    const entry = this.waiting ? null : this.cachedPipeline(launch);
    if (entry) {
      this.encode(entry, launch, ids, values, name, dispatch);
      return undefined;   // None in Python (null would be a JsNull)
    }
    this.waiting += 1;
    const done = this.tail.then(() => this.pipeline(launch))
      .then((compiled) => this.encode(compiled, launch, ids, values, name, dispatch))
      .finally(() => { this.waiting -= 1; });
    this.tail = done.catch(() => {});
    return done;
  }

  // Run one kernel: resolves once submitted and validated; errors reject as KernelError.
  async run(launch, ids, values = [], name = launch.entry_point, dispatch = launch.dispatch) {
    await this.enqueue(launch, ids, values, name, dispatch);
    await this.settle();
  }

  encode({ pipeline, layout }, launch, ids, values, name, dispatch = launch.dispatch) {
    const device = this.requireDevice();
    launch.bindings.forEach((binding, index) => this.ensureSize(ids[index], binding.nbytes));
    const batch = this.openBatch(device);
    const uniform = this.uniformBuffer(launch, values);
    if (uniform) batch.uniforms.push(uniform);
    const at = 2 * batch.names.length;
    const pass = batch.encoder.beginComputePass(batch.querySet ? { timestampWrites: {
      querySet: batch.querySet, beginningOfPassWriteIndex: at, endOfPassWriteIndex: at + 1,
    } } : {});
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, this.bindGroup(launch, layout, ids, uniform));
    pass.dispatchWorkgroups(...dispatch);
    pass.end();
    batch.names.push(name);
    this.stats.kernels += 1;
    this.stats.workgroups += dispatch[0] * dispatch[1] * dispatch[2];
    if (batch.names.length >= BATCH_KERNELS) this.flush();
  }

  openBatch(device) {
    if (this.batch) return this.batch;
    device.pushErrorScope('out-of-memory');
    device.pushErrorScope('validation');
    // GPU timestamps only when asked for (runTimed, timeBatches): resolving and reading them back
    // is a second readback per batch that a training step would pay for nothing
    const timed = (this.timing || this.timeBatches) && device.features.has('timestamp-query');
    this.batch = {
      device, encoder: device.createCommandEncoder(), names: [], uniforms: [],
      querySet: timed ? device.createQuerySet({ type: 'timestamp', count: 2 * BATCH_KERNELS })
        : null,
    };
    this.stats.batches += 1;
    queueMicrotask(() => this.flush());   // once the caller yields (Python waits or returns)
    return this.batch;
  }

  // Submit the open batch and pop its error scopes (their verdict goes to `checks`).
  flush() {
    const batch = this.batch;
    if (!batch) return;
    this.batch = null;
    const { device, encoder, names } = batch;
    if (device !== this.device) return;   // lost: its scopes and work went with it
    const times = batch.querySet ? this.resolveTimes(batch, encoder) : null;
    device.queue.submit([encoder.finish()]);
    this.stats.submits += 1;
    const validation = device.popErrorScope();
    const memory = device.popErrorScope();
    this.checks.push(Promise.all([validation, memory]).then(([invalid, oom]) => {
      const which = names.length === 1 ? `kernel ${names[0]}` : `one of the kernels ` +
        `${names.join(', ')}`;
      if (oom) return new KernelError('LimitError', `out of GPU memory running ${which}: ` +
        oom.message);
      return invalid ? new KernelError('DeviceError', `WebGPU rejected the dispatch of ` +
        `${which}: ${invalid.message}`) : null;
    }, (error) => new KernelError('DeviceError', `checking kernels ${names.join(', ')} ` +
      `failed: ${error.message}`)));
    batch.uniforms.forEach((uniform) => uniform.destroy());
    if (times) this.pendingTimings.push(times());
  }

  // Wait for the verdicts of the batches submitted so far; throws the first error.
  async settle() {
    this.flush();
    if (!this.checks.length) return;
    const checks = this.checks;
    this.checks = [];
    this.stats.scopeWaits += 1;
    const error = (await Promise.all(checks)).find((found) => found);
    if (error) throw error;
  }

  // Run one kernel and wait for it; resolves to its milliseconds: the GPU timestamps where the
  // device has 'timestamp-query', else the wall time until the queue has drained (the search
  // mode compares these).
  async runTimed(launch, ids, values = [], name = launch.entry_point, dispatch = launch.dispatch) {
    await this.settle();
    const queued = this.pendingTimings.length;
    const start = performance.now();
    this.timing = true;
    try {
      await this.run(launch, ids, values, name, dispatch);
    } finally {
      this.timing = false;
    }
    await this.requireDevice().queue.onSubmittedWorkDone();
    const wall = performance.now() - start;
    const timing = this.pendingTimings.length > queued ? await this.pendingTimings.pop() : [];
    const ms = timing.length ? timing.at(-1).ms : 0;
    return ms > 0 ? ms : wall;
  }

  // The batch's timestamps resolved into a buffer to read: a function returning the promise of
  // its kernels' [{name, ms}].
  resolveTimes(batch, encoder) {
    const { device, querySet, names } = batch;
    const count = 2 * names.length;
    const resolved = device.createBuffer({
      size: 8 * count, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
    });
    const readback = device.createBuffer({
      size: 8 * count, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    encoder.resolveQuerySet(querySet, 0, count, resolved, 0);
    encoder.copyBufferToBuffer(resolved, 0, readback, 0, 8 * count);
    return async () => {
      try {
        await readback.mapAsync(GPUMapMode.READ);
        const stamps = new BigUint64Array(readback.getMappedRange());
        return names.map((name, i) => ({ name, ms: Number(stamps[2 * i + 1] - stamps[2 * i]) / 1e6 }));
      } finally {
        readback.destroy();
        resolved.destroy();
        querySet.destroy();
      }
    };
  }

  // The GPU times of the kernels run since the last call: [{name, ms}] (empty without
  // timestamp queries, and unless timeBatches is set).
  async takeTimings() {
    const pending = this.pendingTimings;
    this.pendingTimings = [];
    this.flush();
    const settled = await Promise.allSettled([...pending, ...this.pendingTimings.splice(0)]);
    return settled.filter((s) => s.status === 'fulfilled').flatMap((s) => s.value);
  }
}

// The uniform buffer of scalar arguments sits after the last storage buffer (render/wgsl.py).
function uniformSlot(launch) {
  return Math.max(-1, ...launch.bindings.map((binding) => binding.slot)) + 1;
}

// A binding's kind: 'uniform' for a small read-only input bound as a uniform buffer (its
// nbytes, from offset 0: the buffer may be bigger), else 'storage' (render/wgsl/__init__.py).
function bindingKind(binding) {
  return binding.kind === 'uniform' ? 'uniform' : 'storage';
}

function boundRange(binding, buffer) {
  return bindingKind(binding) === 'uniform'
    ? { buffer, offset: 0, size: binding.nbytes } : { buffer };
}

// The bind group layout: storage buffers by access (small read-only inputs may be uniform
// buffers), then the uniform buffer (scalar arguments).
function layoutEntries(launch) {
  const compute = GPUShaderStage.COMPUTE;
  const type = (binding) => bindingKind(binding) === 'uniform' ? 'uniform'
    : binding.access === 'read' ? 'read-only-storage' : 'storage';
  const entries = launch.bindings.map((binding) => ({
    binding: binding.slot, visibility: compute, buffer: { type: type(binding) },
  }));
  if (launch.uniforms?.length) {
    entries.push({ binding: uniformSlot(launch), visibility: compute, buffer: { type: 'uniform' } });
  }
  return entries;
}

// Scalar arguments, 4 bytes each in order, padded to 16 bytes (a uniform struct's alignment).
function packUniforms(uniforms, values) {
  const data = new DataView(new ArrayBuffer(roundUp(uniforms.length * 4, 16)));
  uniforms.forEach(([, dtype], index) => {
    const value = values[index];
    if (dtype === 'float32') data.setFloat32(index * 4, value, true);
    else if (dtype.startsWith('uint')) data.setUint32(index * 4, value, true);
    else data.setInt32(index * 4, value, true);
  });
  return data.buffer;
}
