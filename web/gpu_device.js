// The WebGPU executor's first layer (gpu.js lists them all): the adapter and the device, with
// the features and limits it is asked for, and the executor's whole state (its constructor),
// which the layers above use.
//
// When the device is lost (a crash, a driver reset, device.destroy()), the next ensureDevice()
// makes a new one and reports that it did.

// Adapter features a kernel can use: requested whenever the adapter has them.
const OPTIONAL_FEATURES = ['shader-f16', 'subgroups', 'timestamp-query'];

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

export class GpuDevice {
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
      pipelinesMade: 0, pipelineBuilds: 0, mostMaking: 0, pipelineMs: 0, pipelineBusyMs: 0,
      pipelineBytes: 0, inliningSettles: 0, maps: 0 };
    // pipelineBuilds: compile() calls (a source built twice counts twice);
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
    this.launchOrder = null;     // a Set: the pipeline keys encoded, first use first, while kept
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
}
