// The WebGPU executor: runs kernelgen's plain launch descriptions (program.Launch.to_json()) on
// navigator.gpu. Works in a page and in a Web Worker. Python never touches WebGPU objects: it
// passes sources, sizes and bytes here (runtime/webgpu_browser.py) and gets bytes back.
//
//   const gpu = new GpuExecutor({ compatibility: false });
//   const info = await gpu.init();          // {available, reason?, adapter, features, limits}
//   const a = gpu.alloc(16); gpu.write(a, bytes);
//   await gpu.run(launch, [a, b], []);      // throws a KernelError {type, message, line}
//   const out = await gpu.read(b);          // Uint8Array
//
// When the device is lost (a crash, a driver reset, device.destroy()), the next ensureDevice()
// makes a new one and reports that it did.

// Adapter features a kernel can use: requested whenever the adapter has them.
const OPTIONAL_FEATURES = ['shader-f16', 'subgroups', 'timestamp-query'];

// Buffer sizes are rounded up to this (WebGPU copies need multiples of 4; 16 suits vec4 access).
const ALIGN = 16;

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
    this.pipelines = new Map();  // source + entry point -> {pipeline, layout}
    this.nextId = 1;
    this.lostReason = null;      // why the last device was lost, until a new one replaces it
    this.everHadDevice = false;
    this.pendingTimings = [];    // promises of {name, ms}
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
    this.adapterInfo = adapterDescription(adapter, this.compatibility);
    this.everHadDevice = true;
    return device;
  }

  onLost(device, info) {
    if (this.device !== device) return;
    this.device = null;
    this.lostReason = info.message || info.reason || 'unknown reason';
    this.buffers.clear();
    this.pipelines.clear();
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
  destroyDevice() {
    this.device?.destroy();
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
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
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
    const { buffer } = this.handle(id);
    const data = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const padded = new Uint8Array(roundUp(data.byteLength, 4));
    padded.set(data);
    this.device.queue.writeBuffer(buffer, 0, padded);
  }

  async read(id) {
    const { buffer, nbytes } = this.handle(id);
    const device = this.device;
    const size = roundUp(nbytes, 4);
    const staging = device.createBuffer({
      size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(buffer, 0, staging, 0, size);
    device.queue.submit([encoder.finish()]);
    try {
      await staging.mapAsync(GPUMapMode.READ);
    } catch (error) {
      throw new KernelError('DeviceError', `reading a buffer failed: ${error.message}`);
    }
    const bytes = new Uint8Array(staging.getMappedRange(0, size).slice(0, nbytes));
    staging.destroy();
    return bytes;
  }

  free(id) {
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
    if (launch.bindings.length > limits.maxStorageBuffersPerShaderStage) {
      fail(`${launch.bindings.length} buffers in one kernel is more than this device allows ` +
        `(${limits.maxStorageBuffersPerShaderStage} storage buffers per stage); ` +
        'use fewer inputs per kernel (realize() intermediate results)');
    }
    const most = Math.max(...launch.dispatch);
    if (most > limits.maxComputeWorkgroupsPerDimension) {
      fail(`a grid of ${most} workgroups in one dimension is more than this device allows ` +
        `(${limits.maxComputeWorkgroupsPerDimension})`);
    }
  }

  // The compute pipeline for a launch, compiled once per (source, entry point).
  async pipeline(launch) {
    const key = launch.entry_point + '\n' + launch.source;
    let entry = this.pipelines.get(key);
    if (!entry) {
      entry = await this.compile(launch);
      this.pipelines.set(key, entry);
    }
    return entry;
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

  async compile(launch) {
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
      return { pipeline, layout };
    } catch (error) {
      const type = /workgroup|limit|exceed/i.test(error.message) ? 'LimitError' : 'CompileError';
      throw new KernelError(type,
        `the WebGPU pipeline for kernel ${launch.entry_point} failed: ${error.message}`);
    }
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
    const bigger = this.device.createBuffer({ size: roundUp(nbytes, ALIGN), usage: entry.buffer.usage });
    const encoder = this.device.createCommandEncoder();
    encoder.copyBufferToBuffer(entry.buffer, 0, bigger, 0, entry.buffer.size);
    this.device.queue.submit([encoder.finish()]);
    entry.buffer.destroy();
    entry.buffer = bigger;
  }

  bindGroup(launch, layout, ids, uniform) {
    launch.bindings.forEach((binding, index) => this.ensureSize(ids[index], binding.nbytes));
    const entries = launch.bindings.map((binding, index) => ({
      binding: binding.slot, resource: { buffer: this.handle(ids[index]).buffer },
    }));
    if (uniform) entries.push({ binding: uniformSlot(launch), resource: { buffer: uniform } });
    return this.device.createBindGroup({ layout, entries });
  }

  // Run one kernel: `ids` are buffer ids in binding order, `values` the scalar arguments in
  // launch.uniforms order. Resolves once submitted and validated; errors reject as KernelError.
  async run(launch, ids, values = [], name = launch.entry_point) {
    this.checkLaunchLimits(launch);
    const { pipeline, layout } = await this.pipeline(launch);
    const device = this.requireDevice();
    device.pushErrorScope('out-of-memory');
    device.pushErrorScope('validation');
    const uniform = this.uniformBuffer(launch, values);
    const timer = this.timer();
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass(timer ? { timestampWrites: timer.writes } : {});
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, this.bindGroup(launch, layout, ids, uniform));
    pass.dispatchWorkgroups(...launch.dispatch);
    pass.end();
    timer?.resolve(encoder);
    device.queue.submit([encoder.finish()]);
    const validation = await device.popErrorScope();
    const memory = await device.popErrorScope();
    if (memory) throw new KernelError('LimitError', `out of GPU memory: ${memory.message}`);
    if (validation) throw new KernelError('DeviceError', `WebGPU rejected the dispatch of ` +
      `kernel ${launch.entry_point}: ${validation.message}`);
    uniform?.destroy();
    if (timer) this.pendingTimings.push(timer.read(name));
  }

  // Run one kernel and wait for it; resolves to its milliseconds: the GPU timestamps where the
  // device has 'timestamp-query', else the wall time until the queue has drained (the search
  // mode compares these).
  async runTimed(launch, ids, values = [], name = launch.entry_point) {
    const queued = this.pendingTimings.length;
    const start = performance.now();
    await this.run(launch, ids, values, name);
    await this.requireDevice().queue.onSubmittedWorkDone();
    const wall = performance.now() - start;
    const timing = this.pendingTimings.length > queued ? await this.pendingTimings.pop() : null;
    return timing && timing.ms > 0 ? timing.ms : wall;
  }

  // GPU timestamps around one compute pass, when the device has 'timestamp-query'.
  timer() {
    const device = this.device;
    if (!device.features.has('timestamp-query')) return null;
    const querySet = device.createQuerySet({ type: 'timestamp', count: 2 });
    const resolved = device.createBuffer({
      size: 16, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
    });
    const readback = device.createBuffer({
      size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    return {
      writes: { querySet, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 },
      resolve(encoder) {
        encoder.resolveQuerySet(querySet, 0, 2, resolved, 0);
        encoder.copyBufferToBuffer(resolved, 0, readback, 0, 16);
      },
      async read(name) {
        await readback.mapAsync(GPUMapMode.READ);
        const [start, end] = new BigUint64Array(readback.getMappedRange());
        readback.destroy();
        resolved.destroy();
        querySet.destroy();
        return { name, ms: Number(end - start) / 1e6 };
      },
    };
  }

  // The GPU times of the kernels run since the last call: [{name, ms}] (empty without
  // timestamp queries).
  async takeTimings() {
    const pending = this.pendingTimings;
    this.pendingTimings = [];
    const settled = await Promise.allSettled(pending);
    return settled.filter((s) => s.status === 'fulfilled').map((s) => s.value);
  }
}

// The uniform buffer of scalar arguments sits after the last storage buffer (render/wgsl.py).
function uniformSlot(launch) {
  return Math.max(-1, ...launch.bindings.map((binding) => binding.slot)) + 1;
}

// The bind group layout: storage buffers by access, then the uniform buffer (scalar arguments).
function layoutEntries(launch) {
  const compute = GPUShaderStage.COMPUTE;
  const entries = launch.bindings.map((binding) => ({
    binding: binding.slot, visibility: compute,
    buffer: { type: binding.access === 'read' ? 'read-only-storage' : 'storage' },
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
